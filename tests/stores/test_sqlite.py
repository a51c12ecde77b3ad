"""SQLiteLockStore: what only a file on one host does (the contract is in test_contract.py)."""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

import pytest

from helpers import TokensAsText, unique_key
from leaselock import Locks, LocksConfigurationError, LockStoreError, SyncLocks, current_lock
from leaselock._durations import MAX_TTL_MS
from leaselock.stores import (
    Acquired,
    AcquireResult,
    Grant,
    JobState,
    LockInfo,
    NotAcquired,
    OpenRun,
    Queued,
    RunRecord,
    RunStart,
)
from leaselock.stores.sqlite import SQLiteLockStore
from leaselock.stores.sqlite._line import SQLiteLines
from leaselock.testing import ManualClock, wait_all_tasks_blocked

LONG_TTL_MS = 60_000
PROCESSES = 8
RACE_ROUNDS = 200
# a child process that never reaches a barrier fails the test instead of hanging it
BARRIER_TIMEOUT_S = 60.0
TICK = datetime(2026, 12, 6, 15, 30, tzinfo=UTC)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "locks.db"


def read_row(path: Path, key: str) -> tuple[str | None, int, int]:
    with sqlite3.connect(path) as db:
        row = db.execute(
            "SELECT owner, fencing_token, expires_at_ms FROM leaselock_locks WHERE key = ?",
            (key,),
        ).fetchone()
    db.close()
    owner, token, expires_at_ms = row
    return owner, token, expires_at_ms


def worker_thread(store: SQLiteLockStore) -> threading.Thread:
    worker = store._worker
    assert worker is not None
    return worker.thread


# --- processes -----------------------------------------------------------------------------


def race_for_one_key(
    path: str,
    key: str,
    start: Barrier,
    attempted: Barrier,
    results: Queue[list[tuple[int, int]] | str],
) -> None:
    """In a process of its own: race the others for ``key`` each round; the winner releases."""
    owner = f"process-{os.getpid()}"
    won: list[tuple[int, int]] = []
    try:
        with asyncio.Runner() as runner:
            store = SQLiteLockStore(path)
            runner.run(store.open())
            try:
                for round_number in range(RACE_ROUNDS):
                    start.wait(BARRIER_TIMEOUT_S)
                    result = runner.run(store.acquire(key, owner, LONG_TTL_MS))
                    # nobody releases before every process has tried: one winner per round
                    attempted.wait(BARRIER_TIMEOUT_S)
                    if isinstance(result, Acquired):
                        won.append((round_number, result.fencing_token))
                        if not runner.run(store.release(key, owner)):
                            raise AssertionError(f"round {round_number}: the release was refused")
            finally:
                runner.run(store.aclose())
    except BaseException as error:
        start.abort()
        attempted.abort()
        results.put(repr(error))
        raise
    results.put(won)


def open_new_file_at_once(
    path: str, key: str, start: Barrier, results: Queue[AcquireResult | str]
) -> None:
    """In a process of its own: open a file no one created yet, with the others, and acquire."""

    async def open_and_acquire() -> AcquireResult:
        store = SQLiteLockStore(path)
        start.wait(BARRIER_TIMEOUT_S)
        await store.open()
        try:
            return await store.acquire(key, f"process-{os.getpid()}", LONG_TTL_MS)
        finally:
            await store.aclose()

    try:
        results.put(asyncio.run(open_and_acquire()))
    except BaseException as error:
        results.put(repr(error))
        raise


def open_an_earlier_file_and_start_one_tick(
    path: str, job: str, start: Barrier, opened: Barrier, results: Queue[tuple[bool, str] | str]
) -> None:
    """In a process of its own: open an earlier leaselock's file with the others, start TICK."""
    instance = f"shop-{os.getpid()}"

    async def open_and_start() -> tuple[bool, str]:
        store = SQLiteLockStore(path)
        start.wait(BARRIER_TIMEOUT_S)
        await store.open()
        try:
            opened.wait(BARRIER_TIMEOUT_S)
            run = OpenRun(instance, None, datetime.now(UTC))
            answer = await store.start_run(RunStart(job, run, tick=TICK))
        finally:
            await store.aclose()
        return answer.started, instance

    try:
        results.put(asyncio.run(open_and_start()))
    except BaseException as error:
        start.abort()
        opened.abort()
        results.put(repr(error))
        raise


