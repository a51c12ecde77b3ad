"""An optional store capability for jobs under an operator's hand: pauses, open runs, streaks.

A store with it decides a run's start in ONE round trip: the pause check, the run lock's acquire
and the "this run is open" write happen in one atomic step, and its answer carries what the job
layer needs to judge the run (the open run it replaced, the last run, the failure streak). A
store without it keeps working: its jobs cannot be paused, and abandoned runs go unnoticed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, TypeAlias, cast, final, get_args, runtime_checkable

from ..._event_types import RunTrigger
from ._capabilities import RunRecord, epoch_ms, from_epoch_ms
from ._protocol import AcquireResult, NotAcquired

__all__ = [
    "JobPause",
    "JobState",
    "OpenRun",
    "RunStart",
    "RunStartAnswer",
    "SupportsJobControl",
    "TickRun",
    "WhenBusy",
    "open_run_fields",
    "open_run_from_fields",
    "open_run_from_json",
    "open_run_json",
    "pause_from_json",
    "pause_json",
    "pause_matches",
    "refusing_tick",
    "tick_run_fields",
    "tick_run_from_fields",
    "tick_run_from_json",
    "tick_run_json",
]


WhenBusy: TypeAlias = Literal["skip", "buffer", "replace"]
"""What a start does when a live lock holds its run lock: nothing (``"skip"``); note one trigger
for the holder's end (``"buffer"``); or take the lock from it (``"replace"``)."""


@final
@dataclass(frozen=True, slots=True)
class JobPause:
    """A pause an operator put on a job, or on every job under a prefix.

    Attributes:
        target: a job key, or a prefix ending in ``*`` (``"reports.*"`` pauses every job whose
            key starts with ``"reports."``).
        note: why, for the people who see the skipped ticks.
        paused_by: who paused it (an instance label or a person's name).
        paused_at: when (UTC).
        until: when it ends by itself (UTC), or ``None``: until resumed.
    """

    target: str
    note: str
    paused_by: str
    paused_at: datetime
    until: datetime | None = None

    def live(self, now: datetime) -> bool:
        """Whether it still pauses at ``now``."""
        return self.until is None or self.until > now


@final
@dataclass(frozen=True, slots=True)
class OpenRun:
    """A run that started and has not ended, as the store keeps it.

    Attributes:
        instance: the label of the instance running it.
        fencing_token: its token.
        started_at: when it started (UTC, the running instance's clock).
        trigger: why it started: ``"schedule"``, ``"manual"`` or ``"buffered"``.
    """

    instance: str
    fencing_token: int | None
    started_at: datetime
    trigger: RunTrigger = "schedule"


@final
@dataclass(frozen=True, slots=True)
class TickRun:
    """The latest scheduled tick a run of a job started for, as the store keeps it.

    Attributes:
        at: the tick's scheduled time (UTC): its id, with the job's key.
        instance: the label of the instance whose run started for it.
        fencing_token: that run's token.
    """

    at: datetime
    instance: str
    fencing_token: int | None


@final
@dataclass(frozen=True, slots=True)
class RunStart:
    """What the job layer asks at a run's start.

    Attributes:
        job: the job's key.
        open_run: the run to keep as open; its ``fencing_token`` is ignored when ``take_key``
            is given (the token taken there is kept instead).
        take_key: a lock to take for ``owner`` for ``ttl_ms`` in the same step (the run lock),
            or ``None`` when the run's lock is already held (the job's lease).
        owner: the owner id of the lock to take.
        ttl_ms: its ttl.
        ignore_pause: start even if paused (a manual run).
        when_busy: what to do when a live lock holds ``take_key``: ``"skip"`` (write nothing),
            ``"buffer"`` (remember one trigger, which the holder's :meth:`end_run` answers),
            ``"replace"`` (take it anyway, with a greater token: the holder's renewals fail).
        tick: the scheduled time (UTC) this run is for, or ``None`` (a job with no declared
            schedule, a manual run). A start for a tick at or before the job's last started
            tick is refused, writing nothing; a start that goes on keeps its tick as the last.
    """

    job: str
    open_run: OpenRun
    take_key: str | None = None
    owner: str = ""
    ttl_ms: int = 0
    ignore_pause: bool = False
    when_busy: WhenBusy = "skip"
    tick: datetime | None = None


