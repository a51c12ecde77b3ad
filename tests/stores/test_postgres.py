"""PostgresLockStore: what only PostgreSQL can show (the contract is in test_contract.py)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import logging
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from helpers import Partition, TokensAsText, unique_key, until_real, wait_for_real, yield_once
from leaselock import Locks, LocksConfigurationError, LockStoreError, SyncLocks, current_lock
from leaselock.stores import (
    Acquired,
    Grant,
    NotAcquired,
    OpenRun,
    Queued,
    Renewal,
    RunStart,
)
from leaselock.stores._common._job_control import TickRun
from leaselock.stores.postgres import PostgresLockStore
from leaselock.stores.postgres import _follower as _postgres_follower
from leaselock.stores.postgres import _listening as _postgres_listening
from leaselock.stores.postgres._executors import ConnectionsExecutor, refused_statement
from leaselock.stores.postgres._line import PostgresWaitingLine, parse_grant
from leaselock.stores.postgres._sql import FOLLOW_SQL, key_channel
from leaselock.testing import ManualClock

asyncpg = pytest.importorskip("asyncpg")

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[2]
SCHEMA_FILE = REPO / "src" / "leaselock" / "stores" / "postgres" / "postgres_schema.sql"
ALEMBIC_MIGRATIONS = (
    REPO / "docs" / "stores" / "alembic_leaselock_locks.py",
    REPO / "docs" / "stores" / "alembic_leaselock_runs.py",
    REPO / "docs" / "stores" / "alembic_leaselock_line.py",
    REPO / "docs" / "stores" / "alembic_leaselock_tokens.py",
    REPO / "docs" / "stores" / "alembic_leaselock_ticks.py",
)
HAS_PSYCOPG = importlib.util.find_spec("psycopg") is not None
HAS_ALEMBIC = importlib.util.find_spec("alembic") is not None
# once on each driver a store can listen through: asyncpg, and psycopg (a SQLAlchemy engine)
BY_EACH_DRIVER = pytest.mark.parametrize(
    "driver",
    [
        "asyncpg",
        pytest.param(
            "psycopg", marks=pytest.mark.skipif(not HAS_PSYCOPG, reason="psycopg is not installed")
        ),
    ],
)
BODY_QUOTE = "$leaselock$"
LINE_SIGNATURE = "(text, text, text, bigint, bigint, bigint, text)"


class Scratch:
    """Fresh table and sequence names on the test server, dropped when the module ends."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._names: list[tuple[str, str]] = []

    def names(self, label: str) -> tuple[str, str]:
        table = f"leaselock_test_{label.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        self._names.append((table, f"{table}_seq"))
        return table, f"{table}_seq"

    def store(self, label: str, **options: Any) -> PostgresLockStore:
        table, sequence = self.names(label)
        return PostgresLockStore.from_url(self.url, table=table, sequence=sequence, **options)

    async def drop_all(self) -> None:
        connection = await asyncpg.connect(self.url)
        try:
            for table, sequence in self._names:
                await connection.execute(f'DROP TABLE IF EXISTS "{table}"')
                await connection.execute(f'DROP TABLE IF EXISTS "{table}_runs"')
                await connection.execute(f'DROP TABLE IF EXISTS "{table}_jobs"')
                await connection.execute(f'DROP TABLE IF EXISTS "{table}_line"')
                await connection.execute(f'DROP FUNCTION IF EXISTS "{table}_line"{LINE_SIGNATURE}')
                await connection.execute(f'DROP SEQUENCE IF EXISTS "{sequence}"')
        finally:
            await connection.close()


@pytest.fixture(scope="module")
def scratch(postgres_url: str) -> Iterator[Scratch]:
    made = Scratch(postgres_url)
    yield made
    asyncio.run(made.drop_all())


@pytest.fixture
async def store(scratch: Scratch) -> AsyncIterator[PostgresLockStore]:
    opened = scratch.store("store")
    await opened.open()
    yield opened
    await opened.aclose()


def sqlalchemy_url(url: str, driver: str) -> str:
    return "postgresql+" + driver + "://" + url.partition("://")[2]


# --- fencing tokens ------------------------------------------------------------------------


