"""The body of one OS process in the multi-process tests (importable by a spawned child)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

from leaselock import Locks, current_lock
from leaselock.stores import LockStore

# how often the scheduler of tick_a_job fires: many ticks per renewal interval (ttl / 3)
TICK_S = 0.1


def make_store(kind: str, where: str) -> LockStore:
    """Build a fresh store of ``kind`` on the shared server or file ``where``."""
    if kind == "postgres":
        from leaselock.stores import PostgresLockStore  # noqa: PLC0415

        return PostgresLockStore.from_url(where)
    if kind == "mysql":
        from leaselock.stores import MySQLLockStore  # noqa: PLC0415

        return MySQLLockStore.from_url(where)
    if kind == "redis":
        from leaselock.stores import RedisLockStore  # noqa: PLC0415

        url, prefix = where.split(" ")
        return RedisLockStore.from_url(url, prefix=prefix)
    if kind == "redis_cluster":
        from leaselock.stores import RedisClusterLockStore  # noqa: PLC0415

        url, prefix = where.split(" ")
        return RedisClusterLockStore.from_url(url, prefix=prefix)
    if kind == "etcd":
        from leaselock.stores import EtcdLockStore  # noqa: PLC0415

        url, prefix = where.split(" ")
        return EtcdLockStore(url, prefix=prefix)
    from leaselock.stores import SQLiteLockStore  # noqa: PLC0415

    return SQLiteLockStore(where)


def race(kind: str, where: str, key: str, sections: int, record: str) -> None:
    """Enter ``sections`` critical sections on ``key``; log each entry and exit to ``record``."""
    asyncio.run(_race(kind, where, key, sections, Path(record)))


async def _race(kind: str, where: str, key: str, sections: int, record: Path) -> None:
    pid = os.getpid()
    # O_APPEND: each line lands whole, and the file's order is the order the writes happened
    descriptor = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    async def critical_section() -> None:
        lock = current_lock()
        assert lock is not None
        os.write(descriptor, f"enter {lock.fencing_token} {pid}\n".encode())
        await asyncio.to_thread(os.fsync, descriptor)
        os.write(descriptor, f"exit {lock.fencing_token} {pid}\n".encode())

    try:
        async with Locks(store=make_store(kind, where), ttl="30s") as locks:
            for _ in range(sections):
                await locks.with_lock(key, critical_section, wait="2m")
    finally:
        os.close(descriptor)


def tick_a_job(where: str, key: str, instance: str, event_log: str, ttl: str) -> None:
    """Fire an ``on_one_instance`` job on ``key`` every :data:`TICK_S`, until SIGTERM.

    One instance of an application with a scheduler, on the SQLite file ``where``: its
    ``Locks`` (labelled ``instance``) writes its events to ``event_log``. SIGTERM closes it
    gracefully (its lease handed back); SIGKILL leaves its leases to expire.
    """
    asyncio.run(_tick_a_job(where, key, instance, Path(event_log), ttl))


async def _tick_a_job(where: str, key: str, instance: str, event_log: Path, ttl: str) -> None:
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    store = make_store("sqlite", where)
    async with Locks(store=store, ttl=ttl, instance=instance, event_log=event_log) as locks:

        @locks.on_one_instance(key=key)
        @locks.without_overlapping()
        async def job() -> None:
            # a run that lasts half a tick: a SIGKILL lands in a run about half the time
            await asyncio.sleep(TICK_S / 2)  # noqa: TID251 -- the job's own work, in real time

        while not stopping.is_set():
            await job()
            # the scheduler's next tick, or the SIGTERM that ends this instance
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), TICK_S)


def operate(where: str, instance: str, job_key: str) -> None:
    """An instance of an application, steered line by line on stdin; it answers on stdout.

    On the SQLite file ``where``, labelled ``instance``, with the job ``job_key`` registered
    (``on_one_instance`` and ``without_overlapping``). Commands: ``hold KEY`` (answers ``held
    KEY TOKEN``), ``tick`` (fires one tick of the job; answers ``ran`` or ``skipped REASON
    HOLDER``). End of input closes it gracefully.
    """
    asyncio.run(_operate(where, instance, job_key))


async def _operate(where: str, instance: str, job_key: str) -> None:
    async with Locks(store=make_store("sqlite", where), ttl="6s", instance=instance) as locks:
        skips: list[str] = []

        def skipped(event: object) -> None:
            skips.append(f"skipped {getattr(event, 'reason', '?')} {getattr(event, 'holder', '')}")

        locks.events.subscribe(skipped, "tick-skipped")

        @locks.on_one_instance(key=job_key)
        @locks.without_overlapping()
        async def job() -> None:
            """The job an operator pauses from the dashboard."""

        held = []
        answer("ready")
        while line := await asyncio.to_thread(input_line):
            command, _, argument = line.partition(" ")
            if command == "hold":
                lock = await locks.acquire(argument)
                assert lock is not None, f"{argument} is held elsewhere"
                held.append(lock)
                answer(f"held {argument} {lock.fencing_token}")
            elif command == "tick":
                skips.clear()
                await job()
                answer(skips[-1] if skips else "ran")


def input_line() -> str:
    """The next command on stdin, or ``""`` at its end."""
    try:
        return input().strip()
    except EOFError:
        return ""


def answer(line: str) -> None:
    """Tell the test something, at once."""
    print(line, flush=True)  # noqa: T201 -- stdout is how this process answers the test


def wait_woken_on_mysql(url: str, table: str, key: str, record: str) -> None:
    """Wait for ``key`` with retries a minute apart, so only a wake-up can hand it over in time.

    Writes ``held <token>`` to ``record`` once held (then releases), or ``missed`` if not.
    """
    from leaselock._engine import _waiter  # noqa: PLC0415

    def a_minute_away(attempt: int) -> int:  # the engine's signature: its name too, for mypy
        return 60_000

    # every retry of a wait a minute away: the wait below is shorter
    _waiter.backoff_ms = a_minute_away
    Path(record).write_text(asyncio.run(_wait_woken_on_mysql(url, table, key)))


async def _wait_woken_on_mysql(url: str, table: str, key: str) -> str:
    from leaselock.stores import MySQLLockStore  # noqa: PLC0415

    async with Locks(store=MySQLLockStore.from_url(url, table=table)) as locks:
        lock = await locks.acquire(key, wait="30s")
        if lock is None:
            return "missed"
        await lock.release()
        return f"held {lock.fencing_token}"


def hold_on_mysql(url: str, table: str, key: str, ttl_ms: int, record: str) -> None:
    """Hold ``key`` for ``ttl_ms`` until killed; write ``held <token>`` to ``record`` once held."""
    asyncio.run(_hold_on_mysql(url, table, key, ttl_ms, Path(record)))


async def _hold_on_mysql(url: str, table: str, key: str, ttl_ms: int, record: Path) -> None:
    from leaselock.stores import Acquired, MySQLLockStore  # noqa: PLC0415

    store = MySQLLockStore.from_url(url, table=table)
    await store.open()
    # the store alone, without a Locks: nothing renews the lease, which ends at its ttl
    held = await store.acquire(key, f"killed-holder-{os.getpid()}", ttl_ms)
    assert isinstance(held, Acquired)
    await asyncio.to_thread(record.write_text, f"held {held.fencing_token}")
    await asyncio.Event().wait()