@final
@dataclass(frozen=True, slots=True)
class RunStartAnswer:
    """What the store answered to a :class:`RunStart`.

    Attributes:
        taken: the acquire's result when ``take_key`` was given and the job was not paused,
            else ``None``.
        pause: the pause that stopped the run (nothing was taken or written), else ``None``.
        open_run: the open run the store held for the job before this start (this start
            replaced it), else ``None``.
        last_run: the job's last finished run before this start, else ``None``.
        failures: how many runs in a row ended in ``"error"`` before this start.
        tick_ran: the job's last started tick when it stopped this start (the start's tick
            was at or before it: nothing was taken or written), else ``None``.
    """

    taken: AcquireResult | None
    pause: JobPause | None = None
    open_run: OpenRun | None = None
    last_run: RunRecord | None = None
    failures: int = 0
    tick_ran: TickRun | None = None

    @property
    def started(self) -> bool:
        """Whether the run may start: not paused, its tick not run, its lock taken if asked."""
        return (
            self.pause is None and self.tick_ran is None and not isinstance(self.taken, NotAcquired)
        )


@final
@dataclass(frozen=True, slots=True)
class JobState:
    """What the store knows of one job beside its run records.

    Attributes:
        job: the key.
        open_run: the run in progress (or abandoned) as the store kept it, else ``None``.
        failures: runs in a row that ended in ``"error"``.
        missed_at: the last tick found missed (its owner never started it), else ``None``.
        last_tick: the latest scheduled tick a run started for, else ``None``.
    """

    job: str
    open_run: OpenRun | None
    failures: int
    missed_at: datetime | None
    last_tick: TickRun | None = None

    @property
    def worth_listing(self) -> bool:
        """Whether it says anything: a run open, a failure streak, a missed or a started tick."""
        return bool(
            self.open_run
            or self.failures
            or self.missed_at is not None
            or self.last_tick is not None
        )


@runtime_checkable
class SupportsJobControl(Protocol):
    """A store that keeps pauses and open runs, and starts a run in one round trip."""

    async def start_run(self, start: RunStart) -> RunStartAnswer:
        """Start a run of ``start.job`` unless paused, atomically, in one round trip.

        Unless ``start.ignore_pause``, a live :class:`JobPause` whose target matches the job
        stops the start: nothing is taken or written. So does a ``start.tick`` at or before the
        job's last started tick (``tick_ran`` is that tick). Else, when ``start.take_key`` is
        given, it is acquired as :meth:`~leaselock.stores.LockStore.acquire` would; if a live
        lock holds it, ``start.when_busy`` says what happens: ``"skip"`` writes nothing,
        ``"buffer"`` notes one trigger for the job, ``"replace"`` takes the key anyway with a
        greater token.
        A start that goes on makes ``start.open_run`` (with the token taken, if any) the job's
        open run, ``start.tick`` (if any) its last started tick, and clears a noted trigger. The
        answer carries the state from before the start. Starts racing for one tick: one goes on.
        """
        ...

    async def end_run(self, run: RunRecord) -> bool:
        """Record ``run`` as ``record_run`` does, close it if it is the open run, and count it.

        The open run is cleared when its token and start are ``run``'s; the failure streak
        grows by one for ``"error"``, goes to 0 for ``"ok"``, and is kept otherwise. Returns
        whether a trigger was noted (``when_busy="buffer"``) while ``run`` was the open run,
        clearing it: the caller runs the job once more.
        """
        ...

    async def note_missed(self, job: str, missed_at: datetime) -> None:
        """Record that the tick of ``missed_at`` of ``job`` was never started."""
        ...

    async def pause_jobs(self, pause: JobPause) -> None:
        """Keep ``pause`` (replacing any pause of the same target)."""
        ...

    async def resume_jobs(self, target: str) -> JobPause | None:
        """Remove the pause of ``target``; return it, or ``None`` if there was none."""
        ...

    async def job_pauses(self) -> list[JobPause]:
        """Return every pause kept (live or past its ``until``), by target."""
        ...

    async def job_states(self, jobs: Sequence[str] | None = None) -> list[JobState]:
        """Return the states of ``jobs`` (every job when ``None``), by job.

        Only jobs with something to say are listed (:attr:`JobState.worth_listing`): a run
        open, a failure streak, a missed tick, or a started tick.
        """
        ...


