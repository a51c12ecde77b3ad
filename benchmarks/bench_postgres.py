"""PostgreSQL: sequential acquire + release cycles per second on ONE connection.

Three figures, each the median of interleaved rounds:

(a) floor   the store's own acquire and release SQL, prepared, on one bare asyncpg connection
(b) store   PostgresLockStore.acquire / release, pool of one connection
(c) locks   leaselock.Locks.acquire + lock.release() on that store (renewal timer, events,
            owner ids, contract checks; no notification: nobody waits on the key)

Run: .venv/bin/python benchmarks/bench_postgres.py [--url URL] [--seconds N] [--rounds N]
The default URL is LEASELOCK_TEST_POSTGRES_URL, else postgresql://postgres@127.0.0.1:5432/test.
The target is (c)/(a) >= 0.8. --profile writes a pyinstrument profile of (c) to stdout.
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

import asyncpg

from leaselock import Locks
from leaselock.stores import Acquired
from leaselock.stores.postgres import PostgresLockStore

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
TABLE = "leaselock_bench_locks"
SEQUENCE = "leaselock_bench_fencing_token_seq"
TTL_MS = 30_000
WARMUP_CYCLES = 200

Cycle = Callable[[int], Awaitable[None]]
NAMES = {
    "a": "(a) floor: prepared SQL, one asyncpg connection",
    "b": "(b) PostgresLockStore, pool of 1",
    "c": "(c) Locks.acquire + lock.release()",
    "c-quiet": "    (c) with notify_releases=False",
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


def make_store(url: str, *, notify_releases: bool = True) -> PostgresLockStore:
    return PostgresLockStore.from_url(
        url,
        table=TABLE,
        sequence=SEQUENCE,
        min_size=1,
        max_size=1,
        notify_releases=notify_releases,
    )


async def floor(url: str, seconds: float) -> Figure:
    """(a): the same two statements, prepared, on one connection, nothing else."""
    sql = make_store(url)._sql  # noqa: SLF001 -- the floor must run the store's exact SQL
    connection = await asyncpg.connect(url)
    try:
        acquire = await connection.prepare(sql.acquire)
        release = await connection.prepare(sql.release)
        key = f"bench:floor:{uuid.uuid4().hex}"

        async def cycle(number: int) -> None:
            owner = f"owner-{number}"
            token = await acquire.fetchval(key, owner, TTL_MS)
            assert token is not None  # noqa: S101 -- a benchmark that stops taking is wrong
            assert await release.fetchrow(key, owner) is not None  # noqa: S101

        return await run_for(cycle, seconds)
    finally:
        await connection.close()


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


async def through_locks(url: str, seconds: float, *, notify_releases: bool = True) -> Figure:
    """(c): Locks.acquire + Lock.release on that store."""
    async with Locks(store=make_store(url, notify_releases=notify_releases), ttl="30s") as locks:
        key = f"bench:locks:{uuid.uuid4().hex}"

        async def cycle(_number: int) -> None:
            lock = await locks.acquire(key)
            assert lock is not None  # noqa: S101 -- a benchmark that stops taking is wrong
            await lock.release()

        return await run_for(cycle, seconds)


async def prepare(url: str) -> None:
    store = make_store(url)
    await store.open()  # creates the bench table and sequence if missing
    await store.aclose()


async def profile(url: str, seconds: float) -> None:
    from pyinstrument import Profiler  # noqa: PLC0415 -- only for --profile

    profiler = Profiler(interval=0.0001, async_mode="disabled")
    profiler.start()
    await through_locks(url, seconds)
    profiler.stop()
    print(profiler.output_text(unicode=False, color=False, show_all=False))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("LEASELOCK_TEST_POSTGRES_URL", DEFAULT_URL))
    parser.add_argument("--seconds", type=float, default=3.0, help="per figure and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; median kept")
    parser.add_argument("--profile", action="store_true", help="profile (c) with pyinstrument")
    args = parser.parse_args()
    await prepare(args.url)
    if args.profile:
        await profile(args.url, args.seconds)
        return
    figures: dict[str, list[Figure]] = {name: [] for name in NAMES}
    for _ in range(args.rounds):
        figures["a"].append(await floor(args.url, args.seconds))
        figures["b"].append(await store_direct(args.url, args.seconds))
        figures["c"].append(await through_locks(args.url, args.seconds))
        figures["c-quiet"].append(
            await through_locks(args.url, args.seconds, notify_releases=False)
        )
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
