"""RunRecords: each run's end kept in the store, on a wall clock that moves with the injected one.

Recording costs one store round trip per run and none per skipped tick. A store that fails to
keep a record never fails the run: the failure is logged, and the job goes on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, final

from .._clock import Clock, utc_now
from .._engine import OperatorStore
from .._errors import LocksConfigurationError, LockStoreError
from .._event_types import RunTrigger
from ..stores._common._capabilities import RunOutcome, RunRecord

__all__ = ["MAX_ERROR_CHARS", "Recorded", "RunRecords", "WallTime", "describe_error"]

MAX_ERROR_CHARS: Final = 500
"""A recorded error's ``"Type: message"`` is cut to this many characters."""

_log = logging.getLogger("leaselock.jobs")


@final
class WallTime:
    """UTC wall time that moves exactly as the injected clock does.

    Read once from the system at creation, then advanced by the clock: with a ManualClock a
    test's runs and overdue checks agree to the millisecond; with the system clock it is the
    wall clock, give or take its drift since the start.
    """

    __slots__ = ("_clock", "_started_ms", "_started_wall")

    def __init__(self, clock: Clock) -> None:
        """Anchor wall time to ``clock`` now."""
        self._clock = clock
        now = utc_now()
        # whole milliseconds, as stores keep them: a time read back equals the one written
        self._started_wall = now.replace(microsecond=now.microsecond // 1000 * 1000)
        self._started_ms = clock.now_ms()

    def at(self, clock_ms: int) -> datetime:
        """Return the wall time of the clock reading ``clock_ms``."""
        return self._started_wall + timedelta(milliseconds=clock_ms - self._started_ms)

    def now(self) -> datetime:
        """Return the wall time now."""
        return self.at(self._clock.now_ms())


def describe_error(error: BaseException) -> str:
    """Return ``"TypeName: message"`` of ``error``, cut to :data:`MAX_ERROR_CHARS`."""
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "\u2026"


@final
@dataclass(frozen=True, slots=True)
class Recorded:
    """A run's end as the store kept it, and whether a tick was noted during the run."""

    run: RunRecord
    buffered: bool


@final
class RunRecords:
    """Keeps each run's end in the store of one Locks."""

    __slots__ = ("_failing", "_instance", "_operator", "wall")

    def __init__(self, operator: OperatorStore, wall: WallTime, instance: str) -> None:
        """Record through ``operator``, timed by ``wall``, labelled with ``instance``."""
        self._operator = operator
        self.wall = wall
        self._instance = instance
        self._failing = False

    @property
    def kept(self) -> bool:
        """Whether the store keeps run records at all."""
        return self._operator.keeps_run_records

    async def record(
        self,
        job: str,
        *,
        fencing_token: int,
        started_ms: int,
        ended_ms: int,
        outcome: RunOutcome,
        error: str | None,
        trigger: RunTrigger = "schedule",
        closes_open_run: bool = False,
    ) -> Recorded | None:
        """Keep one run's end in the store; return what was kept, or ``None`` if it was not.

        With ``closes_open_run`` (its start opened it, on a store that keeps job control), the
        same round trip closes the open run, counts the failure streak, and says whether a tick
        was noted during the run.

        Never raises for a store failure: it is logged (a WARNING at the first failure of a
        streak, then DEBUG until one succeeds), and the job goes on.
        """
        if not self.kept:
            return None
        run = RunRecord(
            job=job,
            instance=self._instance,
            fencing_token=fencing_token,
            started_at=self.wall.at(started_ms),
            ended_at=self.wall.at(ended_ms),
            outcome=outcome,
            error=error,
            trigger=trigger,
        )
        buffered = False
        try:
            if closes_open_run:
                buffered = await self._operator.end_run(run)
            else:
                await self._operator.record_run(run)
        except (LockStoreError, LocksConfigurationError) as failure:
            _log.log(
                logging.DEBUG if self._failing else logging.WARNING,
                "Could not record the end of a run of %s (%s): %s; the job goes on, and "
                "job_status() misses this run",
                job,
                outcome,
                failure,
                extra={"job": job, "reason": "record-failed"},
            )
            self._failing = True
            return None
        self._failing = False
        return Recorded(run, buffered)