async def restart_sequence(store: PostgresLockStore, url: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(f"ALTER SEQUENCE {store._sql.sequence} RESTART WITH 1")
    finally:
        await connection.close()


async def test_tokens_keep_growing_after_the_sequence_restarted_at_one(
    store: PostgresLockStore, scratch: Scratch
) -> None:
    key = unique_key("restart")
    for number in range(5):
        result = await store.acquire(key, f"owner-{number}", 60_000)
        assert await store.release(key, f"owner-{number}")
    assert isinstance(result, Acquired)
    await restart_sequence(store, scratch.url)

    after = await store.acquire(key, "after-restart", 60_000)

    assert isinstance(after, Acquired)
    assert after.fencing_token >= result.fencing_token + 1


async def test_a_takeover_after_expiry_keeps_growing_after_the_sequence_restarted(
    store: PostgresLockStore, scratch: Scratch
) -> None:
    key = unique_key("restart-expired")
    for number in range(5):
        await store.acquire(unique_key("elsewhere"), f"owner-{number}", 60_000)
    first = await store.acquire(key, "short", 300)
    assert isinstance(first, Acquired)
    await restart_sequence(store, scratch.url)
    await wait_for_real(400)

    after = await store.acquire(key, "taker", 60_000)

    assert isinstance(after, Acquired)
    assert after.fencing_token > first.fencing_token


async def test_a_token_returned_as_str_is_refused_with_the_fix(scratch: Scratch) -> None:
    wrapped = TokensAsText(scratch.store("as-text"))
    async with Locks(store=wrapped) as locks:
        with pytest.raises(LockStoreError, match=r"as str; return an int \(convert .* int\(\)\)"):
            await locks.acquire(unique_key("as-text"))


async def test_a_release_keeps_the_row_with_its_token_and_clears_the_owner(
    store: PostgresLockStore, scratch: Scratch
) -> None:
    key = unique_key("kept")
    taken = await store.acquire(key, "holder", 60_000)
    assert isinstance(taken, Acquired)

    assert await store.release(key, "holder")

    connection = await asyncpg.connect(scratch.url)
    try:
        row = await connection.fetchrow(
            # the store's own validated, quoted table name
            f"SELECT owner, fencing_token FROM {store._sql.table} WHERE key = $1",
            key,
        )
    finally:
        await connection.close()
    assert row is not None
    assert row["owner"] is None
    assert row["fencing_token"] == taken.fencing_token


async def test_a_refused_acquire_writes_nothing_no_row_lock_and_no_token_drawn(
    store: PostgresLockStore, scratch: Scratch
) -> None:
    key = unique_key("busy")
    taken = await store.acquire(key, "holder", 60_000)
    assert isinstance(taken, Acquired)

    async def row_and_sequence() -> tuple[object, ...]:
        connection = await asyncpg.connect(scratch.url)
        try:
            # xmax names the last transaction that locked or updated the row; a refused acquire
            # that took the row lock would set it
            row = await connection.fetchrow(
                f"SELECT xmax::text, owner, fencing_token FROM {store._sql.table} WHERE key = $1",
                key,
            )
            drawn = await connection.fetchval(f"SELECT last_value FROM {store._sql.sequence}")
        finally:
            await connection.close()
        assert row is not None
        return (*row, drawn)

    before = await row_and_sequence()
    refused = await asyncio.gather(*(store.acquire(key, f"waiter-{n}", 60_000) for n in range(20)))
    assert all(isinstance(answer, NotAcquired) and answer.holder == "holder" for answer in refused)
    assert await row_and_sequence() == before
    assert await store.release(key, "holder")
    again = await store.acquire(key, "waiter-0", 60_000)
    assert isinstance(again, Acquired)
    assert again.fencing_token > taken.fencing_token


# --- the server's clock --------------------------------------------------------------------


async def test_expiry_reads_clock_timestamp_so_time_moves_inside_one_transaction(
    store: PostgresLockStore, scratch: Scratch
) -> None:
    # now() stands still for a whole transaction: with it, a lock taken inside one would never
    # expire there. The store's own statements, run in one transaction, see time pass.
    key = unique_key("clock")
    connection = await asyncpg.connect(scratch.url)
    try:
        async with connection.transaction():
            first = await connection.fetchval(store._sql.acquire, key, "first", 300)
            assert first is not None
            assert await connection.fetchval(store._sql.acquire, key, "second", 60_000) is None
            await wait_for_real(400)

            assert await connection.fetchrow(store._sql.renew, key, "first", 60_000) is None
            taken = await connection.fetchval(store._sql.acquire, key, "second", 60_000)
            assert taken is not None
            assert taken > first
    finally:
        await connection.close()


# --- batch renewals ------------------------------------------------------------------------


class CountingExecutor:
    """The store's executor, keeping every statement the store sends through it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.statements: list[str] = []

    async def fetch(self, sql: str, args: tuple[object, ...]) -> Any:
        self.statements.append(sql)
        return await self.inner.fetch(sql, args)

    async def fetchrow(self, sql: str, args: tuple[object, ...]) -> Any:
        self.statements.append(sql)
        return await self.inner.fetchrow(sql, args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def write_rows(url: str, table: str, rows: list[tuple[str, str | None, int]]) -> None:
    """Write (key, owner, expires in ms from now: negative for expired) rows as they are."""
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(
            f"INSERT INTO {table} (key, owner, fencing_token, expires_at) "
            "SELECT key, owner, 1, clock_timestamp() + expires_in_ms * INTERVAL '1 millisecond' "
            "FROM unnest(CAST($1 AS text[]), CAST($2 AS text[]), CAST($3 AS bigint[])) "
            "AS row (key, owner, expires_in_ms)",
            *map(list, zip(*rows, strict=True)),
        )
    finally:
        await connection.close()


async def test_renew_many_renews_ten_thousand_leases_in_one_statement_answering_each(
    store: PostgresLockStore, scratch: Scratch
) -> None:
    keys = [unique_key(f"batch-{n}") for n in range(9_996)]
    # by n % 5: held by "me", expired while "me" held it, held by "other", released, never taken
    written = [
        (key, (("me", 10_000), ("me", -1_000), ("other", 10_000), (None, -1_000))[n % 5])
        for n, key in enumerate(keys)
        if n % 5 != 4
    ]
    await write_rows(
        scratch.url, store._sql.table, [(key, owner, ms) for key, (owner, ms) in written]
    )
    renewals = [Renewal(key, "me", 60_000) for key in keys]
    # the same renewal twice, a key named with two owners: answered as renew would, each
    renewals += [
        Renewal(keys[0], "me", 60_000),
        Renewal(keys[0], "other", 60_000),
        Renewal(keys[2], "other", 60_000),
        Renewal(keys[1], "me", 60_000),
    ]
    counting = CountingExecutor(store._executor)
    store._executor = counting
    try:
        answers = await store.renew_many(renewals)
    finally:
        store._executor = counting.inner

    assert counting.statements == [store._sql.renew_many]
    assert list(answers) == [n % 5 == 0 for n in range(len(keys))] + [True, False, True, False]
    connection = await asyncpg.connect(scratch.url)
    try:
        renewed = await connection.fetch(
            f"SELECT key, owner FROM {store._sql.table} "
            "WHERE expires_at > clock_timestamp() + INTERVAL '30 seconds'"
        )
    finally:
        await connection.close()
    assert sorted((row[0], row[1]) for row in renewed) == sorted(
        [(key, "me") for n, key in enumerate(keys) if n % 5 == 0] + [(keys[2], "other")]
    )


async def test_renew_many_looks_keys_up_by_the_index_however_big_the_batch_is(
    store: PostgresLockStore, scratch: Scratch
) -> None:
    # given the arrays' sizes, the planner hashed a scan of the whole table from about 1,000
    # renewals in 200,000 keys; half of the table's keys at once is further past that point
    keys = [unique_key(f"plan-{n}") for n in range(20_000)]
    await write_rows(scratch.url, store._sql.table, [(key, "me", 60_000) for key in keys])
    batch = keys[::2]
    connection = await asyncpg.connect(scratch.url)
    try:
        await connection.execute(f"ANALYZE {store._sql.table}")
        plan = await connection.fetch(
            "EXPLAIN " + store._sql.renew_many, batch, ["me"] * len(batch), [60_000] * len(batch)
        )
    finally:
        await connection.close()

    lines = "\n".join(row[0] for row in plan)
    assert "Index Scan using" in lines, lines
    assert "Seq Scan" not in lines, lines


# --- schema --------------------------------------------------------------------------------


async def test_create_schema_from_many_connections_at_once_succeeds(scratch: Scratch) -> None:
    table, sequence = scratch.names("race")
    stores = [
        PostgresLockStore.from_url(
            scratch.url, table=table, sequence=sequence, create_schema=False, min_size=0
        )
        for _ in range(8)
    ]
    try:
        # eight pools: eight server sessions, each one racing the others on the catalog
        await asyncio.gather(*(created.create_schema() for created in stores))
        result = await stores[0].acquire(unique_key("race"), "owner", 60_000)
    finally:
        await asyncio.gather(*(created.aclose() for created in stores))
    assert isinstance(result, Acquired)


async def test_a_missing_table_is_reported_with_the_ways_to_create_it(scratch: Scratch) -> None:
    missing = scratch.store("missing", create_schema=False)
    try:
        with pytest.raises(LockStoreError, match=r"do not exist.*create_schema"):
            await missing.acquire(unique_key("missing"), "owner", 60_000)
    finally:
        await missing.aclose()


async def test_a_table_dropped_after_start_is_reported_with_the_ways_to_create_it(
    scratch: Scratch,
) -> None:
    store = scratch.store("dropped")
    await store.open()
    try:
        connection = await asyncpg.connect(scratch.url)
        try:
            await connection.execute(f"DROP TABLE {store._sql.table}")
        finally:
            await connection.close()
        with pytest.raises(LockStoreError, match=r"does not exist .*create_schema=True"):
            await store.acquire(unique_key("dropped"), "owner", 60_000)
    finally:
        await store.aclose()


def schema_file_statements() -> list[str]:
    text = "\n".join(
        line for line in SCHEMA_FILE.read_text().splitlines() if not line.startswith("--")
    )
    # a statement ends at a ';' outside the line function's dollar-quoted body
    statements = [""]
    for number, piece in enumerate(text.split(BODY_QUOTE)):
        if number % 2:
            statements[-1] += BODY_QUOTE + piece + BODY_QUOTE
            continue
        first, *rest = piece.split(";")
        statements[-1] += first
        statements += rest
    return [" ".join(part.split()) for part in statements if part.strip()]


def test_the_shipped_schema_file_is_what_create_schema_runs() -> None:
    store = PostgresLockStore.from_url("postgresql://localhost/db")
    created = [" ".join(statement.split()) for statement in store._sql.schema[1:]]

    assert schema_file_statements() == created


def load_migrations(table: str, sequence: str) -> list[ModuleType]:
    """Load the Alembic migrations of the docs, in order, with names set as a user would."""
    migrations = []
    for path in ALEMBIC_MIGRATIONS:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None
        assert spec.loader is not None
        migration = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(migration)
        migration.__dict__.update(TABLE=table, SEQUENCE=sequence)
        migrations.append(migration)
    assert [m.down_revision for m in migrations[1:]] == [m.revision for m in migrations[:-1]]
    return migrations


async def migrate(url: str, migrations: list[ModuleType], step: str) -> None:
    """Run ``step`` of every migration: upgrades in order, downgrades in reverse."""
    for migration in migrations if step == "upgrade" else reversed(migrations):
        await migrate_one(url, migration, step)


async def migrate_one(url: str, migration: ModuleType, step: str) -> None:
    from alembic.migration import MigrationContext  # noqa: PLC0415
    from alembic.operations import Operations  # noqa: PLC0415
    from sqlalchemy.ext.asyncio import create_async_engine  # noqa: PLC0415

    def in_context(connection: Any) -> None:
        with Operations.context(MigrationContext.configure(connection)):
            getattr(migration, step)()

    engine = create_async_engine(sqlalchemy_url(url, "asyncpg"))
    try:
        async with engine.begin() as connection:
            await connection.run_sync(in_context)
    finally:
        await engine.dispose()


@pytest.mark.skipif(not HAS_ALEMBIC, reason="alembic is not installed")
async def test_the_alembic_migration_makes_the_schema_create_schema_makes(
    scratch: Scratch,
) -> None:
    by_store = scratch.store("by-store")
    await by_store.create_schema()
    await by_store.aclose()
    table, sequence = scratch.names("alembic")

    await migrate(scratch.url, load_migrations(table, sequence), "upgrade")

    assert await describe(scratch.url, table, sequence) == await describe(
        scratch.url, by_store._table_name, by_store._sql.sequence.strip('"')
    )
    migrated = PostgresLockStore.from_url(
        scratch.url, table=table, sequence=sequence, create_schema=False
    )
    try:
        key = unique_key("alembic")
        assert isinstance(await migrated.acquire(key, "owner", 60_000), Acquired)
        assert await migrated.release(key, "owner")
    finally:
        await migrated.aclose()


@pytest.mark.skipif(not HAS_ALEMBIC, reason="alembic is not installed")
async def test_the_alembic_downgrade_drops_the_table_and_the_sequence(scratch: Scratch) -> None:
    table, sequence = scratch.names("downgrade")
    migrations = load_migrations(table, sequence)
    await migrate(scratch.url, migrations, "upgrade")

    await migrate(scratch.url, migrations, "downgrade")

    assert await describe(scratch.url, table, sequence) == ([], [], [], [], [], [], [], [], [], [])


async def describe(url: str, table: str, sequence: str) -> tuple[list[Any], ...]:
    """Columns and constraints (named relative to the lock table) of the lock table, the runs,
    jobs and line tables, the sequence's settings, and the line function (its names written
    relative to the lock table's)."""
    connection = await asyncpg.connect(url)
    try:
        described = []
        for name in (table, f"{table}_runs", f"{table}_jobs", f"{table}_line"):
            columns = await connection.fetch(
                "SELECT column_name, data_type, is_nullable, collation_name, is_identity, "
                "identity_generation FROM information_schema.columns WHERE table_name = $1 "
                "ORDER BY ordinal_position",
                name,
            )
            constraints = await connection.fetch(
                "SELECT replace(conname, $1, ''), contype, pg_get_constraintdef(oid) "
                "FROM pg_constraint WHERE conrelid = to_regclass(quote_ident($2)) ORDER BY 1",
                table,
                name,
            )
            described += [[tuple(r) for r in columns], [tuple(r) for r in constraints]]
        sequences = await connection.fetch(
            "SELECT data_type::text, min_value, max_value, cycle FROM pg_sequences "
            "WHERE sequencename = $1",
            sequence,
        )
        functions = await connection.fetch(
            "SELECT pg_get_function_identity_arguments(oid), pg_get_function_result(oid), "
            "replace(replace(prosrc, $2, '<sequence>'), $3, '<table>') "
            "FROM pg_proc WHERE proname = $1",
            f"{table}_line",
            sequence,
            table,
        )
    finally:
        await connection.close()
    return (
        *described,
        [tuple(r) for r in sequences],
        [(arguments, result, " ".join(body.split())) for arguments, result, body in functions],
    )


# --- ways in, and out ----------------------------------------------------------------------


async def test_a_pool_given_to_the_store_stays_open_after_the_store_closes(
    scratch: Scratch,
) -> None:
    table, sequence = scratch.names("given")
    pool = await asyncpg.create_pool(scratch.url, min_size=1, max_size=2)
    try:
        store = PostgresLockStore(pool, table=table, sequence=sequence)
        await store.open()
        assert isinstance(await store.acquire(unique_key("given"), "owner", 60_000), Acquired)
        await store.aclose()

        assert await pool.fetchval("SELECT 1") == 1
    finally:
        await pool.close()


async def test_a_bare_store_opens_once_for_many_first_callers(scratch: Scratch) -> None:
    bare = scratch.store("bare")
    made = 0
    original = bare._make_executor.make

    async def counting() -> Any:
        nonlocal made
        made += 1
        return await original()

    bare._make_executor = type(bare._make_executor)(counting, bare._make_executor.after_close)
    try:
        results = await asyncio.gather(
            *(bare.acquire(unique_key("bare"), "owner", 60_000) for _ in range(20))
        )
    finally:
        await bare.aclose()
    assert made == 1
    assert all(isinstance(result, Acquired) for result in results)


@pytest.mark.parametrize("scheme", ["postgres", "postgresql+asyncpg"])
async def test_from_url_accepts_the_other_postgresql_schemes(scratch: Scratch, scheme: str) -> None:
    table, sequence = scratch.names("scheme")
    url = scheme + "://" + scratch.url.partition("://")[2]
    store = PostgresLockStore.from_url(url, table=table, sequence=sequence)
    try:
        assert isinstance(await store.acquire(unique_key("scheme"), "owner", 60_000), Acquired)
    finally:
        await store.aclose()


async def test_cancelled_calls_never_strand_the_stores_connections(scratch: Scratch) -> None:
    store = scratch.store("cancelled", max_size=1)
    try:
        # one call in flight on the only connection, the others waiting for it
        calls = [
            asyncio.ensure_future(store.acquire(unique_key("cancelled"), "owner", 60_000))
            for _ in range(5)
        ]
        await asyncio.wait(calls, timeout=0)
        for call in calls:
            call.cancel()
        await asyncio.wait(calls)

        after = await store.acquire(unique_key("after"), "owner", 60_000)
    finally:
        await store.aclose()
    assert isinstance(after, Acquired)


PREPARED_HERE = "SELECT statement FROM pg_prepared_statements"


async def test_every_connection_of_the_pool_runs_the_warm_ups_before_it_serves_a_call(
    scratch: Scratch,
) -> None:
    warm_up = "SELECT CAST($1 AS text) AS warmed_up"
    executor = ConnectionsExecutor(
        lambda: asyncpg.connect(scratch.url), refused_statement, min_size=1, max_size=3
    )
    try:
        await executor.fill()
        await executor.warm([(warm_up, ("",))])
        # three at once: the one kept since fill(), and two opened for these calls
        seen = await asyncio.gather(*(executor.fetch(PREPARED_HERE, ()) for _ in range(3)))
        sessions = await asyncio.gather(
            *(executor.fetchrow("SELECT pg_backend_pid()", ()) for _ in range(3))
        )
    finally:
        await executor.close()
    assert len({row[0] for row in sessions if row is not None}) == 3
    assert all(warm_up in [row[0] for row in rows] for rows in seen)


async def test_the_stores_warm_ups_change_no_lock_and_wake_nobody(scratch: Scratch) -> None:
    table, sequence = scratch.names("warm")
    holder = PostgresLockStore.from_url(scratch.url, table=table, sequence=sequence)
    late = PostgresLockStore.from_url(scratch.url, table=table, sequence=sequence)
    spy = await asyncpg.connect(scratch.url)
    on_the_wire: asyncio.Queue[str] = asyncio.Queue()
    # the warm-ups release and renew the key "" for the owner ""; here "" is held by another
    held = await holder.acquire("", "holder", 60_000)
    other = unique_key("other")
    try:
        await spy.add_listener(
            key_channel(f"{table}_released", ""), lambda *_: on_the_wire.put_nowait("")
        )
        await spy.add_listener(
            key_channel(f"{table}_released", other), lambda *_: on_the_wire.put_nowait(other)
        )
        async with (
            holder.follow_releases(lambda _key: None) as follower,
            follower.following(""),
            follower.following(other),
        ):
            tokens_before = await spy.fetchval(f'SELECT last_value FROM "{sequence}"')
            await late.open()
            assert late._executor is not None
            prepared = [row[0] for row in await late._executor.fetch(PREPARED_HERE, ())]
            assert late._sql.lines.step in prepared
            assert await spy.fetchval(f'SELECT last_value FROM "{sequence}"') == tokens_before
            still = await holder.read_lock("")
            assert isinstance(held, Acquired)
            assert still is not None
            assert (still.owner, still.fencing_token) == ("holder", held.fencing_token)
            # notifications arrive in commit order: one from the warm-ups would come first
            await late.acquire(other, "late", 60_000)
            assert await late.release(other, "late")
            assert await asyncio.wait_for(on_the_wire.get(), 5) == other
    finally:
        await spy.close()
        await holder.aclose()
        await late.aclose()


async def test_a_server_that_refuses_the_warm_ups_still_serves_reads(scratch: Scratch) -> None:
    table, sequence = scratch.names("read_only")
    writer = PostgresLockStore.from_url(scratch.url, table=table, sequence=sequence)
    separator = "&" if "?" in scratch.url else "?"
    # every transaction read-only, as on a replica or for a role without writes
    reader = PostgresLockStore.from_url(
        f"{scratch.url}{separator}default_transaction_read_only=on",
        table=table,
        sequence=sequence,
        create_schema=False,
    )
    key = unique_key("read")
    try:
        acquired = await writer.acquire(key, "writer", 60_000)
        await reader.open()
        seen = await reader.read_lock(key)
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
            await reader.acquire(unique_key("refused"), "reader", 60_000)
    finally:
        await writer.aclose()
        await reader.aclose()
    assert isinstance(acquired, Acquired)
    assert seen is not None
    assert (seen.owner, seen.fencing_token) == ("writer", acquired.fencing_token)


async def test_a_call_given_up_while_its_connection_opens_leaks_nothing_and_pools_it(
    scratch: Scratch,
) -> None:
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    previous_handler = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    opened, expected = [], []
    statements: list[object] = []

    class Watched(asyncpg.Connection):
        async def fetchrow(self, *args: Any, **options: Any) -> Any:
            statements.append(args[0])
            return await super().fetchrow(*args, **options)

    try:
        # give up after 0, 1, 2, ... turns of the loop: before, during and after the handshake
        for turns in range(40):
            connects = 0
            statements.clear()

            async def connect() -> Any:
                nonlocal connects
                connects += 1
                return await asyncpg.connect(scratch.url, connection_class=Watched)

            executor = ConnectionsExecutor(connect, refused_statement, min_size=0, max_size=1)
            call = asyncio.ensure_future(executor.fetchrow("SELECT 1", ()))
            for _ in range(turns):
                await yield_once()
            call.cancel()
            await asyncio.wait([call])
            # a call given up inside its statement closes its connection (never reused); one
            # given up while the connection opened leaves it to the pool
            expected.append(2 if call.cancelled() and statements else 1)
            row = await executor.fetchrow("SELECT 1", ())
            await executor.close()
            opened.append(connects)
            assert row is not None
            assert row[0] == 1
            gc.collect()
    finally:
        loop.set_exception_handler(previous_handler)
    assert unhandled == []
    # given up while opening, the one connection opened served the next call
    assert opened == expected
    # most rounds gave up before the statement: the case this test is for was met
    assert expected.count(1) > len(expected) // 2


async def _listen_once(executor: ConnectionsExecutor) -> None:
    async with executor.listening(lambda _payload: None, lambda: None):
        pass


async def _select_one(executor: ConnectionsExecutor) -> None:
    await executor.fetchrow("SELECT 1", ())


@pytest.mark.parametrize("give_up", [_select_one, _listen_once], ids=["statement", "listener"])
async def test_closing_waits_for_a_given_up_opening_and_closes_what_it_opened(
    scratch: Scratch, give_up: Callable[[ConnectionsExecutor], Awaitable[None]]
) -> None:
    handshake = asyncio.Event()
    opened: list[Any] = []

    async def connect() -> Any:
        await handshake.wait()
        connection = await asyncpg.connect(scratch.url)
        opened.append(connection)
        return connection

    executor = ConnectionsExecutor(connect, refused_statement, min_size=0, max_size=1)
    call = asyncio.ensure_future(give_up(executor))
    await yield_once()
    call.cancel()
    await asyncio.wait([call])
    closing = asyncio.ensure_future(executor.close())
    await yield_once()
    assert not closing.done()
    handshake.set()
    await closing
    assert call.cancelled()
    assert len(opened) == 1
    assert opened[0].is_closed()


async def test_the_store_reconnects_after_the_server_ended_its_connections(
    scratch: Scratch,
) -> None:
    table, sequence = scratch.names("ended")
    separator = "&" if "?" in scratch.url else "?"
    store = PostgresLockStore.from_url(
        f"{scratch.url}{separator}application_name={table}",
        table=table,
        sequence=sequence,
        min_size=2,
        notify_releases=False,
    )
    await store.open()
    admin = await asyncpg.connect(scratch.url)
    try:
        ended = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = $1",
            table,
        )
        assert ended == 2
        # each ended connection may fail one call that raced the server's goodbye, no more
        failures = 0
        while True:
            try:
                after = await store.acquire(unique_key("ended"), "owner", 60_000)
                break
            except Exception:  # noqa: BLE001 -- whatever the driver says of a dead session
                failures += 1
                assert failures <= ended
    finally:
        await admin.close()
        await store.aclose()
    assert isinstance(after, Acquired)


