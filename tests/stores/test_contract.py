"""The shipped contract suite, once per shipped store and way in: what users run is what we run.

Stores whose clock can move (in-memory, SQLite) run the time cases on a ManualClock; PostgreSQL
and Redis measure expiry on the server's clock, so the suite waits for real (no advance_time).
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from pathlib import Path
from typing import ClassVar

import pytest

from leaselock.stores import (
    AcquireResult,
    Grant,
    InMemoryLockStore,
    JobPause,
    JobRecord,
    JobState,
    LockInfo,
    LockStore,
    Renewal,
    RunRecord,
    RunStart,
    RunStartAnswer,
    SQLiteLockStore,
    WaitingLine,
)
from leaselock.testing import ManualClock
from leaselock.testing.pytest import LockStoreContractTests

CALLERS: Mapping[str, int] = {"callers": 32}


class TestInMemoryContract(LockStoreContractTests):
    concurrent: ClassVar[Mapping[str, int]] = CALLERS
    clock = ManualClock()

    def make_store(self) -> InMemoryLockStore:
        return InMemoryLockStore(clock=self.clock)

    async def advance_time(self, by: timedelta) -> None:
        await self.clock.advance(by)


# --- SQLite --------------------------------------------------------------------------------


class TestSQLiteContract(LockStoreContractTests):
    concurrent: ClassVar[Mapping[str, int]] = CALLERS

    @pytest.fixture(autouse=True)
    def _fresh_file(self, tmp_path: Path) -> None:
        self.path = tmp_path / "locks.db"
        self.clock = ManualClock()

    def make_store(self) -> LockStore:
        return SQLiteLockStore(self.path, clock=self.clock)

    async def advance_time(self, by: timedelta) -> None:
        await self.clock.advance(by)


class RoundRobinStore:
    """Spreads calls over several stores on one file: a connection and a thread each, as if
    each were a process of its own."""

    def __init__(self, stores: Sequence[SQLiteLockStore]) -> None:
        self._stores = stores
        self._next = itertools.cycle(stores)

    async def open(self) -> None:
        for store in self._stores:
            await store.open()

    async def aclose(self) -> None:
        for store in self._stores:
            await store.aclose()

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        return await next(self._next).acquire(key, owner, ttl_ms)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        return await next(self._next).renew(key, owner, ttl_ms)

    async def renew_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        return list(await next(self._next).renew_many(renewals))

    async def release(self, key: str, owner: str) -> bool:
        return await next(self._next).release(key, owner)

    async def record_run(self, run: RunRecord) -> None:
        await next(self._next).record_run(run)

    async def job_records(self, jobs: Sequence[str] | None = None) -> list[JobRecord]:
        return await next(self._next).job_records(jobs)

    async def read_lock(self, key: str) -> LockInfo | None:
        return await next(self._next).read_lock(key)

    async def list_locks(self, prefix: str = "", limit: int = 1000) -> list[LockInfo]:
        return await next(self._next).list_locks(prefix, limit)

    async def break_lock(self, key: str) -> LockInfo | None:
        return await next(self._next).break_lock(key)

    async def start_run(self, start: RunStart) -> RunStartAnswer:
        return await next(self._next).start_run(start)

    async def end_run(self, run: RunRecord) -> bool:
        return await next(self._next).end_run(run)

    async def note_missed(self, job: str, missed_at: datetime) -> None:
        await next(self._next).note_missed(job, missed_at)

    async def pause_jobs(self, pause: JobPause) -> None:
        await next(self._next).pause_jobs(pause)

    async def resume_jobs(self, target: str) -> JobPause | None:
        return await next(self._next).resume_jobs(target)

    async def job_pauses(self) -> list[JobPause]:
        return await next(self._next).job_pauses()

    async def job_states(self, jobs: Sequence[str] | None = None) -> list[JobState]:
        return await next(self._next).job_states(jobs)

    def wait_in_line(
        self, on_grant: Callable[[Grant], None]
    ) -> AbstractAsyncContextManager[WaitingLine]:
        # each line is one store's (a process of its own); releases go through any of them
        return next(self._next).wait_in_line(on_grant)


class TestSQLiteContractOverFourConnections(TestSQLiteContract):
    def make_store(self) -> LockStore:
        return RoundRobinStore([SQLiteLockStore(self.path, clock=self.clock) for _ in range(4)])


# --- PostgreSQL ----------------------------------------------------------------------------

# every PostgreSQL class of this run shares one table: their keys are unique
PG_TABLE = f"leaselock_contract_{uuid.uuid4().hex[:12]}"
PG_SEQUENCE = f"{PG_TABLE}_seq"


@pytest.fixture(scope="module")
def contract_postgres_url(postgres_url: str) -> Iterator[str]:
    """The server, and the contract table dropped once every class ran."""
    yield postgres_url

    async def drop() -> None:
        import asyncpg  # noqa: PLC0415

        connection = await asyncpg.connect(postgres_url)
        try:
            await connection.execute(f'DROP TABLE IF EXISTS "{PG_TABLE}"')
            await connection.execute(f'DROP TABLE IF EXISTS "{PG_TABLE}_runs"')
            await connection.execute(f'DROP TABLE IF EXISTS "{PG_TABLE}_jobs"')
            await connection.execute(f'DROP TABLE IF EXISTS "{PG_TABLE}_line"')
            await connection.execute(
                f'DROP FUNCTION IF EXISTS "{PG_TABLE}_line"'
                "(text, text, text, bigint, bigint, bigint, text)"
            )
            await connection.execute(f'DROP SEQUENCE IF EXISTS "{PG_SEQUENCE}"')
        finally:
            await connection.close()

    asyncio.run(drop())


def sqlalchemy_url(url: str, driver: str) -> str:
    return "postgresql+" + driver + "://" + url.partition("://")[2]


@pytest.mark.postgres
class PostgresContract(LockStoreContractTests):
    concurrent: ClassVar[Mapping[str, int]] = CALLERS

    @pytest.fixture(autouse=True)
    def _server(self, contract_postgres_url: str) -> None:
        self.url = contract_postgres_url


class TestPostgresContractAsyncpgPool(PostgresContract):
    """An application's asyncpg pool of 20 connections, 32 racing callers."""

    async def make_store(self) -> LockStore:
        import asyncpg  # noqa: PLC0415

        from leaselock.stores import PostgresLockStore  # noqa: PLC0415

        pool = await asyncpg.create_pool(self.url, min_size=1, max_size=20)
        return PostgresLockStore(pool, table=PG_TABLE, sequence=PG_SEQUENCE, own_pool=True)


