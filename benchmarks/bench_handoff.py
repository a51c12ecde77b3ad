"""Handoff: from a holder's release to a waiter in another process holding the key, beside peers.

Each round, this process holds a fresh key, a waiter process starts waiting for it, and 0.3 to
0.4 s later (the waiter is blocked by then) this process releases it; the waiter reports when it
holds the key. Both read the same system-wide monotonic clock; an asynchronous holder reads it
inside its running event loop, where an application's release() starts. It prints p50, p95
and p99 over the rounds, and the p50 of when the holder's release call returned and of how long
after that the waiter held the key, for (the variants of a store take turns, a batch of rounds
each):

    Redis:       leaselock (RedisLockStore), python-redis-lock (SET NX + BLPOP on a signal
                 list), the best Python peer, redis-py's own Lock (it polls), and the floor
                 of an asyncio waiter: a bare PUBLISH from an asyncio client heard by an
                 asyncio subscriber in the other process (a leaselock handoff is one message);
    PostgreSQL:  leaselock (PostgresLockStore), the floor of the server, a session blocked
                 in pg_advisory_lock that the holder's pg_advisory_unlock lets through (it
                 writes nothing), and the floor of a durable handoff: one write and its NOTIFY
                 in one synchronously committed statement, heard by a LISTEN elsewhere (a
                 leaselock grant is that: it must survive a crash); and, as a turn of its own,
                 the server alone after the same pause: the round trip of a durable INSERT
                 and of a SELECT 1 (no durable handoff can beat the first);
    MySQL:       leaselock (MySQLLockStore), the floor of the server, a session blocked in
                 GET_LOCK that the holder's RELEASE_LOCK lets through (it writes nothing), and
                 the floor of a durable handoff as MySQLLockStore makes it: the holder's durable
                 UPDATE, then its RELEASE_LOCK, lets through the waiter's GET_LOCK, and the
                 waiter's durable UPDATE takes the key; and the server alone after the same
                 pause: a durable UPDATE's round trip and a SELECT 1's;
    SQLite:      leaselock (SQLiteLockStore) on a file in a temporary directory.

Run: .venv/bin/python benchmarks/bench_handoff.py [--stores redis,postgres,mysql,sqlite]
     [--rounds 100] [--batches 5] [--load N]
``--load N`` keeps N CPU-bound processes busy beside the run: the handoff of a busy machine,
every variant under the same load (a p99 wants 300 rounds or more).
python-redis-lock comes with the benchmark dependency group: make bench installs it. URLs default to
LEASELOCK_TEST_POSTGRES_URL / LEASELOCK_TEST_REDIS_URL / LEASELOCK_TEST_MYSQL_URL, else the
machine's servers.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from types import ModuleType
from typing import NamedTuple

import asyncmy
import asyncpg
import redis
import redis.asyncio
from _servers import add_server_arguments, delete_prefix, drop_store_tables

from leaselock import Locks
from leaselock.stores.mysql import MySQLLockStore
from leaselock.stores.mysql._arguments import connect_args
from leaselock.stores.postgres import PostgresLockStore
from leaselock.stores.redis import RedisLockStore
from leaselock.stores.sqlite import SQLiteLockStore

BLOCKED_S = 0.3
ADVISORY_CLASS = 4242


def redis_lock() -> ModuleType:
    """python-redis-lock, imported where the Redis rounds need it: the other stores run without."""
    import redis_lock  # noqa: PLC0415 -- the benchmark dependency group's peer

    return redis_lock


IDLE_SERVER = "the server alone, after a round's pause"
GET_LOCK_FLOOR = "GET_LOCK blocked in a session"
DURABLE_FLOOR = "floor: UPDATE, RELEASE_LOCK heard, UPDATE"


class Round(NamedTuple):
    """One handoff, in ms from the holder's release call: the waiter holding; the call returning.

    In the idle server's rounds: a durable write's round trip, and a ``SELECT 1``'s."""

    held_ms: float
    returned_ms: float