async def test_a_release_notifies_only_when_another_pool_follows_its_key(scratch: Scratch) -> None:
    table, sequence = scratch.names("follow")
    releaser = PostgresLockStore.from_url(scratch.url, table=table, sequence=sequence)
    follower_store = PostgresLockStore.from_url(scratch.url, table=table, sequence=sequence)
    followed, unfollowed = unique_key("followed"), unique_key("unfollowed")
    heard: asyncio.Queue[str] = asyncio.Queue()
    on_the_wire: asyncio.Queue[str] = asyncio.Queue()
    spy = await asyncpg.connect(scratch.url)

    def overheard(_connection: object, _pid: int, _channel: str, payload: object) -> None:
        on_the_wire.put_nowait(str(payload))

    try:
        for key in (followed, unfollowed):
            await spy.add_listener(key_channel(f"{table}_released", key), overheard)
        async with (
            follower_store.follow_releases(heard.put_nowait) as follower,
            follower.following(followed),
        ):
            for key in (unfollowed, followed):
                await releaser.acquire(key, "owner", 60_000)
                assert await releaser.release(key, "owner")
            assert await asyncio.wait_for(heard.get(), 5) == followed
            # notifications arrive in commit order: one for the unfollowed key would come first
            assert await asyncio.wait_for(on_the_wire.get(), 5) == followed
    finally:
        await spy.close()
        await releaser.aclose()
        await follower_store.aclose()


