"""Sequential acquire + release cycles per second on Redis: minimal protocol, store, engine.

(a) minimal: SET NX PX, then a compare-and-delete script, through the same redis.asyncio client
    (the least a lock with an expiry can do; no token, no wake-ups);
(m) the same minimal protocol on one pipelined connection of redis-py's, sent as the store sends
    its own calls (RedisCommandPipe): the floor of the store's own transport;
(s) scripts: the store's own two scripts by EVALSHA on a pipelined connection, as (m) (acquire
    with its token, release with its handoff and announcement), nothing else;
(p) redis-py's own asyncio Lock (SET NX PX, and its compare-and-delete script), the peer;
(b) store: RedisLockStore.acquire + release;
(c) Locks: Locks.acquire + Lock.release (owner ids, leases, renewal timer, lines and wake-ups);
(d) as (c), over the store's three methods only: no line and no release subscription.

It then prints the client CPU one command costs (a PING, 5,000 times): through the client's
pool (a BlockingConnectionPool with socket timeouts, as RedisLockStore.from_url makes), and
through the store's pipelined connection, one at a time and with 64 in flight.

Usage::

    .venv/bin/python benchmarks/bench_redis.py [--url URL] [--seconds N]

The URL defaults to LEASELOCK_TEST_REDIS_URL, else redis://127.0.0.1:6379/0. Calls are sequential,
so commands share one pooled connection. The variants take turns in slices of a few milliseconds
for about ``seconds`` each, so that load from other processes falls on all of them alike; each
ratio is the median of the per-turn ratios to (a). Keys live under a prefix of this run's own,
deleted at the end.
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
from _turns import Cycle, median_ratio, rates_of, take_turns

from leaselock import Locks
from leaselock.stores import AcquireResult
from leaselock.stores.redis._line import RELEASE
from leaselock.stores.redis._pipe import RedisCommandPipe
from leaselock.stores.redis._store import ACQUIRE, RedisLockStore
from leaselock.stores.redis._transport import endpoint_of

# KEYS[1] = the lock, ARGV[1] = owner -> 1 if owner held it (now deleted), else 0
COMPARE_AND_DELETE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

DEFAULT_URL = "redis://127.0.0.1:6379/0"
TTL_MS = 30_000
SLICE_CYCLES = 100
WARM_UP_SLICES = 5
COMMANDS = 5_000
IN_FLIGHT = 64


def minimal_cycle(client: redis.asyncio.Redis, prefix: str, compare_and_delete: str) -> Cycle:
    lock_key = prefix + "lock:bench:minimal"
    owner = secrets.token_hex(16)

    async def cycle() -> None:
        taken = await client.set(lock_key, owner, px=TTL_MS, nx=True)
        released = await client.evalsha(compare_and_delete, 1, lock_key, owner)
        if not taken or released != 1:
            raise RuntimeError(f"minimal cycle failed: set {taken!r}, released {released!r}")

    return cycle


def pipelined_minimal_cycle(pipe: RedisCommandPipe, prefix: str, compare_and_delete: str) -> Cycle:
    lock_key = prefix + "lock:bench:pipelined"
    owner = secrets.token_hex(16)

    async def cycle() -> None:
        taken = await pipe.execute("SET", lock_key, owner, "PX", TTL_MS, "NX")
        released = await pipe.execute("EVALSHA", compare_and_delete, 1, lock_key, owner)
        if not taken or released != 1:
            raise RuntimeError(f"pipelined cycle failed: set {taken!r}, released {released!r}")

    return cycle


def new_pipe(url: str) -> RedisCommandPipe:
    """A command pipe as RedisLockStore.from_url makes one: where the pool's settings say."""
    pool = redis.asyncio.BlockingConnectionPool.from_url(url)
    return RedisCommandPipe(endpoint_of(pool), stall_s=5.0, name="the bench's pipe")


