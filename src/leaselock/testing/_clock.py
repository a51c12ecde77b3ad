"""ManualClock: time that moves only when a test says so."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import final

from .._clock import TimerCallback, TimerHandle
from .._durations import Duration, parse_duration
from .._errors import LocksConfigurationError

__all__ = ["ManualClock"]

# a resolved future wakes its waiter one loop pass later; a few passes let the woken code reach
# its next suspension point before advance() returns or fires the next timer
_SETTLE_PASSES = 5

# set while a timer callback runs; tasks the callback starts inherit it, so a slow store call in
# any of them may advance the clock itself, while unrelated tasks may not
_RUNNING_CALLBACK_OF: ContextVar[ManualClock | None] = ContextVar(
    "leaselock.testing.running_callback_of", default=None
)


@dataclass(order=True, slots=True)
class _Timer:
    when_ms: int
    seq: int
    callback: TimerCallback = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


@final
class ManualClock:
    """A :class:`~leaselock._clock.Clock` for tests: ``await clock.advance("5m")`` moves it.

    ``advance`` fires every timer that falls due on the way, in order of due time (ties in the
    order they were scheduled), with :meth:`now_ms` set to each one's due time, and awaits each
    callback to its end, store calls included: when ``advance`` returns, every renewal, retry and
    deadline that fell due has reached the store. Give the store and every ``Locks`` the same clock
    to share time; give one ``Locks`` a clock of its own and never advance it, and that instance
    behaves as a paused process (no renewals, no deadlines) while the others move on.

    A callback waiting on something that never completes (a store call that never returns) holds
    ``advance`` too; model an unreachable store with one that raises, as a driver's timeout does.
    To model a slow call, let the callback (a test store's method) ``await clock.advance(...)``
    itself: time passes during the call, and what falls due meanwhile runs.

    .. versionadded:: 0.1
    """

    __slots__ = ("_advancing", "_now_ms", "_seq", "_timers")

    def __init__(self, start: Duration = 0) -> None:
        """Create a clock reading ``start`` (a :data:`~leaselock.Duration`, default 0)."""
        self._now_ms = parse_duration(start, name="start")
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        self._advancing = False

    def now_ms(self) -> int:
        """Return the current time in milliseconds."""
        return self._now_ms

    def call_at(self, when_ms: int, callback: TimerCallback) -> TimerHandle:
        """Schedule ``callback`` for the first :meth:`advance` that reaches ``when_ms``."""
        timer = _Timer(when_ms, next(self._seq), callback)
        heapq.heappush(self._timers, timer)
        return timer

    @property
    def next_due_ms(self) -> int | None:
        """Return when the earliest pending timer falls due, or ``None`` without one."""
        while self._timers and self._timers[0].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0].when_ms if self._timers else None

    async def advance(self, duration: Duration) -> None:
        """Move the clock forward by ``duration``, running what falls due on the way.

        A timer callback may itself call ``advance`` (time passing during a slow call).

        Raises:
            LocksConfigurationError: ``duration`` is not a duration, or another task is
                advancing this clock.
            Exception: whatever a timer callback raised (leaselock's own never raise).
        """
        step_ms = parse_duration(duration, name="duration")
        if self._advancing and _RUNNING_CALLBACK_OF.get() is not self:
            raise LocksConfigurationError(
                "ManualClock.advance() is already running in another task; await one advance "
                "before starting the next"
            )
        outer = self._advancing
        self._advancing = True
        try:
            target_ms = self._now_ms + step_ms
            await _settle()
            while (due_ms := self.next_due_ms) is not None and due_ms <= target_ms:
                timer = heapq.heappop(self._timers)
                self._now_ms = max(self._now_ms, due_ms)
                running = _RUNNING_CALLBACK_OF.set(self)
                try:
                    await timer.callback()
                finally:
                    _RUNNING_CALLBACK_OF.reset(running)
                await _settle()
            self._now_ms = max(self._now_ms, target_ms)
            await _settle()
        finally:
            self._advancing = outer

    def __repr__(self) -> str:
        """Show the time and how many timers are pending."""
        pending = sum(not timer.cancelled for timer in self._timers)
        return f"ManualClock(now_ms={self._now_ms}, pending_timers={pending})"


async def _settle() -> None:
    for _ in range(_SETTLE_PASSES):
        await asyncio.sleep(0)
