"""leaselock's jobs keep the tick each one last started for, on PostgreSQL.

leaselock's documented migration (docs/stores/alembic_leaselock_ticks.py) with its default
names: it adds ``last_tick`` to ``leaselock_locks_jobs``, which every start of a scheduled run
checks, so that two of the shop's instances never both run one tick of its jobs. Without it the
shop's store (``create_schema=False``) refuses to start, naming that migration.

On SQLite it does nothing: ``SQLiteLockStore`` creates and upgrades its tables itself.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07
"""

from __future__ import annotations

from typing import Final

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

JOBS: Final = "leaselock_locks_jobs"


def upgrade() -> None:
    """Add ``last_tick`` to the jobs table, unless it has it."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f'ALTER TABLE "{JOBS}" ADD COLUMN IF NOT EXISTS last_tick jsonb')


def downgrade() -> None:
    """Drop ``last_tick``: the stores of an earlier leaselock never read it."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f'ALTER TABLE "{JOBS}" DROP COLUMN IF EXISTS last_tick')
