"""leaselock: the job run records and job control tables of PostgresLockStore (leaselock 0.2).

Copy this file into your Alembic ``versions/`` folder after ``alembic_leaselock_locks.py`` (its
``down_revision`` names that one; change it if you renamed the revision), and keep ``TABLE``
equal to the ``table=`` you pass to ``PostgresLockStore``: the records live in
``<table>_runs``, pauses, open runs and failure streaks in ``<table>_jobs``.

It creates what ``PostgresLockStore.create_schema()`` and ``postgres_schema.sql`` create, and
skips what exists already. Needs Alembic 1.13.3 or later (``if_not_exists``).

Revision ID: leaselock_0002
Revises: leaselock_0001
Create Date: 2026-12-01
"""

# ruff: noqa: INP001 -- a file to copy into an Alembic versions/ folder, not a package module

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "leaselock_0002"
down_revision: str | None = "leaselock_0001"
branch_labels = None
depends_on = None

SCHEMA: str | None = None  # e.g. "locks", for table="locks.leaselock_locks"
TABLE = "leaselock_locks"


def upgrade() -> None:
    """Create ``<TABLE>_runs`` (each job's last run and last success) and ``<TABLE>_jobs``."""
    op.create_table(
        f"{TABLE}_runs",
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
        # why the run started: a scheduled tick, run_now(), or a re-run after its instance died
        sa.Column("trigger", sa.Text(), nullable=False, server_default="schedule"),
        # how a lost run's loss was noticed ("abandoned": the next run found it never ended)
        sa.Column("detected_by", sa.Text(), nullable=True),
        sa.CheckConstraint("kind IN ('last', 'success')", name=f"{TABLE}_runs_kind_check"),
        schema=SCHEMA,
        if_not_exists=True,
    )
    op.create_table(
        f"{TABLE}_jobs",
        # a job key, or a pause target (a key, or a prefix ending in "*")
        sa.Column("name", sa.Text(collation="C"), primary_key=True),
        sa.Column("pause", postgresql.JSONB(), nullable=True),
        sa.Column("open_run", postgresql.JSONB(), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False, server_default="0"),
        # milliseconds since the Unix epoch, on the instance's clock that found the tick missed
        sa.Column("missed_at_ms", sa.BigInteger(), nullable=True),
        # a trigger noted during a run (overlap="buffer_one"): one more run after it
        sa.Column("buffered", sa.Boolean(), nullable=False, server_default=sa.false()),
        schema=SCHEMA,
        if_not_exists=True,
    )


def downgrade() -> None:
    """Drop the run records and job control: pauses end, past runs are forgotten."""
    op.drop_table(f"{TABLE}_jobs", schema=SCHEMA, if_exists=True)
    op.drop_table(f"{TABLE}_runs", schema=SCHEMA, if_exists=True)