def leaselock_store(
    kind: str, url: str, run: str
) -> PostgresLockStore | RedisLockStore | SQLiteLockStore | MySQLLockStore:
    if kind == "sqlite":
        return SQLiteLockStore(url)
    if kind == "redis":
        return RedisLockStore.from_url(url, prefix=f"leaselock-handoff-{run}:")
    table = f"leaselock_handoff_{run}"
    if kind == "mysql":
        return MySQLLockStore.from_url(url, table=table)
    return PostgresLockStore.from_url(url, table=table, sequence=f"{table}_seq")


async def forget_run(kind: str, url: str, run: str) -> None:
    """Delete what a run of leaselock left on the server (a SQLite file goes with its directory)."""
    if kind == "redis":
        await delete_prefix(url, f"leaselock-handoff-{run}:")
    elif kind == "postgres":
        await drop_store_tables(url, f"leaselock_handoff_{run}")
    elif kind == "mysql":
        await mysql_statement(url, mysql_drop(f"leaselock_handoff_{run}"))


def mysql_drop(table: str) -> str:
    return f"DROP TABLE IF EXISTS `{table}`, `{table}_runs`, `{table}_jobs`"


async def mysql_connect(url: str) -> asyncmy.Connection:
    return await asyncmy.connect(**connect_args(url), autocommit=True)


async def mysql_statement(url: str, sql: str) -> None:
    connection = await mysql_connect(url)
    try:
        await mysql_run(connection, sql)
    finally:
        connection.close()


async def mysql_run(connection: asyncmy.Connection, sql: str, *args: object) -> None:
    async with connection.cursor() as cursor:
        await cursor.execute(sql, args or None)
        await cursor.fetchall()


def leaselock_waiter(kind: str, url: str, run: str, pipe: Connection) -> None:
    """Wait for each key sent on ``pipe`` through leaselock; answer when it is held."""
    logging.getLogger("leaselock").setLevel(logging.ERROR)

    async def serve() -> None:
        async with Locks(store=leaselock_store(kind, url, run)) as locks:
            pipe.send("ready")
            while (key := pipe.recv()) is not None:
                lock = await locks.acquire(key, wait="10s")
                held_ns = time.monotonic_ns()
                if lock is None:
                    raise SystemExit(f"{key} was not handed over within 10 s")
                await lock.release()
                pipe.send(held_ns)

    asyncio.run(serve())


def python_redis_lock_waiter(url: str, pipe: Connection) -> None:
    """Wait for each key through python-redis-lock (BLPOP on its signal list)."""
    client = redis.Redis.from_url(url)
    pipe.send("ready")
    while (key := pipe.recv()) is not None:
        lock = redis_lock().Lock(client, key, expire=30)
        lock.acquire(blocking=True, timeout=10)
        held_ns = time.monotonic_ns()
        lock.release()
        pipe.send(held_ns)


def redis_py_lock_waiter(url: str, pipe: Connection) -> None:
    """Wait for each key through redis-py's own Lock (it polls, every 0.1 s by default)."""
    client = redis.Redis.from_url(url)
    pipe.send("ready")
    while (key := pipe.recv()) is not None:
        lock = client.lock(key, timeout=30, blocking_timeout=10)
        lock.acquire()
        held_ns = time.monotonic_ns()
        lock.release()
        pipe.send(held_ns)


def asyncio_subscriber_waiter(url: str, pipe: Connection) -> None:
    """Wait for each key as a bare PUBLISH on its channel, heard by an asyncio subscriber."""

    async def serve() -> None:
        client = redis.asyncio.Redis.from_url(url)
        pubsub = client.pubsub()
        loop = asyncio.get_running_loop()
        pipe.send("ready")
        while (key := await loop.run_in_executor(None, pipe.recv)) is not None:
            await pubsub.subscribe(str(key))
            await pubsub.get_message(timeout=None)  # the subscription's confirmation
            pipe.send("subscribed")
            await pubsub.get_message(timeout=None)
            held_ns = time.monotonic_ns()
            await pubsub.unsubscribe(str(key))
            await pubsub.get_message(timeout=None)
            pipe.send(held_ns)
        await pubsub.aclose()
        await client.aclose()

    asyncio.run(serve())


