"""SQLiteLockStore: where a call runs (the caller's thread, or the store's worker) and why.

A call runs on the caller's thread when it cannot wait: the write lock free, the connection
free, recent transactions quick. Each test reads where the transaction ran from the store's
clock, which a transaction reads once, after it holds the write lock.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from multiprocessing.synchronize import Event as EventType
from pathlib import Path

import pytest

from helpers import unique_key
from leaselock import Locks, SyncLocks
from leaselock.stores import Acquired, NotAcquired, Renewal
from leaselock.stores.sqlite import SQLiteLockStore, _store
from leaselock.testing import ManualClock, wait_all_tasks_blocked

LONG_TTL_MS = 60_000
# a child process that never says it holds the lock fails the test instead of hanging it
CHILD_TIMEOUT_S = 60.0


class ThreadNotingClock:
    """A ManualClock that notes the thread of every ``now_ms()``: one per transaction."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.threads: list[int] = []

    def now_ms(self) -> int:
        self.threads.append(threading.get_ident())
        return self.clock.now_ms()

    def call_at(self, when_ms: int, callback: object) -> object:
        return self.clock.call_at(when_ms, callback)  # type: ignore[arg-type]

    def taken(self) -> list[int]:
        """Return the threads noted since the last call, and forget them."""
        threads, self.threads = self.threads, []
        return threads


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "locks.db"


@pytest.fixture(autouse=True)
def no_transaction_counts_as_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a call runs must not hang on how long this machine's fsyncs take today."""
    monkeypatch.setattr(_store, "SLOW_IN_PLACE_S", 3600.0)


def worker_thread(store: SQLiteLockStore) -> int:
    worker = store._worker
    assert worker is not None
    ident = worker.thread.ident
    assert ident is not None
    return ident


@asynccontextmanager
async def noted_store(
    path: Path, **options: str
) -> AsyncIterator[tuple[SQLiteLockStore, ThreadNotingClock]]:
    """An opened store whose clock notes each transaction's thread, the schema's forgotten."""
    clock = ThreadNotingClock()
    store = SQLiteLockStore(path, clock=clock, **options)  # type: ignore[arg-type]
    await store.open()
    clock.taken()  # the schema's, at open
    try:
        yield store, clock
    finally:
        await store.aclose()


async def test_an_uncontended_call_runs_on_the_caller_s_thread(path: Path) -> None:
    async with noted_store(path) as (store, clock):
        key = unique_key("in-place")
        assert isinstance(await store.acquire(key, "owner", LONG_TTL_MS), Acquired)
        assert await store.renew(key, "owner", LONG_TTL_MS)
        assert await store.release(key, "owner")
        here = threading.get_ident()
        assert clock.taken() == [here, here, here]


async def test_a_call_in_place_still_lets_the_loop_run_other_callbacks(path: Path) -> None:
    store = SQLiteLockStore(path)
    await store.open()
    try:
        ran: list[str] = []
        asyncio.get_running_loop().call_soon(ran.append, "other")
        assert isinstance(await store.acquire(unique_key("yield"), "owner", LONG_TTL_MS), Acquired)
        assert ran == ["other"]
    finally:
        await store.aclose()


