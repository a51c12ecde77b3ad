"""SQLiteLockStore: sequential acquire + release cycles per second, from the bare SQL up.

    .venv/bin/python benchmarks/bench_sqlite.py [--seconds N]

Each figure runs the same two transactions (acquire, then release, of one key whose row exists):

  (a) the raw floor: the store's SQL on a sqlite3 connection, the acquire's commit synced to
      disk and the release's not (a release that hands the key to nobody needs no fsync: the
      floor DESIGN section 7 sets is a durable grant), run
      (a1) on the calling thread, no hop;
      (a1') the same with the release's commit synced too, as the store did before: what the
           issue's first figures were measured against;
      (a2) on a ThreadPoolExecutor(max_workers=1), awaited from asyncio (run_in_executor);
      (a3) on a dedicated thread fed by a queue, results posted back to the loop: the hop the
           store makes when a call must wait (the write lock taken, or a slow disk), and the SQL;
  (b) SQLiteLockStore.acquire + release: on the calling thread when the call need not wait;
  (c) Locks.acquire + lock.release() on that store; (b) and (c) are shown as a ratio of (a1),
      the floor;
  (d) 32 concurrent callers (distinct keys) on one store, and spread over four stores on the
      same file: does a pool of connections help when SQLite has one writer at a time?

Beside the rate, each figure shows the CPU time its event loop (calling) thread spent per cycle:
steadier than wall time on a shared machine, and where the engine's own cost shows.

The file is in WAL mode, as the store uses it ((a0) shows what synchronous = NORMAL for both
commits would give on the bare SQL, for reference: nothing synced). Below each table: how long
one acquire transaction of (a1) held its thread (p50, p99, p99.9, max): what a call run in place
makes its event loop wait, fsync included. Every figure runs twice: on a
file in the temporary directory (a disk: each commit waits for an fsync), and, where it exists,
on /dev/shm (tmpfs: an fsync is free, so what remains is the CPU and thread hops of each layer).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import queue
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from leaselock import Locks
from leaselock.stores import Acquired
from leaselock.stores.sqlite._store import (
    ACQUIRE,
    ADVANCE_COUNTER,
    BEGIN_IMMEDIATE,
    COMMIT,
    CREATE_LOCKS,
    CREATE_TOKENS,
    JOURNAL_MODE_WAL,
    RELEASE,
    SEED_TOKENS,
    SYNCHRONOUS_FULL,
    SYNCHRONOUS_NORMAL,
    TAKEN_ROW,
    SQLiteLockStore,
)

T = TypeVar("T")

TTL_MS = 30_000
SHM = Path("/dev/shm")  # noqa: S108 -- a tmpfs, chosen for its free fsync; the files are ours
CONCURRENT_CALLERS = 32
NAMES = {"locks": '"leaselock_locks"', "tokens": '"leaselock_locks_tokens"'}


def check(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"{what} failed: the benchmark measures the winning path only")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class BareSQL:
    """The store's two transactions, on a connection of our own."""

    def __init__(
        self,
        path: Path,
        synchronous: str = SYNCHRONOUS_FULL,
        release_synchronous: str = SYNCHRONOUS_NORMAL,
    ) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute(JOURNAL_MODE_WAL)
        self.synchronous, self.release_synchronous = synchronous, release_synchronous
        self.setting = synchronous
        self.db.execute(synchronous)
        for sql in (CREATE_LOCKS, CREATE_TOKENS, SEED_TOKENS):
            self.db.execute(sql.format_map(NAMES))
        self.acquire_sql = ACQUIRE.format_map(NAMES)
        self.taken_row_sql = TAKEN_ROW.format_map(NAMES)
        self.advance_counter_sql = ADVANCE_COUNTER.format_map(NAMES)
        self.release_sql = RELEASE.format_map(NAMES)

    def set_synchronous(self, setting: str) -> None:
        """As the store does: the setting changed between transactions, when it must change."""
        if setting != self.setting:
            self.db.execute(setting)
            self.setting = setting

    def acquire(self, key: str, owner: str) -> int:
        db = self.db
        self.set_synchronous(self.synchronous)
        db.execute(BEGIN_IMMEDIATE)
        now = now_ms()
        taken = db.execute(
            self.acquire_sql,
            {"key": key, "owner": owner, "now_ms": now, "expires_at_ms": now + TTL_MS},
        )
        check(taken.rowcount == 1, "bare acquire")
        token: int = db.execute(self.taken_row_sql, {"key": key}).fetchone()[0]
        db.execute(self.advance_counter_sql, {"token": token})
        db.execute(COMMIT)
        return token

    def release(self, key: str, owner: str) -> None:
        db = self.db
        self.set_synchronous(self.release_synchronous)
        db.execute(BEGIN_IMMEDIATE)
        released = db.execute(self.release_sql, {"key": key, "owner": owner, "now_ms": now_ms()})
        check(released.rowcount == 1, "bare release")
        db.execute(COMMIT)