def advisory_waiter(url: str, pipe: Connection) -> None:
    """Wait for each key in pg_advisory_lock on a session of its own."""

    async def serve() -> None:
        connection = await asyncpg.connect(url)
        pipe.send("ready")
        while (key := pipe.recv()) is not None:
            await connection.execute("SELECT pg_advisory_lock($1, $2)", ADVISORY_CLASS, key)
            held_ns = time.monotonic_ns()
            await connection.execute("SELECT pg_advisory_unlock($1, $2)", ADVISORY_CLASS, key)
            pipe.send(held_ns)
        await connection.close()

    asyncio.run(serve())


def rounds_of(
    waiter: Callable[..., None],
    waiter_args: tuple[object, ...],
    hold_and_release: Callable[[object, Callable[[], None], Callable[[], None]], None],
    keys: list[object],
    *,
    pipe: tuple[Connection, Connection] | None = None,
) -> list[Round]:
    """Rounds, per key: hold it, let the waiter block on it, release, read the waiter's time.

    ``hold_and_release(key, let_the_waiter_in, mark)`` calls ``mark()`` right before its
    release call and again when the call returns: an asynchronous holder calls it inside its
    running event loop, as an application's release() starts, not before the loop is started
    for the call.
    """
    ours, theirs = multiprocessing.Pipe() if pipe is None else pipe
    process = multiprocessing.get_context("spawn").Process(
        target=waiter, args=(*waiter_args, theirs)
    )
    process.start()
    try:
        if ours.recv() != "ready":
            raise SystemExit("the waiter did not start")
        rounds: list[Round] = []
        for key in keys:
            released_ns: list[int] = []

            def let_the_waiter_in(key: object = key) -> None:
                ours.send(key)
                # a random extra: a polling waiter must not poll in step with the release
                time.sleep(BLOCKED_S + random.uniform(0, 0.1))

            def mark(released_ns: list[int] = released_ns) -> None:
                released_ns.append(time.monotonic_ns())

            hold_and_release(key, let_the_waiter_in, mark)
            held_ns = ours.recv()
            released, returned = released_ns
            rounds.append(Round((held_ns - released) / 1e6, (returned - released) / 1e6))
        ours.send(None)
    finally:
        process.join(10)
    return rounds


async def marked(mark: Callable[[], None], release: Awaitable[object]) -> None:
    """Mark the release's start from inside the running loop, await it, mark its return."""
    mark()
    await release
    mark()


def leaselock_rounds(kind: str, url: str, rounds: int) -> list[Round]:
    run = uuid.uuid4().hex[:8]
    loop = asyncio.new_event_loop()
    locks = Locks(store=leaselock_store(kind, url, run))
    loop.run_until_complete(locks.start())

    def hold_and_release(
        key: object, let_the_waiter_in: Callable[[], None], mark: Callable[[], None]
    ) -> None:
        lock = loop.run_until_complete(locks.acquire(str(key)))
        if lock is None:
            raise SystemExit(f"{key} was not free")
        # the holder's loop runs while it holds, as an application's does: what a store does
        # in the background for a held key (MySQL's wake-up names) happens meanwhile
        loop.run_until_complete(asyncio.to_thread(let_the_waiter_in))
        loop.run_until_complete(marked(mark, lock.release()))

    try:
        keys: list[object] = [f"handoff:{n}" for n in range(rounds)]
        return rounds_of(leaselock_waiter, (kind, url, run), hold_and_release, keys)
    finally:
        loop.run_until_complete(locks.aclose())
        loop.run_until_complete(forget_run(kind, url, run))
        loop.close()


def python_redis_lock_rounds(url: str, rounds: int) -> list[Round]:
    client = redis.Redis.from_url(url)
    run = uuid.uuid4().hex[:8]

    def hold_and_release(
        key: object, let_the_waiter_in: Callable[[], None], mark: Callable[[], None]
    ) -> None:
        lock = redis_lock().Lock(client, str(key), expire=30)
        lock.acquire()
        let_the_waiter_in()
        mark()
        lock.release()
        mark()

    keys: list[object] = [f"handoff-{run}:{n}" for n in range(rounds)]
    return rounds_of(python_redis_lock_waiter, (url,), hold_and_release, keys)


