"""PostgreSQL: what one NOTIFY costs the server as sessions LISTENing elsewhere grow.

Issue 38 asks for a fleet whose server CPU per lock cycle stays flat from 10 to 200 instances
that each wait on a neighbour's key. Each such instance keeps one session LISTENing (on its
own channels). This measures the part of a cycle no client code can change: the server CPU of
a durable write with its NOTIFY, sent on a channel nobody listens to, while N idle sessions
LISTEN on channels of their own. Rows for N = 0 (the floor) and up.

The server CPU is read from /proc (every ``postgres`` process of the host: run it where the
server runs, on a quiet machine). PostgreSQL up to 18 keeps no map of which session listens
to which channel: each NOTIFY signals every session of the database that LISTENs, and each
reads the notification to find it is not for it.

Run: .venv/bin/python benchmarks/bench_postgres_listeners.py [--url URL] [--calls N]
     [--listeners 0,10,50]
The default URL is LEASELOCK_TEST_POSTGRES_URL, else postgresql://postgres@127.0.0.1:5432/test;
the largest N must leave room under the server's max_connections.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from pathlib import Path

import asyncpg

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
# the listeners' first notifications and the server's signals settle before a row is timed
SETTLE_S = 0.5


def server_cpu_s() -> float:
    """Return the user and system CPU seconds of every ``postgres`` process of this host."""
    ticks = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


async def row(url: str, table: str, listeners: int, calls: int) -> tuple[float, float]:
    """Server CPU ms per NOTIFY, and ms per statement, with ``listeners`` idle LISTENs."""
    sessions = [await asyncpg.connect(url) for _ in range(listeners)]
    try:
        for number, session in enumerate(sessions):
            await session.add_listener(f"bench_elsewhere_{number}", lambda *_: None)
        sender = await asyncpg.connect(url)
        try:
            await asyncio.sleep(SETTLE_S)
            cpu_before, started = server_cpu_s(), time.perf_counter()
            write = f"UPDATE {table} SET t = t + 1 WHERE k = 1"  # noqa: S608 -- its own table
            for _ in range(calls):
                await sender.execute(f"{write}; SELECT pg_notify('bench_nobody', 'x')")
            took = time.perf_counter() - started
            await asyncio.sleep(SETTLE_S)  # the listeners' share of the last NOTIFYs
            cpu = server_cpu_s() - cpu_before
        finally:
            await sender.close()
    finally:
        for session in sessions:
            await session.close()
    return cpu / calls * 1e3, took / calls * 1e3


async def main(url: str, calls: int, counts: list[int]) -> None:
    table = f"bench_listeners_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f"CREATE TABLE {table} (k int PRIMARY KEY, t bigint NOT NULL)")
        await admin.execute(f"INSERT INTO {table} VALUES (1, 0)")  # noqa: S608
        print(f"PostgreSQL at {url}: {calls} durable writes, each with a NOTIFY nobody hears")
        floor = None
        for listeners in counts:
            cpu_ms, statement_ms = await row(url, table, listeners, calls)
            floor = cpu_ms if floor is None else floor
            print(
                f"  {listeners:4d} sessions LISTENing elsewhere: server CPU {cpu_ms:6.3f} ms "
                f"per NOTIFY (x{cpu_ms / floor:.2f} the first row), "
                f"statement {statement_ms:6.3f} ms"
            )
    finally:
        await admin.execute(f"DROP TABLE IF EXISTS {table}")
        await admin.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("LEASELOCK_TEST_POSTGRES_URL", DEFAULT_URL))
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--listeners", default="0,10,50")
    arguments = parser.parse_args()
    asyncio.run(
        main(arguments.url, arguments.calls, [int(n) for n in arguments.listeners.split(",")])
    )
