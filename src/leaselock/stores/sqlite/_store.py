"""SQLiteLockStore: locks in a SQLite file, shared by every process of ONE host.

Each store object has one connection and a worker thread. A call runs on the caller's own
thread when it cannot wait: the connection is free, the file's write lock is free (the
connection's busy timeout is 0, so a taken lock answers at once), and the store's recent
transactions there were quick. Otherwise it queues on the worker thread, which waits for the
write lock (short pauses, up to ``busy_timeout``). Each call runs as ONE short ``BEGIN
IMMEDIATE`` transaction: it takes the file's write lock before reading anything, so the check
that a key is free and the write that takes it can't be split by another process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final, Generic, Protocol, TypeAlias, TypeVar, final

from ..._clock import Clock
from ..._durations import Duration, parse_duration
from ..._errors import LocksConfigurationError, LockStoreError
from .._common._capabilities import JobRecord, LockInfo, RunRecord, job_records_from_rows, run_row
from .._common._job_control import JobPause, JobState, RunStart, RunStartAnswer
from .._common._pool_arguments import check_flags
from .._common._protocol import (
    Acquired,
    AcquireResult,
    Grant,
    NotAcquired,
    Queued,
    ReleaseFollower,
    Renewal,
    WaitingLine,
)
from ._jobs import COLUMNS_ADDED, CREATE_JOBS, SQLiteJobControl, add_missing_columns
from ._line import (
    CREATE_LINE,
    CREATE_LINE_ORDER,
    PendingGrant,
    SQLiteLines,
    SQLiteWaitingLine,
    grant_payload,
)
from ._opening import connect, missing_schema
from ._wakeups import ReleaseAnnouncer, following_releases, wakeup_directory
from ._worker import NotRun, SQLiteWorker

__all__ = ["SQLiteLockStore"]

T = TypeVar("T")

MIN_SQLITE_VERSION: Final = (3, 24, 0)
"""UPSERT (``INSERT ... ON CONFLICT DO UPDATE``) arrived in SQLite 3.24.0."""

DEFAULT_TABLE: Final = "leaselock_locks"
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")

# --- SQL -------------------------------------------------------------------------------------
# {locks}, {tokens} and {runs} are the validated, quoted table names, filled in once per store.

# -> ("wal",) once the file is in WAL mode: readers never block the one writer, nor it them
JOURNAL_MODE_WAL: Final = "PRAGMA journal_mode = WAL"

# a new file is switched once, by whichever process gets there first; the others wait and see
WAL_SWITCH_ATTEMPTS: Final = 5

# -> nothing; every commit reaches the disk before it returns, so a power cut can't take back a
# fencing token already handed out (NORMAL would lose the last commits)
SYNCHRONOUS_FULL: Final = "PRAGMA synchronous = FULL"
# -> nothing; the commits after it skip their fsync: the WAL is one log, so the next synced
# commit, of any process, syncs them too, and a power cut loses only the commits after the last
# synced one. Used for what dies with the host's processes anyway (a renewal, a release to
# nobody, a place kept: the class docstring lists them); set between transactions only, as
# SQLite refuses a change inside one
SYNCHRONOUS_NORMAL: Final = "PRAGMA synchronous = NORMAL"

# takes the write lock now, waiting up to the busy timeout; a deferred BEGIN would read first
# and could then fail to upgrade without waiting at all
BEGIN_IMMEDIATE: Final = "BEGIN IMMEDIATE"
# a read-only store's: it takes no lock until its first read, and a WAL reader never blocks the
# file's writer (BEGIN IMMEDIATE would hold the application's writes back at every read)
BEGIN_DEFERRED: Final = "BEGIN"
COMMIT: Final = "COMMIT"
ROLLBACK: Final = "ROLLBACK"

# -> nothing; set once the file is open: a call finds the write lock taken at once, and waits
# for it in the store's own short pauses (on the worker thread), not in SQLite's busy handler,
# whose pauses grow to 100 ms: 64 processes on one key left one waiting 430 ms for a lock that
# was free most of that time
NO_BUSY_WAIT: Final = "PRAGMA busy_timeout = 0"

BUSY_FIRST_PAUSE_S: Final = 0.0001
"""A call that found the write lock taken tries again after this (jittered), on the worker."""
BUSY_PAUSE_CAP_S: Final = 0.008
"""Its pauses double up to this: about what one commit holds the lock on a disk, so a waiter
tries again soon after any commit, and a retry costs a few microseconds of CPU."""

SLOW_IN_PLACE_S: Final = 0.002
"""A transaction slower than this (a slow disk's fsync, a checkpoint) sends the calls after it
to the worker thread: the caller's thread, usually an event loop's, waits that long at most
once, until :data:`QUICK_CALLS_TO_RETURN` calls in a row on the worker were quicker."""
QUICK_CALLS_TO_RETURN: Final = 32

IN_PLACE_RENEWALS: Final = 32
"""A ``renew_many`` of more leases than this runs on the worker: its CPU time grows with them."""

# -> nothing; owner is NULL once released: the row (and its token, the floor of the next) stays
CREATE_LOCKS: Final = """
CREATE TABLE IF NOT EXISTS {locks} (
    key           TEXT    NOT NULL PRIMARY KEY,
    owner         TEXT,
    fencing_token INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
) WITHOUT ROWID
"""

# -> nothing; one row, id 1: the last token handed out to any key
CREATE_TOKENS: Final = """
CREATE TABLE IF NOT EXISTS {tokens} (
    id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    last_token INTEGER NOT NULL
)
"""

# -> nothing; per job, a "last" row (its last run) and a "success" row (its last success)
CREATE_RUNS: Final = """
CREATE TABLE IF NOT EXISTS {runs} (
    job           TEXT    NOT NULL,
    kind          TEXT    NOT NULL CHECK (kind IN ('last', 'success')),
    instance      TEXT    NOT NULL,
    fencing_token INTEGER,
    started_at_ms INTEGER NOT NULL,
    ended_at_ms   INTEGER NOT NULL,
    outcome       TEXT    NOT NULL,
    error         TEXT,
    trigger       TEXT    NOT NULL DEFAULT 'schedule',
    detected_by   TEXT,
    PRIMARY KEY (job, kind)
) WITHOUT ROWID
"""

# -> nothing; a counter that already exists is kept
SEED_TOKENS: Final = "INSERT OR IGNORE INTO {tokens} (id, last_token) VALUES (1, 0)"

# :key :owner :now_ms :expires_at_ms -> changes() 1 if owner took key, 0 if a live lock holds it
ACQUIRE: Final = """
INSERT INTO {locks} AS held (key, owner, fencing_token, expires_at_ms)
VALUES (
    :key,
    :owner,
    coalesce((SELECT last_token FROM {tokens} WHERE id = 1), 0) + 1,
    :expires_at_ms
)
ON CONFLICT (key) DO UPDATE SET
    owner = excluded.owner,
    -- the row's own token is the floor: a counter that went back can't repeat a token
    fencing_token = max(excluded.fencing_token, held.fencing_token + 1),
    expires_at_ms = excluded.expires_at_ms
-- free check and write in ONE statement; an expired lock counts as free
WHERE held.owner IS NULL OR held.expires_at_ms <= :now_ms
"""

# :key -> (fencing_token,) of the row ACQUIRE just wrote
TAKEN_ROW: Final = "SELECT fencing_token FROM {locks} WHERE key = :key"

# :key -> (owner,) of the live lock that kept ACQUIRE out
HOLDER: Final = "SELECT owner FROM {locks} WHERE key = :key"

# :token -> nothing; the counter moves to the token just handed out (never below it)
ADVANCE_COUNTER: Final = """
INSERT INTO {tokens} (id, last_token) VALUES (1, :token)
ON CONFLICT (id) DO UPDATE SET last_token = excluded.last_token
"""

# :key :owner :now_ms :expires_at_ms -> changes() 1 if owner held a live lock on key, else 0
RENEW: Final = """
UPDATE {locks} SET expires_at_ms = :expires_at_ms
WHERE key = :key AND owner = :owner AND expires_at_ms > :now_ms
"""

# :key :owner :now_ms -> changes() 1 if owner held a live lock on key, else 0
RELEASE: Final = """
UPDATE {locks} SET owner = NULL
WHERE key = :key AND owner = :owner AND expires_at_ms > :now_ms
"""


# :job :kind :instance :fencing_token :started_at_ms :ended_at_ms :outcome :error :trigger
# :detected_by -> nothing
RECORD_RUN: Final = """
INSERT INTO {runs} (job, kind, instance, fencing_token, started_at_ms, ended_at_ms, outcome, error,
                    trigger, detected_by)
VALUES (:job, :kind, :instance, :fencing_token, :started_at_ms, :ended_at_ms, :outcome, :error,
        :trigger, :detected_by)
ON CONFLICT (job, kind) DO UPDATE SET
    instance = excluded.instance,
    fencing_token = excluded.fencing_token,
    started_at_ms = excluded.started_at_ms,
    ended_at_ms = excluded.ended_at_ms,
    outcome = excluded.outcome,
    error = excluded.error,
    trigger = excluded.trigger,
    detected_by = excluded.detected_by
-- a run that started before the one kept (same millisecond: a smaller token) does not hide it
WHERE excluded.started_at_ms > {runs}.started_at_ms
   OR (excluded.started_at_ms = {runs}.started_at_ms
       AND coalesce(excluded.fencing_token, -1) >= coalesce({runs}.fencing_token, -1))
"""

# -> (job, kind, instance, fencing_token, started_at_ms, ended_at_ms, outcome, error, trigger,
# detected_by) rows
ALL_RUNS: Final = """
SELECT job, kind, instance, fencing_token, started_at_ms, ended_at_ms, outcome, error, trigger,
       detected_by
FROM {runs} ORDER BY job
"""

# :job -> the same rows, of one job
JOB_RUNS: Final = """
SELECT job, kind, instance, fencing_token, started_at_ms, ended_at_ms, outcome, error, trigger,
       detected_by
FROM {runs} WHERE job = :job
"""

# :key -> (key, owner, fencing_token, expires_at_ms) or nothing
READ_LOCK: Final = "SELECT key, owner, fencing_token, expires_at_ms FROM {locks} WHERE key = :key"

# :prefix :limit -> (key, owner, fencing_token, expires_at_ms) rows, by key
LIST_LOCKS: Final = """
SELECT key, owner, fencing_token, expires_at_ms FROM {locks}
WHERE substr(key, 1, length(:prefix)) = :prefix ORDER BY key LIMIT :limit
"""

# :key :now_ms -> changes() 1 if a live lock held key (now freed, row and token kept), else 0
BREAK_LOCK: Final = """
UPDATE {locks} SET owner = NULL
WHERE key = :key AND owner IS NOT NULL AND expires_at_ms > :now_ms
"""


class _ReadsTime(Protocol):
    def now_ms(self) -> int: ...


@final
class _WallClock:
    """The host's wall clock: the one clock every process of the host shares, across reboots."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


@final
class _Busy:
    """A transaction that found the file's write lock taken (``error``): nothing was written."""

    __slots__ = ("error",)

    def __init__(self, error: sqlite3.Error) -> None:
        self.error = error


_Read: TypeAlias = Callable[[sqlite3.Connection], bool]


@final
@dataclass(frozen=True, slots=True)
class _Sync(Generic[T]):
    """When a call's commit may skip its fsync (see :meth:`SQLiteLockStore._call`)."""

    unsynced_if: Callable[[T], bool]
    synced_if_read: _Read | None

    def begun_unsynced_if(self, db: sqlite3.Connection) -> Callable[[T], bool] | None:
        """The test of a transaction's answer, or ``None``: it begins synced (a likely sync)."""
        if self.synced_if_read is not None and self.synced_if_read(db):
            return None
        return self.unsynced_if


@final
class _SyncNeeded:
    """A transaction begun unsynced, rolled back: its answer says its commit must be synced."""

    __slots__ = ()


_SYNC_NEEDED: Final = _SyncNeeded()


# workers a forked child inherited: SQLite forbids using (even closing) a connection across a
# fork, so the child keeps them unreachable but alive rather than let them be collected
_INHERITED_WORKERS: list[SQLiteWorker] = []


@final
class SQLiteLockStore:
    """Locks in a SQLite file: they exclude every process of ONE host that opens the file.

    The embedded default for gunicorn or uvicorn workers and cron jobs on one machine; use
    :class:`~leaselock.stores.PostgresLockStore` or :class:`~leaselock.stores.RedisLockStore`
    across hosts. The file must be on a local disk (WAL mode needs shared memory: not NFS).

    The contract, and how it is kept here:

    - Each method is ONE ``BEGIN IMMEDIATE`` transaction on the store's one connection; it
      takes the file's write lock first, waiting up to ``busy_timeout``, and a call that
      waited longer raises :class:`~leaselock.LockStoreError`. A call runs on the caller's
      thread when it need not wait (the lock free, recent commits quick), else on the store's
      worker thread: the caller's event loop waits for one short transaction at most, never
      for the lock.
    - Expiry is measured on the host's wall clock, read inside the transaction: every process of
      the host shares it, and it survives a reboot, as the file does.
    - Tokens come from one counter, and the key's own row is their floor: a released lock keeps
      its row (owner cleared), and the next token is ``max(counter + 1, row token + 1)``, so a
      file restored from an older copy can't hand a key an old token.
    - Every commit that hands out a token or records a job's run is synced to disk
      (``synchronous = FULL``): a power cut can't take a token back, nor a run. A renewal and
      a release that hands the key to nobody (and a queue call that only keeps a place, or a
      leave that hands nothing on) skip the fsync: a power cut that loses one also ends every
      process of the host, so no holder is left to rely on it; the key comes back held by its
      dead owner, and frees at its ttl.

    A release wakes the waiters on its key in every process of the host at once, by a Unix
    datagram to each socket that follows the key (:meth:`follow_releases`); nothing is written
    to the file for it. Where that cannot reach a waiter (another user's process, no Unix
    sockets), it finds the key free when it next retries (50 ms doubling to 1 s).

    .. versionadded:: 0.1
    """

    __slots__ = (
        "_acquire_sql",
        "_advance_counter_sql",
        "_announcer",
        "_busy_timeout_ms",
        "_clock",
        "_creates_none",
        "_guard",
        "_holder_sql",
        "_in_place_refused",
        "_jobs",
        "_lines",
        "_operator_sql",
        "_path",
        "_read_only",
        "_release_sql",
        "_renew_sql",
        "_schema_sql",
        "_table",
        "_table_names",
        "_tables_grown",
        "_taken_row_sql",
        "_unsynced",
        "_users",
        "_wakeups",
        "_worker",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        table: str = DEFAULT_TABLE,
        busy_timeout: Duration = "5s",
        clock: Clock | None = None,
        create_schema: bool = True,
        read_only: bool = False,
    ) -> None:
        """Configure the store; the file is opened (and created) by :meth:`open` or first use.

        Args:
            path: the SQLite file every process of the host opens; its directory must exist.
                Relative paths are resolved now, against the current directory.
            table: the locks table; the token counter lives in ``<table>_tokens``, the job run
                records in ``<table>_runs``. All are created if missing, so the file may be one
                your application already uses.
            busy_timeout: how long a call waits for another connection's write transaction on
                the file before it fails. Keep it well under a third of your ttl.
            clock: where expiry is read; pass the :class:`~leaselock.testing.ManualClock` of a
                test to move time by hand. Defaults to the host's wall clock.
            create_schema: at open, create the file and the tables if missing. With ``False``
                the store creates nothing: a missing file is a
                :class:`~leaselock.LocksConfigurationError` at open, a missing table a
                :class:`~leaselock.LockStoreError` naming it, and the file is left as it was
                (its journal mode too).
            read_only: open the file read-only (SQLite's ``mode=ro``), for a tool that only
                reads the locks and the run records: implies ``create_schema=False``, reads
                take no write lock, and a call that writes (``acquire``, ``release``...)
                raises :class:`~leaselock.LockStoreError`. As for any read-only SQLite
                reader, a file in WAL mode needs its ``-shm`` and ``-wal`` beside it, or a
                directory this process may write (SQLite makes them there).

        Raises:
            LocksConfigurationError: ``path`` is ``":memory:"`` or empty, ``table`` is not a
                plain identifier, ``busy_timeout`` is not a duration, ``clock`` has no
                ``now_ms()``, ``create_schema`` or ``read_only`` is not a bool, or this
                Python's SQLite is older than 3.24.

        .. versionchanged:: 0.2
            ``create_schema`` and ``read_only``.
        """
        if sqlite3.sqlite_version_info < MIN_SQLITE_VERSION:
            raise LocksConfigurationError(
                f"SQLiteLockStore needs SQLite 3.24 or newer, and this Python uses "
                f"{sqlite3.sqlite_version}; upgrade the system's libsqlite3, or use a Python "
                "build that bundles a newer one (python.org, uv or conda builds do)"
            )
        self._path = _checked_path(path)
        if not isinstance(table, str) or not _TABLE_NAME.fullmatch(table):
            raise LocksConfigurationError(
                f"table={table!r}; pass a plain SQL identifier of at most 63 characters "
                f'(letters, digits, underscores), such as "{DEFAULT_TABLE}"'
            )
        if table.lower().startswith("sqlite_"):
            raise LocksConfigurationError(
                f'table={table!r}; names starting with "sqlite_" are reserved by SQLite, '
                f'pass another name such as "{DEFAULT_TABLE}"'
            )
        check_flags(create_schema=create_schema, read_only=read_only)
        if clock is not None and not callable(getattr(clock, "now_ms", None)):
            raise LocksConfigurationError(
                f"clock={clock!r} has no now_ms(); pass None (the host's wall clock) or "
                "leaselock.testing.ManualClock() in tests"
            )
        self._table = table
        self._read_only = read_only
        # None: the store creates what is missing; else why it creates nothing, for messages
        self._creates_none = (
            "read_only=True" if read_only else None if create_schema else "create_schema=False"
        )
        self._wakeups = wakeup_directory(self._path, table)
        self._announcer = ReleaseAnnouncer(self._wakeups)
        self._busy_timeout_ms = parse_duration(busy_timeout, name="busy_timeout")
        self._clock: _ReadsTime = clock if clock is not None else _WallClock()
        names = {
            "locks": f'"{table}"',
            "tokens": f'"{table}_tokens"',
            "runs": f'"{table}_runs"',
            "jobs": f'"{table}_jobs"',
            "line": f'"{table}_line"',
            "line_order": f'"{table}_line_order"',
        }
        self._schema_sql = tuple(
            sql.format_map(names)
            for sql in (
                CREATE_LOCKS,
                CREATE_TOKENS,
                SEED_TOKENS,
                CREATE_RUNS,
                CREATE_JOBS,
                CREATE_LINE,
                CREATE_LINE_ORDER,
            )
        )
        # the tables that gained columns since an earlier leaselock made them, quoted
        self._tables_grown = {kind: names[kind] for kind in COLUMNS_ADDED}
        # what a store that creates nothing needs in the file (the line's index only speeds it up)
        self._table_names = tuple(
            names[kind].strip('"') for kind in ("locks", "tokens", "runs", "jobs", "line")
        )
        self._jobs = SQLiteJobControl(names)
        self._operator_sql = _OperatorStatements(
            record_run=RECORD_RUN.format_map(names),
            all_runs=ALL_RUNS.format_map(names),
            job_runs=JOB_RUNS.format_map(names),
            read_lock=READ_LOCK.format_map(names),
            list_locks=LIST_LOCKS.format_map(names),
            break_lock=BREAK_LOCK.format_map(names),
        )
        self._acquire_sql = ACQUIRE.format_map(names)
        self._taken_row_sql = TAKEN_ROW.format_map(names)
        self._holder_sql = HOLDER.format_map(names)
        self._advance_counter_sql = ADVANCE_COUNTER.format_map(names)
        self._renew_sql = RENEW.format_map(names)
        self._release_sql = RELEASE.format_map(names)
        self._lines = SQLiteLines(names, self._take, self._release)
        # guards the worker and the user count; held only for quick, non-blocking work
        self._guard = threading.Lock()
        self._worker: SQLiteWorker | None = None
        self._users = 0
        # > 0: a transaction was slow (see SLOW_IN_PLACE_S), and calls go to the worker until
        # this many more run quick there; changed only by the thread using the connection
        self._in_place_refused = 0
        # the connection set to skip its commits' fsync (SYNCHRONOUS_NORMAL), if one is: by
        # identity, so that a forked child's new connection is never taken for it
        self._unsynced: sqlite3.Connection | None = None

    # --- lifecycle -----------------------------------------------------------------------

    async def open(self) -> None:
        """Open the file (creating it and the tables if missing, if allowed) for one more user.

        Raises:
            LocksConfigurationError: the directory does not exist, the file can't be used, or
                it is missing and the store may not create it.
            LockStoreError: another connection held the file's write lock past the busy
                timeout, or a table is missing and the store may not create it.
        """
        with self._guard:
            self._users += 1
            opened = self._worker_locked().submit(_connected)
        try:
            await opened
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Undo one :meth:`open`; the last one closes the connection and ends the thread.

        Calls still queued run first. A store used without :meth:`open` (opened on first use)
        is closed by any ``aclose()``.
        """
        with self._guard:
            self._users = max(0, self._users - 1)
            worker = self._worker
            if self._users > 0 or worker is None:
                return
            self._worker = None
            closed = worker.close()
            self._announcer.close()
        # shielded: a cancelled aclose must still close the connection on its own thread
        await asyncio.shield(closed)
        worker.thread.join()

    # --- the store contract --------------------------------------------------------------

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        """Take ``key`` if no live lock holds it; the token is greater than any it had."""
        taken = await self._call(
            "acquire", lambda db, now_ms: self._take(db, now_ms, key, owner, ttl_ms)
        )
        return taken if isinstance(taken, NotAcquired) else Acquired(taken)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Move the expiry to ``ttl_ms`` from now if ``owner`` holds a live lock on ``key``."""
        return await self._call(
            "renew",
            lambda db, now_ms: self._renew(db, now_ms, key, owner, ttl_ms),
            unsynced_if=_always,
        )

    async def renew_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        """Renew each lease as :meth:`renew` would, in order, in ONE transaction."""
        return await self._call(
            "renew_many",
            lambda db, now_ms: [self._renew(db, now_ms, *renewal) for renewal in renewals],
            in_place=len(renewals) <= IN_PLACE_RENEWALS,
            unsynced_if=_always,
        )

    async def release(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` holds a live lock on it; the row and its token stay.

        After the commit, the key's followers on this host are told (:meth:`follow_releases`).
        """
        released, pending = await self._call(
            "release",
            lambda db, now_ms: self._release_and_hand_on(db, now_ms, key, owner),
            unsynced_if=_hands_on_nothing,
            synced_if_read=lambda db: self._lines.waits(db, key),
        )
        self._tell(key, released=released, pending=pending)
        return released

    def _tell(self, key: str, *, released: bool, pending: PendingGrant | None) -> None:
        """After a commit that freed ``key``: send its grant, or else announce the release."""
        if pending is not None:
            self._send_grant(pending)
        elif released:
            self._announcer.announce(key)

    def _send_grant(self, pending: PendingGrant) -> None:
        if pending.line:
            self._announcer.send(grant_payload(pending.grant), Path(pending.line))

    @asynccontextmanager
    async def wait_in_line(self, on_grant: Callable[[Grant], None]) -> AsyncIterator[WaitingLine]:
        """Wait in keys' lines while entered; ``on_grant`` hears each grant on this loop.

        The lines are rows of ``<table>_line`` in the file; a release hands its key to the
        first live place in the same transaction, then sends the grant to the waiting
        process's socket (a Unix datagram, as release wake-ups are). A process that cannot be
        reached learns of its grant at its next queue call, every second.
        """
        lines = self._lines

        async def queue_call(
            key: str, owner: str, ttl_ms: int, queue_ms: int, ticket: int, *, line: str
        ) -> tuple[Acquired | Queued, PendingGrant | None]:
            return await self._call(
                "queue",
                lambda db, now_ms: lines.queue(
                    db,
                    now_ms,
                    key=key,
                    owner=owner,
                    ttl_ms=ttl_ms,
                    queue_ms=queue_ms,
                    ticket=ticket,
                    line=line,
                ),
                unsynced_if=_keeps_a_place_only,
            )

        async def leave_call(key: str, owner: str) -> tuple[bool, PendingGrant | None]:
            left, pending = await self._call(
                "leave",
                lambda db, now_ms: lines.leave(db, now_ms, key, owner),
                unsynced_if=_hands_on_nothing,
            )
            if left and pending is None:
                self._announcer.announce(key)
            return left, pending

        line = SQLiteWaitingLine(
            self._wakeups / "lines",
            queue_call=queue_call,
            leave_call=leave_call,
            send=self._send_grant,
            on_grant=on_grant,
            store=repr(self),
        )
        try:
            yield line
        finally:
            line.close()

    def follow_releases(
        self, on_release: Callable[[str], None]
    ) -> AbstractAsyncContextManager[ReleaseFollower]:
        """Call ``on_release(key)`` on this loop for releases of the keys followed, while entered.

        Each key followed is a Unix datagram socket in a directory under the system's temporary
        directory, named after this file and table; a release by any process of the host (of
        the same user) sends its key there. Nothing is opened until a key is followed.
        """
        return following_releases(self._wakeups, on_release)

    # --- run records and inspection ------------------------------------------------------

    async def record_run(self, run: RunRecord) -> None:
        """Keep ``run`` as its job's last run, and as its last success if it went well."""
        await self._call("record_run", lambda db, _now_ms: self._record(db, run))

    async def start_run(self, start: RunStart) -> RunStartAnswer:
        """Start a run unless paused or its tick ran, taking its lock if asked, in ONE transaction.

        The transaction's write lock orders racing starts of one tick: the first commits the
        tick as the job's last, and each one after it reads that and is refused.
        """
        return await self._call(
            "start_run", lambda db, now_ms: self._jobs.start(db, now_ms, start, self._take)
        )

    async def end_run(self, run: RunRecord) -> bool:
        """Record ``run``, close it if it is the open run, and count it, in ONE transaction."""

        def end(db: sqlite3.Connection, _now_ms: int) -> bool:
            self._record(db, run)
            return self._jobs.end(db, run)

        return await self._call("end_run", end)

    async def note_missed(self, job: str, missed_at: datetime) -> None:
        """Record that the tick of ``missed_at`` of ``job`` was never started."""
        await self._call(
            "note_missed", lambda db, _now_ms: self._jobs.note_missed(db, job, missed_at)
        )

    async def pause_jobs(self, pause: JobPause) -> None:
        """Keep ``pause``, replacing any pause of its target."""
        await self._call("pause_jobs", lambda db, _now_ms: self._jobs.pause(db, pause))

    async def resume_jobs(self, target: str) -> JobPause | None:
        """Remove the pause of ``target``; return it, or ``None``."""
        return await self._call("resume_jobs", lambda db, _now_ms: self._jobs.resume(db, target))

    async def job_pauses(self) -> list[JobPause]:
        """Return every pause kept, by target."""
        return await self._call(
            "job_pauses", lambda db, _now_ms: self._jobs.pauses(db), in_place=False
        )

    async def job_states(self, jobs: Sequence[str] | None = None) -> list[JobState]:
        """Return the states of ``jobs`` (every job when ``None``) that have one, by job."""
        return await self._call(
            "job_states", lambda db, _now_ms: self._jobs.states(db, jobs), in_place=False
        )

    async def job_records(self, jobs: Sequence[str] | None = None) -> list[JobRecord]:
        """Return the records of ``jobs`` (every job when ``None``) that have one, by job key."""
        sql = self._operator_sql
        if jobs is None:
            rows = await self._call(
                "job_records",
                lambda db, _now_ms: db.execute(sql.all_runs).fetchall(),
                in_place=False,
            )
        else:
            wanted = sorted(set(jobs))
            rows = await self._call(
                "job_records",
                lambda db, _now_ms: [
                    row for job in wanted for row in db.execute(sql.job_runs, {"job": job})
                ],
                in_place=False,
            )
        return job_records_from_rows(rows)

    async def read_lock(self, key: str) -> LockInfo | None:
        """Return ``key``'s lock (live, or released with its last token), or ``None``."""
        return await self._call(
            "read_lock",
            lambda db, now_ms: _lock_info(
                db.execute(self._operator_sql.read_lock, {"key": key}).fetchone(), now_ms
            ),
        )

    async def list_locks(self, prefix: str = "", limit: int = 1000) -> list[LockInfo]:
        """Return up to ``limit`` locks whose key starts with ``prefix``, by key."""
        rows = self._operator_sql.list_locks
        return await self._call(
            "list_locks",
            lambda db, now_ms: [
                _lock_of_row(row, now_ms)
                for row in db.execute(rows, {"prefix": prefix, "limit": limit})
            ],
            in_place=False,
        )

    async def break_lock(self, key: str) -> LockInfo | None:
        """Free ``key`` whoever holds it; return what held it, or ``None`` if nothing did."""
        broken, pending = await self._call(
            "break_lock", lambda db, now_ms: self._break(db, now_ms, key)
        )
        self._tell(key, released=broken is not None, pending=pending)
        return broken

    # --- on the worker thread ------------------------------------------------------------

    def _record(self, db: sqlite3.Connection, run: RunRecord) -> None:
        kinds = ("last", "success") if run.outcome == "ok" else ("last",)
        for kind in kinds:
            db.execute(self._operator_sql.record_run, {"kind": kind, **run_row(run)})

    def _break(
        self, db: sqlite3.Connection, now_ms: int, key: str
    ) -> tuple[LockInfo | None, PendingGrant | None]:
        held = _lock_info(db.execute(self._operator_sql.read_lock, {"key": key}).fetchone(), now_ms)
        if held is None or not held.live:
            return None, None
        db.execute(self._operator_sql.break_lock, {"key": key, "now_ms": now_ms})
        return held, self._lines.hand_on(db, now_ms, key)

    def _release_and_hand_on(
        self, db: sqlite3.Connection, now_ms: int, key: str, owner: str
    ) -> tuple[bool, PendingGrant | None]:
        if not self._release(db, now_ms, key, owner):
            return False, None
        return True, self._lines.hand_on(db, now_ms, key)

    def _take(
        self, db: sqlite3.Connection, now_ms: int, key: str, owner: str, ttl_ms: int
    ) -> int | NotAcquired:
        taken = db.execute(
            self._acquire_sql,
            {"key": key, "owner": owner, "now_ms": now_ms, "expires_at_ms": now_ms + ttl_ms},
        )
        if taken.rowcount != 1:
            # the same transaction: the holder read is the one that kept us out
            holder = db.execute(self._holder_sql, {"key": key}).fetchone()
            return NotAcquired(holder=None if holder is None else holder[0])
        token: int = db.execute(self._taken_row_sql, {"key": key}).fetchone()[0]
        db.execute(self._advance_counter_sql, {"token": token})
        return token

    def _renew(
        self, db: sqlite3.Connection, now_ms: int, key: str, owner: str, ttl_ms: int
    ) -> bool:
        renewed = db.execute(
            self._renew_sql,
            {"key": key, "owner": owner, "now_ms": now_ms, "expires_at_ms": now_ms + ttl_ms},
        )
        return renewed.rowcount == 1

    def _release(self, db: sqlite3.Connection, now_ms: int, key: str, owner: str) -> bool:
        released = db.execute(self._release_sql, {"key": key, "owner": owner, "now_ms": now_ms})
        return released.rowcount == 1

    async def _call(
        self,
        method: str,
        body: Callable[[sqlite3.Connection, int], T],
        *,
        in_place: bool = True,
        unsynced_if: Callable[[T], bool] | None = None,
        synced_if_read: _Read | None = None,
    ) -> T:
        """Run ``body`` in one transaction: here if it need not wait, else on the worker.

        ``in_place=False`` for a call whose work grows with its arguments or the file (it would
        hold the caller's thread for that long): it always runs on the worker.
        ``unsynced_if``: the commit skips its fsync if this says so of ``body``'s answer (see
        :data:`SYNCHRONOUS_NORMAL`); without it, every commit is synced. A transaction begun
        unsynced whose answer says otherwise is rolled back and run again, synced; where
        ``synced_if_read``, a read before the transaction (no write lock), says that is
        likely, it begins synced.
        """
        sync = None if unsynced_if is None else _Sync(unsynced_if, synced_if_read)
        if in_place and not self._in_place_refused:
            # one yield per call, as a call queued to the thread gave: a task calling in a loop
            # still lets the loop's other tasks run (and is cancelled here, before any write)
            await asyncio.sleep(0)  # noqa: TID251 -- a yield to the loop, not a wait
            with self._guard:
                worker = self._worker_locked()
            answer = worker.run_here(lambda db: self._transaction_once(db, method, body, sync))
            if not isinstance(answer, NotRun | _Busy):
                return answer
        with self._guard:
            # submitted under the guard: an aclose() can't shut the worker down in between
            done = self._worker_locked().submit(
                lambda db: self._in_transaction(db, method, body, sync)
            )
        return await done

    def _in_transaction(
        self,
        db: sqlite3.Connection,
        method: str,
        body: Callable[[sqlite3.Connection, int], T],
        sync: _Sync[T] | None = None,
        *,
        timed: bool = True,
    ) -> T:
        """Run ``body`` in one transaction, waiting up to ``busy_timeout`` for the write lock.

        On the worker thread (or opening the file): the pauses between tries block it.
        ``timed=False``: the transaction's time says nothing of the next calls' (the schema's).
        """
        deadline_ns = time.monotonic_ns() + self._busy_timeout_ms * 1_000_000
        pause_s = BUSY_FIRST_PAUSE_S
        while True:
            answer = self._transaction_once(db, method, body, sync, worker=True, timed=timed)
            if not isinstance(answer, _Busy):
                return answer
            if time.monotonic_ns() >= deadline_ns:
                raise self._failed(method, answer.error) from answer.error
            # jittered: callers that found the lock taken together don't try again together
            time.sleep(pause_s * (0.5 + _jitter.random() / 2))  # noqa: TID251 -- on the worker
            pause_s = min(pause_s * 2, BUSY_PAUSE_CAP_S)

    def _transaction_once(
        self,
        db: sqlite3.Connection,
        method: str,
        body: Callable[[sqlite3.Connection, int], T],
        sync: _Sync[T] | None = None,
        *,
        worker: bool = False,
        timed: bool = True,
    ) -> T | _Busy:
        """Run ``body`` in one transaction if the write lock is free now; else :class:`_Busy`.

        A transaction that met a taken lock is rolled back whole, so running it again is safe.
        ``worker``: it runs on the worker thread, whose quick calls let calls in place again.
        """
        if self._read_only:
            # it commits nothing
            sync = None
        answer = self._commit_once(db, method, body, sync, worker=worker, timed=timed)
        while isinstance(answer, _SyncNeeded):
            # once (a synced try is never rolled back for this); the write lock was let go, so
            # it is a try of its own, which may find the lock taken
            answer = self._commit_once(db, method, body, None, worker=worker, timed=timed)
        return answer

    def _commit_once(
        self,
        db: sqlite3.Connection,
        method: str,
        body: Callable[[sqlite3.Connection, int], T],
        sync: _Sync[T] | None,
        *,
        worker: bool,
        timed: bool,
    ) -> T | _Busy | _SyncNeeded:
        """Try :meth:`_transaction_once` once.

        Returns :class:`_SyncNeeded` if the transaction was rolled back because its commit,
        begun unsynced, must be synced after all.
        """
        started_ns = time.perf_counter_ns()
        try:
            unsynced_if = None if sync is None else sync.begun_unsynced_if(db)
            self._sync_commits(db, synced=unsynced_if is None)
            db.execute(BEGIN_DEFERRED if self._read_only else BEGIN_IMMEDIATE)
            try:
                # read after the write lock is ours: a wait for it can't make "now" stale
                result = body(db, self._clock.now_ms())
                if unsynced_if is not None and not unsynced_if(result):
                    db.execute(ROLLBACK)
                    return _SYNC_NEEDED
                db.execute(COMMIT)
            except BaseException:
                if db.in_transaction:
                    # the original error matters more than a failed rollback, which SQLite
                    # completes itself when the connection is next used or closed
                    with contextlib.suppress(sqlite3.Error):
                        db.execute(ROLLBACK)
                raise
        except sqlite3.Error as error:
            if _is_busy(error):
                # nothing was written: BUSY leaves a COMMIT's transaction open, rolled back above
                return _Busy(error)
            raise self._failed(method, error) from error
        if timed:
            self._note_time(time.perf_counter_ns() - started_ns, worker=worker)
        return result

    def _sync_commits(self, db: sqlite3.Connection, *, synced: bool) -> None:
        """Set whether ``db``'s next commits are synced; outside a transaction, as SQLite asks."""
        if synced:
            if self._unsynced is db:
                db.execute(SYNCHRONOUS_FULL)
                self._unsynced = None
        elif self._unsynced is not db:
            db.execute(SYNCHRONOUS_NORMAL)
            self._unsynced = db

    def _note_time(self, took_ns: int, *, worker: bool) -> None:
        """Count a committed transaction's time towards where the next calls run."""
        if took_ns > SLOW_IN_PLACE_S * 1e9:
            self._in_place_refused = QUICK_CALLS_TO_RETURN
        elif worker and self._in_place_refused:
            self._in_place_refused -= 1

    def _worker_locked(self) -> SQLiteWorker:
        worker = self._worker
        if worker is not None and worker.pid != os.getpid():
            # a forked child: the parent's thread did not come along, and its connection must
            # not be touched here
            _INHERITED_WORKERS.append(worker)
            worker = None
        if worker is None:
            worker = self._worker = SQLiteWorker(self._connect)
        return worker

    def _connect(self) -> sqlite3.Connection:
        directory = self._path.parent
        if not directory.is_dir():
            raise LocksConfigurationError(
                f"{self!r}: the directory {str(directory)!r} does not exist; create it first "
                "(os.makedirs(directory, exist_ok=True), or mkdir -p in your deployment), "
                "or pass a path in an existing directory"
            )
        if self._creates_none is not None and not self._path.is_file():
            # said before SQLite's "unable to open database file"; its mode= makes no file anyway
            raise LocksConfigurationError(
                f"{self!r}: there is no file {str(self._path)!r}, and this store creates none "
                f"({self._creates_none}): pass the path of the file your application's "
                "SQLiteLockStore opens, or start the application once (its store creates the "
                "file and the tables)"
            )
        try:
            db = connect(
                self._path,
                may_create=self._creates_none is None,
                read_only=self._read_only,
                timeout_s=self._busy_timeout_ms / 1000,
            )
        except sqlite3.Error as error:
            raise self._unusable(error) from error
        try:
            self._prepare(db)
            # only now: opening a new file waits in SQLite's busy handler for the process
            # switching it to WAL or creating the tables
            db.execute(NO_BUSY_WAIT)
        except sqlite3.Error as error:
            db.close()
            raise self._failed("open", error) from error
        except BaseException:
            db.close()
            raise
        return db

    def _prepare(self, db: sqlite3.Connection) -> None:
        if self._creates_none is not None:
            # first, and only reading: a file that is not leaselock's is left exactly as it was
            self._in_transaction(db, "open", self._check_schema, timed=False)
            if self._read_only:
                # a reader changes nothing: not the journal mode, and it commits nothing
                return
        mode = _switch_to_wal(db)
        if mode != "wal":
            raise LocksConfigurationError(
                f"{self!r}: SQLite kept the file in journal mode {mode!r} instead of WAL; "
                "put it on a local disk (not a network share or a read-only volume)"
            )
        db.execute(SYNCHRONOUS_FULL)
        if self._creates_none is None:
            # in a transaction: processes that open a new file at once create the tables once,
            # and processes that open an earlier leaselock's file at once add a column once
            self._in_transaction(db, "open", self._create_schema, timed=False)

    def _create_schema(self, db: sqlite3.Connection, _now_ms: int) -> None:
        for sql in self._schema_sql:
            db.execute(sql)
        add_missing_columns(db, self._tables_grown)

    def _check_schema(self, db: sqlite3.Connection, _now_ms: int) -> None:
        missing = missing_schema(
            db,
            self._table_names,
            {kind: table.strip('"') for kind, table in self._tables_grown.items()},
        )
        if missing:
            # fail at start, in one line, rather than at a call that needs the table
            raise LockStoreError(
                f"{self!r} cannot start: {', '.join(missing)} "
                f"{'does' if len(missing) == 1 else 'do'} not exist in the file, and this store "
                f"creates none ({self._creates_none}): start the application once (its "
                "SQLiteLockStore creates them at open, with create_schema=True, the default), "
                "or check that the path names the file the application uses"
            )

    # --- errors --------------------------------------------------------------------------

    def _failed(
        self, method: str, error: sqlite3.Error
    ) -> LockStoreError | LocksConfigurationError:
        if _is_busy(error):
            return LockStoreError(
                f"{self!r}.{method} waited busy_timeout={self._busy_timeout_ms} ms for the "
                f"file's write lock ({error}): another connection held a write transaction that "
                "long. Keep other transactions on this file short (or give the locks a file of "
                "their own), or raise busy_timeout"
            )
        if method == "open":
            return self._unusable(error)
        if self._read_only and _is_read_only(error):
            return LockStoreError(
                f"{self!r}.{method} writes, and this store opened the file read-only "
                "(read_only=True); use a store without read_only for it"
            )
        return LockStoreError(
            f"{self!r}.{method} failed: {type(error).__name__}: {error}. Check that the file "
            "is on a local disk with space left, and that this process may write it"
        )

    def _unusable(self, error: sqlite3.Error) -> LocksConfigurationError:
        return LocksConfigurationError(
            f"{self!r} cannot use the file: {type(error).__name__}: {error}. Check that this "
            "process may read and write the file and its directory, and that the path is a "
            "SQLite file (or a new one)"
        )

    def __repr__(self) -> str:
        """Show the file and the table, as the start-up log shows them."""
        return f"SQLiteLockStore({str(self._path)!r}, table={self._table!r})"


@final
@dataclass(frozen=True, slots=True)
class _OperatorStatements:
    record_run: str
    all_runs: str
    job_runs: str
    read_lock: str
    list_locks: str
    break_lock: str


_LockRow: TypeAlias = tuple[str, str | None, int, int]


def _always(_answer: object) -> bool:
    return True


def _hands_on_nothing(answer: tuple[bool, PendingGrant | None]) -> bool:
    # a grant hands out a token, which must survive a power cut
    return answer[1] is None


def _keeps_a_place_only(answer: tuple[Acquired | Queued, PendingGrant | None]) -> bool:
    # a place dies with its waiter; taking the key, or handing it on, draws a token
    return isinstance(answer[0], Queued) and answer[1] is None


def _lock_info(row: _LockRow | None, now_ms: int) -> LockInfo | None:
    return None if row is None else _lock_of_row(row, now_ms)


def _lock_of_row(row: _LockRow, now_ms: int) -> LockInfo:
    key, owner, token, expires_at_ms = row
    if owner is None or expires_at_ms <= now_ms:
        return LockInfo(key, None, token, None)
    return LockInfo(key, owner, token, expires_at_ms - now_ms)


def _checked_path(path: object) -> Path:
    if not isinstance(path, str | os.PathLike):
        raise LocksConfigurationError(
            f"path={path!r} ({type(path).__name__}); pass the path of the SQLite file as a str "
            'or a pathlib.Path, such as "/var/lib/myapp/locks.db"'
        )
    text = os.fspath(path)
    if not isinstance(text, str):
        raise LocksConfigurationError(f"path={path!r} is bytes; pass it as a str or a pathlib.Path")
    if text in {"", ":memory:"}:
        raise LocksConfigurationError(
            f"path={text!r} is a private database that each connection would get for itself, "
            "so it would exclude nobody; pass a file path shared by every process, or use "
            "leaselock.stores.InMemoryLockStore for one process"
        )
    # resolved once: every process that names the file its own way still meets in it
    return Path(text).resolve()


def _switch_to_wal(db: sqlite3.Connection) -> str:
    """Put the file in WAL mode; return the journal mode SQLite settled on."""
    for _ in range(WAL_SWITCH_ATTEMPTS - 1):
        try:
            (mode,) = db.execute(JOURNAL_MODE_WAL).fetchone()
        except sqlite3.OperationalError as error:
            if not _is_busy(error):
                raise
            # another process is switching a new file to WAL: the pragma fails at once instead
            # of waiting for it, BEGIN IMMEDIATE waits (up to the busy timeout); then try again
            db.execute(BEGIN_IMMEDIATE)
            db.execute(ROLLBACK)
        else:
            return str(mode)
    (mode,) = db.execute(JOURNAL_MODE_WAL).fetchone()
    return str(mode)


_jitter = random.Random()  # noqa: S311 -- jitter spreads retries; it guards no secret


def _connected(_db: sqlite3.Connection) -> None:
    """A job that only makes the worker connect."""


def _is_read_only(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and (code & 0xFF) == sqlite3.SQLITE_READONLY


def _is_busy(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    # extended codes (SQLITE_BUSY_SNAPSHOT, ...) keep the primary code in their low byte
    return code is not None and (code & 0xFF) in {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