def start_processes(
    monkeypatch: pytest.MonkeyPatch, target: Callable[..., None], args: tuple[object, ...]
) -> list[BaseProcess]:
    # the children import this module by the name pytest gave it: make that name importable
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2]))
    context = multiprocessing.get_context("spawn")
    processes: list[BaseProcess] = [
        context.Process(target=target, args=args) for _ in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    return processes


def join_processes(processes: list[BaseProcess]) -> None:
    for process in processes:
        process.join(BARRIER_TIMEOUT_S)
    assert [process.exitcode for process in processes] == [0] * len(processes)


def test_eight_processes_race_for_one_key_and_exactly_one_wins_each_round(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = multiprocessing.get_context("spawn")
    start, attempted = context.Barrier(PROCESSES), context.Barrier(PROCESSES)
    results: Queue[list[tuple[int, int]] | str] = context.Queue()
    args = (str(path), unique_key("race"), start, attempted, results)
    processes = start_processes(monkeypatch, race_for_one_key, args)
    reports = [results.get(timeout=2 * BARRIER_TIMEOUT_S) for _ in processes]
    join_processes(processes)

    assert [report for report in reports if isinstance(report, str)] == []
    wins = sorted(win for report in reports if isinstance(report, list) for win in report)
    assert [round_number for round_number, _ in wins] == list(range(RACE_ROUNDS))
    tokens = [token for _, token in wins]
    assert all(earlier < later for earlier, later in itertools.pairwise(tokens))


def test_processes_opening_a_new_file_at_once_create_it_once_and_one_acquires(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(PROCESSES)
    results: Queue[AcquireResult | str] = context.Queue()
    args = (str(path), unique_key("new"), start, results)
    processes = start_processes(monkeypatch, open_new_file_at_once, args)
    reports = [results.get(timeout=2 * BARRIER_TIMEOUT_S) for _ in processes]
    join_processes(processes)

    assert [report for report in reports if isinstance(report, str)] == []
    assert sum(isinstance(report, Acquired) for report in reports) == 1
    assert sum(isinstance(report, NotAcquired) for report in reports) == PROCESSES - 1


async def an_earlier_leaselock_s_file(path: Path, job: str) -> None:
    """Make a file as a leaselock before tick identity left it: no ``last_tick``, one failure."""
    store = SQLiteLockStore(path)
    started = datetime.now(UTC)
    await store.end_run(RunRecord(job, "shop-3001", None, started, started, "error", "boom"))
    await store.aclose()
    db = sqlite3.connect(path)
    db.execute('ALTER TABLE "leaselock_locks_jobs" DROP COLUMN last_tick')
    db.close()


def test_processes_opening_an_earlier_file_at_once_add_its_column_once_and_one_starts_a_tick(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = unique_key("job")
    asyncio.run(an_earlier_leaselock_s_file(path, job))
    context = multiprocessing.get_context("spawn")
    start, opened = context.Barrier(PROCESSES), context.Barrier(PROCESSES)
    results: Queue[tuple[bool, str] | str] = context.Queue()
    args = (str(path), job, start, opened, results)
    processes = start_processes(monkeypatch, open_an_earlier_file_and_start_one_tick, args)
    reports = [results.get(timeout=2 * BARRIER_TIMEOUT_S) for _ in processes]
    join_processes(processes)

    assert [report for report in reports if isinstance(report, str)] == []
    won = [report[1] for report in reports if isinstance(report, tuple) and report[0]]
    assert len(won) == 1

    async def read_state() -> list[JobState]:
        store = SQLiteLockStore(path, read_only=True)
        try:
            return await store.job_states([job])
        finally:
            await store.aclose()

    [state] = asyncio.run(read_state())
    assert state.failures == 1  # the earlier leaselock's row is kept, column added beside it
    assert state.last_tick is not None
    assert (state.last_tick.at, state.last_tick.instance) == (TICK, won[0])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
async def test_a_store_opened_before_a_fork_works_in_the_child(path: Path) -> None:
    store = SQLiteLockStore(path)
    await store.open()
    context = multiprocessing.get_context("fork")
    results: Queue[object] = context.Queue()
    key = unique_key("forked")

    def in_child() -> None:
        results.put(asyncio.run(store.acquire(key, "child", LONG_TTL_MS)))

    child = context.Process(target=in_child)
    child.start()
    child.join(BARRIER_TIMEOUT_S)
    assert child.exitcode == 0
    assert isinstance(results.get(timeout=BARRIER_TIMEOUT_S), Acquired)
    assert isinstance(await store.acquire(key, "parent", LONG_TTL_MS), NotAcquired)
    await store.aclose()


# --- threads -------------------------------------------------------------------------------


def test_sync_locks_used_from_eight_threads_never_overlap_and_tokens_grow(path: Path) -> None:
    key = unique_key("threads")
    guard = threading.Lock()
    inside = 0
    most_inside = 0
    tokens: list[int] = []

    def critical_section() -> None:
        nonlocal inside, most_inside
        lock = current_lock()
        assert lock is not None
        with guard:
            inside += 1
            most_inside = max(most_inside, inside)
            tokens.append(lock.fencing_token)
        with guard:
            inside -= 1

    with SyncLocks(store=SQLiteLockStore(path), ttl="30s") as locks:

        def worker() -> None:
            for _ in range(10):
                locks.with_lock(key, critical_section, wait="30s")

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert most_inside == 1
    assert len(tokens) == 80
    assert all(earlier < later for earlier, later in itertools.pairwise(tokens))


# --- tokens and rows -----------------------------------------------------------------------


async def test_a_released_lock_keeps_its_row_with_the_owner_cleared(
    path: Path, clock: ManualClock
) -> None:
    store = SQLiteLockStore(path, clock=clock)
    key = unique_key("kept")
    acquired = await store.acquire(key, "holder", LONG_TTL_MS)
    assert isinstance(acquired, Acquired)
    assert read_row(path, key) == ("holder", acquired.fencing_token, LONG_TTL_MS)
    assert await store.release(key, "holder")
    assert read_row(path, key) == (None, acquired.fencing_token, LONG_TTL_MS)
    await store.aclose()


async def test_the_key_s_own_token_is_the_floor_when_the_counter_went_back(
    path: Path, clock: ManualClock
) -> None:
    store = SQLiteLockStore(path, clock=clock)
    key = unique_key("floor")
    for _ in range(3):
        taken = await store.acquire(key, "holder", LONG_TTL_MS)
        assert await store.release(key, "holder")
    assert taken == Acquired(3)
    # a restored, older file: the counter is back at 0 while the key's row kept its token
    with sqlite3.connect(path) as db:
        db.execute("UPDATE leaselock_locks_tokens SET last_token = 0")
    db.close()

    assert await store.acquire(unique_key("new"), "other", LONG_TTL_MS) == Acquired(1)
    after = await store.acquire(key, "holder", LONG_TTL_MS)
    assert after == Acquired(4)
    assert isinstance(after, Acquired)
    assert type(after.fencing_token) is int
    await store.aclose()


async def test_a_key_whose_row_was_deleted_gets_a_greater_token_from_the_counter(
    path: Path, clock: ManualClock
) -> None:
    store = SQLiteLockStore(path, clock=clock)
    key = unique_key("purged")
    assert await store.acquire(key, "holder", LONG_TTL_MS) == Acquired(1)
    assert await store.release(key, "holder")
    # an application that cleans up released rows
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM leaselock_locks WHERE owner IS NULL")
    db.close()

    assert await store.acquire(key, "holder", LONG_TTL_MS) == Acquired(2)
    await store.aclose()


async def test_a_token_returned_as_text_is_refused_by_the_engine(
    path: Path, clock: ManualClock
) -> None:
    store = SQLiteLockStore(path, clock=clock)
    async with Locks(store=TokensAsText(store), clock=clock) as locks:
        with pytest.raises(LockStoreError, match="fencing token '1' as str"):
            await locks.acquire(unique_key("text"))
    await store.aclose()


async def test_a_ttl_of_a_year_is_kept_exactly_and_held_until_it_passes(
    path: Path, clock: ManualClock
) -> None:
    store = SQLiteLockStore(path, clock=clock)
    key = unique_key("year")
    assert isinstance(await store.acquire(key, "holder", MAX_TTL_MS), Acquired)
    assert read_row(path, key)[2] == MAX_TTL_MS
    await clock.advance(timedelta(milliseconds=MAX_TTL_MS - 1))
    assert await store.acquire(key, "other", LONG_TTL_MS) == NotAcquired(holder="holder")
    await clock.advance("1ms")
    assert isinstance(await store.acquire(key, "other", LONG_TTL_MS), Acquired)
    await store.aclose()


async def test_expiry_is_on_the_host_wall_clock_by_default(path: Path) -> None:
    store = SQLiteLockStore(path)
    key = unique_key("wall")
    before_ms = time.time_ns() // 1_000_000
    assert isinstance(await store.acquire(key, "holder", LONG_TTL_MS), Acquired)
    after_ms = time.time_ns() // 1_000_000
    assert before_ms + LONG_TTL_MS <= read_row(path, key)[2] <= after_ms + LONG_TTL_MS
    await store.aclose()


async def test_two_tables_in_one_file_keep_their_locks_apart(
    path: Path, clock: ManualClock
) -> None:
    jobs = SQLiteLockStore(path, table="job_locks", clock=clock)
    reports = SQLiteLockStore(path, table="report_locks", clock=clock)
    assert await jobs.acquire("shared-name", "a", LONG_TTL_MS) == Acquired(1)
    assert await reports.acquire("shared-name", "b", LONG_TTL_MS) == Acquired(1)
    await jobs.aclose()
    await reports.aclose()


# --- what a commit syncs to disk -------------------------------------------------------------

# PRAGMA synchronous's values: FULL syncs every commit, NORMAL (in WAL mode) leaves it to the next
# synced commit or checkpoint
SYNCED, UNSYNCED = 2, 1


class CommitsSeen:
    """Follows the store's connection: for each transaction's end, whether it synced to disk.

    Read from the statements the connection ran (``set_trace_callback``); ``check()`` compares
    the setting that reading leaves with what the connection itself says.
    """

    def __init__(self, store: SQLiteLockStore) -> None:
        worker = store._worker
        assert worker is not None
        assert worker._connection is not None
        self.db = worker._connection
        self.setting: int = self.db.execute("PRAGMA synchronous").fetchone()[0]
        self.ends: list[str] = []
        self.db.set_trace_callback(self.saw)

    def saw(self, statement: str) -> None:
        if statement == "PRAGMA synchronous = FULL":
            self.setting = SYNCED
        elif statement == "PRAGMA synchronous = NORMAL":
            self.setting = UNSYNCED
        elif statement == "COMMIT":
            self.ends.append("synced" if self.setting == SYNCED else "unsynced")
        elif statement == "ROLLBACK":
            self.ends.append("rolled back")

    def taken(self) -> list[str]:
        """The transactions' ends since the last call, checked against the connection."""
        self.db.set_trace_callback(None)
        assert self.db.execute("PRAGMA synchronous").fetchone()[0] == self.setting
        self.db.set_trace_callback(self.saw)
        ends, self.ends = self.ends, []
        return ends


async def test_a_token_and_a_run_are_synced_and_a_renewal_and_a_release_to_nobody_are_not(
    path: Path, clock: ManualClock
) -> None:
    store = SQLiteLockStore(path, clock=clock)
    await store.open()
    try:
        commits = CommitsSeen(store)
        key, job = unique_key("synced"), unique_key("job")
        assert commits.taken() == []

        assert isinstance(await store.acquire(key, "holder", LONG_TTL_MS), Acquired)
        assert commits.taken() == ["synced"]
        assert await store.renew(key, "holder", LONG_TTL_MS)
        assert await store.renew_many([(key, "holder", LONG_TTL_MS)]) == [True]
        assert await store.release(key, "holder")
        assert commits.taken() == ["unsynced", "unsynced", "unsynced"]
        # the setting is put back before the next token: a power cut can't take it back
        assert await store.acquire(key, "holder", LONG_TTL_MS) == Acquired(2)
        assert commits.taken() == ["synced"]

        run = OpenRun("shop-3001", None, datetime.now(UTC))
        assert (await store.start_run(RunStart(job, run, tick=TICK))).started
        started = datetime.now(UTC)
        await store.end_run(RunRecord(job, "shop-3001", None, started, started, "ok", None))
        assert await store.renew(key, "holder", LONG_TTL_MS)
        await store.record_run(RunRecord(job, "shop-3001", None, started, started, "ok", None))
        assert commits.taken() == ["synced", "synced", "unsynced", "synced"]
    finally:
        await store.aclose()


@pytest.mark.parametrize("waiter_read", ["seen", "missed"])
async def test_a_release_that_hands_the_key_on_commits_synced_and_keeping_a_place_not(
    path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, waiter_read: str
) -> None:
    store = SQLiteLockStore(path, clock=clock)
    key = unique_key("handed-on")
    grants: list[Grant] = []
    granted = asyncio.Event()

    def on_grant(grant: Grant) -> None:
        grants.append(grant)
        granted.set()

    await store.open()
    try:
        async with store.wait_in_line(on_grant) as line:
            assert line is not None
            assert await store.acquire(key, "holder", LONG_TTL_MS) == Acquired(1)
            commits = CommitsSeen(store)
            # a place dies with its waiter: keeping it, or leaving it, needs no fsync
            assert isinstance(await line.queue(key, "leaver", LONG_TTL_MS, 3000, 1), Queued)
            assert not await line.leave(key, "leaver")
            assert isinstance(await line.queue(key, "waiter", LONG_TTL_MS, 3000, 1), Queued)
            # taking a free key in line draws a token: begun as a place kept, it is rolled
            # back and committed again, synced
            free = unique_key("free")
            assert await line.queue(free, "taker", LONG_TTL_MS, 3000, 1) == Acquired(2)
            assert commits.taken() == ["unsynced"] * 3 + ["rolled back", "synced"]

            if waiter_read == "missed":
                # the waiter queued between the release's first read and its transaction
                monkeypatch.setattr(SQLiteLines, "waits", lambda *_args: False)
            assert await store.release(key, "holder")
            # the grant is a token: seen by the read before the transaction, it begins synced;
            # else, begun unsynced, it is rolled back when it finds the waiter, and done again
            assert commits.taken() == (
                ["synced"] if waiter_read == "seen" else ["rolled back", "synced"]
            )
            assert read_row(path, key)[:2] == ("waiter", 3)
            await asyncio.wait_for(granted.wait(), BARRIER_TIMEOUT_S)
            assert [(grant.key, grant.owner, grant.fencing_token) for grant in grants] == [
                (key, "waiter", 3)
            ]
    finally:
        await store.aclose()


# --- busy file -----------------------------------------------------------------------------


async def test_a_call_fails_after_the_busy_timeout_while_another_connection_writes(
    path: Path,
) -> None:
    store = SQLiteLockStore(path, busy_timeout="200ms")
    await store.open()
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    started = time.perf_counter()
    with pytest.raises(LockStoreError, match="busy_timeout=200 ms"):
        await store.acquire(unique_key("busy"), "holder", LONG_TTL_MS)
    waited_s = time.perf_counter() - started
    blocker.execute("ROLLBACK")
    blocker.close()

    assert 0.15 <= waited_s < 2.0
    assert isinstance(await store.acquire(unique_key("free"), "holder", LONG_TTL_MS), Acquired)
    await store.aclose()


async def test_a_renewal_that_meets_a_busy_file_is_retried_and_the_lock_is_kept(
    path: Path, clock: ManualClock
) -> None:
    store = SQLiteLockStore(path, busy_timeout="50ms", clock=clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        lock = await locks.acquire(unique_key("renewed"))
        assert lock is not None
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        await clock.advance("10s")  # the renewal is due, and fails on the busy file
        blocker.execute("ROLLBACK")
        blocker.close()
        await clock.advance("25s")  # past the first deadline: only a retried renewal keeps it
        assert lock.held
        assert await lock.release()


# --- a store that creates nothing, and a read-only one ---------------------------------------


def an_application_database(path: Path) -> None:
    """Make an application's own SQLite file: a table of its own, none of leaselock's."""
    db = sqlite3.connect(path)
    try:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER NOT NULL)")
        db.commit()
    finally:
        db.close()


def files_beside(path: Path) -> dict[str, bytes]:
    """The files of ``path``'s directory, with their bytes."""
    return {entry.name: entry.read_bytes() for entry in path.parent.iterdir()}


async def a_file_with_a_lock_and_a_run(path: Path) -> int:
    """Have an application's store hold orders:1 and record a run of feed:import; the token."""
    store = SQLiteLockStore(path)
    taken = await store.acquire("orders:1", "holder", LONG_TTL_MS)
    assert isinstance(taken, Acquired)
    started = datetime.now(UTC)
    await store.record_run(
        RunRecord("feed:import", "shop-3002", taken.fencing_token, started, started, "ok", None)
    )
    await store.aclose()
    return taken.fencing_token


@pytest.mark.parametrize("options", [{"create_schema": False}, {"read_only": True}])
async def test_a_store_that_creates_nothing_names_the_missing_tables_and_leaves_the_file_alone(
    path: Path, options: dict[str, Any]
) -> None:
    an_application_database(path)
    before = files_beside(path)
    store = SQLiteLockStore(path, **options)

    with pytest.raises(LockStoreError) as refused:
        await store.open()

    message = str(refused.value)
    assert '"leaselock_locks", "leaselock_locks_tokens", "leaselock_locks_runs"' in message
    assert "start the application once" in message
    assert next(iter(options)) in message
    # byte for byte: no table, the journal mode not switched to WAL, no -wal or -shm file
    assert files_beside(path) == before


@pytest.mark.parametrize("options", [{"create_schema": False}, {"read_only": True}])
async def test_a_store_that_creates_nothing_makes_no_file(
    path: Path, options: dict[str, Any]
) -> None:
    store = SQLiteLockStore(path, **options)

    with pytest.raises(LocksConfigurationError, match=r"there is no file .* creates none"):
        await store.open()

    assert files_beside(path) == {}


async def test_a_store_that_creates_nothing_names_a_column_an_earlier_leaselock_did_not_make(
    path: Path,
) -> None:
    await a_file_with_a_lock_and_a_run(path)
    db = sqlite3.connect(path)
    db.execute('ALTER TABLE "leaselock_locks_runs" DROP COLUMN detected_by')
    db.close()

    with pytest.raises(LockStoreError, match=r'"leaselock_locks_runs"\."detected_by" does not'):
        await SQLiteLockStore(path, read_only=True).open()


async def test_a_store_that_creates_nothing_names_the_jobs_column_an_earlier_leaselock_lacks(
    path: Path,
) -> None:
    await an_earlier_leaselock_s_file(path, unique_key("job"))

    with pytest.raises(LockStoreError, match=r'"leaselock_locks_jobs"\."last_tick" does not'):
        await SQLiteLockStore(path, create_schema=False).open()


async def test_a_store_that_may_not_create_its_schema_takes_locks_in_a_file_that_has_it(
    path: Path,
) -> None:
    token = await a_file_with_a_lock_and_a_run(path)
    store = SQLiteLockStore(path, create_schema=False)
    try:
        taken = await store.acquire("orders:2", "holder", LONG_TTL_MS)
    finally:
        await store.aclose()
    assert isinstance(taken, Acquired)
    assert taken.fencing_token > token


async def test_a_read_only_store_reads_the_locks_and_runs_and_refuses_to_write(path: Path) -> None:
    token = await a_file_with_a_lock_and_a_run(path)
    store = SQLiteLockStore(path, read_only=True)
    try:
        [listed] = await store.list_locks("orders:")
        [record] = await store.job_records()
        with pytest.raises(LockStoreError, match=r"acquire writes, .*read_only=True"):
            await store.acquire("orders:2", "holder", LONG_TTL_MS)
        with pytest.raises(LockStoreError, match=r"break_lock writes, .*read_only=True"):
            await store.break_lock("orders:1")
        still = await store.read_lock("orders:1")
    finally:
        await store.aclose()
    assert (listed.key, listed.owner, listed.fencing_token) == ("orders:1", "holder", token)
    assert record.last_run is not None
    assert record.last_run.instance == "shop-3002"
    assert still is not None
    assert still == LockInfo("orders:1", "holder", token, still.expires_in_ms)


async def test_a_read_only_store_reads_while_another_connection_holds_the_write_lock(
    path: Path,
) -> None:
    await a_file_with_a_lock_and_a_run(path)
    store = SQLiteLockStore(path, read_only=True, busy_timeout="50ms")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        # a BEGIN IMMEDIATE here would wait for the writer, and fail after 50 ms
        listed = await store.list_locks()
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        await store.aclose()
    assert [info.key for info in listed] == ["orders:1"]


@pytest.mark.parametrize("flag", ["create_schema", "read_only"])
def test_a_flag_that_is_not_a_bool_is_refused(path: Path, flag: str) -> None:
    with pytest.raises(LocksConfigurationError, match=f"{flag}='no'; pass True or False"):
        SQLiteLockStore(path, **{flag: "no"})  # type: ignore[arg-type]


# --- configuration and lifecycle -----------------------------------------------------------


@pytest.mark.parametrize("private", [":memory:", ""])
def test_a_private_database_is_refused_pointing_to_the_in_memory_store(private: str) -> None:
    with pytest.raises(LocksConfigurationError, match="InMemoryLockStore"):
        SQLiteLockStore(private)


async def test_a_missing_directory_is_a_configuration_error_naming_the_fix(
    tmp_path: Path,
) -> None:
    store = SQLiteLockStore(tmp_path / "missing" / "locks.db")
    with pytest.raises(LocksConfigurationError, match="does not exist; create it first"):
        async with Locks(store=store):
            pass
    assert store._worker is None


@pytest.mark.parametrize("table", ["locks; drop table x", "1locks", "sqlite_locks", "a" * 64])
def test_a_table_name_that_is_not_a_plain_identifier_is_refused(path: Path, table: str) -> None:
    with pytest.raises(LocksConfigurationError, match="table="):
        SQLiteLockStore(path, table=table)


def test_an_sqlite_older_than_3_24_is_refused_naming_the_fix(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 22, 0))
    with pytest.raises(LocksConfigurationError, match=r"SQLite 3\.24 or newer"):
        SQLiteLockStore(path)


def test_repr_shows_the_absolute_path_and_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = SQLiteLockStore("locks.db", table="job_locks")
    assert repr(store) == f"SQLiteLockStore({str(tmp_path / 'locks.db')!r}, table='job_locks')"


async def test_the_last_aclose_closes_the_connection_and_ends_the_thread(path: Path) -> None:
    store = SQLiteLockStore(path)
    await store.open()
    await store.open()
    thread = worker_thread(store)
    await store.aclose()
    assert isinstance(await store.acquire(unique_key("still-open"), "a", LONG_TTL_MS), Acquired)
    assert thread.is_alive()
    await store.aclose()
    assert not thread.is_alive()
    assert store._worker is None


async def test_concurrent_first_calls_open_one_connection_on_one_thread(path: Path) -> None:
    store = SQLiteLockStore(path)
    key = unique_key("lazy")
    results = await asyncio.gather(
        *(store.acquire(key, f"owner-{n}", LONG_TTL_MS) for n in range(32))
    )
    assert sum(isinstance(result, Acquired) for result in results) == 1
    thread = worker_thread(store)
    await store.aclose()
    assert not thread.is_alive()


# --- release wake-ups between the processes of the host ----------------------------------------


def take_and_release(path: str, key: str) -> None:
    """In a process of its own: take ``key`` and release it."""

    async def cycle() -> None:
        store = SQLiteLockStore(path)
        await store.open()
        try:
            assert isinstance(await store.acquire(key, "elsewhere", LONG_TTL_MS), Acquired)
            assert await store.release(key, "elsewhere")
        finally:
            await store.aclose()

    asyncio.run(cycle())


async def test_a_release_in_another_process_is_heard_by_the_followers_of_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "locks.db")
    followed, other = unique_key("followed"), unique_key("other")
    store = SQLiteLockStore(path)
    heard: asyncio.Queue[str] = asyncio.Queue()
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2]))
    context = multiprocessing.get_context("spawn")
    await store.open()
    try:
        async with (
            store.follow_releases(heard.put_nowait) as follower,
            follower.following(followed),
        ):
            for key in (other, followed):
                child = context.Process(target=take_and_release, args=(path, key))
                child.start()
                await asyncio.to_thread(child.join, BARRIER_TIMEOUT_S)
                assert child.exitcode == 0
            # the other key's release, sent first, would have come first
            assert await asyncio.wait_for(heard.get(), 5) == followed
            assert heard.empty()
    finally:
        await store.aclose()


