"""leaselock: the lock table and the fencing token sequence of PostgresLockStore.

Copy this file into your Alembic ``versions/`` folder, set ``down_revision`` to your latest
revision (``alembic heads``), and keep the names below equal to the ``table=`` / ``sequence=``
you pass to ``PostgresLockStore`` (the defaults match). Then pass ``create_schema=False`` to the
store if the application's role may not run DDL.

It creates what ``PostgresLockStore.create_schema()`` and ``postgres_schema.sql`` create, and
skips what exists already, so it also adopts a schema the store made by itself.

Needs Alembic 1.13.3 or later (``if_not_exists``).

Revision ID: leaselock_0001
Revises:
Create Date: 2026-11-01
"""

# ruff: noqa: INP001 -- a file to copy into an Alembic versions/ folder, not a package module

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "leaselock_0001"
down_revision: str | None = None  # set to your latest revision
branch_labels = None
depends_on = None

SCHEMA: str | None = None  # e.g. "locks", for table="locks.leaselock_locks"
TABLE = "leaselock_locks"
SEQUENCE = "leaselock_fencing_token_seq"
MAX_FENCING_TOKEN = 2**53 - 1  # tokens stay exact in a JSON number


def upgrade() -> None:
    """Create the sequence and the table, unless they exist."""
    op.execute(
        sa.schema.CreateSequence(
            sa.Sequence(
                SEQUENCE,
                schema=SCHEMA,
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
        schema=SCHEMA,
        if_not_exists=True,
    )


def downgrade() -> None:
    """Drop the table and the sequence: every lock and the token history go with them.

    After a downgrade and an upgrade, tokens start again at 1: fenced resources that kept a
    higher token refuse writes until they are reset too.
    """
    op.drop_table(TABLE, schema=SCHEMA, if_exists=True)
    op.execute(sa.schema.DropSequence(sa.Sequence(SEQUENCE, schema=SCHEMA), if_exists=True))
