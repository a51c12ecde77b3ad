"""Stores for `leaselock check` in the tests: two broken ones it must catch, and one built on an
application's own Redis client. Each is a factory taking the URL, importable by spawned workers.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from pathlib import Path

import redis.asyncio

from leaselock.stores import Acquired, AcquireResult, NotAcquired, SQLiteLockStore
from leaselock.stores.redis import RedisLockStore


class ReadThenWrite:
    """A store with the bug the contract forbids: it reads the key, then writes in a second step.

    Two processes can both read "free" and both write: two holders.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        connection = sqlite3.connect(path, timeout=30)
        with connection:
            connection.execute(
                "CREATE TABLE IF NOT EXISTS broken_locks "
                "(key TEXT PRIMARY KEY, owner TEXT, expires REAL, token INTEGER)"
            )
        connection.close()

    def _run(self, sql: str, *args: object) -> list[tuple[object, ...]]:
        connection = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            return connection.execute(sql, args).fetchall()
        finally:
            connection.close()

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        rows = await asyncio.to_thread(
            self._run, "SELECT expires, token FROM broken_locks WHERE key = ?", key
        )
        if rows and float(rows[0][0]) > time.time():  # type: ignore[arg-type]
            return NotAcquired()
        # the window the bug opens, wide enough that a 6 s check always sees two holders
        await asyncio.sleep(random.uniform(0.1, 0.3))  # noqa: S311, TID251
        token = (int(rows[0][1]) if rows else 0) + 1  # type: ignore[call-overload]
        await asyncio.to_thread(
            self._run,
            "INSERT OR REPLACE INTO broken_locks VALUES (?, ?, ?, ?)",
            key,
            owner,
            time.time() + ttl_ms / 1000,
            token,
        )
        return Acquired(token)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        rows = await asyncio.to_thread(
            self._run,
            "UPDATE broken_locks SET expires = ? WHERE key = ? AND owner = ? AND expires > ? "
            "RETURNING key",
            time.time() + ttl_ms / 1000,
            key,
            owner,
            time.time(),
        )
        return bool(rows)

    async def release(self, key: str, owner: str) -> bool:
        rows = await asyncio.to_thread(
            self._run,
            # the row stays, its token the floor of the next: only the one bug above
            "UPDATE broken_locks SET owner = NULL, expires = 0 WHERE key = ? AND owner = ? "
            "RETURNING key",
            key,
            owner,
        )
        return bool(rows)


class TokensGoBack:
    """A sound SQLite store whose tokens come back halved: they repeat and go back."""

    def __init__(self, path: str) -> None:
        self.inner = SQLiteLockStore(path)

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        result = await self.inner.acquire(key, owner, ttl_ms)
        if isinstance(result, Acquired):
            return Acquired(result.fencing_token // 2 + 1)
        return result

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        return await self.inner.renew(key, owner, ttl_ms)

    async def release(self, key: str, owner: str) -> bool:
        return await self.inner.release(key, owner)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def open(self) -> None:
        await self.inner.open()


def read_then_write(url: str) -> ReadThenWrite:
    return ReadThenWrite(str(Path(url.removeprefix("sqlite:///"))))


def tokens_go_back(url: str) -> TokensGoBack:
    return TokensGoBack(str(Path(url.removeprefix("sqlite:///"))))


# an application keeps its client for its whole life, and closes it as its loop ends (a
# client dropped unclosed warns of its socket at whatever moment it is collected)
_APPLICATION_LIFESPANS: set[asyncio.Task[None]] = set()


async def _close_at_shutdown(client: redis.asyncio.Redis) -> None:
    try:
        await asyncio.Event().wait()
    finally:
        # asyncio.run cancels this task as it ends, after the Locks on the client closed
        await client.aclose()


def redis_on_an_application_client(url: str) -> RedisLockStore:
    """The documented way to share the application's client, with redis-py's own retries.

    Call it on a running loop (the store is made for it): the client lives until that loop's
    ``asyncio.run`` ends, then closes.
    """
    client = redis.asyncio.Redis.from_url(url)
    lifespan = asyncio.get_running_loop().create_task(_close_at_shutdown(client))
    _APPLICATION_LIFESPANS.add(lifespan)
    lifespan.add_done_callback(_APPLICATION_LIFESPANS.discard)
    return RedisLockStore(client, prefix="leaselock-check:")
