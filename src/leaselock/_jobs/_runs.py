"""JobRuns: the runs of decorated jobs on one Locks: leases kept, run locks taken, and handover.

A tick of a job becomes a run in :meth:`JobRuns.begin` (or a skip, reported as an event) and
ends in :meth:`JobRuns.end`, which keeps the run's outcome in the store. The sticky lease
``<key>:owner`` is taken at the first tick that finds it free and kept, renewed, while ticks
keep coming: once ``owner_idle`` has passed since its last tick ended (its run, or its skip),
with no tick in between, it is handed back. A run past its ``max_run`` gives its run lock up.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import statistics
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, final

from .._clock import Clock, TimerHandle
from .._engine import Lease, Lock, LockEngine, release_logged
from .._errors import LockNotAcquiredError, LocksConfigurationError, LockStoreError
from .._event_types import (
    LeaseAcquired,
    LockHandedBack,
    RunEnded,
    RunStarted,
    RunTrigger,
    SkipReason,
)
from .._events import Publisher
from .._keys import holder_name
from ..stores._common._capabilities import RunOutcome
from ..stores._common._job_control import RunStart, RunStartAnswer
from ._control import JobControl
from ._current import RunInfo
from ._follow_ups import FollowUps, RunAgain
from ._overdue import OverdueWatch
from ._records import RunRecords, WallTime
from ._skips import Skips
from ._spec import JobSpec

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["JobRun", "JobRuns"]

_log = logging.getLogger("leaselock.jobs")

# instances firing the same tick differ by less than this: a lease handed back sooner would let
# one of them run the tick a second time
SAME_TICK_MS = 1000
# with no owner_idle set, the owner lets go after this many of the intervals it saw between ticks
# (and SAME_TICK_MS at least: back-to-back ticks have intervals of a store round trip)
IDLE_INTERVALS = 3
# the ticks remembered to derive that interval
TICKS_SEEN = 5


@final
@dataclass(eq=False, slots=True)
class JobRun:
    """One run of a job: the lock ``current_lock()`` returns, and what to undo at the end.

    ``info`` is what ``current_run()`` returns; ``failures_before`` the job's failure streak
    when it started, where the store keeps job control (``None`` elsewhere); ``owned`` the
    job's lease its tick came through (``on_one_instance``), which is not idle until it ends;
    ``ending`` whether its end has begun.
    """

    spec: JobSpec
    lock: Lock
    run_lease: Lease | None
    unlink: Callable[[], None] | None
    started_ms: int
    info: RunInfo
    failures_before: int | None = None
    cap: TimerHandle | None = None
    span: Span | None = None
    owned: _OwnedLease | None = None
    ending: bool = False


@final
@dataclass(eq=False, slots=True)
class _OwnedLease:
    lease: Lease
    lock: Lock
    last_started_ms: int
    ticks: deque[int]
    # the ticks that came through it and have not ended yet: it is idle only at none
    busy: int = 0
    idle_check: TimerHandle | None = None


@final
class JobRuns:
    """Begins and ends the runs of one Locks' jobs; hands their leases back at shutdown."""

    __slots__ = (
        "_active",
        "_clock",
        "_closing",
        "_default_ttl_ms",
        "_engine",
        "_events",
        "_guards",
        "_idle",
        "_last_skip",
        "_leases",
        "_skips",
        "control",
        "follow_ups",
        "overdue",
        "records",
    )

    def __init__(
        self,
        engine: LockEngine,
        clock: Clock,
        events: Publisher,
        *,
        default_ttl_ms: int,
        instance: str,
    ) -> None:
        """Create the runs of a Locks whose engine, clock, events and instance are given."""
        wall = WallTime(clock)
        self.records = RunRecords(engine.operator, wall, instance)
        self.overdue = OverdueWatch(engine.operator, clock, wall, events, instance=instance)
        self.control = JobControl(engine.operator, wall, events, instance=instance)
        self.follow_ups = FollowUps(engine.operator, clock, wall, default_ttl_ms=default_ttl_ms)
        self._engine = engine
        self._clock = clock
        self._events = events
        self._default_ttl_ms = default_ttl_ms
        self._leases: dict[str, _OwnedLease] = {}
        self._guards: dict[str, asyncio.Lock] = {}
        # an ordered set: shutdown gives up runs in the order they began
        self._active: dict[JobRun, None] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing = False
        self._skips = Skips(clock, events, engine.telemetry)
        self._last_skip: dict[str, SkipReason] = {}

    async def begin(
        self,
        spec: JobSpec,
        trigger: RunTrigger = "schedule",
        run_again: RunAgain | None = None,
        tick: datetime | None = None,
    ) -> JobRun | None:
        """Turn a tick into a run, or skip it (``None``) and say why.

        A ``"manual"`` run (``run_now``) ignores pauses and the lease: it runs here, under the
        run lock ``<key>``. A store failure skips the tick: it never reaches the scheduler, and
        no lock is believed held. ``run_again`` runs the job later, should a second look at a
        skipped tick find it must (``catch_up``, ``recover``). ``tick`` is the scheduled time
        the run is for (a job with a declared schedule): a tick started anywhere is skipped.
        """
        if trigger == "schedule":
            self.follow_ups.ticked(spec, self._clock.now_ms())
        self._last_skip.pop(spec.key, None)
        run = await self._begin_or_skip(spec, trigger, tick)
        skipped = self._last_skip.get(spec.key)
        if run is None and skipped is not None and run_again is not None:
            self.follow_ups.after_skip(spec, trigger, skipped, run_again)
        return run

    async def _begin_or_skip(
        self, spec: JobSpec, trigger: RunTrigger, tick: datetime | None
    ) -> JobRun | None:
        if self._closing:
            if trigger == "manual":
                raise LocksConfigurationError(
                    f"run_now({spec.key!r}): this Locks is shutting down; run it on an instance "
                    "that is not"
                )
            self._skip(spec, "shutting-down")
            return None
        # every instance that sees the job's ticks watches it, the owner or not
        self.overdue.watch(spec)
        try:
            return await self._begin(spec, trigger, tick)
        except LockStoreError as error:
            if trigger == "manual":
                raise
            _log.warning("The lock store failed at a tick of %s: %s", spec.key, error)
            self._skip(spec, "store-unavailable")
            return None

    async def _begin(
        self, spec: JobSpec, trigger: RunTrigger, tick: datetime | None
    ) -> JobRun | None:
        if not spec.one_instance or trigger == "manual":
            return await self._begin_run(spec, trigger, None, tick)
        owned = await self._lease_for(spec)
        if not isinstance(owned, _OwnedLease):
            self.control.skipped_elsewhere(spec, owned)
            self._skip(spec, "another-instance", holder=owned)
            return None
        run = None
        try:
            run = await self._begin_run(spec, trigger, owned, tick)
        finally:
            if run is None:
                self._tick_ended(spec, owned)
        return run

    async def _begin_run(
        self,
        spec: JobSpec,
        trigger: RunTrigger,
        owned: _OwnedLease | None,
        tick: datetime | None,
    ) -> JobRun | None:
        """Start a run of a tick that came through ``owned`` (or needs no lease), or skip it."""
        manual = trigger == "manual"
        lease_token = None if owned is None else owned.lease.fencing_token
        started_ms = self._clock.now_ms()
        started_at = self.records.wall.at(started_ms)
        start = self.control.start(spec, trigger, lease_token, started_at, tick)
        started = await self._start(spec, start, manual=manual)
        if started is None:
            return None
        run_lease, answer = started
        if owned is not None and not owned.lease.held:
            # the lease was lost while the run lock was taken: another instance may run now
            if run_lease is not None:
                await release_logged(self._engine.lock(run_lease))
            self._skip(spec, "another-instance", holder=None)
            return None
        if run_lease is not None:
            lock = self._engine.lock(run_lease)
            unlink = None if owned is None else self._tie(owned.lease, run_lease)
        else:
            assert owned is not None  # noqa: S101 -- a job has one of the two
            lock, unlink = owned.lock, None
        info = RunInfo(spec.key, lock, trigger, started_at, tick=tick)
        failures_before = None
        if start is not None and answer is not None:
            ending_here = [
                run.lock.fencing_token for run in self._active if run.spec is spec and run.ending
            ]
            try:
                judged = await self.control.judge_start(
                    spec, start, answer, lock.fencing_token, ending_here=ending_here
                )
            except BaseException:
                self._abandon_start(run_lease, unlink)
                raise
            info = replace(info, previous=judged.previous, abandoned=judged.abandoned)
            failures_before = judged.failures
        run = JobRun(spec, lock, run_lease, unlink, started_ms, info, failures_before, owned=owned)
        self._events.emit(
            RunStarted(
                key=lock.key,
                fencing_token=lock.fencing_token,
                owner=self._owner_of(run),
                job=spec.key,
                trigger=trigger,
                tick=tick,
            )
        )
        telemetry = self._engine.telemetry
        if telemetry is not None:
            run.span = telemetry.start_span(
                f"leaselock.job {spec.key}", lock.key, lock.fencing_token
            )
        if run_lease is not None and spec.max_run_ms is not None:
            run.cap = self._clock.call_at(run.started_ms + spec.max_run_ms, self._capper(run))
        self._skips.ran(spec)
        self._active[run] = None
        self._idle.clear()
        return run

    def _stop_replaced(self, spec: JobSpec, token: int | None) -> None:
        """A newer run took the run lock: the run it replaced aborts now, if it runs here."""
        for run in list(self._active):
            if run.spec is spec and run.run_lease is not None and run.lock.fencing_token == token:
                self._engine.give_up(run.run_lease, "replaced")

    def _abandon_start(self, run_lease: Lease | None, unlink: Callable[[], None] | None) -> None:
        """Let go of a run cancelled before it began: its lock must not stay renewed for ever."""
        if unlink is not None:
            unlink()
        if run_lease is not None:
            self._engine.spawn(self._engine.hand_back(run_lease, 0))

    async def _start(
        self, spec: JobSpec, start: RunStart | None, *, manual: bool
    ) -> tuple[Lease | None, RunStartAnswer | None] | None:
        """Take the run lock if asked, and start the run where the store keeps job control.

        One round trip either way. A manual run always takes the run lock ``<key>``. Returns
        the run lock and the store's answer, or ``None`` when the tick was skipped (paused, or
        a run in progress).

        Raises:
            LockNotAcquiredError: a manual run found a run in progress.
        """
        answers: list[RunStartAnswer] = []
        run_lease = None
        if spec.no_overlap or manual:
            ttl_ms = spec.no_overlap_ttl_ms or spec.one_instance_ttl_ms or self._default_ttl_ms
            acquire = None if start is None else self._engine.operator.starter(start, answers)
            taken = await self._engine.try_once(spec.key, ttl_ms, acquire=acquire)
            # stopped before the lock: paused, or its tick ran
            refused = bool(answers) and answers[0].taken is None
            if not isinstance(taken, Lease) and not refused:
                if manual:
                    raise LockNotAcquiredError(
                        spec.key,
                        0,
                        hint=f"a run of the job holds it now ({holder_name(taken.holder)}); "
                        "run it again once that run ended",
                    )
                self._skip(spec, "in-progress", holder=taken.holder)
                return None
            run_lease = taken if isinstance(taken, Lease) else None
        elif start is not None:
            answers.append(await self._engine.operator.start_run(start))
        answer = answers[0] if answers else None
        if answer is not None and answer.pause is not None:
            self._skip(spec, "paused", holder=answer.pause.paused_by, note=answer.pause.note)
            return None
        if answer is not None and answer.tick_ran is not None:
            ran = answer.tick_ran
            self._skip(
                spec,
                "tick-already-run",
                holder=ran.instance,
                note=f"tick {ran.at.isoformat(timespec='milliseconds')} with fencing token "
                f"{ran.fencing_token}",
            )
            return None
        if answer is not None and answer.open_run is not None and spec.overlap == "replace":
            self._stop_replaced(spec, answer.open_run.fencing_token)
        return run_lease, answer

    def _capper(self, run: JobRun) -> Callable[[], Awaitable[None]]:
        async def cap() -> None:
            if run not in self._active or run.run_lease is None or not run.run_lease.held:
                return
            _log.warning(
                "%s has run for %d ms, past its max_run: its signal aborts and its run lock is "
                "released, so the next tick can start",
                run.spec.key,
                self._clock.now_ms() - run.started_ms,
                extra={"job": run.spec.key, "reason": "max_run"},
            )
            self._engine.give_up(run.run_lease, "max_run")

        return cap

    def _tie(self, lease: Lease, run_lease: Lease) -> Callable[[], None]:
        """Make the run's signal abort when the lease is lost: another instance may run now."""
        return lease.signal.add_callback(
            lambda reason: self._engine.give_up(run_lease, reason.detected_by)
        )

    async def _lease_for(self, spec: JobSpec) -> _OwnedLease | str | None:
        """Return the job's lease held here, or the owner id of the instance holding it."""
        key = spec.key
        # two ticks of one job on this instance must not race each other for its lease
        guard = self._guards.setdefault(key, asyncio.Lock())
        async with guard:
            owned = self._leases.get(key)
            now_ms = self._clock.now_ms()
            if owned is not None and owned.lease.held:
                self._ticked(owned, now_ms)
                return owned
            taken = await self._engine.try_once(
                spec.lease_key, spec.one_instance_ttl_ms or self._default_ttl_ms
            )
            if not isinstance(taken, Lease):
                return taken.holder
            owned = _OwnedLease(taken, self._engine.lock(taken), now_ms, deque(maxlen=TICKS_SEEN))
            self._leases[key] = owned
            self._ticked(owned, now_ms)
            self._events.emit(
                LeaseAcquired(
                    key=taken.key, fencing_token=taken.fencing_token, owner=taken.owner, job=key
                )
            )
            return owned

    def _ticked(self, owned: _OwnedLease, now_ms: int) -> None:
        """Note a tick the owner saw: the lease is busy until it ends (:meth:`_tick_ended`)."""
        owned.last_started_ms = now_ms
        owned.ticks.append(now_ms)
        owned.busy += 1
        if owned.idle_check is not None:
            owned.idle_check.cancel()
            owned.idle_check = None

    def _tick_ended(self, spec: JobSpec, owned: _OwnedLease) -> None:
        """End a tick that came through ``owned``; the last to end starts its idle time."""
        owned.busy -= 1
        if owned.busy or self._leases.get(spec.key) is not owned or self._closing:
            return
        idle_ms = spec.owner_idle_ms or _derived_idle_ms(owned.ticks)
        if idle_ms is not None:
            owned.idle_check = self._clock.call_at(
                self._clock.now_ms() + idle_ms, self._idler(spec, owned)
            )

    def _idler(self, spec: JobSpec, owned: _OwnedLease) -> Callable[[], Awaitable[None]]:
        async def let_go() -> None:
            # under the ticks' guard: a tick that comes meanwhile waits for the hand-back, then
            # takes the lease afresh, instead of finding it on its way back to the store
            async with self._guards[spec.key]:
                mine = self._leases.get(spec.key) is owned and owned.lease.held
                if not mine or owned.busy or self._closing:
                    return
                del self._leases[spec.key]
                self._events.emit(
                    LockHandedBack(
                        key=owned.lease.key,
                        fencing_token=owned.lease.fencing_token,
                        owner=owned.lease.owner,
                        reason="idle",
                        job=spec.key,
                    )
                )
                await self._engine.hand_back(owned.lease, 0)

        return let_go

    async def end(self, run: JobRun, outcome: RunOutcome, error: str | None) -> bool:
        """End ``run``: release its run lock (a failure is logged), then record how it went.

        The lease is kept. A run whose lock was lost meanwhile is recorded ``"lost"`` whatever
        it returned. With ``min_hold``, a run that ended sooner keeps its run lock at the store
        for the rest of it (one last renewal, no waiting), so duplicates of its tick skip.
        Returns whether a tick came during it for a job with ``overlap="buffer_one"``: the
        caller runs the job once more.
        """
        ended_ms = self._clock.now_ms()
        # its run lock is released before its end reaches the store: a start in between finds
        # it open, and must not take it for abandoned
        run.ending = True
        if run.lock.signal.reason is not None:
            outcome = "lost"
        try:
            if run.cap is not None:
                run.cap.cancel()
            if run.unlink is not None:
                run.unlink()
            if run.run_lease is not None:
                keep_ms = (run.spec.min_hold_ms or 0) - (ended_ms - run.started_ms)
                await self._engine.hand_back(run.run_lease, keep_ms)
            buffered = await self._record_end(run, outcome, error, ended_ms)
            telemetry = self._engine.telemetry
            if telemetry is not None:
                telemetry.job_ran(run.spec.key, outcome, (ended_ms - run.started_ms) / 1000)
                if run.span is not None:
                    telemetry.end_span(run.span, error, lost=outcome == "lost")
        finally:
            self._active.pop(run, None)
            if not self._active:
                self._idle.set()
            if run.owned is not None:
                self._tick_ended(run.spec, run.owned)
        return buffered and run.spec.overlap == "buffer_one" and not self._closing

    async def _record_end(
        self, run: JobRun, outcome: RunOutcome, error: str | None, ended_ms: int
    ) -> bool:
        """Keep the run's end in the store, tell its events, and count its failure streak.

        Returns whether a tick was noted during the run (``overlap="buffer_one"``).
        """
        recorded = await self.records.record(
            run.spec.key,
            fencing_token=run.lock.fencing_token,
            started_ms=run.started_ms,
            ended_ms=ended_ms,
            outcome=outcome,
            error=error,
            trigger=run.info.trigger,
            closes_open_run=run.failures_before is not None,
        )
        if recorded is None and run.failures_before is not None:
            self.control.end_unrecorded(run.spec, run.lock.fencing_token)
        self._events.emit(
            RunEnded(
                key=run.lock.key,
                fencing_token=run.lock.fencing_token,
                owner=self._owner_of(run),
                job=run.spec.key,
                outcome=outcome,
                error=error,
                duration_ms=ended_ms - run.started_ms,
                trigger=run.info.trigger,
            )
        )
        if outcome == "ok":
            self.overdue.succeeded(run.spec.key)
        elif outcome == "error" and run.failures_before is not None:
            await self.control.failed(
                run.spec,
                run.failures_before,
                error,
                fencing_token=run.lock.fencing_token,
                owner=self._owner_of(run),
            )
        return recorded is not None and recorded.buffered

    async def drain(self, grace_ms: int) -> None:
        """Skip new ticks and wait up to ``grace_ms`` for runs in progress to finish.

        Runs still going after the grace lose their locks (``detected_by="shutdown"``).
        """
        self._closing = True
        self.overdue.close()
        self.follow_ups.close()
        if not self._active:
            return
        grace_over = asyncio.get_running_loop().create_future()
        timer = self._clock.call_at(self._clock.now_ms() + grace_ms, _resolver(grace_over))
        idle = asyncio.ensure_future(self._idle.wait())
        try:
            await asyncio.wait({idle, grace_over}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            idle.cancel()
        for run in list(self._active):
            _log.warning(
                "%s was still running %d ms into shutdown; its locks are given up",
                run.spec.key,
                grace_ms,
            )
            for lease in (run.run_lease, self._owned_lease(run.spec)):
                if lease is not None:
                    self._engine.give_up(lease, "shutdown")

    def _owner_of(self, run: JobRun) -> str | None:
        lease = run.run_lease or self._owned_lease(run.spec)
        return None if lease is None else lease.owner

    def _owned_lease(self, spec: JobSpec) -> Lease | None:
        owned = self._leases.get(spec.key)
        return None if owned is None else owned.lease

    async def hand_back_leases(self) -> None:
        """Hand every lease back now, so the next tick anywhere takes over.

        A lease whose job started less than a second ago is kept for the rest of that second
        (shortened at the store, not waited for): instances firing the same tick then skip it.
        """
        now_ms = self._clock.now_ms()
        for owned in self._leases.values():
            if owned.idle_check is not None:
                owned.idle_check.cancel()
            if owned.lease.held:
                self._events.emit(
                    LockHandedBack(
                        key=owned.lease.key,
                        fencing_token=owned.lease.fencing_token,
                        owner=owned.lease.owner,
                        reason="shutdown",
                    )
                )
        await asyncio.gather(
            *(
                self._engine.hand_back(owned.lease, owned.last_started_ms + SAME_TICK_MS - now_ms)
                for owned in self._leases.values()
            )
        )
        self._leases.clear()

    def _skip(
        self,
        spec: JobSpec,
        reason: SkipReason,
        *,
        holder: str | None = None,
        note: str | None = None,
    ) -> None:
        self._last_skip[spec.key] = reason
        owned = self._leases.get(spec.key)
        self._skips.skip(
            spec,
            reason,
            holder=holder,
            note=note,
            fencing_token=None if owned is None else owned.lease.fencing_token,
            owner=None if owned is None else owned.lease.owner,
        )


def _derived_idle_ms(ticks: deque[int]) -> int | None:
    """Three times the median interval between the ticks seen, a second at least.

    None before two intervals, or while the median is 0 (ticks at one instant show no period).
    """
    if len(ticks) < 3:  # noqa: PLR2004 -- two intervals at least, or one odd gap decides
        return None
    intervals = [later - earlier for earlier, later in itertools.pairwise(ticks)]
    idle_ms = int(IDLE_INTERVALS * statistics.median(intervals))
    return max(idle_ms, SAME_TICK_MS) if idle_ms else None


def _resolver(future: asyncio.Future[None]) -> Callable[[], Awaitable[None]]:
    async def resolve() -> None:
        if not future.done():
            future.set_result(None)

    return resolve
