"""leaselock: fenced tables on MySQL 8 / MariaDB 10.6+: the fences table and the triggers.

Copy this file into your Alembic ``versions/`` folder, set ``down_revision`` to your latest
revision (``alembic heads``), and list in ``FENCED_TABLES`` every table you mark with
``fenced_table()`` (its name, and its ``token_column=`` or ``None``); keep ``FENCES`` equal to
the ``fences=`` you pass (the default matches). Alembic's autogenerate sees the fences table but
no trigger or procedure: this migration makes them all, as ``metadata.create_all()`` does (a
test compares their SQL). A fenced table's name may have at most 47 characters (its triggers'
names add 17, and MySQL allows 64).

Until it runs, the tables are not fenced: nothing refuses a stale write.

Revision ID: leaselock_fences_mysql_0001
Revises:
Create Date: 2026-12-06
"""

# ruff: noqa: INP001 -- a file to copy into an Alembic versions/ folder, not a package module

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "leaselock_fences_mysql_0001"
down_revision: str | None = None  # set to your latest revision
branch_labels = None
depends_on = None

FENCES = "leaselock_fences"
# every fenced table, and the column its rows are stamped with (None: the fences table alone)
FENCED_TABLES: dict[str, str | None] = {}  # e.g. {"products": "fencing_token", "notes": None}

# the procedure and the triggers as the library makes them; {...} are quoted names,
# {table_name} a string literal, {written} NULL or OLD.<column>, {stamp} MYSQL_STAMP or empty
MYSQL_CHECK_PROCEDURE = """\
CREATE PROCEDURE IF NOT EXISTS {check_procedure}(IN fenced_table VARCHAR(64), IN written BIGINT)
BEGIN
    DECLARE newer BIGINT;
    DECLARE refusal VARCHAR(128);
    IF @leaselock_fence_token IS NULL THEN
        SET refusal = LEFT(CONCAT('leaselock: a write to a fenced table outside fenced() (',
                                  fenced_table, '); use fenced() or unfenced()'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = refusal;
    ELSEIF @leaselock_fence_token > 0 THEN
        INSERT INTO {fences} (`key`, `fencing_token`)
        VALUES (@leaselock_fence_key, @leaselock_fence_token)
        ON DUPLICATE KEY UPDATE `fencing_token` = GREATEST(`fencing_token`, @leaselock_fence_token);
        -- a locking read: the latest committed token, not the transaction's snapshot
        SELECT GREATEST(`fencing_token`, COALESCE(written, 0)) INTO newer
          FROM {fences} WHERE `key` = @leaselock_fence_key FOR UPDATE;
        IF newer > @leaselock_fence_token THEN
            SET refusal = LEFT(CONCAT('leaselock: fencing token ', @leaselock_fence_token,
                                      ' is stale, newer ', newer, ' for key ',
                                      @leaselock_fence_key), 128);
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = refusal;
        END IF;
    END IF;
END"""

MYSQL_TRIGGER = """\
CREATE TRIGGER {trigger} BEFORE {event} ON {table} FOR EACH ROW
BEGIN
    CALL {check_procedure}({table_name}, {written});
{stamp}END"""

MYSQL_STAMP = """\
    IF @leaselock_fence_token > 0 THEN
        SET NEW.{column} = @leaselock_fence_token;
    END IF;
"""

EVENTS = ("INSERT", "UPDATE", "DELETE")


def upgrade() -> None:
    """Create the fences table, the procedure, and each listed table's three triggers."""
    # VARBINARY: keys compare byte for byte, as the lock table's
    op.create_table(
        FENCES,
        sa.Column("key", mysql.VARBINARY(2000), primary_key=True),
        sa.Column("fencing_token", sa.BigInteger(), nullable=False),
    )
    check_procedure = _quoted(f"{FENCES}_check")
    op.execute(
        MYSQL_CHECK_PROCEDURE.format(check_procedure=check_procedure, fences=_quoted(FENCES))
    )
    for table, column in FENCED_TABLES.items():
        quoted_column = None if column is None else _quoted(column)
        for event in EVENTS:
            op.execute(
                MYSQL_TRIGGER.format(
                    trigger=_quoted(f"{table}_leaselock_{event.lower()}"),
                    event=event,
                    table=_quoted(table),
                    check_procedure=check_procedure,
                    table_name="'" + table.replace("'", "''") + "'",
                    written="NULL"
                    if quoted_column is None or event == "INSERT"
                    else f"OLD.{quoted_column}",
                    stamp=""
                    if quoted_column is None or event == "DELETE"
                    else MYSQL_STAMP.format(column=quoted_column),
                )
            )


def downgrade() -> None:
    """Drop the triggers, the procedure and the fences table: the tables are no longer fenced."""
    for table in FENCED_TABLES:
        for event in EVENTS:
            op.execute(f"DROP TRIGGER IF EXISTS {_quoted(f'{table}_leaselock_{event.lower()}')}")
    op.execute(f"DROP PROCEDURE IF EXISTS {_quoted(f'{FENCES}_check')}")
    op.drop_table(FENCES)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