class Figure(NamedTuple):
    """Cycles per second, and the CPU time of the calling (event loop) thread per cycle."""

    per_s: float
    cpu_us: float


class Meter:
    """Counts cycles against wall time and this thread's CPU time (steadier on a busy box)."""

    def __init__(self) -> None:
        self.cycles = 0
        self.started = time.perf_counter()
        self.cpu_started = time.thread_time()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def figure(self) -> Figure:
        cpu_us = (time.thread_time() - self.cpu_started) * 1e6
        return Figure(self.cycles / self.elapsed(), cpu_us / self.cycles)


def rate(seconds: float, cycle: Callable[[], object]) -> Figure:
    meter = Meter()
    while meter.elapsed() < seconds:
        cycle()
        meter.cycles += 1
    return meter.figure()


async def async_rate(seconds: float, cycle: Callable[[], Awaitable[object]]) -> Figure:
    meter = Meter()
    while meter.elapsed() < seconds:
        await cycle()
        meter.cycles += 1
    return meter.figure()


# how long each acquire transaction of (a1) took, in ns: what a call in place holds its loop
TRANSACTION_NS: list[int] = []


def bare_on_calling_thread(
    path: Path, seconds: float, synchronous: str, release_synchronous: str, *, timed: bool = False
) -> Figure:
    sql = BareSQL(path, synchronous, release_synchronous)

    def cycle() -> None:
        started = time.perf_counter_ns()
        sql.acquire("bare", "owner")
        if timed:
            TRANSACTION_NS.append(time.perf_counter_ns() - started)
        sql.release("bare", "owner")

    try:
        return rate(seconds, cycle)
    finally:
        sql.db.close()


async def bare_through_worker_thread(path: Path, seconds: float) -> Figure:
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=1) as executor:
        sql = await loop.run_in_executor(executor, BareSQL, path)

        async def cycle() -> None:
            await loop.run_in_executor(executor, sql.acquire, "hop", "owner")
            await loop.run_in_executor(executor, sql.release, "hop", "owner")

        try:
            return await async_rate(seconds, cycle)
        finally:
            await loop.run_in_executor(executor, sql.db.close)


