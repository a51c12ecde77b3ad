"""SQLiteWorker: one SQLite connection, used in turn by its own thread and by callers in place.

SQLite allows one writer per file at a time, so one connection per store is all a store needs.
A job either runs on the caller's own thread at once (:meth:`SQLiteWorker.run_here`), when the
connection is free and no job waits for the thread, or is queued to the worker's thread
(:meth:`SQLiteWorker.submit`), which runs jobs one at a time in submission order. A hop to the
thread and back costs two thread wake-ups (25 to 35 us each on a small VM) and slows the SQL
between them: several times the SQL itself on a file whose commits don't wait for a disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Final, TypeAlias, TypeVar, final

__all__ = ["NOT_RUN", "NotRun", "SQLiteWorker"]

T = TypeVar("T")


@final
class NotRun:
    """What :meth:`SQLiteWorker.run_here` returns for a job it did not run."""

    __slots__ = ()

    def __repr__(self) -> str:
        """Name the one instance."""
        return "NOT_RUN"


NOT_RUN: Final = NotRun()

# a job, the future its caller awaits, and the caller's loop; no job: close and stop
_Job: TypeAlias = tuple[
    Callable[[sqlite3.Connection], object] | None, asyncio.Future[Any], asyncio.AbstractEventLoop
]


@final
class SQLiteWorker:
    """One connection, and the thread that owns it; a job uses it alone, whichever thread runs it.

    Jobs queued to the thread run one at a time, in submission order; a job run in place
    (:meth:`run_here`) never overtakes one queued before it. Each queued job's result goes back
    to its caller's own event loop, so callers on several loops (a ``Locks`` and a ``SyncLocks``
    sharing the store) are served alike.
    """

    __slots__ = (
        "_connect",
        "_connection",
        "_count",
        "_jobs",
        "_queued",
        "_thread",
        "_using",
        "pid",
    )

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        """Start the thread; ``connect`` makes its connection on first use, on that thread.

        The connection must allow use from other threads (``check_same_thread=False``): the
        worker lets one thread at a time use it.
        """
        self._connect = connect
        self._connection: sqlite3.Connection | None = None
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        # held by whichever thread uses the connection: its own, or a caller's in run_here
        self._using = threading.Lock()
        # jobs submitted and not yet done, so that run_here never overtakes one (under _count:
        # _using is held for as long as a job runs, and a submit must never wait for that)
        self._queued = 0
        self._count = threading.Lock()
        # a daemon: a store nobody closed must not hold the interpreter at exit, and SQLite
        # rolls back a transaction cut short there when the file is next opened
        self._thread = threading.Thread(target=self._serve, name="leaselock-sqlite", daemon=True)
        self._thread.start()
        self.pid = os.getpid()

    @property
    def thread(self) -> threading.Thread:
        """The worker's thread."""
        return self._thread

    def run_here(self, job: Callable[[sqlite3.Connection], T]) -> T | NotRun:
        """Run ``job`` on the calling thread now, or return :data:`NOT_RUN` without running it.

        It runs only if the connection is open and free, and no job waits for the thread: a
        caller never waits here for another. What ``job`` raises is raised.
        """
        if not self._using.acquire(blocking=False):
            return NOT_RUN
        try:
            if self._queued or self._connection is None:
                return NOT_RUN
            return job(self._connection)
        finally:
            self._using.release()

    def submit(self, job: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Queue ``job`` to the thread; call it on the running loop that awaits the result."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        self._put((job, done, loop))
        return done

    def close(self) -> asyncio.Future[None]:
        """Close the connection after the jobs already queued; the thread then ends."""
        loop = asyncio.get_running_loop()
        closed: asyncio.Future[None] = loop.create_future()
        self._put((None, closed, loop))
        return closed

    def _put(self, job: _Job) -> None:
        with self._count:
            self._queued += 1
        self._jobs.put(job)

    def _serve(self) -> None:
        while True:
            job, done, loop = self._jobs.get()
            if job is None:
                break
            result: object = None
            error: BaseException | None = None
            with self._using:
                try:
                    result = self._run(job, done)
                except BaseException as raised:  # noqa: BLE001 -- raised to the caller, on its loop
                    error = raised
                finally:
                    self._done()
            # with the connection free and the job counted out: the caller's next call, woken
            # by this answer, may run in place
            _hand_back(loop, done, result, error)
        with self._using:
            connection, self._connection = self._connection, None
            self._done()
        if connection is not None:
            connection.close()
        # the thread's last act, so a join() after the caller heard it returns at once
        _hand_back(loop, done, None, None)

    def _run(
        self, job: Callable[[sqlite3.Connection], object], done: asyncio.Future[Any]
    ) -> object:
        if done.cancelled():
            # its caller left before its turn: nothing is run on its behalf
            return None
        if self._connection is None:
            self._connection = self._connect()
        return job(self._connection)

    def _done(self) -> None:
        with self._count:
            self._queued -= 1


def _hand_back(
    loop: asyncio.AbstractEventLoop,
    done: asyncio.Future[Any],
    result: object,
    error: BaseException | None,
) -> None:
    # a closed loop has nobody left waiting for the answer
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_settle, done, result, error)


def _settle(done: asyncio.Future[Any], result: object, error: BaseException | None) -> None:
    if done.cancelled():
        return
    if error is None:
        done.set_result(result)
    else:
        done.set_exception(error)