async def test_a_follower_listens_again_after_its_connection_was_killed(scratch: Scratch) -> None:
    table, sequence = scratch.names("relisten")
    store = PostgresLockStore.from_url(scratch.url, table=table, sequence=sequence)
    heard: asyncio.Queue[str] = asyncio.Queue()
    admin = await asyncpg.connect(scratch.url)
    key = unique_key("relisten")
    try:
        async with store.follow_releases(heard.put_nowait) as follower, follower.following(key):
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = $1",
                FOLLOW_SQL,
            )
            assert killed == 1
            await store.acquire(key, "owner", 60_000)
            await store.release(key, "owner")
            for _ in range(20):  # releases before it follows again go unheard: release again
                try:
                    if await asyncio.wait_for(heard.get(), 0.5) == key:
                        break
                except TimeoutError:
                    await store.acquire(key, "owner", 60_000)
                    await store.release(key, "owner")
            else:
                pytest.fail("no release was heard within 10 s of the listener's death")
    finally:
        await admin.close()
        await store.aclose()


async def _listening_backends(admin: Any, table: str) -> list[Any]:
    """The sessions that LISTEN on ``table``'s release channels (their last statement)."""
    return list(
        await admin.fetch(
            "SELECT pid, query FROM pg_stat_activity WHERE pid IN "
            "(SELECT pid FROM pg_locks WHERE locktype = 'advisory') AND application_name = $1",
            table,
        )
    )


@BY_EACH_DRIVER
async def test_a_quiet_listening_connection_is_asked_and_kept(
    scratch: Scratch,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    driver: str,
) -> None:
    monkeypatch.setattr(_postgres_listening, "QUIET_S", 0.1)
    caplog.set_level(logging.INFO, "leaselock")
    table, sequence = scratch.names(f"quiet{driver[:4]}")
    named = _with_query(scratch.url, f"application_name={table}")
    if driver == "asyncpg":
        store = PostgresLockStore.from_url(named, table=table, sequence=sequence)
    else:
        from sqlalchemy.ext.asyncio import create_async_engine  # noqa: PLC0415

        engine = create_async_engine(sqlalchemy_url(named, driver))
        store = PostgresLockStore(engine, table=table, sequence=sequence, own_pool=True)
    admin = await asyncpg.connect(scratch.url)
    try:
        async with store.follow_releases(print) as follower, follower.following(unique_key("q")):
            [before] = await _listening_backends(admin, table)
            await wait_for_real(1000)
            [after] = await _listening_backends(admin, table)
    finally:
        await admin.close()
        await store.aclose()
    assert before["query"] == FOLLOW_SQL
    # the same session, and the last thing it asked the server was the liveness question
    assert (after["pid"], after["query"]) == (before["pid"], "SELECT 1")
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []


