"""leaselock's fenced tables: the fences table, and the triggers of ``orders`` and ``products``.

leaselock's documented migrations (docs/stores/alembic_leaselock_fences.py on PostgreSQL,
docs/stores/alembic_leaselock_fences_sqlite.py on SQLite) with their default names, for the
tables ``shop.models`` marks with ``fenced_table()``. With them the database refuses a write to
those tables from a run whose lock a newer run has taken since (the invoice export's marks, the
stock reconciliation's counts), and any write outside ``fenced()`` or ``unfenced()``.

On SQLite the triggers call ``leaselock_fence()``, a function leaselock gives the shop's own
connections: the ``sqlite3`` shell cannot write ``orders`` or ``products`` after this.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

FENCES: Final = "leaselock_fences"
# every fenced table, and the column its rows are stamped with (None: the fences table alone)
FENCED_TABLES: Final[dict[str, str | None]] = {"orders": None, "products": "stock_fencing_token"}

# the functions and triggers as leaselock makes them on PostgreSQL; {...} are quoted names,
# {column} a string literal
POSTGRES_CHECK_FUNCTION: Final = """\
CREATE OR REPLACE FUNCTION {check_function}() RETURNS trigger
LANGUAGE plpgsql AS $leaselock$
DECLARE
    fence_key text := current_setting('leaselock.fence_key', true);
    fence_token bigint := CAST(nullif(current_setting('leaselock.fence_token', true), '')
                               AS bigint);
    newer bigint;
BEGIN
    -- the transaction's fence, from set_config(..., true) by leaselock's fenced() (token 0:
    -- unfenced(), an explicit opt-out); a transaction without one is refused
    IF fence_token IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'LF001',
            MESSAGE = 'leaselock: a write to a fenced table outside fenced() (' || TG_TABLE_NAME
                      || '); make it inside fenced(session, lock), or inside unfenced(session) '
                      || 'to allow it';
    END IF;
    IF fence_token > 0 THEN
        -- the upsert locks the key's row even when it keeps it: writers of one key queue on it
        -- until the first commits, and the next one then reads what it committed
        INSERT INTO {fences} AS seen (key, fencing_token) VALUES (fence_key, fence_token)
        ON CONFLICT (key) DO UPDATE SET fencing_token = excluded.fencing_token
         WHERE seen.fencing_token < excluded.fencing_token;
        SELECT seen.fencing_token INTO newer FROM {fences} AS seen WHERE seen.key = fence_key;
        IF newer > fence_token THEN
            RAISE EXCEPTION USING ERRCODE = 'LF002',
                MESSAGE = 'leaselock: fencing token ' || fence_token || ' is stale, newer '
                          || newer || ' for key ' || quote_literal(fence_key);
        END IF;
    END IF;
    RETURN NULL;
END
$leaselock$"""

POSTGRES_STAMP_FUNCTION: Final = """\
CREATE OR REPLACE FUNCTION {stamp_function}() RETURNS trigger
LANGUAGE plpgsql AS $leaselock$
DECLARE
    fence_token bigint := CAST(nullif(current_setting('leaselock.fence_token', true), '')
                               AS bigint);
    written bigint;
BEGIN
    -- TG_ARGV[0] names the token column; the statement's trigger has checked the key already
    IF fence_token > 0 THEN
        IF TG_OP <> 'INSERT' THEN
            written := CAST(to_jsonb(OLD) ->> TG_ARGV[0] AS bigint);
            IF written > fence_token THEN
                RAISE EXCEPTION USING ERRCODE = 'LF002',
                    MESSAGE = 'leaselock: fencing token ' || fence_token || ' is stale, newer '
                              || written || ' for key '
                              || quote_literal(current_setting('leaselock.fence_key'));
            END IF;
        END IF;
        IF TG_OP <> 'DELETE' THEN
            NEW := jsonb_populate_record(NEW, jsonb_build_object(TG_ARGV[0], fence_token));
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$leaselock$"""

POSTGRES_CHECK_TRIGGER: Final = """\
CREATE TRIGGER leaselock_fence BEFORE INSERT OR UPDATE OR DELETE ON {table}
FOR EACH STATEMENT EXECUTE FUNCTION {check_function}()"""

POSTGRES_STAMP_TRIGGER: Final = """\
CREATE TRIGGER leaselock_stamp BEFORE INSERT OR UPDATE OR DELETE ON {table}
FOR EACH ROW EXECUTE FUNCTION {stamp_function}({column})"""

# the triggers as leaselock makes them on SQLite; {...} are quoted names, {written} 0 or
# OLD.<column>
SQLITE_TRIGGER: Final = """\
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

SQLITE_STAMP_TRIGGER: Final = """\
CREATE TRIGGER {trigger} AFTER {event} ON {table}
WHEN leaselock_fence('token') > 0 AND NEW.{column} IS NOT leaselock_fence('token')
BEGIN
    UPDATE {table} SET {column} = leaselock_fence('token') WHERE rowid = NEW.rowid;
END"""

EVENTS: Final = ("INSERT", "UPDATE", "DELETE")


def _on_postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    """Create the fences table, and the triggers (and on PostgreSQL their functions)."""
    on_postgresql = _on_postgresql()
    op.create_table(
        FENCES,
        # COLLATE "C" on PostgreSQL: keys compare byte for byte, as the lock store's do
        sa.Column("key", sa.Text(collation="C") if on_postgresql else sa.Text(), primary_key=True),
        sa.Column("fencing_token", sa.BigInteger(), nullable=False),
    )
    if on_postgresql:
        _create_postgres_triggers()
    else:
        _create_sqlite_triggers()


def _create_postgres_triggers() -> None:
    names = {"check_function": _quoted(f"{FENCES}_check"), "fences": _quoted(FENCES)}
    op.execute(POSTGRES_CHECK_FUNCTION.format(**names))
    op.execute(POSTGRES_STAMP_FUNCTION.format(stamp_function=_quoted(f"{FENCES}_stamp")))
    for table, column in FENCED_TABLES.items():
        op.execute(POSTGRES_CHECK_TRIGGER.format(table=_quoted(table), **names))
        if column is not None:
            op.execute(
                POSTGRES_STAMP_TRIGGER.format(
                    table=_quoted(table),
                    stamp_function=_quoted(f"{FENCES}_stamp"),
                    column="'" + column.replace("'", "''") + "'",
                )
            )


def _create_sqlite_triggers() -> None:
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
    """Drop the triggers, the functions and the fences table: the tables are no longer fenced."""
    if _on_postgresql():
        for table in FENCED_TABLES:
            op.execute(f"DROP TRIGGER IF EXISTS leaselock_stamp ON {_quoted(table)}")
            op.execute(f"DROP TRIGGER IF EXISTS leaselock_fence ON {_quoted(table)}")
        op.execute(
            f"DROP FUNCTION IF EXISTS {_quoted(f'{FENCES}_check')}(), "
            f"{_quoted(f'{FENCES}_stamp')}()"
        )
    else:
        for table in FENCED_TABLES:
            for trigger in ("insert", "update", "delete", "stamp_insert", "stamp_update"):
                op.execute(f"DROP TRIGGER IF EXISTS {_quoted(f'{table}_leaselock_{trigger}')}")
    op.drop_table(FENCES)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