async def test_the_socket_of_a_follower_that_died_is_removed_by_the_next_release(
    tmp_path: Path,
) -> None:
    import socket  # noqa: PLC0415 -- Unix sockets only in this test

    from leaselock.stores.sqlite._wakeups import _key_digest, wakeup_directory  # noqa: PLC0415

    store = SQLiteLockStore(tmp_path / "locks.db")
    key = unique_key("orphaned")
    directory = wakeup_directory(Path(store._path), "leaselock_locks") / _key_digest(key)
    directory.mkdir(parents=True)
    dead = directory / "12345-deadbeef"
    orphan = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    orphan.bind(str(dead))
    orphan.close()  # its process is gone: the file stays, nobody reads it
    await store.open()
    try:
        assert isinstance(await store.acquire(key, "owner", LONG_TTL_MS), Acquired)
        assert await store.release(key, "owner")
        assert not dead.exists()
    finally:
        await store.aclose()
        directory.rmdir()


def hold_until_told(path: str, key: str, holding: EventType, go: EventType) -> None:
    """In a process of its own: take ``key``, say so, and release it when told."""

    async def cycle() -> None:
        store = SQLiteLockStore(path)
        await store.open()
        try:
            assert isinstance(await store.acquire(key, "elsewhere", LONG_TTL_MS), Acquired)
            holding.set()
            await asyncio.to_thread(go.wait, BARRIER_TIMEOUT_S)
            assert await store.release(key, "elsewhere")
        finally:
            await store.aclose()

    asyncio.run(cycle())


