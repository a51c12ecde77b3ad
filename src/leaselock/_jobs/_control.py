"""JobControl: what a run's start and end tell about a job, on a store that keeps job control.

A run's start (one round trip, see ``SupportsJobControl.start_run``) answers the job's pause,
its last run, its failure streak and the open run it replaced. From those this module finds
runs whose instance died (``run-abandoned``) and ticks their owner never started
(``job-missed``), and at a run's end counts failures in a row (``job-failing``, and the pause
of ``pause_after_failures``). What it writes besides (an abandoned run's record, a missed
tick, a pause) happens only when something went wrong, never on a healthy tick, as one more
round trip; a store failure there is logged, never raised into the job.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, final

from .._engine import OperatorStore
from .._errors import LocksConfigurationError, LockStoreError
from .._event_types import JobFailing, JobMissed, RunAbandoned, RunTrigger
from .._events import Publisher
from .._keys import holder_name
from ..stores._common._capabilities import RunRecord
from ..stores._common._job_control import JobPause, OpenRun, RunStart, RunStartAnswer, WhenBusy
from ._records import WallTime
from ._spec import JobSpec, Overlap

__all__ = ["JobControl", "StartJudged"]

_log = logging.getLogger("leaselock.jobs")

# instances firing the same tick differ by less than this: a run started this much before a
# skipped tick still ran that tick
SAME_TICK: Final = timedelta(seconds=1)
_WHEN_BUSY: Final[dict[Overlap, WhenBusy]] = {
    "skip": "skip",
    "buffer_one": "buffer",
    "replace": "replace",
}


@final
@dataclass(frozen=True, slots=True)
class _Skipped:
    at: datetime
    holder: str | None


@final
@dataclass(frozen=True, slots=True)
class StartJudged:
    """What a run's start found: the previous run, an abandoned one, and the streak before."""

    previous: RunRecord | None
    abandoned: RunRecord | None
    failures: int


