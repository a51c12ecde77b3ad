"""JobStatus: what an operator asks of a job: how it last ran, whether it runs now, and where."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import final

from .._clock import utc_now
from .._engine import OperatorStore
from .._keys import lease_key
from ..stores._common._capabilities import JobRecord, LockInfo, RunRecord
from ..stores._common._job_control import JobPause, JobState, pause_matches
from ._overdue import OverdueWatch

__all__ = ["JobStatus", "job_statuses"]


@final
@dataclass(frozen=True, slots=True)
class JobStatus:
    """One job, as the store and this ``Locks`` see it now.

    Attributes:
        job: the job's key.
        last_run: its last run anywhere, from the store's run records (``None``: none kept).
        last_success: its last run that went well.
        running_on: the label of the instance whose run holds the run lock ``<job>`` now
            (``without_overlapping`` jobs), else ``None``.
        owner: the label of the instance holding the lease ``<job>:owner`` now
            (``on_one_instance`` jobs): the one whose ticks run it.
        expect_every: the job's ``expect_every``, where this ``Locks`` watches it.
        overdue: whether this ``Locks`` reports it overdue now.
        paused: the pause that stops its ticks now (its own, or a prefix's), else ``None``.
        failures: its runs in a row that raised, up to the last run.
        missed_at: the last tick found missed (its owner never started it), else ``None``.

    .. versionadded:: 0.2
    """

    job: str
    last_run: RunRecord | None
    last_success: RunRecord | None
    running_on: str | None
    owner: str | None
    expect_every: timedelta | None
    overdue: bool
    paused: JobPause | None = None
    failures: int = 0
    missed_at: datetime | None = None

    @property
    def running(self) -> bool:
        """Whether a run holds the job's run lock now."""
        return self.running_on is not None


async def job_statuses(
    operator: OperatorStore, overdue: OverdueWatch | None, jobs: Sequence[str]
) -> list[JobStatus]:
    """Return the status of each of ``jobs``, in order: run records, then both locks.

    Raises:
        LocksConfigurationError: the store keeps no run records.
        LockStoreError: the store failed or did not answer in time.
    """
    records = {record.job: record for record in await operator.job_records(list(jobs))}
    states: dict[str, JobState] = {}
    pauses: list[JobPause] = []
    if operator.keeps_job_control:
        found, pauses = await asyncio.gather(operator.job_states(list(jobs)), operator.job_pauses())
        states = {state.job: state for state in found}
    inspectable = operator.can_inspect
    statuses = await asyncio.gather(
        *(
            _status(operator, overdue, job, records.get(job), inspectable=inspectable)
            for job in jobs
        )
    )
    now = utc_now()
    return [
        replace(
            status,
            paused=next(
                (p for p in pauses if pause_matches(p.target, status.job) and p.live(now)), None
            ),
            failures=states[status.job].failures if status.job in states else 0,
            missed_at=states[status.job].missed_at if status.job in states else None,
        )
        for status in statuses
    ]


async def _status(
    operator: OperatorStore,
    overdue: OverdueWatch | None,
    job: str,
    record: JobRecord | None,
    *,
    inspectable: bool,
) -> JobStatus:
    running: LockInfo | None = None
    owner: LockInfo | None = None
    if inspectable:
        running, owner = await asyncio.gather(
            operator.read_lock(job), operator.read_lock(lease_key(job))
        )
    every_ms = None if overdue is None else overdue.expect_every_ms(job)
    return JobStatus(
        job=job,
        last_run=None if record is None else record.last_run,
        last_success=None if record is None else record.last_success,
        running_on=None if running is None else running.holder,
        owner=None if owner is None else owner.holder,
        expect_every=None if every_ms is None else timedelta(milliseconds=every_ms),
        overdue=overdue is not None and overdue.is_overdue(job),
    )
