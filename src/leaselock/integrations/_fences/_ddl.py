"""Fenced tables: the mark on a table, the fences table, and the DDL of their triggers.

A fenced table refuses, in the database, every INSERT, UPDATE and DELETE whose transaction does
not carry a lock's fencing token at least as great as the greatest one the database has seen for
that lock's key. The greatest token per key lives in the fences table (``leaselock_fences``:
``key``, ``fencing_token``), so a fresh row's INSERT is refused as surely as an UPDATE. A fenced
table with a token column also has each written row stamped with the writer's token, and refuses
to change a row stamped with a greater one (the rule of ``fenced_update``).

The transaction's key and token come from the session (``fenced()``, see ``_session.py``):
PostgreSQL's transaction-local settings ``leaselock.fence_key`` / ``leaselock.fence_token``,
MySQL's user variables ``@leaselock_fence_key`` / ``@leaselock_fence_token``, SQLite's
per-connection function ``leaselock_fence(...)``. A token of 0 is ``unfenced()``: the write is
let through unchecked and unstamped. No token at all is refused.

The templates below are the ones the documented migrations (``docs/stores/alembic_leaselock_
fences*.py``) write out; a test compares them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from ..._errors import LocksConfigurationError

__all__ = [
    "DEFAULT_FENCES",
    "Fencing",
    "fenced_table",
    "fencing_of",
    "trigger_ddl",
]

DEFAULT_FENCES = "leaselock_fences"
# where fenced_table() marks a table, in its info
_MARK = "leaselock.fenced"
# MySQL's limit on a trigger's name
_MYSQL_NAME_LIMIT = 64

# the refusals' messages start with these; _session.py recognises a stale write by the second
UNFENCED_REFUSAL = "leaselock: a write to a fenced table outside fenced()"
STALE_REFUSAL = "leaselock: fencing token "

POSTGRES_CHECK_FUNCTION = """\
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

POSTGRES_STAMP_FUNCTION = """\
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

# a statement's trigger: one look at the fences table per statement, however many rows
POSTGRES_CHECK_TRIGGER = """\
CREATE TRIGGER leaselock_fence BEFORE INSERT OR UPDATE OR DELETE ON {table}
FOR EACH STATEMENT EXECUTE FUNCTION {check_function}()"""

POSTGRES_STAMP_TRIGGER = """\
CREATE TRIGGER leaselock_stamp BEFORE INSERT OR UPDATE OR DELETE ON {table}
FOR EACH ROW EXECUTE FUNCTION {stamp_function}({column})"""

# MESSAGE_TEXT holds 128 characters: the tokens come first, the key is cut
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

# RAISE takes no expression before SQLite 3.47: leaselock_fence('newer', n) hands the newer token
# to the session, which names it in the error
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

# a BEFORE trigger cannot change NEW in SQLite: the row is stamped after, by its rowid; the
# WHEN keeps the stamp's own UPDATE from stamping again
SQLITE_STAMP_TRIGGER = """\
CREATE TRIGGER {trigger} AFTER {event} ON {table}
WHEN leaselock_fence('token') > 0 AND NEW.{column} IS NOT leaselock_fence('token')
BEGIN
    UPDATE {table} SET {column} = leaselock_fence('token') WHERE rowid = NEW.rowid;
