"""leaselock's job run records table, on PostgreSQL.

leaselock's documented migration (docs/stores/alembic_leaselock_runs.py) with its default
names: ``shop status`` and the demo read each job's last run and last success from it.

On SQLite it does nothing: ``SQLiteLockStore`` creates ``leaselock_locks_runs`` in the shop's
file when it first opens it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TABLE: Final = "leaselock_locks_runs"


def upgrade() -> None:
    """Create the run records table, unless it exists (a store may have made it)."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.create_table(
        TABLE,
        sa.Column("job", sa.Text(collation="C"), primary_key=True),
        # "last": the job's last run; "success": its last successful run
        sa.Column("kind", sa.Text(), primary_key=True),
        sa.Column("instance", sa.Text(), nullable=False),
        sa.Column("fencing_token", sa.BigInteger(), nullable=True),
        # milliseconds since the Unix epoch, on the running instance's clock
        sa.Column("started_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("ended_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.CheckConstraint("kind IN ('last', 'success')", name=f"{TABLE}_kind_check"),
        if_not_exists=True,
    )


def downgrade() -> None:
    """Drop the run records: the shop forgets every job's past runs."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.drop_table(TABLE, if_exists=True)
