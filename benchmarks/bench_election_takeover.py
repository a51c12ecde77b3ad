"""Election takeover: from a leader stepping down to the standby leading, next to the floor.

Each round starts two instances (two ``Locks``, each with a store object and connections of
its own) on one election key; the first leads. Then the leader shuts down (``aclose()``: its
lost hook, its release), and the time until the standby's acquired hook runs is taken. The
floor is the store's bare notification, timed the same way: Redis a ``PUBLISH`` until a
subscriber of another connection receives it; PostgreSQL a ``NOTIFY`` until a ``LISTEN`` of
another connection does. It prints p50 and max of each, and their ratio.

Before the standby woke on the release, it took over at its next campaign: up to ttl / 3
later (1 s with the ttl used here). The script runs against that version too.

Run: .venv/bin/python benchmarks/bench_election_takeover.py [--stores redis,postgres]
     [--rounds 20] [--postgres-url URL] [--redis-url URL]
URLs default to LEASELOCK_TEST_POSTGRES_URL / LEASELOCK_TEST_REDIS_URL, else the machine's
servers (postgresql://postgres@127.0.0.1:5432/test, redis://127.0.0.1:6379/0).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

import asyncpg
import redis.asyncio
from _servers import add_server_arguments, delete_prefix, drop_store_tables

from leaselock import Lock, Locks, leader_election
from leaselock.stores import LockStore
from leaselock.stores.postgres import PostgresLockStore
from leaselock.stores.redis import RedisLockStore

TTL = "3s"
SETTLE_S = 0.2


async def takeover_s(make_store: Callable[[], LockStore], key: str) -> float:
    """One round: seconds from the leader's shutdown to the standby's acquired hook."""
    led: dict[str, float] = {}
    leading = {name: asyncio.Event() for name in ("leader", "standby")}

    @leader_election(key, ttl=TTL)
    class Feed:
        def __init__(self, name: str) -> None:
            self.name = name

        async def on_leadership_acquired(self, lock: Lock) -> None:  # noqa: ARG002 -- the hook's signature
            led[self.name] = time.perf_counter()
            leading[self.name].set()

        async def on_leadership_lost(self, lock: Lock) -> None:
            pass

    leader = Locks(store=make_store())
    standby = Locks(store=make_store())
    leader.register(Feed("leader"))
    standby.register(Feed("standby"))
    await leader.start()
    await asyncio.wait_for(leading["leader"].wait(), 10)
    await standby.start()
    # a standby that has run a moment: its subscription to the key is confirmed by then
    await asyncio.sleep(SETTLE_S)
    try:
        stepped_down = time.perf_counter()
        await leader.aclose()
        await asyncio.wait_for(leading["standby"].wait(), 10)
        return led["standby"] - stepped_down
    finally:
        await standby.aclose()


async def redis_floor_s(url: str, channel: str) -> float:
    async with redis.asyncio.Redis.from_url(url) as client:
        pubsub = client.pubsub()
        await pubsub.subscribe(channel)
        await pubsub.get_message(timeout=5)  # the subscribe confirmation
        sent = time.perf_counter()
        await client.publish(channel, "released")
        while (await pubsub.get_message(timeout=5)) is None:
            continue
        heard = time.perf_counter()
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        return heard - sent


async def postgres_floor_s(url: str, channel: str) -> float:
    listener, notifier = await asyncpg.connect(url), await asyncpg.connect(url)
    heard = asyncio.get_running_loop().create_future()
    try:
        await listener.add_listener(channel, lambda *_: heard.done() or heard.set_result(None))
        sent = time.perf_counter()
        await notifier.execute(f"NOTIFY \"{channel}\", 'released'")
        await asyncio.wait_for(heard, 5)
        return time.perf_counter() - sent
    finally:
        await listener.close()
        await notifier.close()


async def measure(
    name: str,
    make_store: Callable[[], LockStore],
    floor_s: Callable[[], Awaitable[float]],
    rounds: int,
) -> None:
    """Take ``rounds`` takeovers, each followed by one floor measurement, and print them."""
    takeovers, floors = [], []
    for n in range(rounds):
        takeovers.append(await takeover_s(make_store, f"feed:{n}"))
        floors.append(await floor_s())
    report(name, takeovers, floors)


def report(name: str, takeovers: list[float], floors: list[float]) -> None:
    p50, floor = statistics.median(takeovers) * 1000, statistics.median(floors) * 1000
    print(
        f"{name:<12} takeover p50 {p50:8.1f} ms  max {max(takeovers) * 1000:8.1f} ms   "
        f"floor (bare notification) p50 {floor:6.2f} ms   ratio {p50 / floor:6.1f}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="redis,postgres")
    parser.add_argument("--rounds", type=int, default=20)
    add_server_arguments(parser)
    arguments = parser.parse_args()
    logging.getLogger("leaselock").setLevel(logging.ERROR)
    run = uuid.uuid4().hex[:8]
    print(f"{arguments.rounds} rounds, ttl {TTL} (campaigns every 1 s)")
    chosen = arguments.stores.split(",")
    if "redis" in chosen:
        prefix = f"leaselock-takeover-{run}:"
        await measure(
            "Redis",
            lambda: RedisLockStore.from_url(arguments.redis_url, prefix=prefix),
            lambda: redis_floor_s(arguments.redis_url, f"{prefix}floor"),
            arguments.rounds,
        )
        await delete_prefix(arguments.redis_url, prefix)
    if "postgres" in chosen:
        table = f"leaselock_takeover_{run}"
        await measure(
            "PostgreSQL",
            lambda: PostgresLockStore.from_url(
                arguments.postgres_url, table=table, sequence=f"{table}_seq"
            ),
            lambda: postgres_floor_s(arguments.postgres_url, f"{table}_floor"),
            arguments.rounds,
        )
        await drop_store_tables(arguments.postgres_url, table)


if __name__ == "__main__":
    asyncio.run(main())