def pause_matches(target: str, job: str) -> bool:
    """Whether a pause of ``target`` (a key, or a prefix ending in ``*``) covers ``job``."""
    if target.endswith("*"):
        return job.startswith(target[:-1])
    return job == target


def pause_json(pause: JobPause) -> str:
    """Return ``pause`` as the JSON a store keeps (times as epoch milliseconds)."""
    return json.dumps(
        {
            "note": pause.note,
            "by": pause.paused_by,
            "at_ms": epoch_ms(pause.paused_at),
            "until_ms": None if pause.until is None else epoch_ms(pause.until),
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def pause_from_json(target: str, text: str | bytes) -> JobPause:
    """Return the pause of ``target`` a store kept as :func:`pause_json`."""
    kept = json.loads(text)
    until_ms = kept.get("until_ms")
    return JobPause(
        target=target,
        note=str(kept.get("note") or ""),
        paused_by=str(kept.get("by") or ""),
        paused_at=from_epoch_ms(int(kept["at_ms"])),
        until=None if until_ms is None else from_epoch_ms(int(until_ms)),
    )


def open_run_json(run: OpenRun, fencing_token: int | None) -> str:
    """Return ``run`` with ``fencing_token`` as the JSON a store keeps."""
    return json.dumps(
        open_run_fields(run, fencing_token), ensure_ascii=False, separators=(",", ":")
    )


def open_run_fields(run: OpenRun, fencing_token: int | None) -> dict[str, object]:
    """Return ``run`` with ``fencing_token`` as the fields of :func:`open_run_json`."""
    # the token last: a store that writes the token itself appends it to the rest
    return {
        "instance": run.instance,
        "started_at_ms": epoch_ms(run.started_at),
        "trigger": run.trigger,
        "token": fencing_token,
    }


def open_run_from_json(text: str | bytes | None) -> OpenRun | None:
    """Return the open run a store kept as :func:`open_run_json`, or ``None``."""
    return None if text is None else open_run_from_fields(json.loads(text))


def open_run_from_fields(kept: dict[str, Any]) -> OpenRun:
    """Return the open run of :func:`open_run_fields`' fields."""
    token = kept.get("token")
    trigger = kept.get("trigger")
    return OpenRun(
        instance=str(kept.get("instance") or ""),
        fencing_token=None if token is None else int(token),
        started_at=from_epoch_ms(int(kept["started_at_ms"])),
        trigger=cast("RunTrigger", trigger if trigger in get_args(RunTrigger) else "schedule"),
    )


def refusing_tick(start: RunStart, last: TickRun | None) -> TickRun | None:
    """Return ``last`` (the job's last started tick) if it refuses ``start``, else ``None``.

    It refuses a start for the same tick or an earlier one, compared in whole milliseconds, as
    stores keep ticks: a tick read back from a store equals the one written.
    """
    if start.tick is None or last is None or epoch_ms(start.tick) > epoch_ms(last.at):
        return None
    return last


def tick_run_fields(tick: datetime, instance: str, fencing_token: int | None) -> dict[str, object]:
    """Return a started tick as the fields of :func:`tick_run_json`."""
    return {"at_ms": epoch_ms(tick), "instance": instance, "token": fencing_token}


def tick_run_json(tick: datetime, instance: str, fencing_token: int | None) -> str:
    """Return a started tick as the JSON a store keeps (its time as epoch milliseconds)."""
    return json.dumps(
        tick_run_fields(tick, instance, fencing_token), ensure_ascii=False, separators=(",", ":")
    )


def tick_run_from_json(text: str | bytes | None) -> TickRun | None:
    """Return the started tick a store kept as :func:`tick_run_json`, or ``None``."""
    return None if text is None else tick_run_from_fields(json.loads(text))


def tick_run_from_fields(kept: dict[str, Any]) -> TickRun:
    """Return the started tick of :func:`tick_run_fields`' fields."""
    token = kept.get("token")
    return TickRun(
        at=from_epoch_ms(int(kept["at_ms"])),
        instance=str(kept.get("instance") or ""),
        fencing_token=None if token is None else int(token),
    )