async def command_cpu(url: str) -> None:
    """Print the client CPU of one PING: through a pool, and on a pipe, alone and 64 at once."""
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        url, socket_timeout=5.0, socket_connect_timeout=5.0
    )
    client = redis.asyncio.Redis(connection_pool=pool)
    pipe = new_pipe(url)
    senders: dict[str, Callable[[], Awaitable[object]]] = {
        "pool (from_url's settings)": client.ping,
        "the store's pipe": lambda: pipe.execute("PING"),
    }
    print(f"client CPU per command, {COMMANDS:,} PINGs")
    for name, send in senders.items():
        await send()
        started = time.process_time()
        for _ in range(COMMANDS):
            await send()
        alone_us = (time.process_time() - started) / COMMANDS * 1e6

        async def sender(send: Callable[[], Awaitable[object]] = send) -> None:
            for _ in range(COMMANDS // IN_FLIGHT):
                await send()

        started = time.process_time()
        await asyncio.gather(*(sender() for _ in range(IN_FLIGHT)))
        together_us = (time.process_time() - started) / COMMANDS * 1e6
        print(
            f"  {name:<30} {alone_us:6.1f} us one at a time, "
            f"{together_us:6.1f} us with {IN_FLIGHT} in flight"
        )
    await pipe.aclose()
    await client.aclose()


def scripts_cycle(pipe: RedisCommandPipe, store: RedisLockStore) -> Cycle:
    key = "bench:scripts"
    keys, args = store._release_args(key)  # noqa: SLF001 -- the store's own release, bare
    owner = secrets.token_hex(16)

    async def cycle() -> None:
        token = await pipe.execute(
            "EVALSHA", ACQUIRE.sha, 3, keys[0], keys[4], keys[7], owner, TTL_MS
        )
        released = await pipe.execute("EVALSHA", RELEASE.sha, len(keys), *keys, owner, *args)
        if not isinstance(token, int) or released != 1:
            raise RuntimeError(f"scripts cycle failed: token {token!r}, released {released!r}")

    return cycle


def peer_cycle(client: redis.asyncio.Redis, prefix: str) -> Cycle:
    name = prefix + "peer:bench"

    async def cycle() -> None:
        lock = client.lock(name, timeout=TTL_MS / 1000, blocking=False)
        if not await lock.acquire():
            raise RuntimeError("redis-py Lock cycle failed")
        await lock.release()

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
    """The store's three methods only: Locks then runs with no line and no subscription."""

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
        for script in (ACQUIRE, RELEASE):
            await client.script_load(script.source)
        compare_and_delete = await client.script_load(COMPARE_AND_DELETE)
        store = RedisLockStore(client, prefix=prefix)
        pipe = new_pipe(url)
        async with (
            Locks(store=store, ttl=f"{TTL_MS}ms") as locks,
            Locks(store=WithoutNotifications(store), ttl=f"{TTL_MS}ms") as quiet_locks,
        ):
            variants = {
                "(a) minimal: SET NX PX + CAD": minimal_cycle(client, prefix, compare_and_delete),
                "(m) (a), pipelined": pipelined_minimal_cycle(pipe, prefix, compare_and_delete),
                "(s) the store's scripts": scripts_cycle(pipe, store),
                "(p) redis-py Lock": peer_cycle(client, prefix),
                "(b) RedisLockStore": store_cycle(store),
                "(c) Locks.acquire + release": locks_cycle(locks),
                "(d) (c) without subscription": locks_cycle(quiet_locks),
            }
            rates = await measure(variants, seconds)
        await pipe.aclose()
        keys = [key async for key in client.scan_iter(match=prefix + "*")]
        if keys:
            await client.delete(*keys)
    report(url, rates)
    await command_cpu(url)


async def measure(variants: dict[str, Cycle], seconds: float) -> dict[str, list[float]]:
    """Let the variants take turns, a slice each, until about ``seconds`` of each has run."""
    slices = await take_turns(
        variants, seconds, slice_cycles=SLICE_CYCLES, warm_up_slices=WARM_UP_SLICES
    )
    return rates_of(slices)


def report(url: str, rates: dict[str, list[float]]) -> None:
    names = list(rates)
    floor = rates[names[0]]
    turns = len(floor)
    print(f"Redis at {url}: {turns} turns of {SLICE_CYCLES} cycles per variant, sequential")
    for name, rate in rates.items():
        median = statistics.median(rate)
        print(f"  {name:<30} {median:>8,.0f} cycles/s  {1e6 / median:7.1f} us/cycle")
    # the pipelined floor, where the run has one (the cluster's benchmark has none)
    pipelined = next((rate for name, rate in rates.items() if name.startswith("(m)")), None)
    for name in names[1:]:
        ratio = median_ratio(rates[name], floor)
        target = "   (target >= 0.90)" if name.startswith("(c)") else ""
        versus_pipe = ""
        if pipelined is not None and not name.startswith("(m)"):
            ratio_m = median_ratio(rates[name], pipelined)
            versus_pipe = f"   {name[:3]}/(m) = {ratio_m:.2f}"
        print(f"  {name[:3]}/(a) = {ratio:.2f}{target}{versus_pipe}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("LEASELOCK_TEST_REDIS_URL") or DEFAULT_URL)
    parser.add_argument("--seconds", type=float, default=5.0, help="time for each variant")
    arguments = parser.parse_args()
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(main(arguments.url, arguments.seconds))