@BY_EACH_DRIVER
async def test_a_listening_connection_silenced_by_a_partition_is_replaced_once_it_heals(
    scratch: Scratch,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    driver: str,
) -> None:
    monkeypatch.setattr(_postgres_listening, "QUIET_S", 0.2)
    monkeypatch.setattr(_postgres_follower, "RELISTEN_PAUSE_S", 0.1)
    caplog.set_level(logging.INFO, "leaselock")
    table, sequence = scratch.names(f"cut{driver[:4]}")
    target = urlsplit(scratch.url)
    key = unique_key("partitioned")
    heard: asyncio.Queue[str] = asyncio.Queue()
    releaser = PostgresLockStore.from_url(scratch.url, table=table, sequence=sequence)
    async with Partition(target.hostname or "127.0.0.1", target.port or 5432) as partition:
        user = target.netloc.rpartition("@")[0]
        proxied = target._replace(
            netloc=f"{user}@127.0.0.1:{partition.port}" if user else f"127.0.0.1:{partition.port}"
        )
        if driver == "asyncpg":
            listener = PostgresLockStore.from_url(
                urlunsplit(proxied), table=table, sequence=sequence, command_timeout="1s"
            )
        else:
            from sqlalchemy.ext.asyncio import create_async_engine  # noqa: PLC0415

            engine = create_async_engine(
                sqlalchemy_url(urlunsplit(proxied), driver), connect_args={"connect_timeout": 1}
            )
            listener = PostgresLockStore(engine, table=table, sequence=sequence, own_pool=True)
        try:
            async with (
                listener.follow_releases(heard.put_nowait) as follower,
                follower.following(key),
            ):
                # no reset, no close: the bytes stop, both ways, and only silence tells
                partition.cut()
                # psycopg first tries to cancel the unanswered SELECT 1, for 5-8 s
                await until_real(
                    lambda: _logged(caplog, "Lost the release notifications"),
                    within_s=5 if driver == "asyncpg" else 20,
                )
                partition.heal()
                await until_real(lambda: _logged(caplog, "Listening for releases on"), within_s=10)
                await releaser.acquire(key, "owner", 60_000)
                assert await releaser.release(key, "owner")
                assert await asyncio.wait_for(heard.get(), 5) == key
        finally:
            await listener.aclose()
            await releaser.aclose()
    # one warning for the outage, however many attempts it took to listen again
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "Lost" in r.message]
    assert len(warned) == 1


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in record.getMessage() for record in caplog.records)


def _with_query(url: str, option: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query=f"{parts.query}&{option}" if parts.query else option))


def test_sync_locks_from_several_threads_never_overlap(scratch: Scratch) -> None:
    store = scratch.store("sync")  # built here, in a plain thread; opened on the portal's loop
    key = unique_key("sync")
    guard = threading.Lock()
    inside = 0
    most_inside = 0
    tokens: list[int] = []

    def critical_section() -> None:
        nonlocal inside, most_inside
        with guard:
            inside += 1
            most_inside = max(most_inside, inside)
            lock = current_lock()
            assert lock is not None
            tokens.append(lock.fencing_token)
        sum(range(20_000))  # a little work, so that an overlap would have room to show
        with guard:
            inside -= 1

    with SyncLocks(store=store) as locks:

        def worker() -> None:
            for _ in range(5):
                locks.with_lock(key, critical_section, wait="30s")

        with ThreadPoolExecutor(max_workers=4) as threads:
            for done in [threads.submit(worker) for _ in range(4)]:
                done.result()

    assert most_inside == 1
    assert len(tokens) == 20
    assert tokens == sorted(set(tokens))


# --- configuration -------------------------------------------------------------------------


def test_from_url_repr_names_the_server_and_table_but_never_the_password() -> None:
    store = PostgresLockStore.from_url("postgresql://u:secret@db.internal:6432/shop")

    shown = repr(store)

    assert "secret" not in shown
    assert "db.internal:6432/shop" in shown
    assert "leaselock_locks" in shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://u:secret@db1:5432,db2:5433/shop?target_session_attrs=read-write",
            "postgresql://u@db1:5432,db2:5433/shop, ",
        ),
        (
            "postgresql://u:secret@/shop?host=db1,db2&port=5432,5433&target_session_attrs=any",
            "postgresql://u@/shop?host=db1,db2&port=5432,5433, ",
        ),
    ],
)
def test_from_url_repr_names_every_host_of_a_multi_host_url(url: str, shown: str) -> None:
    assert shown in repr(PostgresLockStore.from_url(url))


@pytest.mark.parametrize(
    "name",
    ["", "1locks", "locks; DROP TABLE x; --", 'a"b', "a.b.c", "a" * 64, "locks-1", "lo cks"],
)
def test_a_bad_table_name_is_refused(name: str) -> None:
    with pytest.raises(LocksConfigurationError, match="table="):
        PostgresLockStore.from_url("postgresql://localhost/db", table=name)


def test_a_bad_sequence_name_is_refused() -> None:
    with pytest.raises(LocksConfigurationError, match="sequence="):
        PostgresLockStore.from_url("postgresql://localhost/db", sequence="seq'; --")


def test_a_channel_too_long_for_listen_is_refused() -> None:
    with pytest.raises(LocksConfigurationError, match="channel="):
        PostgresLockStore.from_url("postgresql://localhost/db", table="a" * 60)


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        ("mysql://localhost/db", "postgresql://"),
        ("postgresql+psycopg://localhost/db", "create_async_engine"),
        ("localhost/db", "postgresql://"),
    ],
)
def test_from_url_refuses_other_urls_naming_what_works(url: str, hint: str) -> None:
    with pytest.raises(LocksConfigurationError, match=hint):
        PostgresLockStore.from_url(url)


def test_something_that_is_not_a_pool_is_refused_naming_what_works() -> None:
    with pytest.raises(LocksConfigurationError, match="from_url"):
        PostgresLockStore("postgresql://localhost/db")  # type: ignore[arg-type]


def test_a_missing_asyncpg_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "asyncpg", None)

    with pytest.raises(LocksConfigurationError, match=r"pip install 'leaselock\[postgres\]'"):
        PostgresLockStore.from_url("postgresql://localhost/db")


@pytest.mark.skipif(not HAS_ALEMBIC, reason="alembic is not installed")
async def test_lock_tables_describes_exactly_what_create_schema_makes(scratch: Scratch) -> None:
    from alembic.autogenerate import compare_metadata  # noqa: PLC0415
    from alembic.runtime.migration import MigrationContext  # noqa: PLC0415
    from sqlalchemy import MetaData  # noqa: PLC0415
    from sqlalchemy.ext.asyncio import create_async_engine  # noqa: PLC0415

    from leaselock.integrations.sqlalchemy import lock_tables  # noqa: PLC0415

    store = scratch.store("described")
    await store.open()
    await store.aclose()
    metadata = MetaData()
    lock_tables(
        metadata, table=store._sql.table.strip('"'), sequence=store._sql.sequence.strip('"')
    )
    ours = set(metadata.tables)

    def differences(connection: Any) -> list[object]:
        context = MigrationContext.configure(
            connection,
            opts={
                "compare_type": True,
                "include_name": lambda name, type_, _: type_ != "table" or name in ours,
            },
        )
        return list(compare_metadata(context, metadata))

    engine = create_async_engine(sqlalchemy_url(scratch.url, "asyncpg"))
    try:
        async with engine.connect() as connection:
            assert await connection.run_sync(differences) == []
    finally:
        await engine.dispose()


# --- housekeeping: pruning long-released rows, releases committed asynchronously ---------------


async def _age(url: str, table: str, key: str, by: str) -> None:
    """Make ``key``'s row look free for ``by`` already: the server's clock cannot be moved."""
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(
            f'UPDATE "{table}" SET expires_at = clock_timestamp() - $2::text::interval '
            "WHERE key = $1",
            key,
            by,
        )
    finally:
        await admin.close()


async def test_prune_deletes_long_free_rows_only_and_their_keys_still_get_greater_tokens(
    scratch: Scratch,
) -> None:
    table, sequence = scratch.names("prune")
    store = PostgresLockStore.from_url(
        scratch.url, table=table, sequence=sequence, prune_after=None
    )
    held, old, recent, expired = (unique_key(label) for label in ("held", "old", "new", "exp"))
    try:
        tokens = {}
        for key in (held, old, recent, expired):
            taken = await store.acquire(key, "owner", 60_000)
            assert isinstance(taken, Acquired)
            tokens[key] = taken.fencing_token
        for key in (old, recent):
            assert await store.release(key, "owner")
        await _age(scratch.url, table, old, "2 hours")
        await _age(scratch.url, table, expired, "2 hours")

        assert await store.prune("1h") == 2

        assert {info.key for info in await store.list_locks("")} == {held, recent}
        again = await store.acquire(old, "next", 60_000)
        assert isinstance(again, Acquired)
        assert again.fencing_token > max(tokens.values())
        assert await store.prune("1h") == 0
    finally:
        await store.aclose()


