"""Bounded store calls: a deadline on the injected clock for whatever the current task awaits.

The engine never trusts a driver's own timeouts (redis-py 5 waits as long as a partition lasts;
asyncpg's command timeout may exceed a lease). Every store call runs under a bound read from the
same clock as the holder's deadline, so a test clock moves both together.
"""

from __future__ import annotations

import asyncio
import enum
from types import TracebackType
from typing import final

from .._clock import Clock, TimerHandle

__all__ = ["StoreCallTimeoutError", "bounded"]


class StoreCallTimeoutError(TimeoutError):
    """The store did not answer before the call's bound (internal; reported as LockStoreError)."""


class _State(enum.Enum):
    WAITING = "waiting"
    EXPIRING = "expiring"
    DONE = "done"


@final
class bounded:  # noqa: N801 -- used as `async with bounded(...)`, like asyncio.timeout
    """Cancel the current task's work at ``deadline_ms`` on ``clock``; raise StoreCallTimeoutError.

    It follows :func:`asyncio.timeout`: a cancellation from anywhere else passes through
    untouched, and an expiry that races the answer wins only if the answer was not taken yet.
    """

    __slots__ = ("_cancelling", "_clock", "_deadline_ms", "_state", "_task", "_timer")

    def __init__(self, clock: Clock, deadline_ms: int) -> None:
        """Prepare a bound at ``deadline_ms`` on ``clock``."""
        self._clock = clock
        self._deadline_ms = deadline_ms
        self._state = _State.WAITING
        self._task: asyncio.Task[object] | None = None
        self._timer: TimerHandle | None = None
        self._cancelling = 0

    async def __aenter__(self) -> bounded:
        """Arm the bound for the current task."""
        task = asyncio.current_task()
        if task is None:
            msg = "bounded() needs a running task"
            raise RuntimeError(msg)
        self._task = task
        self._cancelling = task.cancelling()
        self._timer = self._clock.call_at(self._deadline_ms, self._expire)
        return self

    async def _expire(self) -> None:
        if self._state is _State.WAITING and self._task is not None:
            self._state = _State.EXPIRING
            self._task.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Disarm; turn the bound's own cancellation into :class:`StoreCallTimeoutError`.

        Once the bound has cancelled the work, the work's end is a timeout however it ended: a
        driver may swallow the cancellation and answer late (Python 3.11's ``asyncio.wait_for``
        returns an answer that lands with a cancellation, and redis-py sends every command
        through it when a socket timeout is set).
        """
        if self._timer is not None:
            self._timer.cancel()
        expired = self._state is _State.EXPIRING
        self._state = _State.DONE
        if not expired or self._task is None:
            return
        # take back our cancellation whether or not the work saw it (it may have just ended)
        if self._task.uncancel() <= self._cancelling:
            raise StoreCallTimeoutError from exc