def write_until_told(path: str, key: str, holding: EventType, go: EventType) -> None:
    """In a process of its own: in ONE write transaction, write ``key`` held; commit when told."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "INSERT INTO leaselock_locks (key, owner, fencing_token, expires_at_ms) "
            "VALUES (?, 'blocker', 7, ?)",
            (key, 2**62),
        )
        holding.set()
        go.wait(CHILD_TIMEOUT_S)
        db.execute("COMMIT")
    finally:
        db.close()


async def test_a_call_that_finds_another_process_writing_waits_on_the_worker_not_the_loop(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = unique_key("busy")
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2]))
    context = multiprocessing.get_context("spawn")
    holding, go = context.Event(), context.Event()
    child = context.Process(target=write_until_told, args=(str(path), key, holding, go))
    # a busy timeout the test would never outlast: a loop blocked for it would hang the test
    async with noted_store(path, busy_timeout="10m") as (store, clock):
        child.start()
        try:
            assert await asyncio.to_thread(holding.wait, CHILD_TIMEOUT_S)
            acquiring = asyncio.create_task(store.acquire(key, "here", LONG_TTL_MS))
            # the loop is free: this task runs while the acquire waits for the write lock
            await wait_all_tasks_blocked()
            assert not acquiring.done()
            assert clock.taken() == []  # no transaction got as far as reading the time
            go.set()
            # the acquire read the file after the other process's commit: the key is held
            assert await asyncio.wait_for(acquiring, CHILD_TIMEOUT_S) == NotAcquired(
                holder="blocker"
            )
            assert clock.taken() == [worker_thread(store)]
            # the lock is free again: the next call runs in place
            assert isinstance(
                await store.acquire(unique_key("after"), "here", LONG_TTL_MS), Acquired
            )
            assert clock.taken() == [threading.get_ident()]
        finally:
            go.set()
            await asyncio.to_thread(child.join, CHILD_TIMEOUT_S)
    assert child.exitcode == 0


async def test_a_slow_transaction_sends_calls_to_the_worker_until_quick_ones_there(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with noted_store(path) as (store, clock):
        key = unique_key("slow")
        here = threading.get_ident()
        # every transaction counts as slow: the first ran in place, the next ones go to the worker
        monkeypatch.setattr(_store, "SLOW_IN_PLACE_S", -1.0)
        assert isinstance(await store.acquire(key, "owner", LONG_TTL_MS), Acquired)
        assert await store.renew(key, "owner", LONG_TTL_MS)
        assert clock.taken() == [here, worker_thread(store)]
        # none counts as slow now: after enough quick ones on the worker, calls run in place
        monkeypatch.setattr(_store, "SLOW_IN_PLACE_S", 3600.0)
        for _ in range(_store.QUICK_CALLS_TO_RETURN + 1):
            assert await store.renew(key, "owner", LONG_TTL_MS)
        there = worker_thread(store)
        assert clock.taken() == [there] * _store.QUICK_CALLS_TO_RETURN + [here]


async def test_a_large_batch_of_renewals_runs_on_the_worker(path: Path) -> None:
    async with noted_store(path) as (store, clock):
        keys = [unique_key(f"batch-{n}") for n in range(_store.IN_PLACE_RENEWALS + 1)]
        for key in keys:
            assert isinstance(await store.acquire(key, "owner", LONG_TTL_MS), Acquired)
        clock.taken()
        renewals = [Renewal(key, "owner", LONG_TTL_MS) for key in keys]
        assert await store.renew_many(renewals[:-1]) == [True] * len(keys[:-1])
        assert await store.renew_many(renewals) == [True] * len(keys)
        assert clock.taken() == [threading.get_ident(), worker_thread(store)]


async def test_a_locks_and_a_sync_locks_sharing_one_store_exclude_each_other(path: Path) -> None:
    store = SQLiteLockStore(path)
    key = unique_key("shared")
    guard = threading.Lock()
    inside = 0
    most_inside = 0
    tokens: list[int] = []

    def enter(token: int) -> None:
        nonlocal inside, most_inside
        with guard:
            inside += 1
            most_inside = max(most_inside, inside)
            tokens.append(token)

    def leave() -> None:
        nonlocal inside
        with guard:
            inside -= 1

    async with Locks(store=store, ttl="30s") as locks:
        # started from a thread: its engine runs on an event loop thread of its own
        sync_locks = SyncLocks(store=store, ttl="30s")
        await asyncio.to_thread(sync_locks.start)

        def in_a_thread() -> None:
            for _ in range(40):
                lock = sync_locks.acquire(key, wait="30s")
                assert lock is not None
                enter(lock.fencing_token)
                leave()
                assert lock.release()

        async def on_this_loop() -> None:
            for _ in range(40):
                lock = await locks.acquire(key, wait="30s")
                assert lock is not None
                enter(lock.fencing_token)
                # the threads may try their turn between this acquire and release
                await asyncio.to_thread(leave)
                assert await lock.release()

        try:
            await asyncio.gather(
                asyncio.to_thread(in_a_thread), asyncio.to_thread(in_a_thread), on_this_loop()
            )
        finally:
            await asyncio.to_thread(sync_locks.close)

    assert most_inside == 1
    assert len(tokens) == 120
    assert all(earlier < later for earlier, later in itertools.pairwise(tokens))