END"""


@dataclass(frozen=True)
class Fencing:
    """How a table is fenced: its fences table, and its token column if it has one."""

    fences: sa.Table
    token_column: str | None


def fenced_table(table: sa.Table | type[Any], *, token_column: str | None, fences: str) -> sa.Table:
    """Mark ``table`` fenced, with the fences table in its metadata; see the public docstring.

    Raises:
        LocksConfigurationError: ``table`` is no table, ``token_column`` is not one of its
            integer columns, or the table is marked already with other settings.
    """
    checked = _table_of(table)
    if not isinstance(fences, str) or not fences:
        raise LocksConfigurationError(
            f"fences={fences!r} is not a table name; leave it out for {DEFAULT_FENCES!r}"
        )
    if checked.name == fences:
        raise LocksConfigurationError(
            f"{fences!r} is the fences table itself; fence the tables your jobs write to"
        )
    if token_column is not None:
        column = checked.c.get(token_column) if isinstance(token_column, str) else None
        if column is None or not isinstance(column.type, sa.Integer):
            raise LocksConfigurationError(
                f"token_column={token_column!r} is not an integer column of {checked.name!r}; "
                f"declare it (sa.Column({token_column!r}, sa.BigInteger(), nullable=False, "
                "server_default='0')), or pass token_column=None to fence the table by the "
                "fences table alone"
            )
    fences_table = _fences_table(checked.metadata, fences, checked.schema)
    fencing = Fencing(fences_table, token_column)
    marked = checked.info.get(_MARK)
    if marked is not None:
        if marked != fencing:
            raise LocksConfigurationError(
                f"{checked.name!r} is fenced already, with token_column="
                f"{marked.token_column!r} and fences={marked.fences.name!r}; mark it once"
            )
        return checked
    checked.info[_MARK] = fencing
    checked.add_is_dependent_on(fences_table)
    sa.event.listen(checked, "after_create", _create_triggers)
    return checked


def fencing_of(table: sa.Table) -> Fencing | None:
    """How ``table`` is fenced, or ``None`` if it is not."""
    marked: Fencing | None = table.info.get(_MARK)
    return marked


def trigger_ddl(table: sa.Table, dialect: sa.Dialect) -> list[str]:
    """The statements that make ``table``'s fence in a database of ``dialect``, in order.

    That is the function or procedure they call (created if missing, so every fenced table's
    statements may run in any order), and the table's triggers; not the fences table.

    Raises:
        LocksConfigurationError: the table is not fenced, the dialect is none of PostgreSQL,
            MySQL/MariaDB and SQLite, or the table cannot carry the fence there.
    """
    fencing = fencing_of(table)
    if fencing is None:
        raise LocksConfigurationError(
            f"{table.name!r} is not fenced; mark it with fenced_table() first"
        )
    preparer = dialect.identifier_preparer
    quoted = preparer.format_table(table)
    fences = preparer.format_table(fencing.fences)
    column = None if fencing.token_column is None else preparer.quote(fencing.token_column)

    def named(name: str) -> str:
        return (
            preparer.quote(name)
            if table.schema is None
            else (f"{preparer.quote_schema(table.schema)}.{preparer.quote(name)}")
        )

    if dialect.name == "postgresql":
        return _postgres_ddl(fencing, quoted, fences, named)
    if dialect.name in ("mysql", "mariadb"):
        return _mysql_ddl(
            table.name, fencing, table=quoted, fences=fences, column=column, named=named
        )
    if dialect.name == "sqlite":
        if table.dialect_options["sqlite"]["with_rowid"] is False and column is not None:
            raise LocksConfigurationError(
                f"{table.name!r} is a WITHOUT ROWID table: SQLite stamps a token column by "
                "rowid; pass token_column=None to fence it by the fences table alone"
            )
        return _sqlite_ddl(table.name, quoted, fences, column, named)
    raise LocksConfigurationError(
        f"fenced tables work on PostgreSQL, MySQL/MariaDB and SQLite, not {dialect.name}; "
        "fence writes there with fenced_update()"
    )


def _postgres_ddl(
    fencing: Fencing, table: str, fences: str, named: Callable[[str], str]
) -> list[str]:
    check_function = named(f"{fencing.fences.name}_check")
    made = [POSTGRES_CHECK_FUNCTION.format(check_function=check_function, fences=fences)]
    if fencing.token_column is not None:
        stamp_function = named(f"{fencing.fences.name}_stamp")
        made.append(POSTGRES_STAMP_FUNCTION.format(stamp_function=stamp_function))
    made.append(POSTGRES_CHECK_TRIGGER.format(table=table, check_function=check_function))
    if fencing.token_column is not None:
        made.append(
            POSTGRES_STAMP_TRIGGER.format(
                table=table, stamp_function=stamp_function, column=_literal(fencing.token_column)
            )
        )
    return made


def _mysql_ddl(
    name: str,
    fencing: Fencing,
    *,
    table: str,
    fences: str,
    column: str | None,
    named: Callable[[str], str],
) -> list[str]:
    check_procedure = named(f"{fencing.fences.name}_check")
    made = [MYSQL_CHECK_PROCEDURE.format(check_procedure=check_procedure, fences=fences)]
    for event in ("INSERT", "UPDATE", "DELETE"):
        trigger = f"{name}_leaselock_{event.lower()}"
        if len(trigger) > _MYSQL_NAME_LIMIT:
            raise LocksConfigurationError(
                f"the trigger name {trigger!r} is longer than MySQL's 64 characters; "
                f"fence a table whose name has at most {_MYSQL_NAME_LIMIT - 17} characters"
            )
        made.append(
            MYSQL_TRIGGER.format(
                trigger=named(trigger),
                event=event,
                table=table,
                check_procedure=check_procedure,
                table_name=_literal(name),
                written="NULL" if column is None or event == "INSERT" else f"OLD.{column}",
                stamp=""
                if column is None or event == "DELETE"
                else MYSQL_STAMP.format(column=column),
            )
        )
    return made


def _sqlite_ddl(
    name: str, table: str, fences: str, column: str | None, named: Callable[[str], str]
) -> list[str]:
    made = [
        SQLITE_TRIGGER.format(
            trigger=named(f"{name}_leaselock_{event.lower()}"),
            event=event,
            table=table,
            fences=fences,
            written="0" if column is None or event == "INSERT" else f"OLD.{column}",
        )
        for event in ("INSERT", "UPDATE", "DELETE")
    ]
    if column is not None:
        made.extend(
            SQLITE_STAMP_TRIGGER.format(
                trigger=named(f"{name}_leaselock_stamp_{event.lower()}"),
                event=event,
                table=table,
                column=column,
            )
            for event in ("INSERT", "UPDATE")
        )
    return made


def _create_triggers(target: sa.Table, connection: sa.Connection, **_: object) -> None:
    statements = trigger_ddl(target, connection.dialect)
    if connection.dialect.name in ("mysql", "mariadb") and _has_procedure(connection, target):
        # CREATE PROCEDURE IF NOT EXISTS on one that exists draws a warning (logged by the driver)
        statements = statements[1:]
    for statement in statements:
        connection.exec_driver_sql(statement)


def _has_procedure(connection: sa.Connection, table: sa.Table) -> bool:
    fencing = fencing_of(table)
    assert fencing is not None  # noqa: S101 -- only fenced tables have the listener
    found = connection.execute(
        sa.text(
            "SELECT count(*) FROM information_schema.routines "
            "WHERE routine_schema = coalesce(:schema, database()) AND routine_name = :name"
        ),
        {"schema": table.schema, "name": f"{fencing.fences.name}_check"},
    ).scalar_one()
    return bool(found)


def _fences_table(metadata: sa.MetaData, name: str, schema: str | None) -> sa.Table:
    qualified = name if schema is None else f"{schema}.{name}"
    existing = metadata.tables.get(qualified)
    if existing is not None:
        return existing
    return sa.Table(
        name,
        metadata,
        # byte for byte, as the lock stores keep keys: COLLATE "C", VARBINARY
        sa.Column(
            "key",
            sa.Text()
            .with_variant(sa.Text(collation="C"), "postgresql")
            .with_variant(mysql.VARBINARY(2000), "mysql", "mariadb"),
            primary_key=True,
        ),
        # the greatest token a fenced write of the key has carried
        sa.Column("fencing_token", sa.BigInteger(), nullable=False),
        schema=schema,
    )


def _table_of(table: object) -> sa.Table:
    if isinstance(table, sa.Table):
        return table
    local = getattr(table, "__table__", None)
    if isinstance(local, sa.Table):
        return local
    raise LocksConfigurationError(
        f"{table!r} is neither a Table nor a mapped class; pass products (a Table) or Product"
    )


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
