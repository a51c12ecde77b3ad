"""MySQL/MariaDB: sequential acquire + release cycles per second on ONE connection.

Three variants, open side by side, on one table of the server:

(a) floor   the store's own acquire and release SQL on one bare asyncmy connection (autocommit)
(b) store   MySQLLockStore.acquire / release, an asyncmy pool of one connection (from_url)
(c) locks   leaselock.Locks.acquire + lock.release() on a store of its own, as (b) (renewal
            timer, events, owner ids, contract checks)

The variants take turns in slices of ``--slice`` cycles (10, about 10 ms) for about ``seconds``
each, so that load from other processes falls on all of them alike (see _turns.py).
Cycles/s and CPU us/cycle are the medians of a variant's slices; a ratio is the median of the
per-turn ratios (the variant's slice over the floor's slice of the same turn), printed with
their spread (min-max) and middle half (25th-75th percentile). The three share one event loop,
so the timers Locks keeps armed are armed in the floor's slices too: with a loop of its own each
(run_until_complete slice by slice), the ratios came out the same to within 0.01-0.02.

Run: .venv/bin/python benchmarks/bench_mysql.py [--url URL] [--seconds N] [--slice CYCLES]
The default URL is LEASELOCK_TEST_MYSQL_URL, else mysql://root@127.0.0.1:3306/test.
The target (issue 38) is (c)/(a) >= 0.9.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import uuid

import asyncmy
from _turns import Cycle, Slice, take_turns, turn_ratios

from leaselock import Locks
from leaselock.stores import Acquired
from leaselock.stores.mysql import MySQLLockStore
from leaselock.stores.mysql._arguments import connect_args
from leaselock.stores.mysql._sql import Statements

DEFAULT_URL = "mysql://root@127.0.0.1:3306/test"
TABLE = "leaselock_bench_locks"
TTL_MS = 30_000
# about 10 ms: a stall of the server's disk spoils a few slices, not most (50 and 20 cycles
# per slice gave a wider middle half of the per-turn ratios)
SLICE_CYCLES = 10
WARM_UP_SLICES = 20

NAMES = {
    "a": "(a) floor: the store's SQL, one asyncmy connection",
    "b": "(b) MySQLLockStore, pool of 1",
    "c": "(c) Locks.acquire + lock.release()",
}


def make_store(url: str) -> MySQLLockStore:
    return MySQLLockStore.from_url(url, table=TABLE, min_size=1, max_size=1)


async def store_sql(url: str) -> Statements:
    """The statements a store sends to this server (made at its open)."""
    store = make_store(url)
    await store.open()
    sql = store._sql  # noqa: SLF001 -- the floor must run the store's exact SQL
    await store.aclose()
    assert sql is not None  # noqa: S101 -- set by open()
    return sql


def floor_cycle(cursor: asyncmy.cursors.Cursor, sql: Statements) -> Cycle:
    """(a): the same two statements on one connection, nothing else."""
    key = f"bench:floor:{uuid.uuid4().hex}"
    owner = f"owner-{uuid.uuid4().hex}"

    async def cycle() -> None:
        await cursor.execute(sql.acquire, (key, owner, TTL_MS, owner, TTL_MS))
        taken = cursor.lastrowid
        await cursor.execute(sql.release, (key, owner))
        if taken == 0 or cursor.lastrowid == 0:
            raise RuntimeError("floor cycle failed: a benchmark that stops taking is wrong")

    return cycle


def store_cycle(store: MySQLLockStore) -> Cycle:
    """(b): the store's methods, pool of one."""
    key = f"bench:store:{uuid.uuid4().hex}"
    owner = f"owner-{uuid.uuid4().hex}"

    async def cycle() -> None:
        taken = await store.acquire(key, owner, TTL_MS)
        if not isinstance(taken, Acquired) or not await store.release(key, owner):
            raise RuntimeError(f"store cycle failed: acquire answered {taken!r}")

    return cycle


def locks_cycle(locks: Locks) -> Cycle:
    """(c): Locks.acquire + Lock.release on a store of its own."""
    key = f"bench:locks:{uuid.uuid4().hex}"

    async def cycle() -> None:
        lock = await locks.acquire(key)
        if lock is None or not await lock.release():
            raise RuntimeError(f"Locks cycle failed: acquire answered {lock!r}")

    return cycle


async def measure(url: str, seconds: float, cycles: int) -> dict[str, list[Slice]]:
    """Open the three variants side by side, and let them take turns."""
    sql = await store_sql(url)
    connection = await asyncmy.connect(**connect_args(url), autocommit=True, charset="utf8mb4")
    store = make_store(url)
    try:
        await store.open()
        async with (
            connection.cursor() as cursor,
            Locks(store=make_store(url), ttl=f"{TTL_MS}ms") as locks,
        ):
            variants = {
                "a": floor_cycle(cursor, sql),
                "b": store_cycle(store),
                "c": locks_cycle(locks),
            }
            return await take_turns(
                variants, seconds, slice_cycles=cycles, warm_up_slices=WARM_UP_SLICES
            )
    finally:
        await store.aclose()
        connection.close()


async def drop_table(url: str) -> None:
    connection = await asyncmy.connect(**connect_args(url), autocommit=True)
    try:
        async with connection.cursor() as cursor:
            await cursor.execute(f"DROP TABLE IF EXISTS `{TABLE}`")
    finally:
        connection.close()


def report(url: str, slices: dict[str, list[Slice]], cycles: int) -> None:
    turns = len(slices["a"])
    print(f"url {url}, {turns} turns of {cycles} cycles per variant, sequential")
    print(
        f"{'':52} {'cycles/s':>9} {'ratio':>6} {'spread':>10} {'middle half':>12} "
        f"{'CPU us/cycle':>13}"
    )
    floor = [each.per_second for each in slices["a"]]
    for name, label in NAMES.items():
        rates = [each.per_second for each in slices[name]]
        ratios = turn_ratios(rates, floor)
        quartiles = statistics.quantiles(ratios, n=4)
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        middle = f"{quartiles[0]:.2f}-{quartiles[2]:.2f}"
        cpu_us = statistics.median(each.cpu_us for each in slices[name])
        print(
            f"{label:52} {statistics.median(rates):9.0f} {statistics.median(ratios):6.2f} "
            f"{spread:>10} {middle:>12} {cpu_us:13.1f}"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("LEASELOCK_TEST_MYSQL_URL", DEFAULT_URL))
    parser.add_argument("--seconds", type=float, default=5.0, help="time for each variant")
    parser.add_argument("--slice", type=int, default=SLICE_CYCLES, help="cycles per slice")
    args = parser.parse_args()
    try:
        slices = await measure(args.url, args.seconds, args.slice)
    finally:
        await drop_table(args.url)
    report(args.url, slices, args.slice)


if __name__ == "__main__":
    asyncio.run(main())
