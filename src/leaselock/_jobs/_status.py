"""JobStatus: what an operator asks of a job: how it last ran, whether it runs now, and where."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import final

from .._clock import utc_now
from .._engine import OperatorStore
from .._keys import lease_key
from ..stores._common._capabilities import JobRecord, LockInfo, RunRecord
from ..stores._common._job_control import JobPause, JobState, TickRun, pause_matches
from ._overdue import OverdueWatch

__all__ = ["JobStatus", "JobsReader", "job_statuses", "statuses_of"]


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
        clock_offset: the store's wall clock minus this instance's, as last measured
            (positive: this instance is behind); ``None`` where the store shows no clock
            (in-memory, SQLite and etcd). Past one second, two instances can each run one
            tick of an ``on_one_instance`` job that declares no schedule; a declared schedule
            allows for a quarter of its shortest interval.
        last_tick: the latest scheduled tick a run started for, and the instance and token
            that ran it (a job that declares its schedule), else ``None``.

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
    clock_offset: timedelta | None = None
    last_tick: TickRun | None = None

    @property
    def running(self) -> bool:
        """Whether a run holds the job's run lock now."""
        return self.running_on is not None


async def job_statuses(
    operator: OperatorStore,
    overdue: OverdueWatch | None,
    jobs: Sequence[str],
    *,
    clock_offset: timedelta | None = None,
) -> list[JobStatus]:
    """Return the status of each of ``jobs``, in order: run records, then both locks.

    ``clock_offset`` is this instance's offset to the store's clock, given to every status.

    Raises:
        LocksConfigurationError: the store keeps no run records.
        LockStoreError: the store failed or did not answer in time.
    """
    records = await operator.job_records(list(jobs))
    states: list[JobState] = []
    pauses: list[JobPause] = []
    if operator.keeps_job_control:
        states, pauses = await asyncio.gather(
            operator.job_states(list(jobs)), operator.job_pauses()
        )
    held: dict[str, LockInfo] = {}
    if operator.can_inspect:
        keys = [key for job in jobs for key in (job, lease_key(job))]
        found = await asyncio.gather(*(operator.read_lock(key) for key in keys))
        held = {info.key: info for info in found if info is not None}
    statuses = statuses_of(
        jobs,
        records=records,
        states=states,
        pauses=pauses,
        held=held,
        overdue=overdue,
        now=utc_now(),
    )
    return [replace(status, clock_offset=clock_offset) for status in statuses]


def statuses_of(
    jobs: Sequence[str],
    *,
    records: Sequence[JobRecord],
    states: Sequence[JobState],
    pauses: Sequence[JobPause],
    held: Mapping[str, LockInfo],
    overdue: OverdueWatch | None,
    now: datetime,
) -> list[JobStatus]:
    """Return the status of each of ``jobs``, in order, from what was read: no store call.

    ``held`` maps keys to their locks (a job's run lock ``<job>`` and lease ``<job>:owner``);
    a key it lacks is free. ``pauses`` are every pause kept; the first live one whose target
    matches a job pauses it.
    """
    by_job = {record.job: record for record in records}
    state_of = {state.job: state for state in states}
    statuses = []
    for job in jobs:
        record, state = by_job.get(job), state_of.get(job)
        running, owner = held.get(job), held.get(lease_key(job))
        every_ms = None if overdue is None else overdue.expect_every_ms(job)
        statuses.append(
            JobStatus(
                job=job,
                last_run=None if record is None else record.last_run,
                last_success=None if record is None else record.last_success,
                running_on=None if running is None else running.holder,
                owner=None if owner is None else owner.holder,
                expect_every=None if every_ms is None else timedelta(milliseconds=every_ms),
                overdue=overdue is not None and overdue.is_overdue(job),
                paused=next(
                    (p for p in pauses if pause_matches(p.target, job) and p.live(now)), None
                ),
                failures=0 if state is None else state.failures,
                missed_at=None if state is None else state.missed_at,
                last_tick=None if state is None else state.last_tick,
            )
        )
    return statuses


@final
class JobsReader:
    """What job statuses are made of, read one store call at a time; statuses from the reads.

    For a watcher that paces its store calls (the dashboard): it reads the run records, the
    job states and the pauses when it chooses, lists the locks itself, and builds every job's
    status from its last reads with :meth:`statuses`, at no further cost.
    """

    __slots__ = ("_operator", "_overdue", "_registered")

    def __init__(
        self,
        operator: OperatorStore,
        overdue: OverdueWatch | None,
        registered: Callable[[], Iterable[str]],
    ) -> None:
        """Read through ``operator``; ``registered`` names the jobs registered here."""
        self._operator = operator
        self._overdue = overdue
        self._registered = registered

    @property
    def keeps_run_records(self) -> bool:
        """Whether the store keeps run records (else :meth:`records` raises)."""
        return self._operator.keeps_run_records

    @property
    def keeps_job_control(self) -> bool:
        """Whether the store keeps pauses and job states (else those reads raise)."""
        return self._operator.keeps_job_control

    def registered(self) -> list[str]:
        """Return the keys of the jobs registered with this ``Locks``: those it can run now."""
        return sorted(self._registered())

    async def records(self) -> list[JobRecord]:
        """Read every job's run records: one store call.

        Raises:
            LocksConfigurationError: the store keeps no run records.
            LockStoreError: the store failed or did not answer in time.
        """
        return await self._operator.job_records(None)

    async def states(self) -> list[JobState]:
        """Read every job's state (failure streak, missed tick): one store call.

        Raises:
            LocksConfigurationError: the store keeps no job control.
            LockStoreError: the store failed or did not answer in time.
        """
        return await self._operator.job_states(None)

    async def pauses(self) -> list[JobPause]:
        """Read every pause kept: one store call.

        Raises:
            LocksConfigurationError: the store keeps no job control.
            LockStoreError: the store failed or did not answer in time.
        """
        return await self._operator.job_pauses()

    def statuses(
        self,
        records: Sequence[JobRecord],
        states: Sequence[JobState],
        pauses: Sequence[JobPause],
        held: Mapping[str, LockInfo],
        now: datetime,
    ) -> list[JobStatus]:
        """Return the status of every job recorded or registered here, by key; no store call."""
        jobs = sorted({record.job for record in records} | set(self._registered()))
        return statuses_of(
            jobs,
            records=records,
            states=states,
            pauses=pauses,
            held=held,
            overdue=self._overdue,
            now=now,
        )