def redis_py_lock_rounds(url: str, rounds: int) -> list[Round]:
    client = redis.Redis.from_url(url)
    run = uuid.uuid4().hex[:8]

    def hold_and_release(
        key: object, let_the_waiter_in: Callable[[], None], mark: Callable[[], None]
    ) -> None:
        lock = client.lock(str(key), timeout=30)
        lock.acquire()
        let_the_waiter_in()
        mark()
        lock.release()
        mark()

    keys: list[object] = [f"handoff-py-{run}:{n}" for n in range(rounds)]
    return rounds_of(redis_py_lock_waiter, (url,), hold_and_release, keys)


def asyncio_floor_rounds(url: str, rounds: int) -> list[Round]:
    """The least an asyncio waiter of another process can hold the key after: a bare PUBLISH
    from an asyncio client, heard by an asyncio subscriber (leaselock's handoff is one such
    message, sent by its release script)."""
    loop = asyncio.new_event_loop()
    client = redis.asyncio.Redis.from_url(url)
    run = uuid.uuid4().hex[:8]
    ours, theirs = multiprocessing.Pipe()

    def hold_and_release(
        key: object, let_the_waiter_in: Callable[[], None], mark: Callable[[], None]
    ) -> None:
        let_the_waiter_in()
        if ours.recv() != "subscribed":
            raise SystemExit("the subscriber did not subscribe")
        loop.run_until_complete(marked(mark, client.publish(str(key), "released")))

    try:
        keys: list[object] = [f"handoff-floor-{run}:{n}" for n in range(rounds)]
        return rounds_of(
            asyncio_subscriber_waiter, (url,), hold_and_release, keys, pipe=(ours, theirs)
        )
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()


def advisory_rounds(url: str, rounds: int) -> list[Round]:
    loop = asyncio.new_event_loop()
    connection = loop.run_until_complete(asyncpg.connect(url))

    def hold_and_release(
        key: object, let_the_waiter_in: Callable[[], None], mark: Callable[[], None]
    ) -> None:
        loop.run_until_complete(
            connection.execute("SELECT pg_advisory_lock($1, $2)", ADVISORY_CLASS, key)
        )
        let_the_waiter_in()
        loop.run_until_complete(
            marked(
                mark, connection.execute("SELECT pg_advisory_unlock($1, $2)", ADVISORY_CLASS, key)
            )
        )

    try:
        return rounds_of(advisory_waiter, (url,), hold_and_release, list(range(rounds)))
    finally:
        loop.run_until_complete(connection.close())
        loop.close()


def notify_waiter(url: str, pipe: Connection) -> None:
    """Wait for each key as a NOTIFY on its channel, heard through asyncpg's LISTEN."""

    async def serve() -> None:
        connection = await asyncpg.connect(url)
        heard: asyncio.Queue[str] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        pipe.send("ready")
        while (key := await loop.run_in_executor(None, pipe.recv)) is not None:
            channel = f"handoff_{key}"

            def on_notify(*notified: object) -> None:
                heard.put_nowait(str(notified[-1]))

            await connection.add_listener(channel, on_notify)
            pipe.send("subscribed")
            await heard.get()
            held_ns = time.monotonic_ns()
            await connection.remove_listener(channel, on_notify)
            pipe.send(held_ns)
        await connection.close()

    asyncio.run(serve())


def durable_notify_rounds(url: str, rounds: int) -> list[Round]:
    """The least a durable handoff costs: one write and its NOTIFY in one statement, committed
    synchronously (a grant must survive a crash), heard by a LISTEN in the other process."""
    loop = asyncio.new_event_loop()
    connection = loop.run_until_complete(asyncpg.connect(url))
    table = f"leaselock_handoff_floor_{uuid.uuid4().hex[:8]}"
    loop.run_until_complete(connection.execute(f'CREATE TABLE "{table}" (n bigint)'))
    ours, theirs = multiprocessing.Pipe()
    written = (
        f'WITH w AS (INSERT INTO "{table}" VALUES (1) RETURNING n) '  # noqa: S608 -- our own table
        "SELECT pg_notify($1, 'released') FROM w"
    )

    def hold_and_release(
        key: object, let_the_waiter_in: Callable[[], None], mark: Callable[[], None]
    ) -> None:
        let_the_waiter_in()
        if ours.recv() != "subscribed":
            raise SystemExit("the listener did not listen")
        loop.run_until_complete(marked(mark, connection.execute(written, f"handoff_{key}")))

    try:
        return rounds_of(
            notify_waiter, (url,), hold_and_release, list(range(rounds)), pipe=(ours, theirs)
        )
    finally:
        loop.run_until_complete(connection.execute(f'DROP TABLE "{table}"'))
        loop.run_until_complete(connection.close())
        loop.close()