async def test_prune_keeps_a_row_whose_token_the_sequence_has_not_reached(scratch: Scratch) -> None:
    table, sequence = scratch.names("floor")
    store = PostgresLockStore.from_url(
        scratch.url, table=table, sequence=sequence, prune_after=None
    )
    key = unique_key("floored")
    admin = await asyncpg.connect(scratch.url)
    try:
        for _ in range(5):
            taken = await store.acquire(key, "owner", 60_000)
            assert isinstance(taken, Acquired)
            assert await store.release(key, "owner")
        await _age(scratch.url, table, key, "2 hours")
        await admin.execute(f"SELECT setval('\"{sequence}\"', 1)")  # set back by hand

        assert await store.prune("1h") == 0

        after = await store.acquire(key, "next", 60_000)
        assert isinstance(after, Acquired)
        assert after.fencing_token > taken.fencing_token
    finally:
        await admin.close()
        await store.aclose()


async def test_prune_racing_acquires_of_its_keys_leaves_one_winner_each_with_a_greater_token(
    scratch: Scratch,
) -> None:
    table, sequence = scratch.names("race")
    store = PostgresLockStore.from_url(
        scratch.url, table=table, sequence=sequence, prune_after=None, max_size=8
    )
    keys = [unique_key(f"raced{n}") for n in range(200)]
    try:
        before = 0
        for key in keys:
            taken = await store.acquire(key, "owner", 60_000)
            assert isinstance(taken, Acquired)
            before = max(before, taken.fencing_token)
            assert await store.release(key, "owner")
        for key in keys:
            await _age(scratch.url, table, key, "2 hours")

        answers = await asyncio.gather(
            store.prune("1h"),
            *(store.acquire(key, f"racer{n}", 60_000) for key in keys for n in range(2)),
        )

        won = [answer for answer in answers[1:] if isinstance(answer, Acquired)]
        assert len(won) == len(keys)  # one of the two racers per key
        assert min(answer.fencing_token for answer in won) > before
        assert len({answer.fencing_token for answer in won}) == len(won)
        assert {info.key for info in await store.list_locks("") if info.live} == set(keys)
    finally:
        await store.aclose()


async def test_an_open_store_prunes_in_the_background(scratch: Scratch) -> None:
    table, sequence = scratch.names("background")
    store = PostgresLockStore.from_url(
        scratch.url, table=table, sequence=sequence, prune_after="1s"
    )
    key = unique_key("background")
    await store.open()
    try:
        assert isinstance(await store.acquire(key, "owner", 60_000), Acquired)
        assert await store.release(key, "owner")
        await _age(scratch.url, table, key, "1 minute")
        for _ in range(40):  # a pass comes every 0.25 to 0.75 s
            if await store.read_lock(key) is None:
                break
            await wait_for_real(100)
        else:
            pytest.fail("the released row was still there 4 s later")
    finally:
        await store.aclose()


@pytest.mark.parametrize("age", ["0.5s", -1, "soon", 0])
def test_a_prune_age_under_a_second_or_not_a_duration_is_refused(age: object) -> None:
    with pytest.raises(LocksConfigurationError, match="prune_after"):
        PostgresLockStore.from_url("postgresql://localhost/db", prune_after=age)  # type: ignore[arg-type]


async def test_an_asynchronous_release_leaves_no_setting_on_the_pooled_connection(
    scratch: Scratch,
) -> None:
    table, sequence = scratch.names("asyncrelease")
    # a setting no server has by default: whatever the release does, the session keeps it
    pool = await asyncpg.create_pool(
        scratch.url, min_size=1, max_size=1, server_settings={"synchronous_commit": "remote_apply"}
    )
    store = PostgresLockStore(pool, table=table, sequence=sequence, prune_after=None)
    key = unique_key("released")
    try:
        assert isinstance(await store.acquire(key, "owner", 60_000), Acquired)
        assert await store.release(key, "owner")
        # the pool's one connection ran the release: its session is as it was
        assert await pool.fetchval("SHOW synchronous_commit") == "remote_apply"
        released = await store.read_lock(key)
        assert released is not None
        assert released.owner is None
    finally:
        await store.aclose()
        await pool.close()


# --- waiting lines -------------------------------------------------------------------------


async def places_in_line(url: str, line_table: str, key: str) -> int:
    admin = await asyncpg.connect(url)
    try:
        # the store's own validated, quoted table name
        count: int = await admin.fetchval(f"SELECT count(*) FROM {line_table} WHERE key = $1", key)
    finally:
        await admin.close()
    return count


async def test_instances_waiting_for_a_key_are_handed_it_in_the_order_they_came(
    scratch: Scratch,
) -> None:
    table, sequence = scratch.names("order")
    key = unique_key("order")
    # a clock that stands still: no waiter asks again on its own, so each takes the key only
    # when the release before hands it over, from another store with connections of its own
    clock = ManualClock()
    async with contextlib.AsyncExitStack() as instances:
        holding, *waiting = [
            await instances.enter_async_context(
                Locks(
                    store=PostgresLockStore.from_url(scratch.url, table=table, sequence=sequence),
                    clock=clock,
                )
            )
            for _ in range(4)
        ]
        held = await holding.acquire(key)
        assert held is not None
        line_table = holding.store._sql.lines.table  # type: ignore[attr-defined]
        order: list[int] = []

        async def wait_in_turn(number: int) -> None:
            lock = await waiting[number].acquire(key, wait="30s")
            assert lock is not None
            order.append(number)
            await lock.release()

        tasks = []
        for number in range(len(waiting)):
            tasks.append(asyncio.create_task(wait_in_turn(number)))
            # each instance stands in the key's line before the next one comes
            await until_real(
                lambda count=number + 1: _has_places(scratch.url, line_table, key, count)
            )
        await held.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 20)
    assert order == list(range(len(waiting)))


async def _has_places(url: str, line_table: str, key: str, count: int) -> bool:
    return await places_in_line(url, line_table, key) == count


async def test_a_release_that_waited_for_a_queue_call_hands_the_key_to_the_place_it_made(
    store: PostgresLockStore, scratch: Scratch
) -> None:
    key = unique_key("raced")
    assert isinstance(await store.acquire(key, "holder", 60_000), Acquired)
    queueing = await asyncpg.connect(scratch.url)
    watching = await asyncpg.connect(scratch.url)
    try:
        # a queue call that holds the key's row lock, its place written but not committed
        transaction = queueing.transaction()
        await transaction.start()
        await queueing.fetch(store._sql.lines.step, "queue", key, "waiter", 60_000, 60_000, 1, None)
        release = asyncio.create_task(store.release(key, "holder"))

        async def release_waits_for_the_row_lock() -> bool:
            waiting: int = await watching.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query = $1",
                store._sql.lines.step,
            )
            return waiting == 1

        await until_real(release_waits_for_the_row_lock)
        await transaction.commit()

        assert await asyncio.wait_for(release, 5)
    finally:
        await queueing.close()
        await watching.close()
    # the release read the line once it held the row lock: it saw the place, and handed over
    info = await store.read_lock(key)
    assert info is not None
    assert info.owner == "waiter"


@pytest.mark.parametrize(
    ("key", "owner"),
    [
        ("two  spaces and a trailing one ", "an owner with spaces @host:1"),
        ("42 7 13 digits first", "7 11 owner@host:2"),
        ("ключ 🔑 ✓ κλειδί", "владелец 🙂@hôte:3"),
    ],
)
async def test_a_grant_carries_awkward_keys_and_owners_through_the_server_intact(
    store: PostgresLockStore, key: str, owner: str
) -> None:
    heard: asyncio.Queue[Grant] = asyncio.Queue()
    async with store.wait_in_line(heard.put_nowait) as line:
        assert line is not None
        assert isinstance(await store.acquire(key, "holder", 60_000), Acquired)
        assert isinstance(await line.queue(key, owner, 60_000, 60_000, 41), Queued)

        assert await store.release(key, "holder")

        grant = await asyncio.wait_for(heard.get(), 5)
    assert (grant.key, grant.owner, grant.ticket) == (key, owner, 41)
    info = await store.read_lock(key)
    assert info is not None
    assert (info.owner, info.fencing_token) == (owner, grant.fencing_token)


@pytest.mark.parametrize(
    "payload", ["", "1 2", "1 2 3 ab", "x 2 1 ab", "1 2 -1 ab", "1 2 ² ab", "1 2 3"]
)
def test_a_payload_that_is_no_grant_is_not_read_as_one(payload: str) -> None:
    assert parse_grant(payload) is None


async def _synchronous_commit_after(url: str, step: str, args: tuple[object, ...]) -> str:
    """Run one line step in a transaction that is rolled back; the setting it leaves."""
    admin = await asyncpg.connect(url)
    try:
        # a setting no server has by default: whatever the step does, SHOW tells
        await admin.execute("SET synchronous_commit = remote_apply")
        transaction = admin.transaction()
        await transaction.start()
        try:
            await admin.fetch(step, *args)
            setting: str = await admin.fetchval("SHOW synchronous_commit")
        finally:
            await transaction.rollback()
    finally:
        await admin.close()
    return setting


