"""leaselock: the lock table of MySQLLockStore (MySQL 8, MariaDB 10.6+).

Copy this file into your Alembic ``versions/`` folder, set ``down_revision`` to your latest
revision (``alembic heads``), and keep ``TABLE`` equal to the ``table=`` you pass to
``MySQLLockStore`` (the default matches). Then pass ``create_schema=False`` to the store if the
application's user may not run DDL.

It creates what ``MySQLLockStore.create_schema()`` creates, and skips a table that exists
already, so it also adopts a table the store made by itself. The DDL is written out rather than
built from ``sa.Column``: the token counter is an ``AUTO_INCREMENT`` on a column that is not the
primary key, which SQLAlchemy does not render.

Revision ID: leaselock_mysql_0001
Revises:
Create Date: 2026-12-01
"""

# ruff: noqa: INP001 -- a file to copy into an Alembic versions/ folder, not a package module

from __future__ import annotations

from alembic import op

revision = "leaselock_mysql_0001"
down_revision: str | None = None  # set to your latest revision
branch_labels = None
depends_on = None

TABLE = "leaselock_locks"  # qualify it ("locks.leaselock_locks") to put it in another database


def _quoted(name: str) -> str:
    return ".".join(f"`{part}`" for part in name.split("."))


def upgrade() -> None:
    """Create the lock table, unless it exists."""
    # VARBINARY keys compare byte for byte (no case folding, no trailing-space padding); the
    # AUTO_INCREMENT is the fencing token counter; expires_at is UTC, to the microsecond
    op.execute(
        f"""\
CREATE TABLE IF NOT EXISTS {_quoted(TABLE)} (
    `key` VARBINARY(2000) NOT NULL,
    `owner` VARBINARY(2000) NULL,
    `fencing_token` BIGINT NOT NULL AUTO_INCREMENT,
    `expires_at` DATETIME(6) NOT NULL,
    PRIMARY KEY (`key`),
    KEY `fencing_token` (`fencing_token`)
) ENGINE=InnoDB"""
    )


def downgrade() -> None:
    """Drop the table: every lock and the token counter go with it.

    After a downgrade and an upgrade, tokens start again at 1: fenced resources that kept a
    higher token refuse writes until they are reset too.
    """
    op.execute(f"DROP TABLE IF EXISTS {_quoted(TABLE)}")