class DedicatedThread:
    """The store's arrangement, bare: one thread, a job queue, results posted to the loop."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[Callable[[], Any], asyncio.Future[Any]] | None]
        self.jobs = queue.SimpleQueue()
        self.loop = asyncio.get_running_loop()
        self.thread = threading.Thread(target=self.serve)
        self.thread.start()

    def serve(self) -> None:
        while (item := self.jobs.get()) is not None:
            job, done = item
            self.loop.call_soon_threadsafe(done.set_result, job())

    def run(self, job: Callable[[], T]) -> asyncio.Future[T]:
        done: asyncio.Future[T] = self.loop.create_future()
        self.jobs.put((job, done))
        return done

    def stop(self) -> None:
        self.jobs.put(None)
        self.thread.join()


async def bare_through_dedicated_thread(path: Path, seconds: float) -> Figure:
    worker = DedicatedThread()
    sql = await worker.run(lambda: BareSQL(path))

    async def cycle() -> None:
        await worker.run(lambda: sql.acquire("thread", "owner"))
        await worker.run(lambda: sql.release("thread", "owner"))

    try:
        return await async_rate(seconds, cycle)
    finally:
        await worker.run(sql.db.close)
        worker.stop()


async def store_directly(path: Path, seconds: float) -> Figure:
    store = SQLiteLockStore(path)
    await store.open()

    async def cycle() -> None:
        check(isinstance(await store.acquire("store", "owner", TTL_MS), Acquired), "acquire")
        check(await store.release("store", "owner"), "release")

    try:
        return await async_rate(seconds, cycle)
    finally:
        await store.aclose()


async def through_locks(path: Path, seconds: float) -> Figure:
    async with Locks(store=SQLiteLockStore(path), ttl=f"{TTL_MS}ms") as locks:

        async def cycle() -> None:
            lock = await locks.acquire("locks")
            check(lock is not None, "Locks.acquire")
            check(lock is not None and await lock.release(), "lock.release")

        return await async_rate(seconds, cycle)


async def concurrent_callers(path: Path, seconds: float, stores: int) -> Figure:
    opened = [SQLiteLockStore(path) for _ in range(stores)]
    for store in opened:
        await store.open()
    meter = Meter()

    async def caller(n: int, store: SQLiteLockStore) -> None:
        key = f"concurrent-{n}"
        while meter.elapsed() < seconds:
            check(isinstance(await store.acquire(key, "owner", TTL_MS), Acquired), "acquire")
            check(await store.release(key, "owner"), "release")
            meter.cycles += 1

    try:
        await asyncio.gather(
            *(
                caller(n, store)
                for n, store in zip(range(CONCURRENT_CALLERS), itertools.cycle(opened))
            )
        )
        return meter.figure()
    finally:
        for store in opened:
            await store.aclose()


FIGURES: dict[str, Callable[[Path, float], Figure]] = {
    "a0": lambda path, s: bare_on_calling_thread(path, s, SYNCHRONOUS_NORMAL, SYNCHRONOUS_NORMAL),
    "a1": lambda path, s: bare_on_calling_thread(
        path, s, SYNCHRONOUS_FULL, SYNCHRONOUS_NORMAL, timed=True
    ),
    "a1'": lambda path, s: bare_on_calling_thread(path, s, SYNCHRONOUS_FULL, SYNCHRONOUS_FULL),
    "a2": lambda path, s: asyncio.run(bare_through_worker_thread(path, s)),
    "a3": lambda path, s: asyncio.run(bare_through_dedicated_thread(path, s)),
    "b": lambda path, s: asyncio.run(store_directly(path, s)),
    "c": lambda path, s: asyncio.run(through_locks(path, s)),
    "one": lambda path, s: asyncio.run(concurrent_callers(path, s, stores=1)),
    "four": lambda path, s: asyncio.run(concurrent_callers(path, s, stores=4)),
}


def measure(directory: Path, seconds: float, rounds: int) -> dict[str, Figure]:
    TRANSACTION_NS.clear()
    samples: dict[str, list[Figure]] = {name: [] for name in FIGURES}
    with tempfile.TemporaryDirectory(prefix="leaselock-bench-", dir=directory) as temporary:
        path = Path(temporary) / "locks.db"
        print(f"\nfile {path}")
        # interleaved, so that a burst of load elsewhere on the machine hits every figure alike
        for _ in range(rounds):
            for name, figure in FIGURES.items():
                samples[name].append(figure(path, seconds))
    return {
        name: Figure(
            statistics.median(sample.per_s for sample in values),
            statistics.median(sample.cpu_us for sample in values),
        )
        for name, values in samples.items()
    }


def report(m: dict[str, Figure]) -> None:
    rows = [
        ("(a0) bare SQL, calling thread, nothing synced", "a0", ""),
        ("(a1) bare SQL, calling thread, the acquire synced", "a1", ""),
        ("(a1') bare SQL, calling thread, both synced", "a1'", "a1"),
        ("(a2) bare SQL, ThreadPoolExecutor(1) from asyncio", "a2", "a1"),
        ("(a3) bare SQL, dedicated thread (the store's way)", "a3", "a1"),
        ("(b)  SQLiteLockStore.acquire + release", "b", "a1"),
        ("(c)  Locks.acquire + lock.release()", "c", "a1"),
        ("(c)  the same over (a1'), every commit synced", "c", "a1'"),
        (f"(d)  {CONCURRENT_CALLERS} callers, one store", "one", "b"),
        (f"(d)  {CONCURRENT_CALLERS} callers, four stores, one file", "four", "one"),
    ]
    print(f"  {'':<52} {'cycles/s':>9} {'us/cycle':>9} {'ratio':>12} {'loop CPU us/cycle':>18}")
    for title, name, base in rows:
        figure = m[name]
        ratio = f"{figure.per_s / m[base].per_s:.2f} x {base}" if base else ""
        print(
            f"  {title:<52} {figure.per_s:>9,.0f} {1e6 / figure.per_s:>9.0f} {ratio:>12} "
            f"{figure.cpu_us:>18.1f}"
        )
    times = sorted(TRANSACTION_NS)

    def at(share: float) -> str:
        return f"{times[min(len(times) - 1, int(share * len(times)))] / 1000:,.0f}"

    print(
        f"  one acquire transaction of (a1), {len(times):,} of them: p50 {at(0.5)} us, "
        f"p99 {at(0.99)} us, p99.9 {at(0.999)} us, max {times[-1] / 1000:,.0f} us"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="per figure and round (1)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; median (3)")
    arguments = parser.parse_args()
    seconds, rounds = arguments.seconds, arguments.rounds

    print(
        f"SQLite {sqlite3.sqlite_version}; acquire + release cycles per second of one key whose "
        f"row exists; median of {rounds} interleaved rounds of {seconds:g} s per figure"
    )
    # on tmpfs an fsync costs nothing: what is left is the CPU and thread hops of each layer
    directories = [Path(tempfile.gettempdir())] + ([SHM] if SHM.is_dir() else [])
    for directory in directories:
        report(measure(directory, seconds, rounds))


if __name__ == "__main__":
    main()