def idle_server_rounds(url: str, rounds: int) -> list[Round]:
    """What the server alone costs after the pause a handoff round has: a durable write (an
    INSERT committed synchronously, as a grant is) and a ``SELECT 1``, each after its pause.

    Every handoff's statement meets a server (and a machine) that idled that long, so these
    are the floors of its parts: no handoff that writes durably can beat the first."""
    loop = asyncio.new_event_loop()
    connection = loop.run_until_complete(asyncpg.connect(url))
    table = f"leaselock_handoff_idle_{uuid.uuid4().hex[:8]}"
    loop.run_until_complete(connection.execute(f'CREATE TABLE "{table}" (n bigint)'))
    written = f'INSERT INTO "{table}" VALUES (1)'  # noqa: S608 -- our own table

    def round_trip(sql: str) -> float:
        time.sleep(BLOCKED_S + random.uniform(0, 0.1))
        started_ns = time.monotonic_ns()
        loop.run_until_complete(connection.execute(sql))
        return (time.monotonic_ns() - started_ns) / 1e6

    try:
        return [Round(round_trip(written), round_trip("SELECT 1")) for _ in range(rounds)]
    finally:
        loop.run_until_complete(connection.execute(f'DROP TABLE "{table}"'))
        loop.run_until_complete(connection.close())
        loop.close()


def get_lock_waiter(url: str, table: str | None, pipe: Connection) -> None:
    """Wait for each key in GET_LOCK on a session of its own; with ``table``, then take the
    key's row in a durable UPDATE, as a woken MySQLLockStore waiter does."""

    async def serve() -> None:
        connection = await mysql_connect(url)
        pipe.send("ready")
        while (key := pipe.recv()) is not None:
            await mysql_run(
                connection,
                "SELECT CASE GET_LOCK(%s, 10) WHEN 1 THEN RELEASE_LOCK(%s) END",
                key,
                key,
            )
            if table is not None:
                await mysql_run(
                    connection,
                    f"UPDATE `{table}` SET owner = 'waiter', n = n + 1 WHERE k = 1",  # noqa: S608 -- our own table
                )
            pipe.send(time.monotonic_ns())
        connection.close()

    asyncio.run(serve())


def get_lock_rounds(url: str, rounds: int, *, durable: bool) -> list[Round]:
    """A session's RELEASE_LOCK letting another through GET_LOCK; ``durable``: the holder's
    durable UPDATE first, and the waiter's after (the floor of a MySQLLockStore handoff)."""
    loop = asyncio.new_event_loop()
    connection = loop.run_until_complete(mysql_connect(url))
    run = uuid.uuid4().hex[:8]
    table = f"leaselock_handoff_floor_{run}" if durable else None
    if table is not None:
        loop.run_until_complete(
            mysql_run(
                connection,
                f"CREATE TABLE `{table}` (k INT PRIMARY KEY, owner "
                "VARCHAR(20), n BIGINT) ENGINE=InnoDB",
            )
        )
        loop.run_until_complete(
            mysql_run(connection, f"INSERT INTO `{table}` VALUES (1, 'holder', 0)")  # noqa: S608 -- our own table
        )

    async def release(key: object) -> None:
        if table is not None:
            await mysql_run(
                connection,
                f"UPDATE `{table}` SET owner = NULL, n = n + 1 WHERE k = 1",  # noqa: S608 -- our own table
            )
        await mysql_run(connection, "SELECT RELEASE_LOCK(%s)", key)

    def hold_and_release(
        key: object, let_the_waiter_in: Callable[[], None], mark: Callable[[], None]
    ) -> None:
        loop.run_until_complete(mysql_run(connection, "SELECT GET_LOCK(%s, 0)", key))
        let_the_waiter_in()
        loop.run_until_complete(marked(mark, release(key)))

    try:
        keys: list[object] = [f"leaselock-handoff-{run}:{n}" for n in range(rounds)]
        return rounds_of(get_lock_waiter, (url, table), hold_and_release, keys)
    finally:
        if table is not None:
            loop.run_until_complete(mysql_run(connection, f"DROP TABLE `{table}`"))
        connection.close()
        loop.close()


