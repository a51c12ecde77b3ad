"""OverdueWatch: the dead-man's switch of jobs with ``expect_every``.

Every instance that sees a job's ticks checks the store's run records of that job every quarter
of ``expect_every`` (between 1 s and 1 min): when no run succeeded anywhere for ``expect_every``
plus a tenth of it (at least 1 s), it reports ``job-overdue``, again every ``expect_every``
while that lasts, and ``job-recovered`` when a run succeeds. It fires whatever silenced the job:
a hung run renewed for ever, an owner whose scheduler stopped, an error on every run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, final

from .._clock import Clock, TimerHandle
from .._engine import OperatorStore
from .._errors import LocksConfigurationError, LockStoreError
from .._event_types import JobOverdue, JobRecovered
from .._events import Publisher
from ..stores._common._job_control import pause_matches
from ._records import WallTime
from ._spec import JobSpec

__all__ = ["OverdueWatch", "check_every_ms", "grace_ms"]

_log = logging.getLogger("leaselock.jobs")

MIN_CHECK_MS: Final = 1000
MAX_CHECK_MS: Final = 60_000
MIN_GRACE_MS: Final = 1000


def check_every_ms(expect_every_ms: int) -> int:
    """How often the store is read for a job expected every ``expect_every_ms``."""
    return min(max(expect_every_ms // 4, MIN_CHECK_MS), MAX_CHECK_MS)


def grace_ms(expect_every_ms: int) -> int:
    """How late past ``expect_every_ms`` a success may be before the job is overdue."""
    return max(expect_every_ms // 10, MIN_GRACE_MS)


@final
@dataclass(eq=False, slots=True)
class _Watched:
    spec: JobSpec
    expect_every_ms: int
    since: datetime
    overdue: bool = False
    paused_until: datetime | None = None
    reported_ms: int = 0
    failing: bool = False
    timer: TimerHandle | None = None


@final
class OverdueWatch:
    """Watches the jobs with ``expect_every`` whose ticks one Locks sees."""

    __slots__ = ("_clock", "_closed", "_events", "_operator", "_reporter", "_wall", "_watched")

    def __init__(
        self,
        operator: OperatorStore,
        clock: Clock,
        wall: WallTime,
        events: Publisher,
        *,
        instance: str,
    ) -> None:
        """Read run records through ``operator``, on ``clock``; report through ``events``.

        No lock belongs to an overdue job, so its events name ``instance``, which reports them.
        """
        # an owner id's form ("<id>@<label>") with no id: the events' instance is the reporter
        self._reporter = f"@{instance}"
        self._operator = operator
        self._clock = clock
        self._wall = wall
        self._events = events
        self._watched: dict[str, _Watched] = {}
        self._closed = False

    def watch(self, spec: JobSpec) -> None:
        """Start watching ``spec`` if it has ``expect_every`` and is not watched yet."""
        every_ms = spec.expect_every_ms
        if every_ms is None or spec.key in self._watched or self._closed:
            return
        watched = _Watched(spec, every_ms, self._wall.now())
        self._watched[spec.key] = watched
        self._schedule(watched)

    def is_overdue(self, job: str) -> bool:
        """Whether this instance reports ``job`` overdue now."""
        watched = self._watched.get(job)
        return watched is not None and watched.overdue

    def expect_every_ms(self, job: str) -> int | None:
        """The ``expect_every`` of ``job`` if this Locks watches it."""
        watched = self._watched.get(job)
        return None if watched is None else watched.expect_every_ms

    def succeeded(self, job: str) -> None:
        """A run of ``job`` succeeded here: it has recovered now, if it was overdue."""
        watched = self._watched.get(job)
        if watched is not None:
            self._judge(watched, self._wall.now())

    def close(self) -> None:
        """Stop every check."""
        self._closed = True
        for watched in self._watched.values():
            if watched.timer is not None:
                watched.timer.cancel()

    def _schedule(self, watched: _Watched) -> None:
        due_ms = self._clock.now_ms() + check_every_ms(watched.expect_every_ms)

        async def check() -> None:
            await self._check(watched)

        watched.timer = self._clock.call_at(due_ms, check)

    async def _check(self, watched: _Watched) -> None:
        if self._closed:
            return
        job = watched.spec.key
        try:
            records = await self._operator.job_records([job])
            paused = self._operator.keeps_job_control and any(
                pause_matches(pause.target, job) and pause.live(self._wall.now())
                for pause in await self._operator.job_pauses()
            )
        except (LockStoreError, LocksConfigurationError) as failure:
            if not self._closed:
                _log.log(
                    logging.DEBUG if watched.failing else logging.WARNING,
                    "Could not read the run records of %s to check that it runs: %s",
                    job,
                    failure,
                    extra={"job": job, "reason": "records-unreadable"},
                )
            watched.failing = True
        else:
            watched.failing = False
            record = next((r for r in records if r.job == job), None)
            last = None if record is None or record.last_success is None else record.last_success
            if paused:
                # a paused job is not late: its expect_every counts again from its resume
                watched.paused_until, watched.overdue = self._wall.now(), False
            else:
                self._judge(watched, None if last is None else last.ended_at)
        if not self._closed:
            self._schedule(watched)

    def _judge(self, watched: _Watched, last_success_at: datetime | None) -> None:
        every_ms = watched.expect_every_ms
        reference = watched.since if last_success_at is None else last_success_at
        if watched.paused_until is not None:
            reference = max(reference, watched.paused_until)
        late = self._wall.now() - reference > timedelta(milliseconds=every_ms + grace_ms(every_ms))
        now_ms = self._clock.now_ms()
        job = watched.spec.key
        if late:
            if watched.overdue and now_ms - watched.reported_ms < every_ms:
                return
            watched.overdue, watched.reported_ms = True, now_ms
            self._events.emit(
                JobOverdue(
                    key=job,
                    fencing_token=None,
                    owner=self._reporter,
                    job=job,
                    expect_every_ms=every_ms,
                    last_success_at=last_success_at,
                )
            )
        elif watched.overdue:
            watched.overdue = False
            self._events.emit(
                JobRecovered(key=job, fencing_token=None, owner=self._reporter, job=job)
            )
