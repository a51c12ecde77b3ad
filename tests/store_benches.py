"""Store benches: one per shipped store, so the same stories run on each.

Where the store's clock can move (in-memory, SQLite), instances share a ManualClock with it and
time passes by ``advance``. Where it is the server's (PostgreSQL, Redis, a Redis Cluster),
running instances use the system clock with a short ttl and time passes for real; a paused
instance is one whose ManualClock is never advanced, on every store.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Protocol

import pytest
import redis.asyncio
from redis.asyncio.cluster import RedisCluster

from helpers import wait_for_real
from leaselock._clock import Clock, SystemClock
from leaselock.stores import LockStore
from leaselock.testing import ManualClock

STORES = [
    "memory",
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("redis_cluster", marks=pytest.mark.redis_cluster),
]
# the job stories run on etcd too; the lock stories do not: they wait 100 ms past a ttl for an
# expiry, and 1.1 s for the second a shutdown keeps a lease, which etcd's leases outlast (they
# last 2 s at least, in whole seconds, and expire up to 0.7 s late)
JOB_STORES = [*STORES, pytest.param("etcd", marks=pytest.mark.etcd)]


class FencedStock(Protocol):
    """A resource that keeps the highest fencing token it saw and refuses lower ones."""

    async def write(self, count: int, token: int) -> bool: ...

    async def read(self) -> tuple[int, int]: ...


@dataclass
class Bench:
    """One store under test, and how time passes on it."""

    name: str
    new_store: Callable[[], LockStore]
    manual: ManualClock | None
    ttl_ms: int
    stock: FencedStock
    # how much longer than its ttl a lock may live on the store
    expiry_slack_ms: int = 0

    @property
    def expiry_ms(self) -> int:
        """How long a lock of :attr:`ttl_ms` may live after its last renewal, on the store."""
        return self.ttl_ms + self.expiry_slack_ms

    def instance_clock(self) -> Clock:
        """The clock of a running instance."""
        return self.manual if self.manual is not None else SystemClock()

    async def pass_time(self, ms: int) -> None:
        """Let ``ms`` pass on the store's clock (and on running instances')."""
        if self.manual is not None:
            await self.manual.advance(timedelta(milliseconds=ms))
        else:
            await wait_for_real(ms)

    async def eventually(self, check: Callable[[], bool], within_ms: int) -> None:
        """Pass time in small steps until ``check()`` holds; fail after ``within_ms``."""
        for _ in range(within_ms // 20 + 1):
            if check():
                return
            await self.pass_time(20)
        assert check(), f"not true within {within_ms} ms on {self.name}"


class MemoryStock:
    def __init__(self) -> None:
        self.count, self.token = 12, 0

    async def write(self, count: int, token: int) -> bool:
        if token < self.token:
            return False
        self.count, self.token = count, token
        return True

    async def read(self) -> tuple[int, int]:
        return self.count, self.token


class SQLiteStock:
    FENCED_WRITE = "UPDATE stock SET count = ?, token = ? WHERE id = 1 AND token <= ?"

    def __init__(self, path: Path) -> None:
        self.path = path
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE stock (id INTEGER PRIMARY KEY, count INTEGER, token INTEGER)")
            db.execute("INSERT INTO stock VALUES (1, 12, 0)")

    def _write(self, count: int, token: int) -> bool:
        with sqlite3.connect(self.path) as db:
            return db.execute(self.FENCED_WRITE, (count, token, token)).rowcount == 1

    async def write(self, count: int, token: int) -> bool:
        return await asyncio.to_thread(self._write, count, token)

    async def read(self) -> tuple[int, int]:
        with sqlite3.connect(self.path) as db:
            count, token = db.execute("SELECT count, token FROM stock").fetchone()
        return count, token


class PostgresStock:
    def __init__(self, url: str, table: str) -> None:
        self.url, self.table = url, table

    async def create(self) -> None:
        import asyncpg  # noqa: PLC0415 -- only the postgres bench needs the driver

        connection = await asyncpg.connect(self.url)
        try:
            await connection.execute(
                f"CREATE TABLE {self.table} (id int PRIMARY KEY, count int, token bigint);"
                f"INSERT INTO {self.table} VALUES (1, 12, 0)"
            )
        finally:
            await connection.close()

    async def _run(self, sql: str, *args: int) -> list[tuple[int, ...]]:
        import asyncpg  # noqa: PLC0415

        connection = await asyncpg.connect(self.url)
        try:
            return [tuple(row) for row in await connection.fetch(sql, *args)]
        finally:
            await connection.close()

    async def write(self, count: int, token: int) -> bool:
        updated = await self._run(
            f"UPDATE {self.table} SET count = $1, token = $2 WHERE id = 1 AND token <= $2 "
            "RETURNING id",
            count,
            token,
        )
        return bool(updated)

    async def read(self) -> tuple[int, int]:
        ((count, token),) = await self._run(f"SELECT count, token FROM {self.table}")
        return count, token


class RedisStock:
    # KEYS[1]=stock hash  ARGV[1]=count ARGV[2]=token -> 1 written, 0 refused (older token)
    FENCED_WRITE = """
    local seen = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
    if tonumber(ARGV[2]) < seen then return 0 end
    redis.call('HSET', KEYS[1], 'count', ARGV[1], 'token', ARGV[2])
    return 1
    """

    def __init__(self, url: str, key: str, *, cluster: bool = False) -> None:
        self.url, self.key, self.cluster = url, key, cluster

    async def _client(self) -> redis.asyncio.Redis | RedisCluster:
        if self.cluster:
            return RedisCluster.from_url(self.url)
        return redis.asyncio.from_url(self.url)

    async def write(self, count: int, token: int) -> bool:
        client = await self._client()
        try:
            written: int = await client.eval(self.FENCED_WRITE, 1, self.key, count, token)
            return written == 1
        finally:
            await client.aclose()

    async def read(self) -> tuple[int, int]:
        client = await self._client()
        try:
            values = await client.hmget(self.key, "count", "token")
        finally:
            await client.aclose()
        return int(values[0] or 12), int(values[1] or 0)
