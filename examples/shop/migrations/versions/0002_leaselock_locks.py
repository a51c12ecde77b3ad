"""leaselock's lock table and fencing token sequence, on PostgreSQL.

The shop passes ``create_schema=False`` to ``PostgresLockStore``: its role needs no DDL at run
time, and the schema is versioned with the shop's own. This is leaselock's documented migration
(docs/stores/alembic_leaselock_locks.py) with its default names.

On SQLite it does nothing: ``SQLiteLockStore`` creates its two tables in the shop's file when it
first opens it (``CREATE TABLE IF NOT EXISTS``), and has no option to leave that to a migration.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TABLE: Final = "leaselock_locks"
SEQUENCE: Final = "leaselock_fencing_token_seq"
MAX_FENCING_TOKEN: Final = 2**53 - 1  # tokens stay exact in a JSON number


def _on_postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    """Create the sequence and the table, unless they exist (a store may have made them)."""
    if not _on_postgresql():
        return
    op.execute(
        sa.schema.CreateSequence(
            sa.Sequence(
                SEQUENCE,
                data_type=sa.BigInteger(),
                minvalue=1,
                maxvalue=MAX_FENCING_TOKEN,
                cycle=False,
            ),
            if_not_exists=True,
        )
    )
    op.create_table(
        TABLE,
        # COLLATE "C": keys compare byte for byte, never by a locale's rules
        sa.Column("key", sa.Text(collation="C"), primary_key=True),
        # NULL once released: the row stays, its token is the floor of the key's next token
        sa.Column("owner", sa.Text(), nullable=True),
        sa.Column("fencing_token", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("fencing_token > 0", name=f"{TABLE}_fencing_token_check"),
        if_not_exists=True,
    )


def downgrade() -> None:
    """Drop the table and the sequence: every lock and the token history go with them.

    After a downgrade and an upgrade, tokens start again at 1, and every product keeps the
    higher token of its last write: stock reconciliations are refused until those are reset.
    """
    if not _on_postgresql():
        return
    op.drop_table(TABLE, if_exists=True)
    op.execute(sa.schema.DropSequence(sa.Sequence(SEQUENCE), if_exists=True))
