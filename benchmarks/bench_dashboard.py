"""The dashboard's cost to the store: round trips per second per open page, beside the bound.

An application holds 1,000 locks and has 100 jobs (each run once, so each has run records and
its lease held): 1,100 live locks. The dashboard is mounted in it (given its ``Locks``), and
pages are opened on it as a browser opens them (their live streams, in process). For each mix of
open pages it counts, at the store, the calls the dashboard makes to watch (``list_locks``,
``job_records``, ``job_states``, ``job_pauses``: the application's own renewals are not counted)
over ``--seconds``, and prints them per second beside the bound: one per second per open page
(issue 40). It prints how long one listing of every lock took, and the bytes pushed per page.

Run: .venv/bin/python benchmarks/bench_dashboard.py [--stores sqlite,redis,postgres]
     [--seconds 10]
SQLite runs on a file of its own; Redis and PostgreSQL use LEASELOCK_TEST_REDIS_URL /
LEASELOCK_TEST_POSTGRES_URL, else the machine's servers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _servers import add_server_arguments, delete_prefix, drop_store_tables

from leaselock import Locks, SystemClock
from leaselock.integrations.dashboard import Dashboard, dashboard
from leaselock.stores import LockStore, PostgresLockStore, RedisLockStore, SQLiteLockStore
from leaselock.testing import FaultyStore

LOCKS = 1000
JOBS = 100
WATCHING = frozenset({"list_locks", "job_records", "job_states", "job_pauses"})
MIXES: tuple[tuple[str, ...], ...] = (
    ("locks",),
    ("jobs",),
    ("timeline",),
    ("locks", "jobs", "timeline"),
    ("locks",) * 10,
)


@dataclass
class Opened:
    """One open page: the bytes its stream pushed."""

    pushed: int = 0


@contextlib.asynccontextmanager
async def open_page(app: Dashboard, page: str) -> AsyncIterator[Opened]:
    """Open ``page``'s live stream, as its browser tab does, for the block."""
    opened = Opened()
    gone = asyncio.Event()
    asked = False

    async def receive() -> MutableMapping[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        opened.pushed += len(message.get("body", b""))

    scope: dict[str, Any] = {
        "type": "http",
        "method": "GET",
        "path": "/events",
        "root_path": "",
        "query_string": f"page={page}".encode(),
        "headers": [(b"host", b"bench")],
        "scheme": "http",
        "client": ("127.0.0.1", 1),
    }
    serving = asyncio.get_running_loop().create_task(app(scope, receive, send))
    try:
        yield opened
    finally:
        gone.set()
        await serving


async def application(locks: Locks, run: str) -> None:
    """Take the 1,000 locks, and run each of the 100 jobs once."""
    for start in range(0, LOCKS, 100):
        taken = await asyncio.gather(
            *(
                locks.acquire(f"bench:{run}:orders:{n}", ttl="60s")
                for n in range(start, start + 100)
            )
        )
        if any(lock is None for lock in taken):
            raise SystemExit("a key was not free: run on a quiet store")
    for number in range(JOBS):

        async def work() -> None:
            """One of the application's jobs."""

        job = locks.on_one_instance(key=f"bench:{run}:job:{number}", ttl="60s")(
            locks.without_overlapping()(work)
        )
        await job()


async def measure(name: str, make_store: Callable[[], LockStore], seconds: float) -> None:
    store = FaultyStore(make_store(), clock=SystemClock())
    run = uuid.uuid4().hex[:8]
    async with Locks(store=store, ttl="60s", instance="bench-app") as locks:
        await application(locks, run)
        app = dashboard(locks)
        listing = time.perf_counter()
        found = await locks.inspect("", limit=5000)
        listing_ms = (time.perf_counter() - listing) * 1000
        live = sum(info.live for info in found)
        print(
            f"{name}: {live} live locks, {JOBS} jobs; one listing of them all: {listing_ms:.1f} ms"
        )
        for mix in MIXES:
            async with contextlib.AsyncExitStack() as pages:
                opened = [await pages.enter_async_context(open_page(app, page)) for page in mix]
                # the first reads of a page just opened are not the steady state
                await asyncio.sleep(7)
                before = sum(call.method in WATCHING for call in store.calls)
                pushed_before = [page.pushed for page in opened]
                started = time.perf_counter()
                await asyncio.sleep(seconds)
                elapsed = time.perf_counter() - started
                reads = sum(call.method in WATCHING for call in store.calls) - before
                pushed = [
                    page.pushed - was for page, was in zip(opened, pushed_before, strict=True)
                ]
            per_second = reads / elapsed
            bound = len(mix)
            verdict = "within" if per_second <= bound + 0.05 else "OVER"
            shown = "+".join(sorted(set(mix))) + (
                "" if len(mix) == len(set(mix)) else f" x{len(mix)}"
            )
            kib = sum(pushed) / len(pushed) / elapsed / 1024
            print(
                f"  {len(mix):>2} open page(s) ({shown:<22}) {per_second:5.2f} round trips/s; "
                f"bound {bound:>2}/s: {verdict}; {kib:6.1f} KiB/s pushed per page"
            )
        await app.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="sqlite")
    parser.add_argument("--seconds", type=float, default=10.0)
    add_server_arguments(parser)
    arguments = parser.parse_args()
    logging.getLogger("leaselock").setLevel(logging.ERROR)
    print(f"Each mix of pages watched for {arguments.seconds:g} s after 7 s of settling")
    run = uuid.uuid4().hex[:8]
    chosen = arguments.stores.split(",")
    makers: list[tuple[str, Callable[[], LockStore], Callable[[], Awaitable[None]] | None]] = []
    directory = Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    if "sqlite" in chosen:
        makers.append(("SQLite", lambda: SQLiteLockStore(directory / "locks.db"), None))
    if "redis" in chosen:
        prefix = f"leaselock-dashboard-{run}:"
        makers.append(
            (
                "Redis",
                lambda: RedisLockStore.from_url(arguments.redis_url, prefix=prefix),
                lambda: delete_prefix(arguments.redis_url, prefix),
            )
        )
    if "postgres" in chosen:
        table = f"leaselock_dashboard_{run}"
        makers.append(
            (
                "PostgreSQL",
                lambda: PostgresLockStore.from_url(
                    arguments.postgres_url, table=table, sequence=f"{table}_seq"
                ),
                lambda: drop_store_tables(arguments.postgres_url, table),
            )
        )
    for name, make_store, clean_up in makers:
        try:
            await measure(name, make_store, arguments.seconds)
        finally:
            if clean_up is not None:
                await clean_up()


if __name__ == "__main__":
    asyncio.run(main())