async def test_a_release_in_another_process_hands_the_key_to_the_waiter_in_line_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "locks.db")
    key = unique_key("handed")
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2]))
    context = multiprocessing.get_context("spawn")
    holding, go = context.Event(), context.Event()
    child = context.Process(target=hold_until_told, args=(path, key, holding, go))
    child.start()
    assert await asyncio.to_thread(holding.wait, BARRIER_TIMEOUT_S)
    # a clock that stands still: the waiter never asks again, so only the grant can reach it
    async with Locks(store=SQLiteLockStore(path), clock=ManualClock()) as locks:
        waiting = asyncio.create_task(locks.acquire(key, wait="1m"))
        await wait_all_tasks_blocked()
        go.set()
        lock = await asyncio.wait_for(waiting, 10)
        assert lock is not None
        assert read_row(Path(path), key)[0] == lock.owner
        await lock.release()
    await asyncio.to_thread(child.join, BARRIER_TIMEOUT_S)
    assert child.exitcode == 0


async def test_a_grant_to_a_process_that_died_holds_the_key_only_for_its_place(
    path: Path,
) -> None:
    clock = ManualClock()
    store = SQLiteLockStore(path, clock=clock)
    key = unique_key("died-in-line")
    await store.open()
    try:
        async with store.wait_in_line(lambda _grant: None) as line:
            assert isinstance(await store.acquire(key, "holder", LONG_TTL_MS), Acquired)
            assert isinstance(await line.queue(key, "waiter", LONG_TTL_MS, 3000, 1), Queued)
            socket_path = Path(line._path or "")
            # the process dies: its socket file stays, nobody reads it
            line._receiver.close()  # type: ignore[union-attr]
            line._receiver = None
            assert await store.release(key, "holder")
            assert not await asyncio.to_thread(socket_path.exists), "its socket was not removed"
            assert isinstance(await store.acquire(key, "outsider", LONG_TTL_MS), NotAcquired)
            await clock.advance("3s")
            assert isinstance(await store.acquire(key, "outsider", LONG_TTL_MS), Acquired)
    finally:
        await store.aclose()
