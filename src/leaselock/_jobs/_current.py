"""current_run(): what a job's code may know about the run it is in."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import final

from .._engine import Lock
from .._event_types import RunTrigger
from ..stores._common._capabilities import RunRecord

__all__ = ["CURRENT_RUN", "RunInfo", "current_run"]


@final
@dataclass(frozen=True, slots=True)
class RunInfo:
    """The run of a decorated job this code runs in.

    Attributes:
        job: the job's key.
        lock: the run's lock (``current_lock()``): its signal, its fencing token.
        trigger: why it runs: ``"schedule"`` (a tick), ``"manual"`` (``Locks.run_now``) or
            ``"buffered"`` (a tick that came during the previous run, ``overlap="buffer_one"``).
        started_at: when it started (UTC).
        previous: the job's last finished run before this one, anywhere (its outcome,
            ``ended_at`` and ``fencing_token``), or ``None`` (none recorded, or the store
            keeps no run records). For "process everything since the last success", use
            ``Locks.job_status(job)``'s ``last_success`` or this run's ``previous``.
        abandoned: a run of the job that never ended (its instance died), found by this run's
            start and recorded as lost, else ``None``: its work may be half done.
        tick: the scheduled time (UTC) this run is for, on a job that declares its schedule
            (``every=``, ``cron=``); ``None`` for a manual run, or a job that declares none.

    .. versionadded:: 0.2
    """

    job: str
    lock: Lock
    trigger: RunTrigger
    started_at: datetime
    previous: RunRecord | None = None
    abandoned: RunRecord | None = None
    tick: datetime | None = None

    @property
    def fencing_token(self) -> int:
        """The run's fencing token."""
        return self.lock.fencing_token

    @property
    def previous_token(self) -> int | None:
        """The token of the run this one follows: the abandoned one, else the previous."""
        before = self.abandoned or self.previous
        return None if before is None else before.fencing_token


CURRENT_RUN: ContextVar[RunInfo | None] = ContextVar("leaselock.current_run", default=None)


def current_run() -> RunInfo | None:
    """Return the run of the decorated job this code runs in, or ``None`` outside one.

    .. versionadded:: 0.2
    """
    return CURRENT_RUN.get()
