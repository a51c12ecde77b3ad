"""ManualClock: time that moves only when a test says so."""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
from collections.abc import Awaitable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TypeVar, final

from .._clock import Clock, TimerCallback, TimerHandle
from .._durations import Duration, parse_duration
from .._errors import LocksConfigurationError
from ._settle import wait_all_tasks_blocked

__all__ = ["ManualClock", "wait_on_clock"]

T = TypeVar("T")


@dataclass(order=True, slots=True)
class _Timer:
    when_ms: int
    seq: int
    callback: TimerCallback = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


@final
class _Run:
    """One timer callback in flight: its task, and how many of its waits only time can end."""

    __slots__ = ("clock", "parked", "task")

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.parked = 0
        self.task: asyncio.Task[None] | None = None

    @property
    def settled(self) -> bool:
        """Whether the run has nothing to do until the clock moves: ended, or parked."""
        return self.task is None or self.task.done() or self.parked > 0


# the run of the timer callback this code belongs to; tasks a callback starts inherit it, so a
# slow store call in any of them may park on the clock or advance it, while unrelated tasks may not
_CURRENT_RUN: ContextVar[_Run | None] = ContextVar("leaselock.testing.current_run", default=None)


@final
class ManualClock:
    """A :class:`~leaselock.Clock` for tests: ``await clock.advance("5m")`` moves it.

    ``advance`` fires every timer that falls due on the way, in order of due time (ties in the
    order they were scheduled), with :meth:`now_ms` set to each one's due time, and lets each
    callback run until it ends or waits for time to pass, store calls included: when ``advance``
    returns, every renewal, retry and deadline that fell due has reached the store. Give the store
    and every ``Locks`` the same clock to share time; give one ``Locks`` a clock of its own and
    never advance it, and that instance behaves as a paused process (no renewals, no deadlines)
    while the others move on.

    A store call that answers late or never (:class:`~leaselock.testing.FaultyStore`'s delays and
    hangs) waits "on the clock": ``advance`` goes on past it to the timers that fall due later,
    so the bound leaselock puts on every store call fires as it would in production. A callback
    waiting on anything else that never completes holds ``advance``. A callback may also call
    ``advance`` itself (time passing during a slow call).

    .. versionadded:: 0.1
    """

    __slots__ = ("_advancing", "_now_ms", "_progress", "_runs", "_seq", "_timers")

    def __init__(self, start: Duration = 0) -> None:
        """Create a clock reading ``start`` (a :data:`~leaselock.Duration`, default 0)."""
        self._now_ms = parse_duration(start, name="start")
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        self._advancing = False
        self._runs: set[_Run] = set()
        # set whenever a run ends or parks: what advance waits for between timers
        self._progress: asyncio.Event | None = None

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

        Raises:
            LocksConfigurationError: ``duration`` is not a duration, or another task is
                advancing this clock.
        """
        step_ms = parse_duration(duration, name="duration")
        caller = _CURRENT_RUN.get()
        inside_a_callback = caller is not None and caller.clock is self
        if self._advancing and not inside_a_callback:
            raise LocksConfigurationError(
                "ManualClock.advance() is already running in another task; await one advance "
                "before starting the next"
            )
        outer = self._advancing
        self._advancing = True
        try:
            target_ms = self._now_ms + step_ms
            await wait_all_tasks_blocked()
            while (due_ms := self.next_due_ms) is not None and due_ms <= target_ms:
                timer = heapq.heappop(self._timers)
                self._now_ms = max(self._now_ms, due_ms)
                self._start(timer.callback)
                await self._until_settled(exclude=caller)
                await wait_all_tasks_blocked()
            self._now_ms = max(self._now_ms, target_ms)
            await wait_all_tasks_blocked()
        finally:
            self._advancing = outer

    def jump(self, duration: Duration) -> None:
        """Move the clock forward by ``duration`` without running the timers that fall due.

        This is what a process finds when it resumes from a pause (``SIGSTOP``, a long garbage
        collection, a VM migration): time has passed, and its overdue timers have not run yet.
        Code that runs before them (an answer that arrived meanwhile, a ``release()``) reads the
        new time. They run, in order, at the next :meth:`advance` (``advance(0)`` is enough).

        Raises:
            LocksConfigurationError: ``duration`` is not a duration.

        .. versionadded:: 0.2
        """
        self._now_ms += parse_duration(duration, name="duration")

    def _start(self, callback: TimerCallback) -> None:
        run = _Run(self)
        context = contextvars.copy_context()
        context.run(_CURRENT_RUN.set, run)
        run.task = asyncio.get_running_loop().create_task(_call(callback), context=context)
        run.task.add_done_callback(lambda _: self._changed())
        self._runs.add(run)

    async def _until_settled(self, *, exclude: _Run | None) -> None:
        """Wait until every run but ``exclude`` (the caller's own) has ended or parked."""
        progress = self._progress
        if progress is None:
            progress = self._progress = asyncio.Event()
        while True:
            progress.clear()
            self._runs = {run for run in self._runs if not (run.task and run.task.done())}
            if all(run.settled for run in self._runs if run is not exclude):
                return
            await progress.wait()

    def _changed(self) -> None:
        if self._progress is not None:
            self._progress.set()

    async def _parked(self, waiting: Awaitable[T]) -> T:
        run = _CURRENT_RUN.get()
        if run is None or run.clock is not self:
            return await waiting
        run.parked += 1
        self._changed()
        try:
            return await waiting
        finally:
            run.parked -= 1

    def __repr__(self) -> str:
        """Show the time and how many timers are pending."""
        pending = sum(not timer.cancelled for timer in self._timers)
        return f"ManualClock(now_ms={self._now_ms}, pending_timers={pending})"


async def _call(callback: TimerCallback) -> None:
    await callback()


async def wait_on_clock(clock: Clock, waiting: Awaitable[T]) -> T:
    """Await ``waiting``, something only time or the test will end (a delay, a hang).

    On a :class:`ManualClock`, a timer callback waiting here lets ``advance`` go on to the
    timers after it, as a slow call lets a real process's other timers fire.
    """
    if isinstance(clock, ManualClock):
        return await clock._parked(waiting)  # noqa: SLF001 -- the clock's own module
    return await waiting
