"""PostgreSQL: what a refused acquire costs the server, next to a bare read of the same row.

A waiter's retry, or every instance's tick but the owner's, is a refused acquire: at fleet scale
they are most of the traffic. For N sequential refusals on one connection it prints, for the
store's acquire and for the floor (a plain SELECT of the key's row):

    per second, WAL bytes per call (pg_current_wal_lsn before and after), and fencing tokens
    drawn from the sequence per call.

Run: .venv/bin/python benchmarks/bench_postgres_refusals.py [--url URL] [--calls N]
The default URL is LEASELOCK_TEST_POSTGRES_URL, else postgresql://postgres@127.0.0.1:5432/test.
Other writers on the server add to the WAL figures: run it on a quiet server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable

import asyncpg

from leaselock.stores import Acquired
from leaselock.stores.postgres import PostgresLockStore

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


async def measure(
    admin: asyncpg.Connection, sequence: str, calls: int, call: Callable[[], Awaitable[object]]
) -> tuple[float, float, float]:
    """Calls per second, WAL bytes per call, tokens drawn per call."""
    wal_before = await admin.fetchval("SELECT pg_current_wal_lsn()")
    # the store's own validated, quoted names, here and below
    drawn_before = await admin.fetchval(f"SELECT last_value FROM {sequence}")  # noqa: S608
    started = time.perf_counter()
    for _ in range(calls):
        await call()
    took = time.perf_counter() - started
    wal_bytes = await admin.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1)", wal_before)
    drawn = await admin.fetchval(f"SELECT last_value FROM {sequence}") - drawn_before  # noqa: S608
    return calls / took, float(wal_bytes) / calls, drawn / calls


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("LEASELOCK_TEST_POSTGRES_URL", DEFAULT_URL))
    parser.add_argument("--calls", type=int, default=2000)
    arguments = parser.parse_args()
    table = f"leaselock_bench_refusals_{uuid.uuid4().hex[:8]}"
    store = PostgresLockStore.from_url(
        arguments.url, table=table, sequence=f"{table}_seq", max_size=1
    )
    admin = await asyncpg.connect(arguments.url)
    await store.open()
    try:
        key = "orders:refused"
        await store.acquire(key, "holder", 3_600_000)
        sequence = store._sql.sequence  # noqa: SLF001 -- the store's own quoted name
        quoted_table = store._sql.table  # noqa: SLF001
        floor_connection = await asyncpg.connect(arguments.url)
        read = await floor_connection.prepare(
            f"SELECT owner FROM {quoted_table} WHERE key = $1"  # noqa: S608
        )

        async def refused() -> None:
            took_it = isinstance(await store.acquire(key, "waiter", 30_000), Acquired)
            if took_it:
                raise RuntimeError("the key was free: the benchmark measures refusals")

        async def floor() -> None:
            await read.fetchval(key)

        for name, call in (
            ("floor: SELECT of the row", floor),
            ("store: refused acquire", refused),
        ):
            await measure(admin, sequence, 100, call)
            per_second, wal, drawn = await measure(admin, sequence, arguments.calls, call)
            print(
                f"{name:<28} {per_second:>8.0f}/s  {wal:>7.1f} WAL bytes/call  "
                f"{drawn:.2f} tokens drawn/call"
            )
        await floor_connection.close()
    finally:
        await store.aclose()
        for suffix in ("", "_runs", "_jobs"):
            await admin.execute(f'DROP TABLE IF EXISTS "{table}{suffix}"')
        await admin.execute(f'DROP SEQUENCE IF EXISTS "{table}_seq"')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
