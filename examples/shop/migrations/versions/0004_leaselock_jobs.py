"""leaselock's job control table, and two columns of its run records, on PostgreSQL.

What leaselock's documented migration (docs/stores/alembic_leaselock_runs.py) now creates beside
the run records: ``leaselock_locks_jobs`` (pauses, open runs, failure streaks) and the runs'
``trigger`` and ``detected_by``. The admin API pauses and resumes jobs through it.

On SQLite it does nothing: ``SQLiteLockStore`` creates and upgrades its tables itself.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

RUNS: Final = "leaselock_locks_runs"
JOBS: Final = "leaselock_locks_jobs"


def upgrade() -> None:
    """Add the runs' two columns and create the jobs table, skipping what exists."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.add_column(
        RUNS,
        sa.Column("trigger", sa.Text(), nullable=False, server_default="schedule"),
        if_not_exists=True,
    )
    op.add_column(RUNS, sa.Column("detected_by", sa.Text(), nullable=True), if_not_exists=True)
    op.create_table(
        JOBS,
        sa.Column("name", sa.Text(collation="C"), primary_key=True),
        sa.Column("pause", postgresql.JSONB(), nullable=True),
        sa.Column("open_run", postgresql.JSONB(), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("missed_at_ms", sa.BigInteger(), nullable=True),
        # a trigger noted during a run (overlap="buffer_one"): one more run after it
        sa.Column("buffered", sa.Boolean(), nullable=False, server_default=sa.false()),
        if_not_exists=True,
    )


def downgrade() -> None:
    """Drop the jobs table and the two columns: pauses end, open runs are forgotten."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.drop_table(JOBS, if_exists=True)
    op.drop_column(RUNS, "detected_by", if_exists=True)
    op.drop_column(RUNS, "trigger", if_exists=True)
