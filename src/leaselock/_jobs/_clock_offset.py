"""ClockOffsetWatch: how far this instance's wall clock is from the lock store's.

A scheduler fires a job's tick on its instance's wall clock. The sticky lease of an
``on_one_instance`` job keeps the tick on one instance as long as the instances fire it within
:data:`~._runs.SAME_TICK_MS` of each other: an instance whose clock is further behind can fire
a tick that the owner already ran and handed back, and run it again. Each instance therefore
measures its offset to the store's clock (where the store shows one, ``store_time_ms``) at the
first tick of a job it sees and every :data:`MEASURE_EVERY_MS` after, and reports an offset
past that guard, beyond the measurement's own uncertainty, as a
:class:`~leaselock.ClockOffsetLarge` event (a WARNING). A job that declares its schedule
(``every=``, ``cron=``) is kept to each tick once by the store instead, as long as instances
place a tick within half an interval of its slot: the bound for it is a quarter of its shortest
interval (its ticks are placed with the measured offset, so this guards the measurement).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, final

from .._clock import Clock, TimerHandle, utc_now
from .._engine import OperatorStore
from .._errors import LocksConfigurationError, LockStoreError
from .._event_types import ClockOffsetLarge
from .._events import Publisher
from ..stores._common._capabilities import epoch_ms
from ._runs import SAME_TICK_MS
from ._spec import JobSpec

__all__ = [
    "CLOCK_OFFSET_BOUND_MS",
    "MEASURE_EVERY_MS",
    "SLOT_FRACTION",
    "ClockOffset",
    "ClockOffsetWatch",
    "offset_bound_ms",
]

_log = logging.getLogger("leaselock.jobs")

CLOCK_OFFSET_BOUND_MS: Final = SAME_TICK_MS
"""The largest offset to the store's clock that ``on_one_instance`` jobs allow for."""
SLOT_FRACTION: Final = 4
"""A job with a declared schedule allows for an offset of its shortest interval over this."""
MEASURE_EVERY_MS: Final = 60_000
"""How often an instance measures its offset again."""


@final
@dataclass(frozen=True, slots=True)
class ClockOffset:
    """One measurement: the store's clock minus this instance's, give or take ``uncertainty``.

    Positive: this instance's clock is behind the store's.
    """

    offset: timedelta
    uncertainty: timedelta

    def past(self, bound_ms: int) -> bool:
        """Whether it is past ``bound_ms`` whatever the uncertainty."""
        return abs(self.offset) - self.uncertainty > timedelta(milliseconds=bound_ms)


def offset_bound_ms(jobs: Iterable[JobSpec]) -> int:
    """The largest offset ``jobs`` allow for: the guard, or less for a dense declared schedule."""
    bounds = [
        job.schedule.shortest_interval_ms // SLOT_FRACTION
        for job in jobs
        if job.schedule is not None
    ]
    return min([CLOCK_OFFSET_BOUND_MS, *bounds])


@final
class ClockOffsetWatch:
    """Measures one Locks' offset to its store's clock, and reports a large one once."""

    __slots__ = (
        "_bound_ms",
        "_clock",
        "_closed",
        "_events",
        "_large",
        "_operator",
        "_reporter",
        "_timer",
        "last",
        "started",
    )

    def __init__(
        self,
        operator: OperatorStore,
        clock: Clock,
        events: Publisher,
        *,
        instance: str,
        bound_ms: Callable[[], int],
    ) -> None:
        """Read the store's clock through ``operator``, paced by ``clock``; report to ``events``.

        ``bound_ms`` says the largest offset the jobs registered now allow for.
        """
        self._operator = operator
        self._bound_ms = bound_ms
        self._clock = clock
        self._events = events
        # an owner id's form ("<id>@<label>") with no id: the event's instance is this one
        self._reporter = f"@{instance}"
        self._timer: TimerHandle | None = None
        self._large = False
        self._closed = False
        # the last measurement, for job_status()
        self.last: ClockOffset | None = None
        self.started = False

    def start(self) -> Coroutine[Any, Any, None]:
        """Mark it started; return the first measurement to await, then every minute.

        The measurement does nothing where the store shows no clock. Marked at once, so ticks
        that come before it ran do not start another.
        """
        self.started = True
        return self._measure_and_again() if self._operator.shows_its_clock else _nothing()

    def close(self) -> None:
        """Measure no more."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def measure(self) -> ClockOffset | None:
        """Measure the offset now, report it if large; ``None`` where the store shows no clock.

        A store that fails leaves the last measurement as it was (and is logged at DEBUG): the
        clocks are measured again at the next turn.
        """
        if not self._operator.shows_its_clock:
            return None
        sent = epoch_ms(utc_now())
        try:
            store_ms = await self._operator.store_time_ms()
        except (LockStoreError, LocksConfigurationError) as error:
            _log.debug("Could not read the lock store's clock: %s", error)
            return self.last
        received = epoch_ms(utc_now())
        # the store read its clock somewhere in the round trip: in its middle, at best
        measured = ClockOffset(
            offset=timedelta(milliseconds=store_ms - (sent + received) / 2),
            uncertainty=timedelta(milliseconds=(received - sent) / 2),
        )
        self.last = measured
        self._judge(measured)
        return measured

    async def _measure_and_again(self) -> None:
        await self.measure()
        if not self._closed:
            self._timer = self._clock.call_at(
                self._clock.now_ms() + MEASURE_EVERY_MS, self._measure_and_again
            )

    def _judge(self, measured: ClockOffset) -> None:
        bound_ms = self._bound_ms()
        large = measured.past(bound_ms)
        if large and not self._large:
            self._large = True
            self._events.emit(
                ClockOffsetLarge(
                    key="",
                    fencing_token=None,
                    owner=self._reporter,
                    offset_ms=round(measured.offset / timedelta(milliseconds=1)),
                    uncertainty_ms=round(measured.uncertainty / timedelta(milliseconds=1)),
                    bound_ms=bound_ms,
                )
            )
        elif self._large and not large:
            self._large = False
            _log.info(
                "This instance's clock is back within %g s of the lock store's (%+.3f s)",
                bound_ms / 1000,
                measured.offset.total_seconds(),
            )


async def _nothing() -> None:
    """The measurement of a store that shows no clock."""