@final
class JobControl:
    """Judges the runs of one Locks' jobs by what their starts and ends tell."""

    __slots__ = ("_ended_here", "_events", "_instance", "_operator", "_skipped", "_wall")

    def __init__(
        self,
        operator: OperatorStore,
        wall: WallTime,
        events: Publisher,
        *,
        instance: str,
    ) -> None:
        """Judge through ``operator``, timed by ``wall``, reporting through ``events``."""
        self._operator = operator
        self._wall = wall
        self._events = events
        self._instance = instance
        self._skipped: dict[str, _Skipped] = {}
        self._ended_here: dict[str, int] = {}

    @property
    def kept(self) -> bool:
        """Whether the store keeps job control at all."""
        return self._operator.keeps_job_control

    def start(
        self,
        spec: JobSpec,
        trigger: RunTrigger,
        token: int | None,
        started_at: datetime,
        tick: datetime | None,
    ) -> RunStart | None:
        """Return the start to send for a run of ``spec`` (``None``: the store keeps none).

        ``tick`` is the scheduled time the run is for, which the store refuses to start twice.
        """
        if not self.kept:
            return None
        opened = OpenRun(self._instance, token, started_at, trigger)
        manual = trigger == "manual"
        busy = "skip" if manual else _WHEN_BUSY[spec.overlap]
        return RunStart(spec.key, opened, ignore_pause=manual, when_busy=busy, tick=tick)

    def skipped_elsewhere(self, spec: JobSpec, holder: str | None) -> None:
        """Remember a tick skipped because another instance owns ``spec``."""
        self._skipped[spec.key] = _Skipped(self._wall.now(), holder)

    async def judge_start(
        self,
        spec: JobSpec,
        start: RunStart,
        answer: RunStartAnswer,
        token: int,
        *,
        ending_here: Collection[int],
    ) -> StartJudged:
        """Find what a run's start says: an abandoned run, a missed tick; record them.

        ``ending_here`` holds the tokens of the job's runs whose end is on its way to the
        store from this instance: an open run among them is not abandoned, its end records it.

        Recorded before the run begins (one more round trip, only when one was found), so the
        run's own end is the job's last run. A store failure there is logged, never raised.
        """
        abandoned = None
        opened = answer.open_run
        ended_here = self._ended_here.pop(spec.key, None)
        if (
            opened is not None
            and opened.fencing_token != token
            and not (
                opened.instance == self._instance
                and opened.fencing_token in {ended_here, *ending_here}
            )
            # a run this start replaced records its own end, if it lives to
            and spec.overlap != "replace"
        ):
            abandoned = _abandoned(spec.key, opened, start.open_run.started_at)
            self._events.emit(
                RunAbandoned(
                    key=spec.key,
                    fencing_token=opened.fencing_token,
                    owner=f"@{opened.instance}",
                    job=spec.key,
                    started_at=opened.started_at,
                )
            )
            await self._write("record the abandoned run of", spec.key, abandoned)
        skipped = self._skipped.pop(spec.key, None)
        if skipped is not None:
            started = [run.started_at for run in (opened, answer.last_run) if run is not None]
            if not started or max(started) < skipped.at - SAME_TICK:
                self._events.emit(
                    JobMissed(
                        key=spec.key,
                        fencing_token=None,
                        # the event is this instance's report; the instance that missed the
                        # tick is its holder (naming that one here drew it alive in timelines)
                        owner=f"@{self._instance}",
                        job=spec.key,
                        missed_at=skipped.at,
                        holder=holder_name(skipped.holder),
                    )
                )
                await self._write("record the missed tick of", spec.key, skipped.at)
        return StartJudged(answer.last_run, abandoned, answer.failures)

    def end_unrecorded(self, spec: JobSpec, token: int) -> None:
        """Remember a run that ended here but whose end the store missed: not abandoned."""
        self._ended_here[spec.key] = token

    async def failed(
        self,
        spec: JobSpec,
        failures_before: int,
        error: str | None,
        *,
        fencing_token: int,
        owner: str | None,
    ) -> None:
        """Count a run of ``spec`` that raised ``error``: alert, and pause, once a streak.

        ``fencing_token`` and ``owner`` are the failed run's, so the alert names where it ran.

        The pause is written before the run's caller hears of the failure (one more round trip,
        once a streak), so the next tick anywhere finds it.
        """
        failures = failures_before + 1
        pause_at = spec.pause_after_failures
        pausing = pause_at is not None and failures == pause_at
        if failures != spec.alert_after_failures and not pausing:
            return
        self._events.emit(
            JobFailing(
                key=spec.key,
                fencing_token=fencing_token,
                owner=owner or f"@{self._instance}",
                job=spec.key,
                failures=failures,
                error=error,
                paused=pausing,
            )
        )
        if pausing:
            pause = JobPause(
                spec.key,
                f"paused after {failures} failed runs in a row (last: {error})",
                self._instance,
                self._wall.now(),
            )
            await self._write("pause", spec.key, pause)

    async def _write(self, doing: str, job: str, what: RunRecord | datetime | JobPause) -> None:
        try:
            if isinstance(what, RunRecord):
                await self._operator.record_run(what)
            elif isinstance(what, JobPause):
                await self._operator.pause_jobs(what)
            else:
                await self._operator.note_missed(job, what)
        except (LockStoreError, LocksConfigurationError) as failure:
            _log.warning(
                "Could not %s %s: %s",
                doing,
                job,
                failure,
                extra={"job": job, "reason": "record-failed"},
            )


def _abandoned(job: str, opened: OpenRun, now: datetime) -> RunRecord:
    return RunRecord(
        job=job,
        instance=opened.instance,
        fencing_token=opened.fencing_token,
        started_at=opened.started_at,
        ended_at=now,
        outcome="lost",
        trigger=opened.trigger,
        detected_by="abandoned",
    )
