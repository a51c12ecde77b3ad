"""Election takeover: from a leader stepping down to the standby leading, next to the floor.

Each round starts two instances on one election key, each a ``Locks`` with a store object and
connections of its own: the leader in a process of its own (one process serves every round),
the standby here. Then the leader shuts down (``aclose()``: its lost hook, its release), and the
time from that call to the standby's acquired hook running is taken (``time.perf_counter`` is
one clock for both processes on Linux and macOS). The leader is another process, as it is in
production: in one process, closing the leader's connections (a 2 ms ``send`` of asyncpg's
Terminate, the server's backend exiting) held up the standby's loop.

The floor is what a takeover cannot do without, timed the same way: the store's bare
notification heard by another connection, and then the standby's acquiring write. PostgreSQL:
a ``NOTIFY`` until a ``LISTEN`` hears it, then an ``UPDATE`` committed durably (as an acquire
is). Redis: a ``PUBLISH`` until a subscriber hears it, then a ``SET NX PX``. Both after the
same idle pause as a takeover's round: the machine and the server cool down in it (here the
floor took 0.7 ms on PostgreSQL and 1.0 ms on Redis without the pause, 1.4 and 2.0 ms after
it). It prints p50 and max of each, the bare notification alone, and the takeover's ratio to the
floor.

Run: .venv/bin/python benchmarks/bench_election_takeover.py [--stores redis,postgres]
     [--rounds 20] [--postgres-url URL] [--redis-url URL]
URLs default to LEASELOCK_TEST_POSTGRES_URL / LEASELOCK_TEST_REDIS_URL, else the machine's
servers (postgresql://postgres@127.0.0.1:5432/test, redis://127.0.0.1:6379/0).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection

import asyncpg
import redis.asyncio
from _servers import add_server_arguments, delete_prefix, drop_store_tables

from leaselock import Lock, Locks, leader_election
from leaselock.stores import LockStore
from leaselock.stores.postgres import PostgresLockStore
from leaselock.stores.redis import RedisLockStore

TTL = "3s"
SETTLE_S = 0.2

# which store, on which server, under which names: what both processes need to make one
StoreSpec = tuple[str, str, str]


def make_store(spec: StoreSpec) -> LockStore:
    kind, url, name = spec
    if kind == "redis":
        return RedisLockStore.from_url(url, prefix=name)
    return PostgresLockStore.from_url(url, table=name, sequence=f"{name}_seq")


def election(key: str, led: dict[str, float], leading: dict[str, asyncio.Event]) -> type:
    """An elected class on ``key`` whose acquired hook notes when, per instance name."""

    @leader_election(key, ttl=TTL)
    class Feed:
        def __init__(self, name: str) -> None:
            self.name = name

        async def on_leadership_acquired(self, lock: Lock) -> None:  # noqa: ARG002 -- the hook's signature
            led[self.name] = time.perf_counter()
            leading[self.name].set()

        async def on_leadership_lost(self, lock: Lock) -> None:
            pass

    return Feed


def leader_process(spec: StoreSpec, orders: Connection) -> None:
    """Serve rounds until told to stop: lead a key, and step down when told, saying when."""
    logging.getLogger("leaselock").setLevel(logging.ERROR)

    async def serve() -> None:
        while (key := orders.recv()) is not None:
            led: dict[str, float] = {}
            leading = {"leader": asyncio.Event()}
            leader = Locks(store=make_store(spec))
            leader.register(election(key, led, leading)("leader"))
            await leader.start()
            await asyncio.wait_for(leading["leader"].wait(), 10)
            orders.send("leading")
            orders.recv()
            stepped_down = time.perf_counter()
            await leader.aclose()
            orders.send(stepped_down)

    asyncio.run(serve())


async def takeover_s(spec: StoreSpec, leader: Connection, key: str) -> float:
    """One round: seconds from the leader's shutdown to the standby's acquired hook."""
    led: dict[str, float] = {}
    leading = {"standby": asyncio.Event()}
    leader.send(key)
    if await asyncio.to_thread(leader.recv) != "leading":
        raise RuntimeError("the leader's process did not lead")
    standby = Locks(store=make_store(spec))
    standby.register(election(key, led, leading)("standby"))
    await standby.start()
    # a standby that has run a moment: its subscription to the key is confirmed by then
    await asyncio.sleep(SETTLE_S)
    try:
        leader.send("step down")
        await asyncio.wait_for(leading["standby"].wait(), 10)
        stepped_down: float = await asyncio.to_thread(leader.recv)
        return led["standby"] - stepped_down
    finally:
        await standby.aclose()


async def redis_floor_s(url: str, channel: str, key: str) -> tuple[float, float]:
    """A PUBLISH heard, and then a SET NX PX: seconds to each, from the PUBLISH."""
    async with (
        redis.asyncio.Redis.from_url(url) as client,
        redis.asyncio.Redis.from_url(url) as standby,
    ):
        pubsub = standby.pubsub()
        await pubsub.subscribe(channel)
        await pubsub.get_message(timeout=5)  # the subscribe confirmation
        await standby.ping()
        await asyncio.sleep(SETTLE_S)  # idle as long as a takeover's round before it
        sent = time.perf_counter()
        await client.publish(channel, "released")
        while (await pubsub.get_message(timeout=5)) is None:
            continue
        heard = time.perf_counter()
        if not await standby.set(key, "standby", nx=True, px=3000):
            raise RuntimeError(f"the floor's key {key} was taken")
        acquired = time.perf_counter()
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await standby.delete(key)
        return heard - sent, acquired - sent


async def postgres_floor_s(url: str, channel: str, table: str) -> tuple[float, float]:
    """A NOTIFY heard, and then a durable UPDATE: seconds to each, from the NOTIFY."""
    notifier = await asyncpg.connect(url)
    listener, writer = await asyncpg.connect(url), await asyncpg.connect(url)
    heard = asyncio.get_running_loop().create_future()
    try:
        await listener.add_listener(
            channel, lambda *_: heard.done() or heard.set_result(time.perf_counter())
        )
        update = f'UPDATE "{table}" SET holder = $1 WHERE id = 1'  # noqa: S608 -- our own table
        await writer.execute(update, "warm")
        await asyncio.sleep(SETTLE_S)  # idle as long as a takeover's round before it
        sent = time.perf_counter()
        await notifier.execute(f"NOTIFY \"{channel}\", 'released'")
        heard_at = await asyncio.wait_for(heard, 5)
        await writer.execute(update, "standby")
        return heard_at - sent, time.perf_counter() - sent
    finally:
        await asyncio.gather(listener.close(), writer.close(), notifier.close())


async def measure(
    name: str, spec: StoreSpec, floor_s: Callable[[], Awaitable[tuple[float, float]]], rounds: int
) -> None:
    """Take ``rounds`` takeovers, each followed by one floor measurement, and print them."""
    orders, leader_end = multiprocessing.get_context("spawn").Pipe()
    leader = multiprocessing.get_context("spawn").Process(
        target=leader_process, args=(spec, leader_end), daemon=True
    )
    leader.start()
    takeovers, notifications, floors = [], [], []
    try:
        for n in range(rounds):
            takeovers.append(await takeover_s(spec, orders, f"feed:{n}"))
            heard, floor = await floor_s()
            notifications.append(heard)
            floors.append(floor)
    finally:
        orders.send(None)
        await asyncio.to_thread(leader.join, 30)
    report(name, takeovers, notifications, floors)


def report(
    name: str, takeovers: list[float], notifications: list[float], floors: list[float]
) -> None:
    p50, floor = statistics.median(takeovers) * 1000, statistics.median(floors) * 1000
    print(
        f"{name:<12} takeover p50 {p50:6.2f} ms  max {max(takeovers) * 1000:6.2f} ms   "
        f"floor (notification heard + acquiring write) p50 {floor:5.2f} ms  "
        f"max {max(floors) * 1000:5.2f} ms   ratio {p50 / floor:4.2f}   "
        f"(bare notification p50 {statistics.median(notifications) * 1000:4.2f} ms)"
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
            ("redis", arguments.redis_url, prefix),
            lambda: redis_floor_s(arguments.redis_url, f"{prefix}floor", f"{prefix}floor-key"),
            arguments.rounds,
        )
        await delete_prefix(arguments.redis_url, prefix)
    if "postgres" in chosen:
        table = f"leaselock_takeover_{run}"
        floor_table = f"{table}_floor"
        admin = await asyncpg.connect(arguments.postgres_url)
        try:
            await admin.execute(f'CREATE TABLE "{floor_table}" (id int PRIMARY KEY, holder text)')
            await admin.execute(f'INSERT INTO "{floor_table}" VALUES (1, NULL)')  # noqa: S608 -- our own table
            await measure(
                "PostgreSQL",
                ("postgres", arguments.postgres_url, table),
                lambda: postgres_floor_s(arguments.postgres_url, f"{table}_floor", floor_table),
                arguments.rounds,
            )
        finally:
            await admin.execute(f'DROP TABLE IF EXISTS "{floor_table}"')
            await admin.close()
        await drop_store_tables(arguments.postgres_url, table)


if __name__ == "__main__":
    asyncio.run(main())
