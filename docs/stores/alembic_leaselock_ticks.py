"""leaselock: each job's last started tick in the job control table of PostgresLockStore.

Copy this file into your Alembic ``versions/`` folder after ``alembic_leaselock_tokens.py`` (its
``down_revision`` names that one; change it if you renamed the revision), and keep ``TABLE``
equal to the ``table=`` you pass to ``PostgresLockStore``. It adds the column ``last_tick``
to ``<table>_jobs``, as ``PostgresLockStore.create_schema()`` and ``postgres_schema.sql`` do:
the scheduled tick each job's last run started for, which every start checks in the same
statement, so that two instances never both start one tick (their clocks apart, across a
restart). It skips a column that exists.

Until it runs, a store started with ``create_schema=False`` refuses to start, naming this file.

Revision ID: leaselock_0005
Revises: leaselock_0004
Create Date: 2026-12-07
"""

# ruff: noqa: INP001 -- a file to copy into an Alembic versions/ folder, not a package module

from __future__ import annotations

from alembic import op

revision = "leaselock_0005"
down_revision: str | None = "leaselock_0004"
branch_labels = None
depends_on = None

SCHEMA: str | None = None  # e.g. "locks", for table="locks.leaselock_locks"
TABLE = "leaselock_locks"


def upgrade() -> None:
    """Add ``last_tick`` to ``<TABLE>_jobs``, unless it has it."""
    # {"at_ms": the tick's scheduled time in epoch ms, "instance": who ran it, "token": its token}
    op.execute(f"ALTER TABLE {_quoted(TABLE + '_jobs')} ADD COLUMN IF NOT EXISTS last_tick jsonb")


def downgrade() -> None:
    """Drop ``last_tick``: the stores of an earlier leaselock never read it."""
    op.execute(f"ALTER TABLE {_quoted(TABLE + '_jobs')} DROP COLUMN IF EXISTS last_tick")


def _quoted(name: str) -> str:
    """The name as the store writes it: quoted, schema-qualified if SCHEMA is set."""
    return ".".join(f'"{part}"' for part in ([SCHEMA] if SCHEMA else []) + [name])
