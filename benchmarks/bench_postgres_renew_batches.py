"""PostgreSQL: one renewal tick of N held leases in a table of many keys, before and now.

For 1,000, 10,000 and 50,000 leases held in a table of 200,000 keys, this prints the statements
of one tick, the plan's scan of the table and the tick's milliseconds (median of interleaved
rounds) of:

    store           PostgresLockStore.renew_many: one statement up to RENEW_CHUNK leases
                    (past it, also the store's statement over the whole batch at once)
    500-chunk form  the statement renew_many ran before, in chunks of 500 sent at once, as it
                    did (past about 1,000 leases in one statement, its plan scanned the table);
                    also its chunks one after another on one connection: the server's time
                    for them without running side by side on its cores
    floor           a bare UPDATE ... WHERE key = ANY($1) of the same rows: no owner check, no
                    expiry check, one ttl, no answer per lease

all three through the store's own connections, with the ratios to the floor.

Run: .venv/bin/python benchmarks/bench_postgres_renew_batches.py [--url URL] [--keys N]
The default URL is LEASELOCK_TEST_POSTGRES_URL, else postgresql://postgres@127.0.0.1:5432/test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
from _servers import drop_store_tables

from leaselock.stores import Renewal
from leaselock.stores.postgres import RENEW_CHUNK, PostgresLockStore

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
ROUNDS = 7
SIZES = (1_000, 10_000, 50_000)
OLD_CHUNK = 500
# the statement renew_many sent per chunk of OLD_CHUNK leases before
OLD_RENEW_MANY_SQL = """\
UPDATE {table} AS held
   SET expires_at = clock_timestamp() + renewal.ttl_ms * INTERVAL '1 millisecond'
  FROM unnest(CAST($1 AS text[]), CAST($2 AS text[]), CAST($3 AS bigint[]))
       AS renewal (key, owner, ttl_ms)
 WHERE held.key = renewal.key AND held.owner = renewal.owner
   AND held.expires_at > clock_timestamp()
RETURNING held.key, held.owner"""
FLOOR_SQL = """\
UPDATE {table} SET expires_at = clock_timestamp() + INTERVAL '30 seconds'
 WHERE key = ANY(CAST($1 AS text[]))"""


class CountingExecutor:
    """The store's executor, counting the statements sent through it."""

    def __init__(self, inner: Any) -> None:  # noqa: ANN401 -- the store's private executor
        self.inner = inner
        self.statements = 0

    async def fetch(self, sql: str, args: tuple[object, ...]) -> Sequence[Any]:
        self.statements += 1
        return await self.inner.fetch(sql, args)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 -- whatever the executor has
        return getattr(self.inner, name)


def scan_of(plan: Sequence[asyncpg.Record]) -> str:
    lines = "\n".join(row[0] for row in plan)
    return "whole table" if "Seq Scan" in lines else "index" if "Index" in lines else "?"