class TestPostgresContractFromUrl(PostgresContract):
    def make_store(self) -> LockStore:
        from leaselock.stores import PostgresLockStore  # noqa: PLC0415

        return PostgresLockStore.from_url(
            self.url, table=PG_TABLE, sequence=PG_SEQUENCE, max_size=20
        )


class TestPostgresContractSQLAlchemy(PostgresContract):
    """A SQLAlchemy AsyncEngine (asyncpg dialect) with a pool of 20."""

    driver = "asyncpg"

    def make_store(self) -> LockStore:
        from sqlalchemy.ext.asyncio import create_async_engine  # noqa: PLC0415

        from leaselock.stores import PostgresLockStore  # noqa: PLC0415

        engine = create_async_engine(sqlalchemy_url(self.url, self.driver), pool_size=20)
        return PostgresLockStore(engine, table=PG_TABLE, sequence=PG_SEQUENCE, own_pool=True)


@pytest.mark.skipif(
    importlib.util.find_spec("psycopg") is None, reason="psycopg (v3) is not installed"
)
class TestPostgresContractSQLAlchemyPsycopg(TestPostgresContractSQLAlchemy):
    """The same through the psycopg 3 dialect."""

    driver = "psycopg"


# --- Redis ---------------------------------------------------------------------------------


@pytest.mark.redis
class TestRedisContract(LockStoreContractTests):
    """A pool of 8 connections that 32 racing callers queue for."""

    concurrent: ClassVar[Mapping[str, int]] = CALLERS

    @pytest.fixture(autouse=True)
    def _server(self, redis_url: str) -> Iterator[None]:
        import redis  # noqa: PLC0415

        self.url = redis_url
        self.prefix = f"leaselock-contract-{uuid.uuid4().hex[:12]}:"
        yield
        with redis.Redis.from_url(redis_url) as client:
            keys = list(client.scan_iter(match=self.prefix + "*", count=1000))
            if keys:
                client.delete(*keys)

    def make_store(self) -> LockStore:
        from leaselock.stores import RedisLockStore  # noqa: PLC0415

        # from_url's pool is a BlockingConnectionPool: the 33rd caller waits for a connection
        return RedisLockStore.from_url(self.url, prefix=self.prefix, max_connections=8)
