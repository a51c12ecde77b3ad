"""SQLiteWorker: one thread that owns one SQLite connection and runs jobs on it in order.

sqlite3 connections must not be shared between threads, and SQLite allows one writer per file at
a time anyway: a thread per store with a queue in front costs one hop each way and nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar, final

__all__ = ["SQLiteWorker"]

T = TypeVar("T")


# a job, the future its caller awaits, and the caller's loop; no job: close and stop
_Job: TypeAlias = tuple[
    Callable[[sqlite3.Connection], object] | None, asyncio.Future[Any], asyncio.AbstractEventLoop
]


@final
class SQLiteWorker:
    """One thread and the one connection it owns; jobs run one at a time, in submission order.

    Each result goes back to its caller's own event loop, so callers on several loops (a
    ``Locks`` and a ``SyncLocks`` sharing the store) are served alike.
    """

    __slots__ = ("_connect", "_connection", "_jobs", "_thread", "pid")

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        """Start the thread; ``connect`` makes its connection on first use, on that thread."""
        self._connect = connect
        self._connection: sqlite3.Connection | None = None
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        # a daemon: a store nobody closed must not hold the interpreter at exit, and SQLite
        # rolls back a transaction cut short there when the file is next opened
        self._thread = threading.Thread(target=self._serve, name="leaselock-sqlite", daemon=True)
        self._thread.start()
        self.pid = os.getpid()

    @property
    def thread(self) -> threading.Thread:
        """The worker's thread."""
        return self._thread

    def submit(self, job: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Queue ``job``; call it on the running loop that awaits the result."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        self._jobs.put((job, done, loop))
        return done

    def close(self) -> asyncio.Future[None]:
        """Close the connection after the jobs already queued; the thread then ends."""
        loop = asyncio.get_running_loop()
        closed: asyncio.Future[None] = loop.create_future()
        self._jobs.put((None, closed, loop))
        return closed

    def _serve(self) -> None:
        while True:
            job, done, loop = self._jobs.get()
            if job is None:
                break
            if done.cancelled():
                # its caller left before its turn: nothing is run on its behalf
                continue
            try:
                if self._connection is None:
                    self._connection = self._connect()
                result = job(self._connection)
            except BaseException as error:  # noqa: BLE001 -- raised to the caller, on its loop
                _hand_back(loop, done, None, error)
            else:
                _hand_back(loop, done, result, None)
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
        # the thread's last act, so a join() after the caller heard it returns at once
        _hand_back(loop, done, None, None)


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
