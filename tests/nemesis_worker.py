"""One worker process of the nemesis test: take the lock, pause-prone work, a fenced write.

Importable by a spawned child. Time here is real on purpose: the nemesis pauses, kills and
restarts real processes and servers.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import redis.asyncio

from leaselock import LockNotAcquiredError, Locks, LockStoreError
from leaselock.stores import LockStore
from leaselock.stores.redis import RedisLockStore
from leaselock.testing.history import HistoryRecorder
from process_worker import make_store

RESOURCE_TABLE = "fenced_resource"


def create_resource(path: Path, key: str) -> None:
    """Create the fenced resource: one row per key holding the highest token accepted."""
    with sqlite3.connect(path) as connection:
        connection.execute(f"CREATE TABLE {RESOURCE_TABLE} (key TEXT PRIMARY KEY, token INTEGER)")
        connection.execute(f"INSERT INTO {RESOURCE_TABLE} VALUES (?, 0)", (key,))


def fenced_write(path: Path, key: str, token: int) -> bool:
    """Write as the holder of ``token``; refused if a greater token wrote before (the fence)."""
    connection = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        written = connection.execute(
            f"UPDATE {RESOURCE_TABLE} SET token = ? WHERE key = ? AND token <= ?",
            (token, key, token),
        )
        return written.rowcount == 1
    finally:
        connection.close()


@dataclass(frozen=True)
class Job:
    """What every worker does: the store, the key, where to record, until when."""

    kind: str
    where: str
    key: str
    files: Path
    until_ns: int
    ttl: str


def _store(kind: str, where: str) -> LockStore:
    if kind != "redis":
        return make_store(kind, where)
    # the documented way to share the application's client, with redis-py's own retries
    url, prefix = where.split(" ")
    return RedisLockStore(redis.asyncio.Redis.from_url(url), prefix=prefix)


def work(job: Job) -> None:
    """Take the key again and again until ``job.until_ns`` (CLOCK_MONOTONIC); record it all."""
    asyncio.run(_work(job))


async def _work(job: Job) -> None:
    pid = os.getpid()
    holding = job.files / "holding" / str(pid)
    resource = job.files / "resource.db"
    recorder = HistoryRecorder(
        _store(job.kind, job.where), job.files / "history.jsonl", process=f"worker-{pid}"
    )
    rng = random.Random(pid)  # noqa: S311 -- pacing, not secrets

    async def write(token: int) -> bool:
        return await asyncio.to_thread(fenced_write, resource, job.key, token)

    async with Locks(store=recorder, ttl=job.ttl) as locks:
        while time.monotonic_ns() < job.until_ns:
            try:
                async with locks.hold(job.key, wait="2s") as lock:
                    token = lock.fencing_token
                    holding.write_text(str(token))
                    # the nemesis pauses holders here: the write below then comes late, and the
                    # fence must refuse it once a newer holder has written. Some sections
                    # outlive a renewal or two.
                    await asyncio.sleep(rng.choice([0.01, 0.05, 0.1, 0.2, 0.6]))  # noqa: TID251 -- real work time
                    await recorder.fenced_write(job.key, token, functools.partial(write, token))
                    holding.unlink(missing_ok=True)
            except (LockNotAcquiredError, LockStoreError):
                holding.unlink(missing_ok=True)
                await asyncio.sleep(0.05)  # noqa: TID251 -- back off while the store is away
    recorder.close()