def mysql_idle_server_rounds(url: str, rounds: int) -> list[Round]:
    """As :func:`idle_server_rounds`, on MySQL: a durable UPDATE's round trip and SELECT 1's."""
    loop = asyncio.new_event_loop()
    connection = loop.run_until_complete(mysql_connect(url))
    table = f"leaselock_handoff_idle_{uuid.uuid4().hex[:8]}"
    loop.run_until_complete(
        mysql_run(connection, f"CREATE TABLE `{table}` (k INT PRIMARY KEY, n BIGINT)")
    )
    loop.run_until_complete(mysql_run(connection, f"INSERT INTO `{table}` VALUES (1, 0)"))  # noqa: S608 -- our own table
    written = f"UPDATE `{table}` SET n = n + 1 WHERE k = 1"  # noqa: S608 -- our own table

    def round_trip(sql: str) -> float:
        time.sleep(BLOCKED_S + random.uniform(0, 0.1))
        started_ns = time.monotonic_ns()
        loop.run_until_complete(mysql_run(connection, sql))
        return (time.monotonic_ns() - started_ns) / 1e6

    try:
        return [Round(round_trip(written), round_trip("SELECT 1")) for _ in range(rounds)]
    finally:
        loop.run_until_complete(mysql_run(connection, f"DROP TABLE `{table}`"))
        connection.close()
        loop.close()


def report(
    name: str, rounds: list[Round], best: float | None = None, of: str = "of the peer's p50"
) -> float:
    """Print a variant's handoff p50 and p95, and where its release call returned; its p50."""
    handoffs = [each.held_ms for each in rounds]
    p50 = statistics.median(handoffs)
    p95 = statistics.quantiles(handoffs, n=20)[-1]
    p99 = statistics.quantiles(handoffs, n=100)[-1]
    versus = "" if best is None else f"   x{p50 / best:.2f} {of}"
    print(f"  {name:<40} p50 {p50:6.2f} ms   p95 {p95:6.2f} ms   p99 {p99:6.2f} ms{versus}")
    returned = statistics.median(each.returned_ms for each in rounds)
    after = statistics.median(each.held_ms - each.returned_ms for each in rounds)
    print(f"  {'':<40} its release call returns at {returned:.2f} ms; held {after:+.2f} ms after")
    return p50


