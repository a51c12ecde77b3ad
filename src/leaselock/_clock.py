"""Clocks: the only source of time in leaselock.

Every wait, deadline and renewal reads an injected :class:`Clock`. Timed work is a callback
scheduled with :meth:`Clock.call_at`, never a sleeping task, so that a test clock
(:class:`leaselock.testing.ManualClock`) can run each piece of work, store calls included, in
order and to its end.

Wall-clock time (events' ``at``, run records) is for people and decides nothing; it too is read
here only, through :func:`utc_now`, so that a simulation (``leaselock.testing.simulate``) can
give the code it runs a wall clock of its own and never touch the system's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Protocol, final, runtime_checkable

__all__ = [
    "Clock",
    "SystemClock",
    "TimerCallback",
    "TimerHandle",
    "WallTimeSource",
    "utc_now",
    "wall_time_from",
]

TimerCallback = Callable[[], Awaitable[None]]
WallTimeSource = Callable[[], datetime]
"""Reads the wall-clock time: an aware UTC datetime."""

_log = logging.getLogger("leaselock")

# where the code running now reads wall time; None: the system's. A context variable, so the
# tasks a simulation starts inherit its wall clock and nothing else in the process does
_WALL_TIME: ContextVar[WallTimeSource | None] = ContextVar("leaselock.wall_time", default=None)


def utc_now() -> datetime:
    """Return the wall-clock time, UTC: the system's, or the one :func:`wall_time_from` set.

    For people (events' ``at``, run records); no decision of leaselock's reads it.
    """
    read = _WALL_TIME.get()
    return datetime.now(UTC) if read is None else read()


@contextmanager
def wall_time_from(read: WallTimeSource) -> Iterator[None]:
    """Make :func:`utc_now` return ``read()`` inside, for this context and the tasks it starts."""
    token = _WALL_TIME.set(read)
    try:
        yield
    finally:
        _WALL_TIME.reset(token)


@runtime_checkable
class TimerHandle(Protocol):
    """A scheduled callback that has not necessarily run yet."""

    def cancel(self) -> None:
        """Stop the callback from running if it has not started; no effect afterwards."""


@runtime_checkable
class Clock(Protocol):
    """Monotonic time in milliseconds, and timers on it.

    Implementations: :class:`SystemClock` (the default) and
    :class:`leaselock.testing.ManualClock`.
    """

    def now_ms(self) -> int:
        """Return the current monotonic time in whole milliseconds."""
        ...

    def call_at(self, when_ms: int, callback: TimerCallback) -> TimerHandle:
        """Run ``await callback()`` once :meth:`now_ms` reaches ``when_ms``.

        Must be called from the event loop the callback will run on. The callback must not raise;
        a clock logs what escapes it.
        """
        ...


@final
class _SystemTimer:
    __slots__ = ("_handle",)

    def __init__(self, handle: asyncio.TimerHandle) -> None:
        self._handle = handle

    def cancel(self) -> None:
        self._handle.cancel()


@final
class SystemClock:
    """The process's monotonic clock; timers run on the running asyncio event loop."""

    __slots__ = ("_running",)

    def __init__(self) -> None:
        """Create a clock; it holds only the tasks of callbacks that are running."""
        self._running: set[asyncio.Task[None]] = set()

    def now_ms(self) -> int:
        """Return :func:`time.monotonic` in whole milliseconds."""
        return time.monotonic_ns() // 1_000_000

    def call_at(self, when_ms: int, callback: TimerCallback) -> TimerHandle:
        """Schedule ``callback`` on the running loop; it runs in a task of its own."""
        loop = asyncio.get_running_loop()
        delay_s = max(0, when_ms - self.now_ms()) / 1000
        return _SystemTimer(loop.call_later(delay_s, self._start, callback))

    def _start(self, callback: TimerCallback) -> None:
        task = asyncio.get_running_loop().create_task(_run_logged(callback))
        # the loop keeps only weak references to tasks: hold it until it ends
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    def __repr__(self) -> str:
        """Name the clock."""
        return "SystemClock()"


async def _run_logged(callback: TimerCallback) -> None:
    try:
        await callback()
    except Exception:  # noqa: BLE001 -- a timer must never take the loop down; logged in full
        _log.exception("A leaselock timer callback failed; this is a bug, please report it")
