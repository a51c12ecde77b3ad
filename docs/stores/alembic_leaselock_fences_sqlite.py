"""leaselock: fenced tables on SQLite: the fences table, and the triggers of the tables listed.

Copy this file into your Alembic ``versions/`` folder, set ``down_revision`` to your latest
revision (``alembic heads``), and list in ``FENCED_TABLES`` every table you mark with
``fenced_table()`` (its name, and its ``token_column=`` or ``None``); keep ``FENCES`` equal to
the ``fences=`` you pass (the default matches). Alembic's autogenerate sees the fences table but
no trigger: this migration makes both, as ``metadata.create_all()`` does (a test compares their
SQL). The triggers call ``leaselock_fence()``, a function leaselock gives each connection a
fenced session uses: a connection without it (the ``sqlite3`` shell) cannot write the fenced
tables at all.

Until it runs, the tables are not fenced: nothing refuses a stale write.

Revision ID: leaselock_fences_sqlite_0001
Revises:
Create Date: 2026-12-06
"""

# ruff: noqa: INP001 -- a file to copy into an Alembic versions/ folder, not a package module

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "leaselock_fences_sqlite_0001"
down_revision: str | None = None  # set to your latest revision
branch_labels = None
depends_on = None

FENCES = "leaselock_fences"
# every fenced table, and the column its rows are stamped with (None: the fences table alone)
FENCED_TABLES: dict[str, str | None] = {}  # e.g. {"products": "fencing_token", "notes": None}

# the triggers as the library makes them; {...} are quoted names, {written} 0 or OLD.<column>
SQLITE_TRIGGER = """\
CREATE TRIGGER {trigger} BEFORE {event} ON {table}
BEGIN
    SELECT RAISE(ABORT, 'leaselock: a write to a fenced table outside fenced(); make it inside \
fenced(session, lock), or inside unfenced(session) to allow it')
     WHERE leaselock_fence('token') IS NULL;
    INSERT INTO {fences} (key, fencing_token)
    SELECT leaselock_fence('key'), 0
     WHERE leaselock_fence('token') > 0
       AND NOT EXISTS (SELECT 1 FROM {fences} WHERE key = leaselock_fence('key'));
    SELECT RAISE(ABORT, 'leaselock: fencing token is stale')
      FROM {fences}
     WHERE key = leaselock_fence('key') AND leaselock_fence('token') > 0
       AND leaselock_fence('newer', max(fencing_token, {written})) > leaselock_fence('token');
    UPDATE {fences} SET fencing_token = leaselock_fence('token')
     WHERE key = leaselock_fence('key') AND fencing_token < leaselock_fence('token');
END"""

SQLITE_STAMP_TRIGGER = """\
CREATE TRIGGER {trigger} AFTER {event} ON {table}
WHEN leaselock_fence('token') > 0 AND NEW.{column} IS NOT leaselock_fence('token')
BEGIN
    UPDATE {table} SET {column} = leaselock_fence('token') WHERE rowid = NEW.rowid;
END"""

EVENTS = ("INSERT", "UPDATE", "DELETE")


def upgrade() -> None:
    """Create the fences table and each listed table's triggers."""
    op.create_table(
        FENCES,
        sa.Column("key", sa.Text(), primary_key=True),
        sa.Column("fencing_token", sa.BigInteger(), nullable=False),
    )
    for table, column in FENCED_TABLES.items():
        quoted_column = None if column is None else _quoted(column)
        for event in EVENTS:
            op.execute(
                SQLITE_TRIGGER.format(
                    trigger=_quoted(f"{table}_leaselock_{event.lower()}"),
                    event=event,
                    table=_quoted(table),
                    fences=_quoted(FENCES),
                    written="0"
                    if quoted_column is None or event == "INSERT"
                    else f"OLD.{quoted_column}",
                )
            )
        if quoted_column is not None:
            for event in EVENTS[:2]:
                op.execute(
                    SQLITE_STAMP_TRIGGER.format(
                        trigger=_quoted(f"{table}_leaselock_stamp_{event.lower()}"),
                        event=event,
                        table=_quoted(table),
                        column=quoted_column,
                    )
                )


def downgrade() -> None:
    """Drop the triggers and the fences table: the tables are no longer fenced."""
    for table in FENCED_TABLES:
        for trigger in ("insert", "update", "delete", "stamp_insert", "stamp_update"):
            op.execute(f"DROP TRIGGER IF EXISTS {_quoted(f'{table}_leaselock_{trigger}')}")
    op.drop_table(FENCES)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