def in_turns(
    variants: dict[str, Callable[[int], list[Round]]], rounds: int, batches: int
) -> dict[str, list[Round]]:
    """Run every variant's rounds in ``batches`` batches, the variants taking turns.

    On a shared machine the speed of the same code drifts by 10 % and more within minutes: in
    turns, the drift falls on every variant alike.
    """
    done: dict[str, list[Round]] = {name: [] for name in variants}
    for batch in range(batches):
        size = rounds // batches + (1 if batch < rounds % batches else 0)
        for name, variant in variants.items():
            done[name] += variant(size)
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="redis,postgres,mysql,sqlite")
    parser.add_argument(
        "--mysql-url",
        default=os.environ.get("LEASELOCK_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
    )
    parser.add_argument("--rounds", type=int, default=100, help="rounds of each variant")
    parser.add_argument("--batches", type=int, default=5, help="turns the variants take")
    parser.add_argument(
        "--load",
        type=int,
        default=0,
        help="CPU-bound processes kept busy beside the whole run (default 0: a quiet machine)",
    )
    add_server_arguments(parser)
    arguments = parser.parse_args()
    logging.getLogger("leaselock").setLevel(logging.ERROR)
    rounds, batches = arguments.rounds, arguments.batches
    print(
        f"handoff: release() to the waiter in another process holding; {rounds} rounds of "
        f"each variant, in {batches} turns"
        + (f", {arguments.load} busy processes beside it" if arguments.load else "")
    )
    busy = [multiprocessing.Process(target=spin, daemon=True) for _ in range(arguments.load)]
    for process in busy:
        process.start()
    try:
        run_stores(arguments)
    finally:
        for process in busy:
            process.terminate()
            process.join()


def spin() -> None:
    """Burn CPU until terminated: the load of a busy machine."""
    while True:
        pass


def run_stores(arguments: argparse.Namespace) -> None:
    """Run the chosen stores' variants and print their figures."""
    chosen = arguments.stores.split(",")
    rounds, batches = arguments.rounds, arguments.batches
    if "redis" in chosen:
        url = arguments.redis_url
        print("Redis")
        done = in_turns(
            {
                "python-redis-lock": lambda n: python_redis_lock_rounds(url, n),
                "redis-py Lock (polls every 0.1 s)": lambda n: redis_py_lock_rounds(url, n),
                "leaselock": lambda n: leaselock_rounds("redis", url, n),
                "floor: bare PUBLISH, asyncio both ends": lambda n: asyncio_floor_rounds(url, n),
            },
            rounds,
            batches,
        )
        peer = report("python-redis-lock", done.pop("python-redis-lock"))
        for name, handoffs in done.items():
            report(name, handoffs, peer)
    if "postgres" in chosen:
        url = arguments.postgres_url
        print("PostgreSQL")
        done = in_turns(
            {
                "pg_advisory_lock blocked in a session": lambda n: advisory_rounds(url, n),
                "leaselock": lambda n: leaselock_rounds("postgres", url, n),
                "floor: a durable write + NOTIFY heard": lambda n: durable_notify_rounds(url, n),
                IDLE_SERVER: lambda n: idle_server_rounds(url, n),
            },
            rounds,
            batches,
        )
        idle = done.pop(IDLE_SERVER)
        floor = report(
            "pg_advisory_lock blocked in a session",
            done.pop("pg_advisory_lock blocked in a session"),
        )
        for name, handoffs in done.items():
            report(name, handoffs, floor)
        durable = statistics.median(each.held_ms for each in idle)
        select_1 = statistics.median(each.returned_ms for each in idle)
        print(
            f"  {IDLE_SERVER}: a durable INSERT's round trip p50 {durable:.2f} ms "
            f"(x{durable / floor:.2f} of the peer's handoff), SELECT 1's {select_1:.2f} ms"
        )
    if "mysql" in chosen:
        url = arguments.mysql_url
        print("MySQL/MariaDB")
        done = in_turns(
            {
                GET_LOCK_FLOOR: lambda n: get_lock_rounds(url, n, durable=False),
                "leaselock": lambda n: leaselock_rounds("mysql", url, n),
                DURABLE_FLOOR: lambda n: get_lock_rounds(url, n, durable=True),
                IDLE_SERVER: lambda n: mysql_idle_server_rounds(url, n),
            },
            rounds,
            batches,
        )
        idle = done.pop(IDLE_SERVER)
        report(GET_LOCK_FLOOR, done.pop(GET_LOCK_FLOOR))
        floor = report(DURABLE_FLOOR, done.pop(DURABLE_FLOOR))
        report("leaselock", done.pop("leaselock"), floor, "of the durable floor's p50")
        durable = statistics.median(each.held_ms for each in idle)
        select_1 = statistics.median(each.returned_ms for each in idle)
        print(
            f"  {IDLE_SERVER}: a durable UPDATE's round trip p50 {durable:.2f} ms, "
            f"SELECT 1's {select_1:.2f} ms"
        )
    if "sqlite" in chosen:
        with tempfile.TemporaryDirectory() as directory:
            print("SQLite (one host; no peer: the figure to beat is 5 ms)")
            report("leaselock", leaselock_rounds("sqlite", f"{directory}/locks.db", rounds))


if __name__ == "__main__":
    main()