async def test_a_grant_commits_synchronously_and_a_release_to_nobody_asynchronously(
    store: PostgresLockStore, scratch: Scratch
) -> None:
    step = store._sql.lines.step
    alone, waited = unique_key("alone"), unique_key("waited")
    async with store.wait_in_line(lambda _grant: None) as line:
        assert line is not None
        for key in (alone, waited):
            assert isinstance(await store.acquire(key, "holder", 60_000), Acquired)
        assert isinstance(await line.queue(waited, "waiter", 60_000, 60_000, 1), Queued)

        freed = await _synchronous_commit_after(
            scratch.url, step, ("release", alone, "holder", None, None, None, None)
        )
        granted = await _synchronous_commit_after(
            scratch.url, step, ("release", waited, "holder", None, None, None, None)
        )
        kept = await _synchronous_commit_after(
            scratch.url, step, ("queue", waited, "another", 60_000, 60_000, 1, None)
        )
        taken = await _synchronous_commit_after(
            scratch.url, step, ("queue", unique_key("free"), "taker", 60_000, 60_000, 1, None)
        )
    assert (freed, kept) == ("off", "off")
    assert (granted, taken) == ("remote_apply", "remote_apply")


async def schema_without_lines(scratch: Scratch, name: str) -> tuple[str, str]:
    """Make the schema an earlier leaselock made (no line table, no line function)."""
    table, sequence = scratch.names(name)
    made = PostgresLockStore.from_url(scratch.url, table=table, sequence=sequence)
    await made.create_schema()
    await made.aclose()
    admin = await asyncpg.connect(scratch.url)
    try:
        await admin.execute(f'DROP FUNCTION "{table}_line"{LINE_SIGNATURE}')
        await admin.execute(f'DROP TABLE "{table}_line"')
    finally:
        await admin.close()
    return table, sequence


async def schema_with_an_earlier_line_function(scratch: Scratch, name: str) -> tuple[str, str]:
    """Make the schema leaselock_0003 made: its line function draws tokens without a band."""
    table, sequence = scratch.names(name)
    made = PostgresLockStore.from_url(scratch.url, table=table, sequence=sequence)
    await made.create_schema()
    await made.aclose()
    (line_migration,) = [m for m in load_migrations(table, sequence) if m.revision.endswith("3")]
    earlier = line_migration.LINE_FUNCTION.format(
        table=f'"{table}"',
        line=f'"{table}_line"',
        line_function=f'"{table}_line"',
        sequence_name=f"'\"{sequence}\"'",
    )
    admin = await asyncpg.connect(scratch.url)
    try:
        await admin.execute(earlier)
    finally:
        await admin.close()
    return table, sequence


async def test_a_line_function_of_an_earlier_leaselock_is_not_used_without_create_schema(
    scratch: Scratch, caplog: pytest.LogCaptureFixture
) -> None:
    table, sequence = await schema_with_an_earlier_line_function(scratch, "earlier")
    caplog.set_level(logging.INFO, logger="leaselock.stores.postgres")
    store = PostgresLockStore.from_url(
        scratch.url, table=table, sequence=sequence, create_schema=False
    )
    try:
        async with store.wait_in_line(lambda _grant: None) as line:
            assert line is None
        assert isinstance(await store.acquire(unique_key("earlier"), "owner", 60_000), Acquired)
    finally:
        await store.aclose()
    said = [r.getMessage() for r in caplog.records if r.name == "leaselock.stores.postgres"]
    assert len(said) == 1
    assert "of an earlier leaselock" in said[0]
    assert "alembic_leaselock_tokens.py" in said[0]


async def test_create_schema_replaces_a_line_function_of_an_earlier_leaselock(
    scratch: Scratch,
) -> None:
    table, sequence = await schema_with_an_earlier_line_function(scratch, "replaced")
    key = unique_key("replaced")
    earlier = PostgresLockStore.from_url(
        scratch.url, table=table, sequence=sequence, create_schema=False
    )
    try:
        # the earlier function hands out a token, as a store of the earlier leaselock would
        step = ("queue", key, "before", 60_000, 60_000, 1, None)
        before = await earlier._fetchrow(earlier._sql.lines.step, step)
        assert before is not None
        assert await earlier.release(key, "before")
    finally:
        await earlier.aclose()
    store = PostgresLockStore.from_url(scratch.url, table=table, sequence=sequence)
    try:
        async with store.wait_in_line(lambda _grant: None) as line:
            assert line is not None
            after = await line.queue(key, "after", 60_000, 60_000, 1)
    finally:
        await store.aclose()
    admin = await asyncpg.connect(scratch.url)
    try:
        body = await admin.fetchval(
            "SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure($1)",
            f'"{table}_line"{LINE_SIGNATURE.replace(" ", "")}',
        )
    finally:
        await admin.close()

    assert "leaselock_0004" in body
    assert isinstance(after, Acquired)
    assert after.fencing_token > before[0]


async def test_a_schema_without_lines_offers_none_and_works_as_before(
    scratch: Scratch, caplog: pytest.LogCaptureFixture
) -> None:
    table, sequence = await schema_without_lines(scratch, "nolines")
    caplog.set_level(logging.INFO, logger="leaselock.stores.postgres")
    old = PostgresLockStore.from_url(
        scratch.url, table=table, sequence=sequence, create_schema=False
    )
    key = unique_key("nolines")
    try:
        async with old.wait_in_line(lambda _grant: None) as line:
            assert line is None
        said = [r.getMessage() for r in caplog.records if r.name == "leaselock.stores.postgres"]
        assert len(said) == 1
        assert "has no waiting lines" in said[0]
        assert "alembic_leaselock_line.py" in said[0]
        async with Locks(store=old) as locks:
            held = await locks.acquire(key)
            assert held is not None
            waiting = asyncio.create_task(locks.acquire(key, wait="10s"))
            await wait_for_real(100)
            await held.release()
            taken = await asyncio.wait_for(waiting, 5)
            assert taken is not None
            assert taken.fencing_token > held.fencing_token
            await taken.release()
        broken = await old.acquire(key, "holder", 60_000)
        assert isinstance(broken, Acquired)
        info = await old.break_lock(key)
        assert info is not None
        assert info.owner == "holder"
    finally:
        await old.aclose()


@BY_EACH_DRIVER
async def test_create_schema_makes_the_lines_through_a_sqlalchemy_engine(
    scratch: Scratch, driver: str
) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine  # noqa: PLC0415

    table, sequence = scratch.names(driver[:4])
    # psycopg reads a '%' as a placeholder even in a statement without parameters
    engine = create_async_engine(sqlalchemy_url(scratch.url, driver))
    store = PostgresLockStore(engine, table=table, sequence=sequence, own_pool=True)
    try:
        async with store.wait_in_line(lambda _grant: None) as line:
            assert line is not None
            assert isinstance(
                await line.queue(unique_key("engine"), "w", 60_000, 3000, 1), Acquired
            )
    finally:
        await store.aclose()


async def test_create_schema_adds_the_lines_to_a_schema_made_without_them(
    scratch: Scratch,
) -> None:
    table, sequence = await schema_without_lines(scratch, "addlines")
    upgraded = PostgresLockStore.from_url(scratch.url, table=table, sequence=sequence)
    try:
        async with upgraded.wait_in_line(lambda _grant: None) as line:
            assert line is not None
            key = unique_key("addlines")
            assert isinstance(await line.queue(key, "waiter", 60_000, 3000, 1), Acquired)
    finally:
        await upgraded.aclose()


async def schema_without_ticks(scratch: Scratch, name: str) -> tuple[str, str]:
    """Make the schema an earlier leaselock made: a jobs table without last_tick."""
    table, sequence = scratch.names(name)
    made = PostgresLockStore.from_url(scratch.url, table=table, sequence=sequence)
    await made.create_schema()
    await made.aclose()
    admin = await asyncpg.connect(scratch.url)
    try:
        await admin.execute(f'ALTER TABLE "{table}_jobs" DROP COLUMN last_tick')
    finally:
        await admin.close()
    return table, sequence


def tick_start(job: str, minute: int) -> RunStart:
    tick = datetime(2026, 12, 7, 9, minute, tzinfo=UTC)
    return RunStart(job, OpenRun("shop-1", 1, tick), tick=tick)


