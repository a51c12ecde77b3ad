"""Schedule: the ticks a job declares (``every=`` or ``cron=``), and which tick a moment is.

A tick's id is its job's key and its scheduled time in UTC. Each instance fires a tick on its own
clock, a little late; placed on the declared schedule, the moment it fired (corrected by the
instance's measured offset to the store's clock) names the slot nearest to it. So instances
whose clocks disagree by less than half the interval between slots name the same tick, and the
store refuses its second start.

``every``: slots at whole multiples of the interval since the Unix epoch (``every="5m"`` at :00,
:05, ..., UTC). ``cron``: the expression's times on the local clock of ``timezone``. Where that
clock repeats an hour (daylight saving ends), a time in it is one tick, its first occurrence
(``fall_back="once"``), or two (``"twice"``); where it skips an hour (daylight saving starts),
a time in the gap is the moment it would have been had the clock not moved on (02:30 in
Europe/Warsaw's spring gap is 03:30 summer time), as ``zoneinfo`` reads it with ``fold=0``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Literal, Protocol, final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .._clock import utc_now
from .._errors import LocksConfigurationError
from ..stores._common._capabilities import epoch_ms, from_epoch_ms

__all__ = [
    "FALL_BACKS",
    "CronSchedule",
    "EverySchedule",
    "FallBack",
    "Schedule",
    "cron_schedule",
]

FallBack = Literal["once", "twice"]
FALL_BACKS: Final[tuple[FallBack, ...]] = ("once", "twice")

# a local clock moves by an hour at most when daylight saving starts or ends (Lord Howe's half
# hour included): local slots this far around a moment hold every slot near it in UTC
_SHIFT: Final = timedelta(hours=2)
# slots read to find a cron schedule's shortest interval
_SLOTS_MEASURED: Final = 50


class Schedule(Protocol):
    """The slots of a declared schedule, as moments in UTC."""

    @property
    def shortest_interval_ms(self) -> int:
        """The shortest time between two slots (what a clock offset is judged against)."""
        ...

    def around(self, at: datetime) -> list[datetime]:
        """Return slots near ``at`` in order: at least one at or before it and one after."""
        ...

    def describe(self) -> str:
        """Name the schedule for messages (``every 10s``, ``cron "0 2 * * *" Europe/Warsaw``)."""
        ...


def nearest_slot(schedule: Schedule, at: datetime) -> datetime:
    """The slot nearest to ``at`` (the earlier of two equally near): the tick fired then."""
    return min(schedule.around(at), key=lambda slot: (abs(slot - at), slot))


def latest_slot(schedule: Schedule, at: datetime) -> datetime:
    """The latest slot at or before ``at``."""
    return max(slot for slot in schedule.around(at) if slot <= at)


def next_slot(schedule: Schedule, tick: datetime) -> datetime:
    """The first slot after ``tick``."""
    return min(slot for slot in schedule.around(tick) if slot > tick)


@final
@dataclass(frozen=True, slots=True)
class EverySchedule:
    """Slots every ``interval_ms``, at its whole multiples since the Unix epoch (UTC)."""

    interval_ms: int

    @property
    def shortest_interval_ms(self) -> int:
        """The interval."""
        return self.interval_ms

    def around(self, at: datetime) -> list[datetime]:
        """The slot at or before ``at`` and the one after it."""
        slot_ms = epoch_ms(at) // self.interval_ms * self.interval_ms
        return [from_epoch_ms(slot_ms), from_epoch_ms(slot_ms + self.interval_ms)]

    def describe(self) -> str:
        """``every <interval>``."""
        return f"every {self.interval_ms / 1000:g}s"


@final
@dataclass(frozen=True, slots=True)
class CronSchedule:
    """Slots at a cron expression's times on the local clock of ``zone``.

    Build it with :func:`cron_schedule`, which checks the expression and measures
    ``shortest_interval_ms`` between its next times.
    """

    expression: str
    zone: ZoneInfo
    fall_back: FallBack
    shortest_interval_ms: int

    def around(self, at: datetime) -> list[datetime]:
        """Slots from before ``at`` to after it, each once, in order."""
        local = at.astimezone(self.zone).replace(tzinfo=None)
        if (at - _SHIFT).astimezone(self.zone).utcoffset() == (at + _SHIFT).astimezone(
            self.zone
        ).utcoffset():
            # no change of offset near: local slots map one to one, in order
            walls = self._iterator(local)
            after = walls.get_next(datetime)
            walls = self._iterator(after)
            return [*self._moments(walls.get_prev(datetime)), *self._moments(after)]
        before = self._iterator(local - _SHIFT).get_prev(datetime)
        found: set[datetime] = set(self._moments(before))
        for wall in self._walls_from(local - _SHIFT):
            found.update(self._moments(wall))
            if wall > local + _SHIFT and max(found) > at:
                break
        return sorted(found)

    def describe(self) -> str:
        """``cron "<expression>" <zone>``."""
        return f'cron "{self.expression}" {self.zone.key}'

    def _walls_from(self, local: datetime) -> Iterator[datetime]:
        """The expression's local wall times after ``local`` (naive: no zone, no fold)."""
        walls = self._iterator(local)
        while True:
            yield walls.get_next(datetime)

    def _iterator(self, local: datetime) -> _Walls:
        from croniter import croniter  # noqa: PLC0415 -- an optional extra, imported on use

        return croniter(self.expression, local)

    def _moments(self, wall: datetime) -> list[datetime]:
        """The moments (UTC) the local wall time ``wall`` is a slot at: one, or two (repeated)."""
        first = wall.replace(tzinfo=self.zone, fold=0)
        moments = [first.astimezone(UTC)]
        if self.fall_back == "twice":
            second = wall.replace(tzinfo=self.zone, fold=1)
            repeated = second.utcoffset() != first.utcoffset() and (
                second.astimezone(UTC).astimezone(self.zone).replace(tzinfo=None) == wall
            )
            if repeated:
                moments.append(second.astimezone(UTC))
        return moments


