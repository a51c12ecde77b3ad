"""InstanceClock: one simulated instance's view of the simulation's clock, offset and pausable."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from dataclasses import dataclass, field
from typing import final

from .._clock import TimerCallback, TimerHandle
from ._clock import ManualClock

__all__ = ["InstanceClock"]

_log = logging.getLogger("leaselock.testing")


@final
@dataclass(eq=False, slots=True)
class _Timer:
    """A timer of one instance: its callback, and the context it was scheduled from."""

    when_ms: int
    callback: TimerCallback
    context: contextvars.Context
    cancelled: bool = False
    on_base: TimerHandle | None = field(default=None, repr=False)

    def cancel(self) -> None:
        self.cancelled = True
        if self.on_base is not None:
            self.on_base.cancel()


@final
class InstanceClock:
    """A :class:`~leaselock.Clock` for one simulated instance: the shared clock, shifted.

    It reads ``offset_ms`` ahead of the simulation's :class:`ManualClock` (the store's clock),
    as a host's clock differs from the database's. Its timers sit on the shared clock, at their
    due time less the offset, so the timers of every instance and of the store run in ONE order.

    Each timer runs in a task of its own, in the context it was scheduled from, as the system
    clock runs it; it never runs inside the shared clock's ``advance`` (a callback that waits on
    anything but time would hold the whole simulation there).

    Frozen (a paused process), timers that fall due are held, and run in order when it thaws,
    reading the time of the thaw: what a process resumed from ``SIGSTOP`` does. A clock that is
    frozen and never thawed is a killed process's.
    """

    __slots__ = ("_base", "_frozen", "_held", "_offset_ms", "_running")

    def __init__(self, base: ManualClock, offset_ms: int) -> None:
        """Read ``base`` plus ``offset_ms``; run timers on ``base``."""
        self._base = base
        self._offset_ms = offset_ms
        self._frozen = False
        self._held: list[_Timer] = []
        # the loop keeps only weak references to tasks: hold each until it ends
        self._running: dict[asyncio.Task[None], None] = {}

    @property
    def offset_ms(self) -> int:
        """How far ahead of the shared clock this clock reads."""
        return self._offset_ms

    @property
    def frozen(self) -> bool:
        """Whether the instance is paused (or killed): no timer of it runs."""
        return self._frozen

    def now_ms(self) -> int:
        """Return the shared clock's time plus the offset."""
        return self._base.now_ms() + self._offset_ms

    def call_at(self, when_ms: int, callback: TimerCallback) -> TimerHandle:
        """Run ``await callback()`` in a task once this clock reads ``when_ms`` (not frozen)."""
        timer = _Timer(when_ms, callback, contextvars.copy_context())
        timer.on_base = self._base.call_at(
            when_ms - self._offset_ms, functools.partial(self._due, timer)
        )
        return timer

    def freeze(self) -> None:
        """Hold every timer that falls due from now on, until :meth:`thaw`."""
        self._frozen = True

    def thaw(self) -> None:
        """Run the timers held while frozen, in the order they fell due; run later ones again."""
        self._frozen = False
        held, self._held = self._held, []
        for timer in held:
            self._run(timer)

    async def _due(self, timer: _Timer) -> None:
        if timer.cancelled:
            return
        if self._frozen:
            self._held.append(timer)
            return
        self._run(timer)

    def _run(self, timer: _Timer) -> None:
        if timer.cancelled:
            return
        task = asyncio.get_running_loop().create_task(
            _logged(timer.callback), context=timer.context
        )
        self._running[task] = None
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._running.pop(task, None)

    def __repr__(self) -> str:
        """Show the offset and the time."""
        return f"InstanceClock(now_ms={self.now_ms()}, offset_ms={self._offset_ms})"


async def _logged(callback: TimerCallback) -> None:
    try:
        await callback()
    except Exception:  # noqa: BLE001 -- a timer must never take the loop down; logged in full
        _log.exception("A timer callback of a simulated instance failed")
