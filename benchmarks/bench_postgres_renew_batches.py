"""PostgreSQL: a batch renewal of N leases in a table of many keys, whole or in chunks.

A batched renewal is one UPDATE joined to the batch. Past a few hundred rows PostgreSQL's planner
switches it from the primary key's index to a scan of the whole table, whose cost grows with
the table, not the batch. For each batch size this prints the plan and the milliseconds of:

    one statement   the whole batch in one UPDATE
    store           PostgresLockStore.renew_many (chunks of RENEW_CHUNK rows, sent at once)

next to the floor: the same number of index lookups (a SELECT of the batch's keys by primary
key), in the same run.

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
from collections.abc import Awaitable, Callable

import asyncpg

from leaselock.stores import Renewal
from leaselock.stores.postgres import RENEW_CHUNK, PostgresLockStore

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
ROUNDS = 5


async def median_ms(call: Callable[[], Awaitable[object]]) -> float:
    """The median of ``ROUNDS`` timed calls, after one to warm up."""
    await call()
    took = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        await call()
        took.append((time.perf_counter() - started) * 1000)
    return statistics.median(took)


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
    try:
        await admin.execute(
            f"INSERT INTO {quoted} SELECT 'k' || g, 'o' || g, g, "  # noqa: S608
            "clock_timestamp() + interval '1 hour' FROM generate_series(1, $1) AS g",
            arguments.keys,
        )
        await admin.execute(f"ANALYZE {quoted}")
        whole = store._sql.renew_many  # noqa: SLF001 -- the statement the store runs
        lookup = f"SELECT key FROM {quoted} WHERE key = ANY(CAST($1 AS text[]))"  # noqa: S608
        print(f"chunks of {RENEW_CHUNK} rows; a table of {arguments.keys} keys")
        for size in (100, 500, 1000, 2000, 10_000):
            renewals = [Renewal(f"k{n}", f"o{n}", 30_000) for n in range(1, size + 1)]
            keys = [renewal.key for renewal in renewals]
            owners = [renewal.owner for renewal in renewals]
            ttls = [renewal.ttl_ms for renewal in renewals]
            plan = await admin.fetch("EXPLAIN " + whole, keys, owners, ttls)
            scan = "index" if any("Index Scan" in row[0] for row in plan) else "whole table"
            one = await median_ms(lambda: admin.fetch(whole, keys, owners, ttls))  # noqa: B023
            chunked = await median_ms(lambda: store.renew_many(renewals))  # noqa: B023
            floor = await median_ms(lambda: admin.fetch(lookup, keys))  # noqa: B023
            print(
                f"{size:>6} leases: one statement {one:7.1f} ms ({scan}); store {chunked:7.1f} "
                f"ms; floor (index lookups) {floor:7.1f} ms; store/floor {chunked / floor:4.1f}"
            )
    finally:
        await store.aclose()
        for suffix in ("", "_runs", "_jobs"):
            await admin.execute(f'DROP TABLE IF EXISTS "{table}{suffix}"')
        await admin.execute(f'DROP SEQUENCE IF EXISTS "{table}_seq"')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
