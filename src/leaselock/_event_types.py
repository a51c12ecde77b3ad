"""Event types: what happened to locks, as objects for code and as lines for the logger.

Every event has ``type``, ``key``, ``fencing_token``, ``owner`` and ``at``; its ``message()`` is
the line the ``leaselock`` logger writes, and its ``log_fields()`` the structured fields that
line carries (``extra``), for log pipelines that index them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Literal, TypeAlias, final

from ._clock import utc_now
from ._errors import DetectedBy
from ._keys import instance_label

__all__ = [
    "ClockOffsetLarge",
    "Event",
    "EventType",
    "JobFailing",
    "JobMissed",
    "JobOverdue",
    "JobRecovered",
    "LeadershipAcquired",
    "LeadershipLost",
    "LeaseAcquired",
    "LockAcquired",
    "LockHandedBack",
    "LockLost",
    "LockReleased",
    "OperatorActed",
    "OperatorAction",
    "RenewalFailing",
    "RunAbandoned",
    "RunEnded",
    "RunStarted",
    "RunTrigger",
    "SkipReason",
    "TickSkipped",
]

EventType: TypeAlias = Literal[
    "lock-acquired",
    "lock-released",
    "lease-acquired",
    "tick-skipped",
    "lock-lost",
    "lock-handed-back",
    "renewal-failing",
    "leadership-acquired",
    "leadership-lost",
    "job-overdue",
    "job-recovered",
    "run-started",
    "run-ended",
    "job-missed",
    "run-abandoned",
    "job-failing",
    "operator-acted",
    "clock-offset-large",
]
SkipReason: TypeAlias = Literal[
    "another-instance",
    "in-progress",
    "paused",
    "store-unavailable",
    "shutting-down",
    "tick-already-run",
]
OperatorAction: TypeAlias = Literal["break", "pause", "resume", "run"]
"""What an operator did: broke a lock, paused or resumed jobs, ran a job by hand."""
RunTrigger: TypeAlias = Literal["schedule", "manual", "buffered", "catch-up", "recover"]
"""Why a run started: its scheduler's tick; ``Locks.run_now()`` (an operator); a tick that came
while the last run ran (``overlap="buffer_one"``), run right after it; a tick its dead owner
never ran (``catch_up="latest"``); or a run whose instance died, run again (``recover=True``)."""


def _utc_now() -> datetime:
    # wall-clock time is for people reading events; every decision reads the injected Clock
    return utc_now()


@dataclass(frozen=True, slots=True, kw_only=True)
class _EventFields:
    key: str
    fencing_token: int | None
    owner: str | None
    at: datetime = field(default_factory=_utc_now)

    @property
    def instance(self) -> str | None:
        """The label of the instance the event is about (from its owner id), or ``None``.

        The holder's, for an event about a lock; for a job's alerts (``job-overdue``,
        ``job-recovered``, ``job-missed``) the instance that reported it; ``job-failing``
        names where the failed run ran.
        """
        return instance_label(self.owner)

    def log_fields(self) -> dict[str, object]:
        """The event as the structured fields of its log record (``extra``)."""
        fields: dict[str, object] = {
            "event": getattr(self, "type", None),
            "key": self.key,
            "token": self.fencing_token,
            "instance": self.instance,
        }
        for name in ("job", "reason", "detected_by", "action", "operator"):
            value = getattr(self, name, None)
            if value is not None:
                fields["reason" if name == "detected_by" else name] = value
        return fields


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class LockAcquired(_EventFields):
    """This instance took a lease: any lock, a job's, an election's (DEBUG).

    With :class:`LockReleased`, :class:`LockLost` and :class:`LockHandedBack`, what a timeline
    of who held what is drawn from (``Locks(event_log=...)``).
    """

    type: Literal["lock-acquired"] = "lock-acquired"
    ttl_ms: int
    level: ClassVar[int] = logging.DEBUG

    def message(self) -> str:
        """Return the log line."""
        return f'Acquired "{self.key}" (fencing token {self.fencing_token}, ttl {self.ttl_ms} ms)'


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class LockReleased(_EventFields):
    """This instance gave a lease back on purpose: released, or a run lock's end (DEBUG).

    ``kept_ms`` is how long the store keeps it still (a job's ``min_hold``, or the same-second
    rule at shutdown); 0 when it is free at once.
    """

    type: Literal["lock-released"] = "lock-released"
    kept_ms: int = 0
    level: ClassVar[int] = logging.DEBUG

    def message(self) -> str:
        """Return the log line."""
        kept = f", kept {self.kept_ms} ms more at the store" if self.kept_ms else ""
        return f'Released "{self.key}" (fencing token {self.fencing_token}){kept}'


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseAcquired(_EventFields):
    """An instance took the lease ``<job>:owner`` and runs ``job`` from now on."""

    type: Literal["lease-acquired"] = "lease-acquired"
    job: str
    level: ClassVar[int] = logging.INFO

    def message(self) -> str:
        """Return the log line."""
        return (
            f'{self.job} runs on this instance (lease "{self.key}", '
            f"fencing token {self.fencing_token})"
        )


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class TickSkipped(_EventFields):
    """A tick of ``job`` did not run here, for ``reason``.

    ``holder`` is the label of the instance that kept it out, where the store said;
    ``min_hold_ms`` the job's ``min_hold`` when the reason is ``"in-progress"`` (the run lock
    may be held by a run that already ended). ``streak`` counts the skips in a row for this
    reason since ``streak_since``; ``loud`` says whether its line is worth INFO: the first of a
    streak, then at most one summary a minute. Quieter skips are logged at DEBUG.
    """

    type: Literal["tick-skipped"] = "tick-skipped"
    job: str
    reason: SkipReason
    min_hold_ms: int | None = None
    holder: str | None = None
    note: str | None = None
    streak: int = 1
    streak_since: datetime | None = None
    loud: bool = True

    @property
    def level(self) -> int:
        """WARNING when the store failed; INFO for a streak's first skip and its summaries."""
        if self.reason == "store-unavailable":
            return logging.WARNING
        return logging.INFO if self.loud else logging.DEBUG

    def message(self) -> str:
        """Return the log line."""
        why = {
            "another-instance": "it runs on another instance",
            "in-progress": "a run is still in progress",
            "paused": "it is paused",
            "store-unavailable": "the lock store is unavailable",
            "shutting-down": "this instance is shutting down",
            "tick-already-run": "its tick already ran",
        }[self.reason]
        if self.holder is not None and self.reason in ("another-instance", "in-progress"):
            why += f" ({self.holder})"
        if self.reason == "paused":
            why += f" by {self.holder or 'an operator'}" + (f": {self.note}" if self.note else "")
        if self.reason == "tick-already-run":
            why += f" on {self.holder or 'another instance'}" + (
                f" ({self.note})" if self.note else ""
            )
        if self.min_hold_ms:
            why += f", or one started less than min_hold ({self.min_hold_ms} ms) ago"
        if self.streak > 1 and self.streak_since is not None:
            since = self.streak_since.isoformat(timespec="seconds")
            why += f"; {self.streak} ticks skipped since {since}"
        return f"Skipped {self.job}: {why}"


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class LockLost(_EventFields):
    """A held lock was really lost: a renewal refused, a deadline passed, a run over its cap.

    Alerting can key on it: a graceful shutdown's hand-back is :class:`LockHandedBack`.
    """

    type: Literal["lock-lost"] = "lock-lost"
    detected_by: DetectedBy

    level: ClassVar[int] = logging.WARNING

    def message(self) -> str:
        """Return the log line."""
        how = {
            "renewal": "the store refused its renewal",
            "deadline": "no renewal was confirmed within its ttl",
            "shutdown": "its Locks closed while it was held",
            "max_run": "the run outlived its max_run cap",
            "replaced": 'a newer run of its job took it (overlap="replace")',
            "fencing": "a database refused a write fenced with its token",
        }[self.detected_by]
        return (
            f'Lost lock "{self.key}" (fencing token {self.fencing_token}), '
            f"detected by {self.detected_by}: {how}"
        )


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class LeadershipAcquired(_EventFields):
    """This instance leads the election ``key``."""

    type: Literal["leadership-acquired"] = "leadership-acquired"
    level: ClassVar[int] = logging.INFO

    def message(self) -> str:
        """Return the log line."""
        return f'Leading "{self.key}" (fencing token {self.fencing_token})'


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class LeadershipLost(_EventFields):
    """This instance no longer leads ``key``: the lease was ``"lost"`` or ``"released"``."""

    type: Literal["leadership-lost"] = "leadership-lost"
    reason: Literal["lost", "released"]
    level: ClassVar[int] = logging.INFO

    def message(self) -> str:
        """Return the log line."""
        if self.reason == "released":
            return f'Stepped down from "{self.key}"'
        return f'Lost leadership of "{self.key}" (fencing token {self.fencing_token})'


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class LockHandedBack(_EventFields):
    """A lock given up on purpose: at a graceful shutdown, or a job's lease its owner let go.

    ``reason`` is ``"shutdown"`` or ``"idle"`` (no tick came for ``owner_idle``).
    """

    type: Literal["lock-handed-back"] = "lock-handed-back"
    reason: Literal["shutdown", "idle"]
    job: str | None = None
    level: ClassVar[int] = logging.INFO

    def message(self) -> str:
        """Return the log line."""
        if self.reason == "idle":
            return (
                f'Handed back "{self.key}" (fencing token {self.fencing_token}): no tick of '
                f"{self.job} came for its owner_idle, so another instance's next tick takes it"
            )
        return f'Handed back "{self.key}" (fencing token {self.fencing_token}) at shutdown'


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class RenewalFailing(_EventFields):
    """A renewal failed; the lock is lost at its deadline unless a retry gets through.

    ``ms_left`` is the time left before that deadline; ``error`` what the store said.
    """

    type: Literal["renewal-failing"] = "renewal-failing"
    error: str
    ms_left: int
    level: ClassVar[int] = logging.WARNING

    def message(self) -> str:
        """Return the log line."""
        return (
            f'Renewal of "{self.key}" failed, retrying until its deadline in {self.ms_left} ms: '
            f"{self.error}"
        )


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class JobOverdue(_EventFields):
    """No run of ``job`` succeeded within its ``expect_every`` (and a grace), anywhere.

    ``last_success_at`` is when the last run succeeded (``None``: never, as far as the store
    remembers). Emitted once per overdue period, by every instance that checks.
    """

    type: Literal["job-overdue"] = "job-overdue"
    job: str
    expect_every_ms: int
    last_success_at: datetime | None
    level: ClassVar[int] = logging.WARNING

    def message(self) -> str:
        """Return the log line."""
        last = (
            "never"
            if self.last_success_at is None
            else self.last_success_at.isoformat(timespec="seconds")
        )
        return (
            f"{self.job} is overdue: no run succeeded in the last {self.expect_every_ms} ms on "
            f"any instance (last success: {last})"
        )


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class JobRecovered(_EventFields):
    """A run of ``job`` succeeded again after it was reported overdue."""

    type: Literal["job-recovered"] = "job-recovered"
    job: str
    level: ClassVar[int] = logging.INFO

    def message(self) -> str:
        """Return the log line."""
        return f"{self.job} ran successfully again"


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted(_EventFields):
    """A run of ``job`` started on this instance, under the lock ``key`` (DEBUG)."""

    type: Literal["run-started"] = "run-started"
    job: str
    trigger: RunTrigger = "schedule"
    tick: datetime | None = None
    level: ClassVar[int] = logging.DEBUG

    def message(self) -> str:
        """Return the log line."""
        how = "" if self.trigger == "schedule" else f" ({self.trigger})"
        tick = "" if self.tick is None else f", tick {self.tick.isoformat(timespec='seconds')}"
        return f"Started {self.job}{how} (fencing token {self.fencing_token}{tick})"


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class RunEnded(_EventFields):
    """A run of ``job`` on this instance ended (DEBUG; INFO unless it went well).

    ``outcome`` is ``"ok"``, ``"error"`` (``error`` says what it raised), ``"cancelled"`` or
    ``"lost"``; ``duration_ms`` how long it ran.
    """

    type: Literal["run-ended"] = "run-ended"
    job: str
    outcome: str
    error: str | None = None
    duration_ms: int
    trigger: RunTrigger = "schedule"

    @property
    def level(self) -> int:
        """DEBUG when it went well, else INFO (the error itself reaches the scheduler)."""
        return logging.DEBUG if self.outcome == "ok" else logging.INFO

    def message(self) -> str:
        """Return the log line."""
        what = self.outcome + (f": {self.error}" if self.error else "")
        return f"Ended {self.job} after {self.duration_ms} ms ({what})"


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class JobMissed(_EventFields):
    """A tick of ``job`` skipped here because another instance owned it was never run there.

    ``missed_at`` is that tick; ``holder`` the instance that owned the job then (dead or
    stalled). Found by the next instance to run the job, which records it: ``instance`` is
    that reporting instance.
    """

    type: Literal["job-missed"] = "job-missed"
    job: str
    missed_at: datetime
    holder: str | None = None
    level: ClassVar[int] = logging.WARNING

    def message(self) -> str:
        """Return the log line."""
        owner = f" ({self.holder})" if self.holder else ""
        return (
            f"{self.job} missed its tick of {self.missed_at.isoformat(timespec='seconds')}: the "
            f"instance that owned it{owner} never started it"
        )


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class RunAbandoned(_EventFields):
    """A run of ``job`` never ended: its instance died or lost its lock while it ran.

    The next run found it open, its lock gone, and recorded it ``"lost"``
    (``detected_by="abandoned"``); that run's ``current_run().abandoned`` is it.
    ``fencing_token`` and ``owner`` are the dead run's; ``started_at`` when it started.
    """

    type: Literal["run-abandoned"] = "run-abandoned"
    job: str
    started_at: datetime
    level: ClassVar[int] = logging.WARNING

    def message(self) -> str:
        """Return the log line."""
        started = self.started_at.isoformat(timespec="seconds")
        return (
            f"A run of {self.job} started {started} on {self.instance or 'another instance'} "
            f"(fencing token {self.fencing_token}) never ended: recorded as lost"
        )


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class JobFailing(_EventFields):
    """``job`` failed ``failures`` times in a row (its ``alert_after_failures``), once a streak.

    ``error`` is the last failure; ``paused`` says whether ``pause_after_failures`` paused it.
    """

    type: Literal["job-failing"] = "job-failing"
    job: str
    failures: int
    error: str | None = None
    paused: bool = False
    level: ClassVar[int] = logging.ERROR

    def message(self) -> str:
        """Return the log line."""
        paused = "; paused until an operator resumes it" if self.paused else ""
        return f"{self.job} failed {self.failures} times in a row (last: {self.error}){paused}"


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class OperatorActed(_EventFields):
    """An operator broke a lock, paused or resumed jobs, or ran a job by hand: the audit trail.

    ``operator`` names who asked (the ``by=`` given to the call, else this instance's label);
    ``key`` is the lock, the job or the pause's target (a prefix ending in ``*``).
    ``fencing_token`` and ``owner`` are the broken lease's, for a break, else ``None``;
    ``note`` says why (a pause's note, or the pause a resume lifted); ``until`` is when a pause
    ends by itself. Logged at WARNING, and written to the event log, whatever the
    operator's tool (the dashboard, the ``leaselock`` command, code).
    """

    type: Literal["operator-acted"] = "operator-acted"
    action: OperatorAction
    operator: str
    note: str | None = None
    until: datetime | None = None
    level: ClassVar[int] = logging.WARNING

    def message(self) -> str:
        """Return the log line."""
        asked = f"; asked by {self.operator}"
        if self.action == "break":
            holder = self.instance or self.owner
            return (
                f'Broke the lock on "{self.key}" held by {holder} '
                f"(fencing token {self.fencing_token}){asked}"
            )
        if self.action == "pause":
            until = (
                "" if self.until is None else f" until {self.until.isoformat(timespec='seconds')}"
            )
            return f"Paused {self.key}{until}: {self.note or '(no note)'}{asked}"
        if self.action == "resume":
            return f"Resumed {self.key} ({self.note}){asked}"
        return f"Running {self.key} now, by hand{asked}"


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class ClockOffsetLarge(_EventFields):
    """This instance's wall clock is further from the lock store's than jobs tolerate.

    ``offset_ms`` is the store's clock minus this instance's (positive: this instance is
    behind), measured over a round trip: ``uncertainty_ms`` is half of it. ``bound_ms`` is the
    guard of ``on_one_instance`` jobs: instances whose clocks differ by more can each run one
    tick (docs/jobs.md). ``key`` is empty and ``owner`` names the instance: the event is about
    this instance, not a lock. Emitted when the offset passes the bound, and again only after
    a measurement found it back within it.
    """

    type: Literal["clock-offset-large"] = "clock-offset-large"
    offset_ms: int
    uncertainty_ms: int
    bound_ms: int
    level: ClassVar[int] = logging.WARNING

    def message(self) -> str:
        """Return the log line."""
        side = "behind" if self.offset_ms > 0 else "ahead of"
        return (
            f"This instance's clock is {abs(self.offset_ms) / 1000:.3f} s {side} the lock "
            f"store's (give or take {self.uncertainty_ms} ms), more than the "
            f"{self.bound_ms / 1000:g} s that its jobs allow for (1 s for on_one_instance, a "
            "quarter of the shortest interval of a declared schedule): the same tick can run "
            "here and on another instance. Fix: keep the hosts' clocks in time (NTP, chrony), "
            "or give such jobs a min_hold longer than the offset"
        )


Event: TypeAlias = (
    LockAcquired
    | LockReleased
    | LeaseAcquired
    | TickSkipped
    | LockLost
    | LockHandedBack
    | RenewalFailing
    | LeadershipAcquired
    | LeadershipLost
    | JobOverdue
    | JobRecovered
    | RunStarted
    | RunEnded
    | JobMissed
    | RunAbandoned
    | JobFailing
    | OperatorActed
    | ClockOffsetLarge
)
EventCallback: TypeAlias = Callable[[Event], object]