async def test_create_schema_adds_last_tick_to_a_jobs_table_made_without_it(
    scratch: Scratch,
) -> None:
    table, sequence = await schema_without_ticks(scratch, "addticks")
    upgraded = PostgresLockStore.from_url(scratch.url, table=table, sequence=sequence)
    try:
        job = unique_key("addticks")
        assert (await upgraded.start_run(tick_start(job, 1))).started
        again = await upgraded.start_run(tick_start(job, 1))
    finally:
        await upgraded.aclose()

    assert again.tick_ran == TickRun(datetime(2026, 12, 7, 9, 1, tzinfo=UTC), "shop-1", 1)


async def test_a_jobs_table_without_last_tick_and_create_schema_false_fails_naming_the_migration(
    scratch: Scratch,
) -> None:
    table, sequence = await schema_without_ticks(scratch, "noticks")
    store = PostgresLockStore.from_url(
        scratch.url, table=table, sequence=sequence, create_schema=False
    )
    try:
        with pytest.raises(LockStoreError) as refused:
            await store.open()
    finally:
        await store.aclose()
    said = str(refused.value)
    assert f'the jobs table "{table}_jobs" has no column last_tick' in said
    assert "create_schema=False" in said
    assert "alembic_leaselock_ticks.py" in said


async def test_a_role_that_may_not_add_last_tick_fails_at_start_naming_the_migration(
    scratch: Scratch,
) -> None:
    table, sequence = await schema_without_ticks(scratch, "roleticks")
    role = f"leaselock_test_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(scratch.url)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN")
        for name in (table, f"{table}_runs", f"{table}_jobs", f"{table}_line"):
            await admin.execute(f'GRANT SELECT, INSERT, UPDATE ON "{name}" TO {role}')
        await admin.execute(f'GRANT USAGE, SELECT, UPDATE ON SEQUENCE "{sequence}" TO {role}')
        server = urlsplit(scratch.url)
        as_role = server._replace(netloc=f"{role}@{server.hostname}:{server.port}")
        app = PostgresLockStore.from_url(urlunsplit(as_role), table=table, sequence=sequence)
        try:
            with pytest.raises(LockStoreError) as refused:
                await app.open()
        finally:
            await app.aclose()
    finally:
        await admin.execute(f"DROP OWNED BY {role}")
        await admin.execute(f"DROP ROLE {role}")
        await admin.close()
    said = str(refused.value)
    assert f'the jobs table "{table}_jobs" has no column last_tick' in said
    assert "could not add it" in said
    assert "alembic_leaselock_ticks.py" in said


@pytest.mark.skipif(not HAS_ALEMBIC, reason="alembic is not installed")
async def test_the_ticks_migration_adds_last_tick_to_a_jobs_table_made_without_it(
    scratch: Scratch,
) -> None:
    table, sequence = await schema_without_ticks(scratch, "migrateticks")
    (ticks,) = [m for m in load_migrations(table, sequence) if m.revision.endswith("5")]

    await migrate_one(scratch.url, ticks, "upgrade")

    store = PostgresLockStore.from_url(
        scratch.url, table=table, sequence=sequence, create_schema=False
    )
    try:
        assert (await store.start_run(tick_start(unique_key("migrateticks"), 1))).started
    finally:
        await store.aclose()


async def test_a_release_without_notifications_still_hands_the_key_to_a_waiter_elsewhere(
    scratch: Scratch,
) -> None:
    table, sequence = scratch.names("quiet")
    quiet = PostgresLockStore.from_url(
        scratch.url, table=table, sequence=sequence, notify_releases=False
    )
    waiting = PostgresLockStore.from_url(scratch.url, table=table, sequence=sequence)
    key = unique_key("quiet")
    heard: asyncio.Queue[Grant] = asyncio.Queue()
    try:
        async with quiet.wait_in_line(lambda _grant: None) as none:
            # no LISTEN behind a transaction-pooling PgBouncer: this store waits by retrying
            assert none is None
        async with waiting.wait_in_line(heard.put_nowait) as line:
            assert line is not None
            assert isinstance(await quiet.acquire(key, "holder", 60_000), Acquired)
            assert isinstance(await line.queue(key, "waiter", 60_000, 60_000, 1), Queued)

            assert await quiet.release(key, "holder")

            grant = await asyncio.wait_for(heard.get(), 5)
        assert grant.owner == "waiter"
    finally:
        await quiet.aclose()
        await waiting.aclose()


async def test_a_lost_listening_connection_is_opened_again_at_the_next_queue_call(
    store: PostgresLockStore, scratch: Scratch
) -> None:
    heard: asyncio.Queue[Grant] = asyncio.Queue()
    key = unique_key("relisten")
    admin = await asyncpg.connect(scratch.url)
    try:
        async with store.wait_in_line(heard.put_nowait) as line:
            assert isinstance(line, PostgresWaitingLine)
            assert isinstance(await store.acquire(key, "holder", 60_000), Acquired)
            assert isinstance(await line.queue(key, "waiter", 60_000, 60_000, 1), Queued)
            listening = f'LISTEN "{line._channel}"'
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = $1",
                listening,
            )
            assert killed == 1
            await until_real(lambda: line._lost)

            assert isinstance(await line.queue(key, "waiter", 60_000, 60_000, 2), Queued)

            assert await store.release(key, "holder")
            grant = await asyncio.wait_for(heard.get(), 5)
            assert (grant.owner, grant.ticket) == ("waiter", 2)
    finally:
        await admin.close()


async def test_prune_deletes_places_whose_time_was_up_long_ago(
    store: PostgresLockStore, scratch: Scratch
) -> None:
    dead, live = unique_key("dead"), unique_key("live")
    async with store.wait_in_line(lambda _grant: None) as line:
        assert line is not None
        for key in (dead, live):
            assert isinstance(await store.acquire(key, "holder", 60_000), Acquired)
            assert isinstance(await line.queue(key, "waiter", 60_000, 60_000, 1), Queued)
        admin = await asyncpg.connect(scratch.url)
        try:
            # a waiter that died two hours ago, on a key nobody looked at since
            await admin.execute(
                f"UPDATE {store._sql.lines.table} "
                "SET expires_at = clock_timestamp() - interval '2 hours' WHERE key = $1",
                dead,
            )
        finally:
            await admin.close()

        await store.prune("1h")

        line_table = store._sql.lines.table
        assert await places_in_line(scratch.url, line_table, dead) == 0
        assert await places_in_line(scratch.url, line_table, live) == 1


@pytest.mark.skipif(not HAS_ALEMBIC, reason="alembic is not installed")
async def test_an_autogenerated_migration_of_lock_tables_makes_a_schema_the_store_runs_on(
    scratch: Scratch,
) -> None:
    import textwrap  # noqa: PLC0415

    import sqlalchemy as sa  # noqa: PLC0415
    from alembic.autogenerate import produce_migrations, render_python_code  # noqa: PLC0415
    from alembic.operations import Operations  # noqa: PLC0415
    from alembic.runtime.migration import MigrationContext  # noqa: PLC0415
    from sqlalchemy.dialects import postgresql  # noqa: PLC0415
    from sqlalchemy.ext.asyncio import create_async_engine  # noqa: PLC0415

    from leaselock.integrations.sqlalchemy import lock_tables  # noqa: PLC0415

    table, sequence = scratch.names("autogenerated")
    metadata = sa.MetaData()
    lock_tables(metadata, table=table, sequence=sequence)
    ours = set(metadata.tables)

    def autogenerate_then_upgrade(connection: Any) -> str:
        """What `alembic revision --autogenerate` writes, run as `alembic upgrade` runs it."""
        context = MigrationContext.configure(
            connection, opts={"include_name": lambda name, kind, _: kind != "table" or name in ours}
        )
        script = produce_migrations(context, metadata)
        rendered = render_python_code(script.upgrade_ops).splitlines()
        code = textwrap.dedent("\n".join(line for line in rendered if not line.startswith("#")))
        names = {"op": Operations(context), "sa": sa, "postgresql": postgresql, "Text": sa.Text}
        exec(code, names)  # noqa: S102 -- the migration autogenerate just wrote
        return code

    engine = create_async_engine(sqlalchemy_url(scratch.url, "asyncpg"))
    try:
        async with engine.begin() as connection:
            code = await connection.run_sync(autogenerate_then_upgrade)
    finally:
        await engine.dispose()
    assert "CREATE SEQUENCE" in code, code
    store = PostgresLockStore.from_url(
        scratch.url, table=table, sequence=sequence, create_schema=False
    )
    async with Locks(store=store) as locks, locks.hold("autogenerated") as lock:
        assert lock.fencing_token >= 1
        assert await store._has_lines(), "the line function came with the migration"