class _Walls(Protocol):
    def get_next(self, ret_type: type[datetime]) -> datetime: ...

    def get_prev(self, ret_type: type[datetime]) -> datetime: ...


def cron_schedule(expression: object, timezone: object, fall_back: object) -> CronSchedule:
    """Return the schedule of a cron ``expression`` on the clock of ``timezone``.

    Raises:
        LocksConfigurationError: croniter is not installed, or a bad expression, time zone or
            ``fall_back``; the message names the fix.
    """
    try:
        from croniter import CroniterError, croniter  # noqa: PLC0415 -- an optional extra
    except ImportError:
        raise LocksConfigurationError(
            "cron=... reads cron expressions with croniter, which is not installed; "
            "pip install 'leaselock[cron]', or declare every=... instead"
        ) from None
    if not isinstance(expression, str) or not croniter.is_valid(expression):
        raise LocksConfigurationError(
            f'cron={expression!r}; pass a cron expression such as "30 2 * * *" (minute, hour, '
            "day of month, month, day of week)"
        )
    zone = _zone("UTC" if timezone is None else timezone)
    if fall_back not in FALL_BACKS:
        raise LocksConfigurationError(
            f'fall_back={fall_back!r}; pass "once" (a local time repeated when daylight saving '
            'ends is one tick, its first) or "twice" (two ticks)'
        )
    try:
        first = croniter(expression, utc_now().astimezone(zone).replace(tzinfo=None))
        walls = [first.get_next(datetime) for _ in range(_SLOTS_MEASURED)]
    except (CroniterError, ValueError):
        raise LocksConfigurationError(
            f"cron={expression!r} names no time that comes within years; check its day and "
            "month (a 30 February never comes)"
        ) from None
    # on the local clock: a gap shortened by a change of offset is no schedule's interval
    shortest = min(later - earlier for earlier, later in itertools.pairwise(walls))
    return CronSchedule(expression, zone, fall_back, shortest // timedelta(milliseconds=1))


def _zone(name: object) -> ZoneInfo:
    wrong = LocksConfigurationError(
        f'timezone={name!r}; pass an IANA time zone name such as "Europe/Warsaw" (the default '
        'is "UTC"; install tzdata where the system has no zone database)'
    )
    if not isinstance(name, str):
        raise wrong
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise wrong from None
