"""Fenced tables: the database refuses the ORM writes of a holder whose token is stale.

On SQLite, PostgreSQL (asyncpg, psycopg) and MariaDB (asyncmy): ORM updates, inserts and
deletes are accepted under the key's current token, refused (StaleFencingTokenError, rows
unchanged) under an older one, refused outside a fenced session unless it opts out; and the
user's story, two OS processes and one paused past its lease, on each database.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from helpers import TESTS, unique_key
from leaselock import LockLostError, Locks, LocksConfigurationError, StaleFencingTokenError
from leaselock.integrations._fences import _ddl
from leaselock.integrations.sqlalchemy import (
    fenced,
    fenced_sync,
    fenced_table,
    unfenced,
    unfenced_sync,
)
from leaselock.stores import InMemoryLockStore
from leaselock.testing import ManualClock
from orm_shop import Shop, database_url, opened_shop, shop

DOCS = Path(__file__).resolve().parents[2] / "docs" / "stores"
SHOP_MIGRATIONS = (
    Path(__file__).resolve().parents[2] / "examples" / "shop" / "migrations" / "versions"
)
DRIVERS = [
    "sqlite",
    pytest.param("asyncpg", marks=pytest.mark.postgres),
    pytest.param("psycopg", marks=pytest.mark.postgres),
    pytest.param("asyncmy", marks=pytest.mark.mysql),
]


def url_of(driver: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if driver == "sqlite":
        return database_url("sqlite", str(tmp_path / "shop.db"))
    server = "postgres_url" if driver in ("asyncpg", "psycopg") else "mysql_url"
    return database_url(driver, request.getfixturevalue(server))


@pytest.fixture(params=DRIVERS)
async def shop_db(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Shop, AsyncEngine]]:
    async with opened_shop(url_of(request.param, request, tmp_path)) as opened:
        yield opened


@asynccontextmanager
async def stale_and_fresh(key: str) -> AsyncIterator[tuple[Any, Any]]:
    """Two holders of ``key``: one whose lease ended while it was paused, and its successor."""
    store_clock = ManualClock()
    store = InMemoryLockStore(clock=store_clock)
    # the paused holder's clock never moves: it neither renews nor sees its deadline pass
    async with (
        Locks(store=store, clock=ManualClock(), ttl="30s") as paused,
        Locks(store=store, clock=store_clock, ttl="30s") as running,
    ):
        stale = await paused.acquire(key)
        assert stale is not None
        await store_clock.advance("31s")
        fresh = await running.acquire(key)
        assert fresh is not None
        assert fresh.fencing_token > stale.fencing_token
        yield stale, fresh


async def rows(engine: AsyncEngine, made: Shop) -> tuple[list[tuple[int, int, int]], list[int]]:
    async with engine.connect() as connection:
        products = await connection.execute(
            sa.select(made.product.id, made.product.in_stock, made.product.fencing_token)
        )
        notes = await connection.execute(sa.select(made.note.id).order_by(made.note.id))
        return [tuple(row) for row in products], [row[0] for row in notes]


async def test_orm_writes_under_the_current_token_go_through_and_stamp_the_rows(shop_db):
    made, engine = shop_db
    async with (
        stale_and_fresh(unique_key("stock")) as (_, fresh),
        AsyncSession(engine) as session,
        fenced(session, fresh),
    ):
        product = await session.get(made.product, 1)
        product.in_stock = 9
        session.add_all([made.note(id=1, body="counted 9"), made.note(id=2, body="extra")])
        await session.commit()
        await session.delete(await session.get(made.note, 2))
        await session.commit()
    assert await rows(engine, made) == ([(1, 9, fresh.fencing_token)], [1])


async def test_after_a_newer_token_wrote_the_older_ones_update_insert_and_delete_are_refused(
    shop_db,
):
    made, engine = shop_db
    key = unique_key("stock")
    async with stale_and_fresh(key) as (stale, fresh):
        async with AsyncSession(engine) as session, fenced(session, fresh):
            (await session.get(made.product, 1)).in_stock = 9
            session.add(made.note(id=9, body="counted 9"))
            await session.commit()

        async def update(session: AsyncSession) -> None:
            (await session.get(made.product, 1)).in_stock = 12

        async def insert(session: AsyncSession) -> None:
            session.add(made.note(id=12, body="counted 12"))

        async def delete(session: AsyncSession) -> None:
            await session.delete(await session.get(made.note, 9))

        for write in (update, insert, delete):
            async with AsyncSession(engine) as session, fenced(session, stale):
                await write(session)
                with pytest.raises(StaleFencingTokenError) as refused:
                    await session.commit()
            assert (refused.value.key, refused.value.fencing_token) == (key, stale.fencing_token)
            assert refused.value.newer_token == fresh.fencing_token
            assert isinstance(refused.value, LockLostError)
            assert refused.value.detected_by == "fencing"
    assert await rows(engine, made) == ([(1, 9, fresh.fencing_token)], [9])


async def test_a_write_outside_a_fenced_session_is_refused_unless_it_opts_out(shop_db):
    made, engine = shop_db
    async with AsyncSession(engine) as session:
        session.add(made.note(id=5, body="no lock"))
        with pytest.raises(sa.exc.DBAPIError, match="outside fenced"):
            await session.commit()
    async with AsyncSession(engine) as session, unfenced(session):
        session.add(made.note(id=5, body="a data fix"))
        await session.commit()
    # the opt-out ended with its transaction: the connection it used is no longer let through
    async with engine.connect() as connection:
        with pytest.raises(sa.exc.DBAPIError, match="outside fenced"):
            await connection.execute(sa.update(made.product).values(in_stock=0))
    assert await rows(engine, made) == ([(1, 10, 0)], [5])


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_pooled_connection_that_served_a_fenced_transaction_takes_no_fence_to_the_next(
    driver, request, tmp_path
):
    url = url_of(driver, request, tmp_path)
    async with opened_shop(url) as (made, _):
        # one connection: every transaction below runs on the one the fenced one used
        engine = create_async_engine(url, pool_size=1, max_overflow=0)
        try:
            async with AsyncSession(engine) as session:
                async with fenced(session, HeldLock(unique_key("notes"), 5)):
                    session.add(made.note(id=1, body="fenced"))
                    await session.commit()
                session.add(made.note(id=2, body="after the block, in the same session"))
                with pytest.raises(sa.exc.DBAPIError, match="outside fenced"):
                    await session.commit()
            async with engine.connect() as connection:
                with pytest.raises(sa.exc.DBAPIError, match="outside fenced"):
                    await connection.execute(sa.insert(made.note).values(id=3, body="core"))
        finally:
            await engine.dispose()


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_fence_told_on_a_bind_other_than_the_sessions_own_ends_with_its_transaction(
    driver, request, tmp_path
):
    url = url_of(driver, request, tmp_path)
    async with opened_shop(url) as (made, _):
        # the fenced tables' engine is one fenced() has not seen: it is not the session's bind,
        # only the bind of its fenced tables; one connection, so the plain session below gets
        # the one the opt-out used
        tables_engine = create_async_engine(url, pool_size=1, max_overflow=0)
        default_engine = create_async_engine(url)
        binds = {made.product: tables_engine, made.note: tables_engine}
        try:
            async with AsyncSession(default_engine, binds=binds) as session, unfenced(session):
                session.add(made.note(id=1, body="a data fix"))
                await session.commit()
            async with AsyncSession(tables_engine) as session:
                session.add(made.note(id=2, body="no lock"))
                with pytest.raises(sa.exc.DBAPIError, match="outside fenced"):
                    await session.commit()
        finally:
            await tables_engine.dispose()
            await default_engine.dispose()


@pytest.mark.parametrize("driver", ["sqlite", pytest.param("psycopg", marks=pytest.mark.postgres)])
def test_the_sync_twins_fence_a_sync_session(driver, request, tmp_path):
    server = (
        str(tmp_path / "shop.db") if driver == "sqlite" else request.getfixturevalue("postgres_url")
    )
    url = database_url(driver, server).replace("+aiosqlite", "")
    made = shop(unique_key("sync").rsplit(":", 1)[1][:8])
    engine = sa.create_engine(url)
    made.metadata.create_all(engine)
    try:
        with Session(engine) as session, unfenced_sync(session):
            session.add(made.product(id=1, in_stock=10))
            session.commit()
        held = HeldLock(unique_key("sync"), 7)
        with Session(engine) as session, fenced_sync(session, held):
            session.get(made.product, 1).in_stock = 4
            session.commit()
        with Session(engine) as session, fenced_sync(session, HeldLock(held.key, 6)):
            session.get(made.product, 1).in_stock = 3
            with pytest.raises(StaleFencingTokenError, match="fencing token 6"):
                session.commit()
        with Session(engine) as session:
            assert session.execute(sa.select(made.product.in_stock)).scalar_one() == 4
    finally:
        made.metadata.drop_all(engine)
        if engine.dialect.name == "postgresql":
            with engine.begin() as connection:
                connection.exec_driver_sql(
                    f"DROP FUNCTION {made.fences}_check(), {made.fences}_stamp()"
                )
        engine.dispose()


class HeldLock:
    """A lock as a SyncLock shows it: the sync test needs no Locks of its own for the tokens."""

    def __init__(self, key: str, fencing_token: int) -> None:
        self.key, self.fencing_token, self.held = key, fencing_token, True


async def test_bad_arguments_are_refused_naming_the_fix(tmp_path: Path):
    async with opened_shop(database_url("sqlite", str(tmp_path / "shop.db"))) as (made, engine):
        async with AsyncSession(engine) as session:
            with pytest.raises(LocksConfigurationError, match="not a SQLAlchemy AsyncSession"):
                async with fenced(object(), HeldLock("k", 1)):
                    pass
            with pytest.raises(LocksConfigurationError, match="fenced_sync"):
                async with fenced(session.sync_session, HeldLock("k", 1)):
                    pass
            with (
                pytest.raises(LocksConfigurationError, match="async with fenced"),
                fenced_sync(session, HeldLock("k", 1)),
            ):
                pass
            with pytest.raises(LocksConfigurationError, match="is not a lock"):
                async with fenced(session, "k"):
                    pass
            with pytest.raises(LocksConfigurationError, match="not a fencing token"):
                async with fenced(session, HeldLock("k", 0)):
                    pass
            released = HeldLock("k", 1)
            released.held = False
            with pytest.raises(LocksConfigurationError, match="is not held"):
                async with fenced(session, released):
                    pass
        with pytest.raises(LocksConfigurationError, match="neither a Table nor a mapped class"):
            fenced_table("products")
        with pytest.raises(LocksConfigurationError, match="not an integer column"):
            fenced_table(made.note, token_column="body")  # noqa: S106 -- a column's name
        with pytest.raises(LocksConfigurationError, match="fenced already"):
            fenced_table(made.note, token_column="id")  # noqa: S106 -- a column's name
        with pytest.raises(LocksConfigurationError, match="mark it with fenced_table"):
            _ddl.trigger_ddl(sa.Table("plain", sa.MetaData()), engine.dialect)


def load_migration(name: str, folder: Path = DOCS) -> Any:
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("migration", "templates"),
    [
        (
            "alembic_leaselock_fences",
            (
                "POSTGRES_CHECK_FUNCTION POSTGRES_STAMP_FUNCTION POSTGRES_CHECK_TRIGGER "
                "POSTGRES_STAMP_TRIGGER"
            ),
        ),
        ("alembic_leaselock_fences_mysql", "MYSQL_CHECK_PROCEDURE MYSQL_TRIGGER MYSQL_STAMP"),
        ("alembic_leaselock_fences_sqlite", "SQLITE_TRIGGER SQLITE_STAMP_TRIGGER"),
    ],
)
def test_the_documented_migrations_write_out_the_ddl_the_library_makes(migration, templates):
    module = load_migration(migration)
    for name in templates.split():
        assert getattr(module, name) == getattr(_ddl, name), name


def test_the_shops_migration_writes_out_the_ddl_the_library_makes():
    # a copy, as a migration must be: frozen, it must still say what the library says today
    module = load_migration("0007_leaselock_fences", SHOP_MIGRATIONS)
    for name in (
        "POSTGRES_CHECK_FUNCTION",
        "POSTGRES_STAMP_FUNCTION",
        "POSTGRES_CHECK_TRIGGER",
        "POSTGRES_STAMP_TRIGGER",
        "SQLITE_TRIGGER",
        "SQLITE_STAMP_TRIGGER",
    ):
        assert getattr(module, name) == getattr(_ddl, name), name


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_schema_made_by_the_documented_migration_fences_the_tables_it_lists(
    driver, request, tmp_path
):
    url = url_of(driver, request, tmp_path)
    suffix = unique_key("m").rsplit(":", 1)[1][:8]
    made = shop(suffix)
    name = {"sqlite": "_sqlite", "asyncmy": "_mysql"}.get(driver, "")
    migration = load_migration(f"alembic_leaselock_fences{name}")
    migration.FENCES = made.fences
    migration.FENCED_TABLES = {made.product.__tablename__: "fencing_token"}
    engine = create_async_engine(url)
    # the application's own migration made its tables; leaselock's adds the fences
    unfenced_metadata = sa.MetaData()
    for table in made.metadata.sorted_tables:
        if table.name != made.fences:
            table.to_metadata(unfenced_metadata)

    def upgrade(connection: sa.Connection) -> None:
        unfenced_metadata.create_all(connection)
        with Operations.context(MigrationContext.configure(connection)):
            migration.upgrade()
        # autogenerate finds nothing to add or change: the fences table is the metadata's (the
        # server's other tables are other tests')
        ours = MigrationContext.configure(
            connection,
            opts={
                "include_name": lambda name, kind, _: (
                    kind != "table" or name in made.metadata.tables
                )
            },
        )
        assert compare_metadata(ours, made.metadata) == []

    def downgrade(connection: sa.Connection) -> None:
        with Operations.context(MigrationContext.configure(connection)):
            migration.downgrade()
        unfenced_metadata.drop_all(connection)

    async with engine.begin() as connection:
        await connection.run_sync(upgrade)
    try:
        key = unique_key("stock")
        async with AsyncSession(engine) as session, fenced(session, HeldLock(key, 3)):
            session.add(made.product(id=1, in_stock=3))
            await session.commit()
        async with AsyncSession(engine) as session, fenced(session, HeldLock(key, 2)):
            session.add(made.product(id=2, in_stock=2))
            with pytest.raises(StaleFencingTokenError):
                await session.commit()
        assert (await rows(engine, made))[0] == [(1, 3, 3)]
    finally:
        async with engine.begin() as connection:
            await connection.run_sync(downgrade)
        await engine.dispose()


# --- the user's story: two processes, one paused past its lease -------------------------------


class Worker:
    """A child process running :func:`orm_shop.reconcile`, answering a line at a time."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def line(self) -> str:
        assert self.process.stdout is not None
        raw = await asyncio.wait_for(self.process.stdout.readline(), 60)
        assert raw, f"the worker ended (code {await self.process.wait()})"
        return raw.decode().strip()

    async def tell(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{line}\n".encode())
        await self.process.stdin.drain()


@asynccontextmanager
async def reconciling(*arguments: str) -> AsyncIterator[Worker]:
    program = (
        "import sys; from orm_shop import reconcile; reconcile(*sys.argv[1:5], int(sys.argv[5]))"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        program,
        *arguments,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(TESTS), "PYTHONUNBUFFERED": "1"},
    )
    try:
        yield Worker(process)
    finally:
        if process.returncode is None:
            os.kill(process.pid, signal.SIGCONT)
            process.terminate()
        # the transport closes once its pipes have
        assert process.stdin is not None
        process.stdin.close()
        await process.wait()


