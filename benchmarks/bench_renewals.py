"""Keeping many locks alive: round trips per renewal interval and client CPU, beside the floor.

One ``Locks`` takes N keys (100 at a time, so they are taken at many different moments) and
holds them for a while. It prints, for the keep-alive window after the last acquire:

    renewal round trips per renewal interval (ttl / 3): ``renew_many`` calls, counted;
    client CPU (this process) per second;
    and the floor: ``store.renew_many`` of all N leases once per interval, from a bare loop,
    for the same window, with its client CPU per second.

With ``--sync`` the locks are taken and held through ``SyncLocks`` (from a thread of the
benchmark's, its loop thread renewing), as a threaded application holds them.

Run: .venv/bin/python benchmarks/bench_renewals.py [--stores redis,postgres] [--locks 1000,10000]
     [--ttl 3] [--seconds 10] [--sync]
URLs default to LEASELOCK_TEST_POSTGRES_URL / LEASELOCK_TEST_REDIS_URL, else the machine's
servers. It runs against earlier versions too (same public API), for before and after figures.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Protocol

from _servers import add_server_arguments, delete_prefix, drop_store_tables

from leaselock import Locks, SyncLocks
from leaselock.stores import AcquireResult, Renewal
from leaselock.stores.postgres import PostgresLockStore
from leaselock.stores.redis import RedisLockStore

TAKEN_AT_ONCE = 100


class Held(Protocol):
    """A lock of Locks or SyncLocks: whether it is still held."""

    @property
    def held(self) -> bool: ...


class CountingStore:
    """The store, with its ``renew_many`` calls counted."""

    def __init__(self, inner: PostgresLockStore | RedisLockStore) -> None:
        self.inner = inner
        self.batches = 0

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        return await self.inner.acquire(key, owner, ttl_ms)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        return await self.inner.renew(key, owner, ttl_ms)

    async def release(self, key: str, owner: str) -> bool:
        return await self.inner.release(key, owner)

    async def renew_many(self, renewals: Sequence[Renewal]) -> Sequence[bool]:
        self.batches += 1
        return await self.inner.renew_many(renewals)

    async def open(self) -> None:
        await self.inner.open()

    async def aclose(self) -> None:
        await self.inner.aclose()


class Window:
    """The keep-alive window, from its start: the renewal calls, the CPU and the wall time."""

    def __init__(self, store: CountingStore, held: Sequence[Held | None]) -> None:
        if any(lock is None for lock in held):
            raise SystemExit("a key was not free: run on a quiet prefix")
        self.store, self.held = store, held
        self.batches, self.cpu, self.wall = store.batches, time.process_time(), time.perf_counter()

    def figures(self, ttl_s: float) -> tuple[float, float]:
        """Round trips per renewal interval, and client CPU seconds per second, since the start."""
        cpu_s, wall_s = time.process_time() - self.cpu, time.perf_counter() - self.wall
        lost = sum(lock is not None and not lock.held for lock in self.held)
        if lost:
            raise SystemExit(f"{lost} of {len(self.held)} locks were lost while kept alive")
        round_trips = self.store.batches - self.batches
        return round_trips / (wall_s / (ttl_s / 3)), cpu_s / wall_s


async def keep_alive(
    make_store: Callable[[], PostgresLockStore | RedisLockStore],
    locks_held: int,
    ttl_s: float,
    seconds: float,
) -> tuple[float, float]:
    """Round trips per renewal interval and client CPU seconds per second, through Locks."""
    store = CountingStore(make_store())
    run = uuid.uuid4().hex[:8]
    async with Locks(store=store, ttl=timedelta(seconds=ttl_s)) as locks:
        held = []
        for start in range(0, locks_held, TAKEN_AT_ONCE):
            taken = await asyncio.gather(
                *(
                    locks.acquire(f"renewals:{run}:{n}")
                    for n in range(start, min(start + TAKEN_AT_ONCE, locks_held))
                )
            )
            held.extend(taken)
        window = Window(store, held)
        await asyncio.sleep(seconds)
        return window.figures(ttl_s)


def keep_alive_sync(
    make_store: Callable[[], PostgresLockStore | RedisLockStore],
    locks_held: int,
    ttl_s: float,
    seconds: float,
) -> tuple[float, float]:
    """As :func:`keep_alive`, through SyncLocks; call it from a thread without an event loop."""
    store = CountingStore(make_store())
    run = uuid.uuid4().hex[:8]
    with SyncLocks(store=store, ttl=timedelta(seconds=ttl_s)) as locks:
        held = [locks.acquire(f"renewals:{run}:{n}") for n in range(locks_held)]
        window = Window(store, held)
        time.sleep(seconds)
        return window.figures(ttl_s)


async def floor(
    make_store: Callable[[], PostgresLockStore | RedisLockStore],
    locks_held: int,
    ttl_s: float,
    seconds: float,
) -> float:
    """Client CPU seconds per second of one bare renew_many of every lease per interval.

    The leases look like those ``Locks`` holds (``renewals:<run>:<n>`` keys, owner ids of 32
    hex digits and this process's instance label), so both send the same bytes.
    """
    store = make_store()
    await store.open()
    run = uuid.uuid4().hex[:8]
    try:
        instance = f"{socket.gethostname()}:{os.getpid()}"
        renewals = [
            Renewal(f"renewals:{run}:{n}", f"{uuid.uuid4().hex}@{instance}", int(ttl_s * 1000))
            for n in range(locks_held)
        ]
        for start in range(0, locks_held, TAKEN_AT_ONCE):
            await asyncio.gather(
                *(store.acquire(r.key, r.owner, r.ttl_ms) for r in renewals[start : start + 100])
            )
        cpu, wall = time.process_time(), time.perf_counter()
        while time.perf_counter() - wall < seconds:
            started = time.perf_counter()
            await store.renew_many(renewals)
            await asyncio.sleep(max(0.0, ttl_s / 3 - (time.perf_counter() - started)))
        return (time.process_time() - cpu) / (time.perf_counter() - wall)
    finally:
        await store.aclose()


async def measure(
    name: str,
    make_store: Callable[[], PostgresLockStore | RedisLockStore],
    arguments: argparse.Namespace,
) -> None:
    for locks_held in (int(n) for n in arguments.locks.split(",")):
        if arguments.sync:
            per_interval, cpu = await asyncio.to_thread(
                keep_alive_sync, make_store, locks_held, arguments.ttl, arguments.seconds
            )
        else:
            per_interval, cpu = await keep_alive(
                make_store, locks_held, arguments.ttl, arguments.seconds
            )
        floor_cpu = await floor(make_store, locks_held, arguments.ttl, arguments.seconds)
        print(
            f"{name:<11} {locks_held:>6} locks: {per_interval:6.1f} round trips per renewal "
            f"interval; client CPU {cpu * 1000:6.1f} ms/s, floor {floor_cpu * 1000:6.1f} ms/s "
            f"(ratio {cpu / max(floor_cpu, 1e-9):.1f})"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="redis,postgres")
    parser.add_argument("--locks", default="1000,10000")
    parser.add_argument("--ttl", type=float, default=3.0, help="seconds")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--sync", action="store_true", help="hold the locks through SyncLocks")
    add_server_arguments(parser)
    arguments = parser.parse_args()
    logging.getLogger("leaselock").setLevel(logging.ERROR)
    interval = arguments.ttl / 3
    print(
        f"ttl {arguments.ttl:g} s (renewals every {interval:g} s), {arguments.seconds:g} s alive, "
        f"through {'SyncLocks' if arguments.sync else 'Locks'}"
    )
    run = uuid.uuid4().hex[:8]
    chosen = arguments.stores.split(",")
    if "redis" in chosen:
        prefix = f"leaselock-renewals-{run}:"
        await measure(
            "Redis", lambda: RedisLockStore.from_url(arguments.redis_url, prefix=prefix), arguments
        )
        await delete_prefix(arguments.redis_url, prefix)
    if "postgres" in chosen:
        table = f"leaselock_renewals_{run}"
        await measure(
            "PostgreSQL",
            lambda: PostgresLockStore.from_url(
                arguments.postgres_url, table=table, sequence=f"{table}_seq"
            ),
            arguments,
        )
        await drop_store_tables(arguments.postgres_url, table)


if __name__ == "__main__":
    asyncio.run(main())
