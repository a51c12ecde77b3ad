"""Sequential acquire + release cycles per second on etcd: the raw floor, the store, the engine.

(a) raw: the two transactions of a cycle, through the same httpx client, nothing else: the
    acquire txn (under a lease granted once) and the release txn: the floor;
(b) store: EtcdLockStore.acquire + release;
(c) Locks: Locks.acquire + Lock.release (owner ids, leases, renewal timer, release wake-ups);
(r) for reference, the raw calls one after another as the store sent them up to 0.4: the
    acquire txn, then the keep-alive of its lease, then the release txn.

Then the renewal cost: a Locks holds 1,000 locks of one ttl, and every gateway call is counted
for a few renewal intervals (the first interval gathers the locks under one lease; then each
interval costs the same whatever the number of locks).

Usage::

    .venv/bin/python benchmarks/bench_etcd.py [--url URL] [--seconds N]

The URL defaults to LEASELOCK_TEST_ETCD_URL; without one, a throwaway etcd is started from the
local binary as the tests start it (its data on disk, as a real member's). The variants take
turns in slices of a few milliseconds for about ``seconds`` each, so that load from other
processes falls on all of them alike; each ratio is the median of the per-turn ratios. Keys
live under a prefix of this run's own, deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import logging
import os
import secrets
import statistics
import sys
from collections import Counter
from pathlib import Path

import httpx
from _turns import Cycle, median_ratio, rates_of, take_turns

from leaselock import Lock, Locks
from leaselock.stores.etcd import EtcdLockStore
from leaselock.stores.etcd._requests import acquire_txn, release_txn

TTL_MS = 30_000
SLICE_CYCLES = 50
WARM_UP_SLICES = 3
HELD = 1_000
# concurrent acquires at a time: each must answer within the engine's 1 s bound
ACQUIRE_BATCH = 50
RENEWAL_TTL = "6s"
RENEWAL_INTERVALS = 4


async def raw_cycle(client: httpx.AsyncClient, url: str, prefix: str, *, keep_alive: bool) -> Cycle:
    key = prefix + f"locks/bench:raw:{keep_alive}"
    owner = secrets.token_hex(16)
    granted = await client.post(f"{url}/v3/lease/grant", json={"TTL": TTL_MS // 1000})
    lease = int(granted.json()["ID"])

    async def cycle() -> None:
        taken = (await client.post(f"{url}/v3/kv/txn", json=acquire_txn(key, owner, lease))).json()
        if keep_alive:
            kept = (await client.post(f"{url}/v3/lease/keepalive", json={"ID": str(lease)})).json()
            if not kept["result"].get("TTL"):
                raise RuntimeError(f"raw keep-alive failed: {kept!r}")
        freed = (await client.post(f"{url}/v3/kv/txn", json=release_txn(key, owner))).json()
        if not taken.get("succeeded") or not freed["succeeded"]:
            raise RuntimeError(f"raw cycle failed: {taken!r}, {freed!r}")

    return cycle


def store_cycle(store: EtcdLockStore) -> Cycle:
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


async def measure(variants: dict[str, Cycle], seconds: float) -> dict[str, list[float]]:
    """Let the variants take turns, a slice each, until about ``seconds`` of each has run."""
    slices = await take_turns(
        variants, seconds, slice_cycles=SLICE_CYCLES, warm_up_slices=WARM_UP_SLICES
    )
    return rates_of(slices)


def report(url: str, rates: dict[str, list[float]]) -> None:
    names = list(rates)
    floor = rates[names[0]]
    print(f"etcd at {url}: {len(floor)} turns of {SLICE_CYCLES} cycles per variant, sequential")
    for name, rate in rates.items():
        median = statistics.median(rate)
        print(f"  {name:<30} {median:>8,.0f} cycles/s  {1e6 / median:7.1f} us/cycle")
    for name in names[1:]:
        ratio = median_ratio(rates[name], floor)
        target = "   (target >= 0.90)" if name.startswith("(c)") else ""
        print(f"  {name[:3]}/(a) = {ratio:.2f}{target}")


async def renewal_cost(url: str, prefix: str) -> None:
    """Hold HELD locks; print the gateway calls of each renewal interval."""
    calls: Counter[str] = Counter()

    async def count(request: httpx.Request) -> None:
        calls[request.url.path.removeprefix("/v3/")] += 1

    async with (
        httpx.AsyncClient(trust_env=False, event_hooks={"request": [count]}) as client,
        Locks(store=EtcdLockStore(url, client=client, prefix=prefix), ttl=RENEWAL_TTL) as locks,
    ):
        held: list[Lock | None] = []
        for start in range(0, HELD, ACQUIRE_BATCH):
            batch = range(start, min(start + ACQUIRE_BATCH, HELD))
            held += await asyncio.gather(*(locks.acquire(f"held:{n}") for n in batch))
        if not all(held):
            raise RuntimeError("could not take every lock")
        print(f"  acquiring {HELD} locks at once: {sum(calls.values())} calls {dict(calls)}")
        interval_s = int(RENEWAL_TTL.removesuffix("s")) / 3
        for number in range(1, RENEWAL_INTERVALS + 1):
            calls.clear()
            await asyncio.sleep(interval_s)
            print(f"  renewal interval {number}: {sum(calls.values())} calls {dict(calls)}")
        for lock in held:
            if lock is not None:
                await lock.release()


async def main(url: str, seconds: float) -> None:
    prefix = f"leaselock-bench-{secrets.token_hex(6)}/"
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            store = EtcdLockStore(url, client=client, prefix=prefix)
            async with Locks(store=store, ttl=f"{TTL_MS}ms") as locks:
                variants = {
                    "(a) raw txn + txn": await raw_cycle(client, url, prefix, keep_alive=False),
                    "(b) EtcdLockStore": store_cycle(store),
                    "(c) Locks.acquire + release": locks_cycle(locks),
                    "(r) raw txn, keepalive, txn": await raw_cycle(
                        client, url, prefix, keep_alive=True
                    ),
                }
                rates = await measure(variants, seconds)
        report(url, rates)
        print(f"Renewal cost of {HELD} locks held by one Locks (ttl {RENEWAL_TTL}):")
        await renewal_cost(url, prefix)
    finally:
        async with httpx.AsyncClient(trust_env=False) as client:
            start = prefix.encode()
            await client.post(
                f"{url}/v3/kv/deleterange",
                json={
                    "key": base64.b64encode(start).decode(),
                    "range_end": base64.b64encode(start[:-1] + b"0").decode(),
                },
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("LEASELOCK_TEST_ETCD_URL"))
    parser.add_argument("--seconds", type=float, default=5.0, help="time for each variant")
    arguments = parser.parse_args()
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from etcd_server import etcd_server

    with contextlib.ExitStack() as servers:
        url = arguments.url or servers.enter_context(etcd_server())
        asyncio.run(main(url, arguments.seconds))
