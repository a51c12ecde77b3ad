"""leaselock: the job control table of MySQLLockStore (MySQL 8, MariaDB 10.6+).

Copy this file into your Alembic ``versions/`` folder after ``alembic_leaselock_runs_mysql.py``
(its ``down_revision`` names that one; change it if you renamed the revision), and keep
``TABLE`` equal to the ``table=`` you pass to ``MySQLLockStore``: the pauses and each job's
state (its open run, failure streak, missed tick) live in ``<table>_jobs``.

It creates what ``MySQLLockStore.create_schema()`` creates, and skips a table that exists
already, so it also adopts a table the store made by itself. The DDL is written out, as in the
other tables' migrations, so that both make the very same table.

Revision ID: leaselock_mysql_0003
Revises: leaselock_mysql_0002
Create Date: 2026-12-06
"""

# ruff: noqa: INP001 -- a file to copy into an Alembic versions/ folder, not a package module

from __future__ import annotations

from alembic import op

revision = "leaselock_mysql_0003"
down_revision: str | None = "leaselock_mysql_0002"
branch_labels = None
depends_on = None

TABLE = "leaselock_locks"  # qualify it ("locks.leaselock_locks") to put it in another database


def _quoted(name: str) -> str:
    return ".".join(f"`{part}`" for part in name.split("."))


def upgrade() -> None:
    """Create ``<TABLE>_jobs`` (pauses and job states), unless it exists."""
    # one row per document: "pause:<target>" or "job:<key>", UTF-8 in VARBINARY (a key of 2,000
    # bytes, its prefix and a pause target's "*"), the document UTF-8 JSON in a MEDIUMBLOB:
    # both compare byte for byte
    op.execute(
        f"""\
CREATE TABLE IF NOT EXISTS {_quoted(TABLE + "_jobs")} (
    `name` VARBINARY(2007) NOT NULL,
    `document` MEDIUMBLOB NOT NULL,
    PRIMARY KEY (`name`)
) ENGINE=InnoDB"""
    )


def downgrade() -> None:
    """Drop the job control table: pauses, open runs and failure streaks are forgotten."""
    op.execute(f"DROP TABLE IF EXISTS {_quoted(TABLE + '_jobs')}")