def stopped(pid: int) -> None:
    """Return once ``pid`` is stopped: a SIGSTOP lands when the kernel next schedules it."""
    stat = Path(f"/proc/{pid}/stat")
    if not stat.exists():
        return
    # the state is the field after the command's closing parenthesis
    while stat.read_text().rpartition(")")[2].split()[0] != "T":
        os.sched_yield()


def pause_outside_its_store_calls(pid: int, locks_file: str) -> None:
    """SIGSTOP ``pid`` at a moment it holds no write lock on the SQLite lock file.

    Paused inside a renewal's transaction (every third of its 1 s ttl), it would hold the
    file's write lock for as long as it is paused, and no other process could take a lock: a
    SQLite store's limit, not this test's subject. Stopped holding it, it is let go on until
    the lock is free (SQLite's busy handler waits for it), and stopped again.
    """
    probe = sqlite3.connect(locks_file, isolation_level=None)
    try:
        while True:
            os.kill(pid, signal.SIGSTOP)
            stopped(pid)
            probe.execute("PRAGMA busy_timeout = 0")
            try:
                probe.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                os.kill(pid, signal.SIGCONT)
                probe.execute("PRAGMA busy_timeout = 60000")
                probe.execute("BEGIN IMMEDIATE")
                probe.execute("ROLLBACK")
                continue
            probe.execute("ROLLBACK")
            return
    finally:
        probe.close()


