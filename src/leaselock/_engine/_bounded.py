"""Bounded store calls: a deadline on the injected clock for whatever the current task awaits.

The engine never trusts a driver's own timeouts (redis-py 5 waits as long as a partition lasts;
asyncpg's command timeout may exceed a lease). Every store call runs under a bound read from the
same clock as the holder's deadline, so a test clock moves both together.

The bounds of one :class:`StoreCallBounds` share one clock timer, armed for the earliest
deadline: arming and cancelling a timer per call cost a lock cycle more than the rest of the
engine's bookkeeping together. An answered call leaves its entry behind until the timer passes
it or the entries are swept, so the timer may fire once for a call already answered.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
from types import TracebackType
from typing import final

from .._clock import Clock, TimerHandle

__all__ = ["StoreCallBounds", "StoreCallTimeoutError", "bounded"]

# answered calls kept in the heap before a sweep is worth its pass over it
_SWEEP_AFTER = 256


class StoreCallTimeoutError(TimeoutError):
    """The store did not answer before the call's bound (internal; reported as LockStoreError)."""


class _State(enum.Enum):
    WAITING = "waiting"
    EXPIRING = "expiring"
    DONE = "done"


# as module names: reading a member off its enum class costs a descriptor call on Python 3.11,
# and every store call reads these five times
_WAITING = _State.WAITING
_EXPIRING = _State.EXPIRING
_DONE = _State.DONE


@final
class StoreCallBounds:
    """Deadlines for store calls on one clock, watched by a single timer."""

    __slots__ = ("_answered", "_armed_at_ms", "_clock", "_entries", "_seq", "_timer")

    def __init__(self, clock: Clock) -> None:
        """Watch deadlines on ``clock``; no timer is armed before the first bound."""
        self._clock = clock
        # (deadline, seq, bound), heaped; the sequence number keeps equal deadlines from
        # comparing bounds, and expires them in the order they were armed (an id would order
        # them by memory address, and a seeded simulation would not replay)
        self._entries: list[tuple[int, int, bounded]] = []
        self._seq = itertools.count()
        # how many entries belong to calls already answered
        self._answered = 0
        self._armed_at_ms: int | None = None
        self._timer: TimerHandle | None = None

    @property
    def clock(self) -> Clock:
        """The clock the deadlines are read on."""
        return self._clock

    def until(self, deadline_ms: int) -> bounded:
        """Return a bound for ``with``: cancel its task's work at ``deadline_ms``.

        A plain ``with``, not ``async with``: arming and disarming await nothing, and two
        coroutines less a store call is time off every lock cycle.
        """
        return bounded(self, deadline_ms)

    def close(self) -> None:
        """Forget answered calls and stop the timer, unless a call is still waiting.

        Bounds armed afterwards are watched as before.
        """
        self._sweep()
        if not self._entries and self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._armed_at_ms = None

    def _watch(self, bound: bounded) -> None:
        if self._answered > _SWEEP_AFTER and self._answered * 2 > len(self._entries):
            self._sweep()
        deadline_ms = bound.deadline_ms
        heapq.heappush(self._entries, (deadline_ms, next(self._seq), bound))
        if self._armed_at_ms is None or deadline_ms < self._armed_at_ms:
            self._arm(deadline_ms)

    def _sweep(self) -> None:
        self._entries = [entry for entry in self._entries if entry[2].waiting]
        heapq.heapify(self._entries)
        self._answered = 0

    def _arm(self, at_ms: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_at_ms = at_ms
        self._timer = self._clock.call_at(at_ms, self._fire)

    async def _fire(self) -> None:
        self._timer = None
        self._armed_at_ms = None
        now_ms = self._clock.now_ms()
        entries = self._entries
        while entries and (entries[0][0] <= now_ms or not entries[0][2].waiting):
            _, _, bound = heapq.heappop(entries)
            if bound.waiting:
                bound.expire()
            else:
                self._answered -= 1
        if entries:
            self._arm(entries[0][0])


@final
class bounded:  # noqa: N801 -- read as a phrase: `with bounds.until(...)`
    """Cancel the current task's work at a deadline; raise StoreCallTimeoutError.

    It follows :func:`asyncio.timeout`: a cancellation from anywhere else passes through
    untouched, and an expiry that races the answer wins only if the answer was not taken yet.
    """

    __slots__ = ("_bounds", "_cancelling", "_state", "_task", "deadline_ms")

    def __init__(self, bounds: StoreCallBounds, deadline_ms: int) -> None:
        """Prepare a bound at ``deadline_ms`` on the clock of ``bounds``."""
        self._bounds = bounds
        self.deadline_ms = deadline_ms
        self._state = _WAITING
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0

    @property
    def waiting(self) -> bool:
        """Whether the bounded work is neither answered nor expired yet."""
        return self._state is _WAITING

    def __enter__(self) -> bounded:
        """Arm the bound for the current task."""
        task = asyncio.current_task()
        if task is None:
            msg = "bounded() needs a running task"
            raise RuntimeError(msg)
        self._task = task
        self._cancelling = task.cancelling()
        self._bounds._watch(self)  # noqa: SLF001 -- a bound and its watcher are one concept
        return self

    def expire(self) -> None:
        """Cancel the bounded work: its deadline has come (called by the watcher)."""
        if self._state is _WAITING and self._task is not None:
            self._state = _EXPIRING
            self._task.cancel()

    def __exit__(
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
        expired = self._state is _EXPIRING
        if self._state is _WAITING:
            self._bounds._answered += 1  # noqa: SLF001 -- a bound and its watcher are one concept
        self._state = _DONE
        if not expired or self._task is None:
            return
        # take back our cancellation whether or not the work saw it (it may have just ended)
        if self._task.uncancel() <= self._cancelling:
            raise StoreCallTimeoutError from exc
