"""Two optional store capabilities for operators: job run records, and reading or breaking locks.

Found by shape like the others: a store without them keeps working; ``job_status()``,
``inspect()``, ``break_lock()`` and the ``leaselock`` command say that the store cannot.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Literal, Protocol, TypeAlias, cast, final, get_args, runtime_checkable

from ..._event_types import RunTrigger
from ..._keys import holder_name, instance_label

__all__ = [
    "RUN_ROW_COLUMNS",
    "JobRecord",
    "LockInfo",
    "RunOutcome",
    "RunRecord",
    "SupportsDiscard",
    "SupportsInspection",
    "SupportsRunRecords",
    "epoch_ms",
    "from_epoch_ms",
    "job_records_from_rows",
    "job_records_of",
    "run_from_json",
    "run_from_row",
    "run_row",
    "with_run",
]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

RunOutcome: TypeAlias = Literal["ok", "error", "cancelled", "lost"]
"""How a run ended: ``"ok"``; ``"error"`` (it raised); ``"cancelled"``; ``"lost"`` (its lock was
lost while it ran: whatever it wrote after that must have been fenced)."""


@final
@dataclass(frozen=True, slots=True)
class RunRecord:
    """One finished run of a job, as the store keeps it.

    Attributes:
        job: the job's key.
        instance: the label of the instance that ran it.
        fencing_token: the run's token (its run lock's, or its lease's).
        started_at: when it started (UTC, the running instance's wall clock).
        ended_at: when it ended (the same clock).
        outcome: how it ended, see :data:`RunOutcome`.
        error: ``"TypeName: message"`` when the outcome is ``"error"``, else ``None``.
        trigger: why it started: ``"schedule"``, ``"manual"`` (``run_now``) or ``"buffered"``
            (a tick that came during the previous run, ``overlap="buffer_one"``).
        detected_by: for a ``"lost"`` run, how the loss was noticed (``"abandoned"``: the
            next run found it never ended), else ``None``.
    """

    job: str
    instance: str
    fencing_token: int | None
    started_at: datetime
    ended_at: datetime
    outcome: RunOutcome
    error: str | None = None
    trigger: RunTrigger = "schedule"
    detected_by: str | None = None

    @property
    def duration(self) -> timedelta:
        """How long the run took."""
        return self.ended_at - self.started_at


@final
@dataclass(frozen=True, slots=True)
class JobRecord:
    """What a store remembers of one job: its last run, and its last successful one."""

    job: str
    last_run: RunRecord | None
    last_success: RunRecord | None


@final
@dataclass(frozen=True, slots=True)
class LockInfo:
    """One key's lock, as the store sees it now.

    Attributes:
        key: the key.
        owner: the owner id of the live lock (``<32 hex>@<instance label>`` when leaselock made
            it), or ``None`` when released or expired.
        fencing_token: the last token the key was given, where the store keeps it per key.
        expires_in_ms: the time left on the store's clock (``None`` when not live).
    """

    key: str
    owner: str | None
    fencing_token: int | None
    expires_in_ms: int | None

    @property
    def live(self) -> bool:
        """Whether a live lock holds the key."""
        return self.owner is not None

    @property
    def instance(self) -> str | None:
        """The label of the instance holding it, from its owner id."""
        return instance_label(self.owner)

    @property
    def holder(self) -> str | None:
        """Who holds it, for people: the instance label, else the owner id; ``None`` if free."""
        return holder_name(self.owner)


@runtime_checkable
class SupportsRunRecords(Protocol):
    """A store that keeps each job's last run and last success, beside its locks."""

    async def record_run(self, run: RunRecord) -> None:
        """Keep ``run`` as the job's last run, and as its last success if it went well.

        Unless the run kept there started later than ``run``, or in the same millisecond with a
        greater token (a run that was replaced, or ended late, does not hide a newer one). One
        round trip.
        """
        ...

    async def job_records(self, jobs: Sequence[str] | None = None) -> list[JobRecord]:
        """Return the records of ``jobs`` (every job when ``None``), sorted by job key."""
        ...


@runtime_checkable
class SupportsInspection(Protocol):
    """A store whose locks can be read and broken by an operator."""

    async def read_lock(self, key: str) -> LockInfo | None:
        """Return ``key``'s lock, or ``None`` if the store has no trace of the key."""
        ...

    async def list_locks(self, prefix: str = "", limit: int = 1000) -> list[LockInfo]:
        """Return the locks whose key starts with ``prefix`` (live and released), by key."""
        ...

    async def break_lock(self, key: str) -> LockInfo | None:
        """Free ``key`` whoever holds it; return what held it (``None``: it was not live).

        The next acquire wins at once, with a token greater than every earlier one; the broken
        holder learns it at its next renewal (``detected_by="renewal"``).
        """
        ...


def epoch_ms(moment: datetime) -> int:
    """Return ``moment`` (timezone-aware) as milliseconds since the Unix epoch."""
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def from_epoch_ms(ms: int) -> datetime:
    """Return milliseconds since the Unix epoch as an aware UTC datetime."""
    return _EPOCH + timedelta(milliseconds=ms)


def with_run(record: JobRecord | None, run: RunRecord) -> JobRecord:
    """Return ``record`` with ``run`` kept as its last run (and last success when it went well).

    A run that started before the one kept (or in the same millisecond with a smaller token)
    stays out: a replaced or late run ending last does not hide the newer one.
    """
    last = None if record is None else record.last_run
    success = None if record is None else record.last_success
    if last is None or _order(run) >= _order(last):
        last = run
    if run.outcome == "ok" and (success is None or _order(run) >= _order(success)):
        success = run
    return JobRecord(run.job, last, success)


def _order(run: RunRecord) -> tuple[datetime, int]:
    # runs that started in the same millisecond: the greater token is the newer run
    return run.started_at, -1 if run.fencing_token is None else run.fencing_token


def run_row(run: RunRecord) -> dict[str, object]:
    """Return ``run`` as the columns a SQL store keeps (times as epoch milliseconds)."""
    return {
        "job": run.job,
        "instance": run.instance,
        "fencing_token": run.fencing_token,
        "started_at_ms": epoch_ms(run.started_at),
        "ended_at_ms": epoch_ms(run.ended_at),
        "outcome": run.outcome,
        "error": run.error,
        "trigger": run.trigger,
        "detected_by": run.detected_by,
    }


RUN_ROW_COLUMNS: Final = 10

RunRow: TypeAlias = Sequence[object]
"""``(job, kind, instance, fencing_token, started_at_ms, ended_at_ms, outcome, error, trigger,
detected_by)``, where ``kind`` is ``"last"`` or ``"success"``."""


def job_records_from_rows(rows: Iterable[RunRow]) -> list[JobRecord]:
    """Return the job records the rows of a SQL store's runs table make, by job key."""
    last: dict[str, RunRecord] = {}
    success: dict[str, RunRecord] = {}
    for row in rows:
        kind = row[1]
        run = run_from_row([row[0], *row[2:]])
        (success if kind == "success" else last)[run.job] = run
    return job_records_of(last, success)


def job_records_of(
    last: Mapping[str, RunRecord], success: Mapping[str, RunRecord]
) -> list[JobRecord]:
    """Return the job records of each job's last run and last success, by job key."""
    return [
        JobRecord(job, last.get(job), success.get(job)) for job in sorted(last.keys() | success)
    ]


def run_from_row(row: Sequence[object]) -> RunRecord:
    """Return the run a store keeps as a row.

    The row is ``(job, instance, fencing_token, started_at_ms, ended_at_ms, outcome, error,
    trigger, detected_by)``.
    """
    job, instance, token, started_at_ms, ended_at_ms, outcome, error, trigger, detected_by = row
    return RunRecord(
        job=str(job),
        instance=str(instance),
        fencing_token=None if token is None else int(cast("int", token)),
        started_at=from_epoch_ms(int(cast("int", started_at_ms))),
        ended_at=from_epoch_ms(int(cast("int", ended_at_ms))),
        outcome=_outcome(outcome),
        error=None if error is None else str(error),
        trigger=cast("RunTrigger", trigger if trigger in get_args(RunTrigger) else "schedule"),
        detected_by=None if detected_by is None else str(detected_by),
    )


def run_from_json(text: str) -> RunRecord:
    """Return the run a store keeps as the JSON object of :func:`run_row`."""
    kept = json.loads(text)
    return run_from_row(
        [
            kept["job"],
            kept["instance"],
            kept["fencing_token"],
            kept["started_at_ms"],
            kept["ended_at_ms"],
            kept["outcome"],
            kept["error"],
            kept.get("trigger"),
            kept.get("detected_by"),
        ]
    )


def _outcome(value: object) -> RunOutcome:
    if value not in get_args(RunOutcome):
        # an outcome a newer leaselock wrote: it reads as an error rather than fail the listing
        return "error"
    return cast("RunOutcome", value)


@runtime_checkable
class SupportsDiscard(Protocol):
    """A store whose keys share a prefix, all of which can be deleted at once."""

    async def discard_prefix(self) -> int:
        """Delete every key under this store's prefix (locks, counters, lines, run records).

        For a prefix of one's own that nothing will use again, such as ``leaselock check``'s.
        Never on a prefix an application uses: its fencing counters would start over, and a
        paused holder's stale token could then be handed out again. Returns how many keys went.
        """
        ...
