"""Sequential acquire + release cycles per second on Redis: the raw floor, the store, the engine.

(a) raw: the store's two scripts by EVALSHA through the same redis.asyncio client, nothing else
    (the release announces itself as the store's does: to the next follower in turn, here none);
(b) store: RedisLockStore.acquire + release;
(c) Locks: Locks.acquire + Lock.release (owner ids, leases, renewal timer, release wake-ups);
(d) as (c), over the store's three methods only: no release subscription, so (c) - (d) is what
    reading back our own release notifications costs.

Usage::

    .venv/bin/python benchmarks/bench_redis.py [--url URL] [--seconds N]

The URL defaults to LEASELOCK_TEST_REDIS_URL, else redis://127.0.0.1:6379/0. Calls are sequential,
so commands share one pooled connection (the subscription of (c) has its own). The variants take
turns in slices of a few milliseconds for about ``seconds`` each, so that load from other
processes falls on all of them alike; each ratio is the median of the per-turn ratios. Keys
live under a prefix of this run's own, deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable

import redis.asyncio

from leaselock import Locks
from leaselock.stores import AcquireResult
from leaselock.stores._redis_turns import RELEASE_IN_TURN, queue_name
from leaselock.stores.redis import ACQUIRE, RedisLockStore

DEFAULT_URL = "redis://127.0.0.1:6379/0"
TTL_MS = 30_000
SLICE_CYCLES = 100
WARM_UP_SLICES = 5

Cycle = Callable[[], Awaitable[None]]


async def timed_slice(cycle: Cycle) -> float:
    """Run ``cycle`` SLICE_CYCLES times back to back; return cycles per second."""
    started = time.perf_counter()
    for _ in range(SLICE_CYCLES):
        await cycle()
    return SLICE_CYCLES / (time.perf_counter() - started)


def raw_cycle(client: redis.asyncio.Redis, prefix: str) -> Cycle:
    key = "bench:raw"
    lock_key, counter, channel, followers = (
        prefix + "lock:" + key,
        prefix + "fencing-token",
        prefix + "released@db0:" + key,
        prefix + "followers@db0",
    )
    owner = secrets.token_hex(16)

    async def cycle() -> None:
        token = await client.evalsha(ACQUIRE.sha, 2, lock_key, counter, owner, TTL_MS)
        released = await client.evalsha(
            RELEASE_IN_TURN.sha,
            3,
            lock_key,
            queue_name(prefix, key),
            followers,
            owner,
            channel,
            key,
            0,
        )
        if not token or released != 1:
            raise RuntimeError(f"raw cycle failed: token {token!r}, released {released!r}")

    return cycle


def store_cycle(store: RedisLockStore) -> Cycle:
    key = "bench:store"
    owner = secrets.token_hex(16)

    async def cycle() -> None:
        acquired = await store.acquire(key, owner, TTL_MS)
        if not await store.release(key, owner):
            raise RuntimeError(f"store cycle failed: acquire answered {acquired!r}")

    return cycle


def locks_cycle(locks: Locks) -> Cycle:
    key = "bench:locks"

    async def cycle() -> None:
        lock = await locks.acquire(key)
        if lock is None or not await lock.release():
            raise RuntimeError(f"Locks cycle failed: acquire answered {lock!r}")

    return cycle


class WithoutNotifications:
    """The store's three methods only: Locks then runs without a release subscription."""

    def __init__(self, store: RedisLockStore) -> None:
        self._store = store

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        return await self._store.acquire(key, owner, ttl_ms)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        return await self._store.renew(key, owner, ttl_ms)

    async def release(self, key: str, owner: str) -> bool:
        return await self._store.release(key, owner)


async def main(url: str, seconds: float) -> None:
    prefix = f"leaselock-bench-{secrets.token_hex(6)}:"
    async with redis.asyncio.Redis.from_url(url) as client:
        for script in (ACQUIRE, RELEASE_IN_TURN):
            await client.script_load(script.source)
        store = RedisLockStore(client, prefix=prefix)
        async with (
            Locks(store=store, ttl=f"{TTL_MS}ms") as locks,
            Locks(store=WithoutNotifications(store), ttl=f"{TTL_MS}ms") as quiet_locks,
        ):
            variants = {
                "(a) raw EVALSHA x2": raw_cycle(client, prefix),
                "(b) RedisLockStore": store_cycle(store),
                "(c) Locks.acquire + release": locks_cycle(locks),
                "(d) (c) without subscription": locks_cycle(quiet_locks),
            }
            rates = await measure(variants, seconds)
        keys = [key async for key in client.scan_iter(match=prefix + "*")]
        if keys:
            await client.delete(*keys)
    report(url, rates)


async def measure(variants: dict[str, Cycle], seconds: float) -> dict[str, list[float]]:
    """Let the variants take turns, a slice each, until about ``seconds`` of each has run."""
    for cycle in variants.values():  # connections, scripts, caches
        for _ in range(WARM_UP_SLICES):
            await timed_slice(cycle)
    rates: dict[str, list[float]] = {name: [] for name in variants}
    deadline = time.perf_counter() + seconds * len(variants)
    while time.perf_counter() < deadline:
        for name, cycle in variants.items():
            rates[name].append(await timed_slice(cycle))
    return rates


def report(url: str, rates: dict[str, list[float]]) -> None:
    names = list(rates)
    floor = rates[names[0]]
    turns = len(floor)
    print(f"Redis at {url}: {turns} turns of {SLICE_CYCLES} cycles per variant, sequential")
    for name, rate in rates.items():
        median = statistics.median(rate)
        print(f"  {name:<30} {median:>8,.0f} cycles/s  {1e6 / median:7.1f} us/cycle")
    for name in names[1:]:
        ratio = statistics.median(r / f for r, f in zip(rates[name], floor, strict=True))
        target = "   (target >= 0.80)" if name.startswith("(c)") else ""
        print(f"  {name[:3]}/(a) = {ratio:.2f}{target}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("LEASELOCK_TEST_REDIS_URL") or DEFAULT_URL)
    parser.add_argument("--seconds", type=float, default=5.0, help="time for each variant")
    arguments = parser.parse_args()
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(main(arguments.url, arguments.seconds))
