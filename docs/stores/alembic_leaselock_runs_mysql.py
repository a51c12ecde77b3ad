"""leaselock: the job run records table of MySQLLockStore (MySQL 8, MariaDB 10.6+).

Copy this file into your Alembic ``versions/`` folder after ``alembic_leaselock_locks_mysql.py``
(its ``down_revision`` names that one; change it if you renamed the revision), and keep
``TABLE`` equal to the ``table=`` you pass to ``MySQLLockStore``: the records live in
``<table>_runs``, each job's last run and last success.

It creates what ``MySQLLockStore.create_schema()`` creates, and skips a table that exists
already, so it also adopts a table the store made by itself. The DDL is written out, as in the
lock table's migration, so that both make the very same table.

Revision ID: leaselock_mysql_0002
Revises: leaselock_mysql_0001
Create Date: 2026-12-02
"""

# ruff: noqa: INP001 -- a file to copy into an Alembic versions/ folder, not a package module

from __future__ import annotations

from alembic import op

revision = "leaselock_mysql_0002"
down_revision: str | None = "leaselock_mysql_0001"
branch_labels = None
depends_on = None

TABLE = "leaselock_locks"  # qualify it ("locks.leaselock_locks") to put it in another database


def _quoted(name: str) -> str:
    return ".".join(f"`{part}`" for part in name.split("."))


def upgrade() -> None:
    """Create ``<TABLE>_runs`` (each job's last run and last success), unless it exists."""
    # "last": the job's last run; "success": its last successful run. Text is UTF-8 in
    # VARBINARY, as in the lock table (the job, a lock key, compares byte for byte); times are
    # milliseconds since the Unix epoch, on the running instance's clock; trigger says why the
    # run started, detected_by how a lost run's loss was noticed
    op.execute(
        f"""\
CREATE TABLE IF NOT EXISTS {_quoted(TABLE + "_runs")} (
    `job` VARBINARY(2000) NOT NULL,
    `kind` ENUM('last', 'success') NOT NULL,
    `instance` VARBINARY(2000) NOT NULL,
    `fencing_token` BIGINT NULL,
    `started_at_ms` BIGINT NOT NULL,
    `ended_at_ms` BIGINT NOT NULL,
    `outcome` VARBINARY(64) NOT NULL,
    `error` BLOB NULL,
    `trigger` VARBINARY(64) NOT NULL DEFAULT 'schedule',
    `detected_by` VARBINARY(64) NULL,
    PRIMARY KEY (`job`, `kind`)
) ENGINE=InnoDB"""
    )


def downgrade() -> None:
    """Drop the run records: past runs are forgotten; the locks stay."""
    op.execute(f"DROP TABLE IF EXISTS {_quoted(TABLE + '_runs')}")
