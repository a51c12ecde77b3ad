"""MySQL/MariaDB: sequential acquire + release cycles per second on ONE connection.

Three figures, each the median of interleaved rounds:

(a) floor   the store's own acquire and release SQL on one bare asyncmy connection (autocommit)
(b) store   MySQLLockStore.acquire / release, an asyncmy pool of one connection (from_url)
(c) locks   leaselock.Locks.acquire + lock.release() on that store (renewal timer, events,
            owner ids, contract checks)

Run: .venv/bin/python benchmarks/bench_mysql.py [--url URL] [--seconds N] [--rounds N]
The default URL is LEASELOCK_TEST_MYSQL_URL, else mysql://root@127.0.0.1:3306/test.
The target is (c)/(a) >= 0.8.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncmy

from leaselock import Locks
from leaselock.stores import Acquired
from leaselock.stores.mysql import MySQLLockStore
from leaselock.stores.mysql._arguments import connect_args

DEFAULT_URL = "mysql://root@127.0.0.1:3306/test"
TABLE = "leaselock_bench_locks"
TTL_MS = 30_000
WARMUP_CYCLES = 200

Cycle = Callable[[int], Awaitable[None]]
NAMES = {
    "a": "(a) floor: the store's SQL, one asyncmy connection",
    "b": "(b) MySQLLockStore, pool of 1",
    "c": "(c) Locks.acquire + lock.release()",
}


@dataclass(frozen=True)
class Figure:
    """Cycles per second (wall clock), and this process's CPU time per cycle."""

    per_second: float
    cpu_us: float


async def run_for(cycle: Cycle, seconds: float) -> Figure:
    """Run ``cycle`` back to back for ``seconds``."""
    for number in range(WARMUP_CYCLES):
        await cycle(number)
    count = 0
    started = time.perf_counter()
    cpu_started = time.process_time()
    deadline = started + seconds
    while True:
        for _ in range(100):
            await cycle(count)
            count += 1
        now = time.perf_counter()
        if now >= deadline:
            cpu_s = time.process_time() - cpu_started
            return Figure(count / (now - started), cpu_s / count * 1e6)


def make_store(url: str) -> MySQLLockStore:
    return MySQLLockStore.from_url(url, table=TABLE, min_size=1, max_size=1)


async def floor(url: str, seconds: float) -> Figure:
    """(a): the same two statements on one connection, nothing else."""
    store = make_store(url)
    await store.open()
    sql = store._sql  # noqa: SLF001 -- the floor must run the store's exact SQL
    await store.aclose()
    assert sql is not None  # noqa: S101 -- set by open()
    connection = await asyncmy.connect(**connect_args(url), autocommit=True, charset="utf8mb4")
    try:
        key = f"bench:floor:{uuid.uuid4().hex}"
        async with connection.cursor() as cursor:

            async def cycle(number: int) -> None:
                owner = f"owner-{number}"
                await cursor.execute(sql.acquire, (key, owner, TTL_MS, owner, TTL_MS))
                assert cursor.lastrowid != 0  # noqa: S101 -- a benchmark that stops taking is wrong
                await cursor.execute(sql.release, (key, owner))
                assert cursor.lastrowid != 0  # noqa: S101

            return await run_for(cycle, seconds)
    finally:
        connection.close()


async def store_direct(url: str, seconds: float) -> Figure:
    """(b): the store's methods, pool of one."""
    store = make_store(url)
    await store.open()
    try:
        key = f"bench:store:{uuid.uuid4().hex}"

        async def cycle(number: int) -> None:
            owner = f"owner-{number}"
            taken = await store.acquire(key, owner, TTL_MS)
            assert isinstance(taken, Acquired)  # noqa: S101 -- a benchmark that stops taking is wrong
            assert await store.release(key, owner)  # noqa: S101

        return await run_for(cycle, seconds)
    finally:
        await store.aclose()


async def through_locks(url: str, seconds: float) -> Figure:
    """(c): Locks.acquire + Lock.release on that store."""
    async with Locks(store=make_store(url), ttl="30s") as locks:
        key = f"bench:locks:{uuid.uuid4().hex}"

        async def cycle(_number: int) -> None:
            lock = await locks.acquire(key)
            assert lock is not None  # noqa: S101 -- a benchmark that stops taking is wrong
            await lock.release()

        return await run_for(cycle, seconds)


async def drop_table(url: str) -> None:
    connection = await asyncmy.connect(**connect_args(url), autocommit=True)
    try:
        async with connection.cursor() as cursor:
            await cursor.execute(f"DROP TABLE IF EXISTS `{TABLE}`")
    finally:
        connection.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("LEASELOCK_TEST_MYSQL_URL", DEFAULT_URL))
    parser.add_argument("--seconds", type=float, default=3.0, help="per figure and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; median kept")
    args = parser.parse_args()
    figures: dict[str, list[Figure]] = {name: [] for name in NAMES}
    try:
        for _ in range(args.rounds):
            figures["a"].append(await floor(args.url, args.seconds))
            figures["b"].append(await store_direct(args.url, args.seconds))
            figures["c"].append(await through_locks(args.url, args.seconds))
    finally:
        await drop_table(args.url)
    print(f"url {args.url}, {args.rounds} interleaved rounds of {args.seconds:g} s")
    print(f"{'':52} {'cycles/s':>9} {'ratio':>6} {'spread':>13} {'CPU us/cycle':>13}")
    floor_rate = statistics.median(f.per_second for f in figures["a"])
    for name, label in NAMES.items():
        rates = [f.per_second for f in figures[name]]
        rate = statistics.median(rates)
        cpu_us = statistics.median(f.cpu_us for f in figures[name])
        spread = f"{min(rates):.0f}-{max(rates):.0f}"
        print(f"{label:52} {rate:9.0f} {rate / floor_rate:6.2f} {spread:>13} {cpu_us:13.1f}")


if __name__ == "__main__":
    asyncio.run(main())
