"""leaselock: fenced tables on PostgreSQL: the fences table, and the triggers of the tables listed.

Copy this file into your Alembic ``versions/`` folder, set ``down_revision`` to your latest
revision (``alembic heads``), and list in ``FENCED_TABLES`` every table you mark with
``fenced_table()`` (its name, and its ``token_column=`` or ``None``); keep ``FENCES`` equal to
the ``fences=`` you pass (the default matches). Alembic's autogenerate sees the fences table
(``fenced_table()`` puts it in your metadata) but no trigger: this migration makes both, as
``metadata.create_all()`` does (a test compares their SQL). Fence a table later with a
migration of your own that runs ``CHECK_TRIGGER`` (and ``STAMP_TRIGGER``) for it.

Until it runs, the tables are not fenced: nothing refuses a stale write.

Revision ID: leaselock_fences_0001
Revises:
Create Date: 2026-12-06
"""

# ruff: noqa: INP001 -- a file to copy into an Alembic versions/ folder, not a package module

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "leaselock_fences_0001"
down_revision: str | None = None  # set to your latest revision
branch_labels = None
depends_on = None

SCHEMA: str | None = None  # the schema of the fenced tables, e.g. "shop"
FENCES = "leaselock_fences"
# every fenced table, and the column its rows are stamped with (None: the fences table alone)
FENCED_TABLES: dict[str, str | None] = {}  # e.g. {"products": "fencing_token", "notes": None}

# the functions and triggers as the library makes them; {...} are quoted names, {column} a
# string literal
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

POSTGRES_CHECK_TRIGGER = """\
CREATE TRIGGER leaselock_fence BEFORE INSERT OR UPDATE OR DELETE ON {table}
FOR EACH STATEMENT EXECUTE FUNCTION {check_function}()"""

POSTGRES_STAMP_TRIGGER = """\
CREATE TRIGGER leaselock_stamp BEFORE INSERT OR UPDATE OR DELETE ON {table}
FOR EACH ROW EXECUTE FUNCTION {stamp_function}({column})"""


def upgrade() -> None:
    """Create the fences table, the functions, and each listed table's triggers."""
    op.create_table(
        FENCES,
        sa.Column("key", sa.Text(collation="C"), primary_key=True),
        sa.Column("fencing_token", sa.BigInteger(), nullable=False),
        schema=SCHEMA,
    )
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


def downgrade() -> None:
    """Drop the triggers, the functions and the fences table: the tables are no longer fenced."""
    for table in FENCED_TABLES:
        op.execute(f"DROP TRIGGER IF EXISTS leaselock_stamp ON {_quoted(table)}")
        op.execute(f"DROP TRIGGER IF EXISTS leaselock_fence ON {_quoted(table)}")
    op.execute(
        f"DROP FUNCTION IF EXISTS {_quoted(f'{FENCES}_check')}(), {_quoted(f'{FENCES}_stamp')}()"
    )
    op.drop_table(FENCES, schema=SCHEMA)


def _quoted(name: str) -> str:
    """The name quoted, schema-qualified if SCHEMA is set."""
    return ".".join(f'"{part}"' for part in ([SCHEMA] if SCHEMA else []) + [name])