async def medians_ms(calls: dict[str, Callable[[], Awaitable[object]]]) -> dict[str, float]:
    """Each call's median of ``ROUNDS`` timed calls, taken in turns, after one each to warm up."""
    took: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        await call()
    for _ in range(ROUNDS):
        for name, call in calls.items():
            started = time.perf_counter()
            await call()
            took[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(times) for name, times in took.items()}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("LEASELOCK_TEST_POSTGRES_URL", DEFAULT_URL))
    parser.add_argument("--keys", type=int, default=200_000, help="rows in the table")
    arguments = parser.parse_args()
    table = f"leaselock_bench_renew_{uuid.uuid4().hex[:8]}"
    store = PostgresLockStore.from_url(arguments.url, table=table, sequence=f"{table}_seq")
    admin = await asyncpg.connect(arguments.url)
    await store.open()
    quoted = store._sql.table  # noqa: SLF001 -- the store's own validated, quoted name
    counting = CountingExecutor(store._executor)  # noqa: SLF001 -- statements, from its side
    store._executor = counting  # noqa: SLF001
    old_sql = OLD_RENEW_MANY_SQL.format(table=quoted)
    floor_sql = FLOOR_SQL.format(table=quoted)
    try:
        await admin.execute(
            f"INSERT INTO {quoted} SELECT 'k' || g, 'o' || g, g, "  # noqa: S608
            "clock_timestamp() + interval '1 hour' FROM generate_series(1, $1) AS g",
            arguments.keys,
        )
        await admin.execute(f"ANALYZE {quoted}")
        print(f"a table of {arguments.keys} keys; RENEW_CHUNK {RENEW_CHUNK}; medians of {ROUNDS}")
        for size in SIZES:
            renewals = [Renewal(f"k{n}", f"o{n}", 3_600_000) for n in range(1, size + 1)]
            keys = [renewal.key for renewal in renewals]
            owners = [renewal.owner for renewal in renewals]
            ttls = [renewal.ttl_ms for renewal in renewals]
            chunks = [
                (keys[i : i + OLD_CHUNK], owners[i : i + OLD_CHUNK], ttls[i : i + OLD_CHUNK])
                for i in range(0, size, OLD_CHUNK)
            ]

            async def store_tick(renewals: list[Renewal] = renewals) -> object:
                return await store.renew_many(renewals)

            async def old_tick(chunks: list[tuple[Any, ...]] = chunks) -> object:
                return await asyncio.gather(*(counting.fetch(old_sql, chunk) for chunk in chunks))

            async def old_in_turn(chunks: list[tuple[Any, ...]] = chunks) -> object:
                return [await counting.fetch(old_sql, chunk) for chunk in chunks]

            async def floor_tick(keys: list[str] = keys) -> object:
                return await counting.fetch(floor_sql, (keys,))

            async def one_tick(whole: tuple[Any, ...] = (keys, owners, ttls)) -> object:
                return await counting.fetch(store._sql.renew_many, whole)  # noqa: SLF001

            ticks: dict[str, Callable[[], Awaitable[object]]] = {
                "store": store_tick,
                "old": old_tick,
                "old in turn": old_in_turn,
                "floor": floor_tick,
            }
            if size > RENEW_CHUNK:
                ticks["one"] = one_tick
            statements = {}
            for name, tick in ticks.items():
                counting.statements = 0
                await tick()
                statements[name] = counting.statements
            scans = {
                "store": scan_of(
                    await admin.fetch("EXPLAIN " + store._sql.renew_many, keys, owners, ttls)  # noqa: SLF001
                ),
                "old": scan_of(await admin.fetch("EXPLAIN " + old_sql, *chunks[-1])),
                "old whole": scan_of(await admin.fetch("EXPLAIN " + old_sql, keys, owners, ttls)),
                "floor": scan_of(await admin.fetch("EXPLAIN " + floor_sql, keys)),
            }
            ms = await medians_ms(ticks)
            print(
                f"{size:>6} leases: store {statements['store']} statement(s) "
                f"{ms['store']:6.1f} ms ({scans['store']}); "
                f"500-chunk form {statements['old']} statements {ms['old']:6.1f} ms "
                f"({scans['old']}; as one statement: {scans['old whole']}; "
                f"one after another {ms['old in turn']:6.1f} ms); "
                f"floor {statements['floor']} statement {ms['floor']:6.1f} ms ({scans['floor']}); "
                f"store/floor x{ms['store'] / ms['floor']:.2f}, "
                f"500-chunk/floor x{ms['old'] / ms['floor']:.2f}"
            )
            if "one" in ms:
                print(
                    f"{size:>6} leases in one statement of the store's: {ms['one']:6.1f} ms, "
                    f"x{ms['one'] / ms['floor']:.2f} the floor"
                )
    finally:
        store._executor = counting.inner  # noqa: SLF001
        await store.aclose()
        await admin.close()
        await drop_store_tables(arguments.url, table)


if __name__ == "__main__":
    asyncio.run(main())