@pytest.mark.parametrize(
    "driver",
    [
        "sqlite",
        pytest.param("asyncpg", marks=pytest.mark.postgres),
        pytest.param("asyncmy", marks=pytest.mark.mysql),
    ],
)
async def test_a_process_paused_past_its_lease_has_its_orm_commit_refused(
    driver, request, tmp_path
):
    url = url_of(driver, request, tmp_path)
    locks_file = str(tmp_path / "locks.db")
    key = unique_key("inventory:reconcile")
    async with opened_shop(url) as (made, engine):
        suffix = made.product.__tablename__.removeprefix("products_")
        async with reconciling(url, suffix, locks_file, key, "12") as first:
            stale = int((await first.line()).removeprefix("held "))
            assert await first.line() == "ready"
            pause_outside_its_store_calls(first.process.pid, locks_file)
            # the second waits at the store until the first's lease ends there
            async with reconciling(url, suffix, locks_file, key, "9") as second:
                fresh = int((await second.line()).removeprefix("held "))
                assert await second.line() == "ready"
                await second.tell("commit")
                assert await second.line() == "committed"
                assert await second.process.wait() == 0
            await first.tell("commit")
            os.kill(first.process.pid, signal.SIGCONT)
            assert await first.line() == f"stale {stale} {fresh}"
            assert await first.process.wait() == 0
        assert await rows(engine, made) == ([(1, 9, fresh)], [9])
