"""JobRuntime: the jobs and elections of one Locks: registration, runs, campaigns, shutdown.

The facade (:class:`~leaselock.Locks`) makes one runtime when it is made, starts it with its
engine and event loop, and closes it first at shutdown. A decorated function finds the runtime
that runs it (:func:`resolve_runtime`) and runs each tick through it, from whichever loop or
thread calls it; the runtime never knows the facade.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import functools
import inspect
import logging
import weakref
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar, final

from .._clock import Clock
from .._engine import CURRENT_LOCK, LockEngine
from .._errors import LocksConfigurationError
from .._event_types import RunTrigger
from .._events import Publisher
from .._forks import process_generation, refuse_if_forked
from .._threads import await_on_loop, call_in_loop, running_loop, start_on_loop
from ..stores._common._capabilities import RunOutcome
from ..stores._common._job_control import JobPause
from ._bindings import Bindings, Started
from ._campaign import Campaign
from ._cancel import CancelOnLoss
from ._clock_offset import ClockOffsetWatch, offset_bound_ms
from ._current import CURRENT_RUN
from ._follow_ups import RunAgain
from ._pauses import build_pause, checked_target
from ._records import describe_error
from ._registry import Registry
from ._runs import JobRun, JobRuns
from ._schedule import latest_slot, nearest_slot, next_slot
from ._spec import ElectionSpec, JobSpec, election_spec_of, job_spec_of
from ._status import JobsReader, JobStatus, job_statuses

__all__ = [
    "CURRENT_RUNTIME",
    "JobRuntime",
    "current_runtime",
    "resolve_runtime",
]

T = TypeVar("T")

_log = logging.getLogger("leaselock.jobs")


class _Phase(enum.Enum):
    NEW = "new"
    STARTED = "started"
    CLOSING = "closing"
    CLOSED = "closed"


@final
@dataclass(frozen=True, slots=True)
class _When:
    """Which tick a run is for.

    The one that fired at ``fired_ms`` on this Locks' clock (now, when ``None``): a scheduled
    tick, or one skipped that a later look runs (caught up, recovered). For a buffered run, the
    tick after ``follows``, the tick of the run it waited for.
    """

    fired_ms: int | None = None
    follows: datetime | None = None


_NOW: Final = _When()

# the triggers whose skipped tick may be looked at again: a scheduled tick, and a follow-up's
# own run refused by the dead holder's still-live lock
_LOOKED_AGAIN: Final = frozenset({"schedule", "catch-up", "recover"})
"""The tick that fires now: a scheduler's call."""


@final
class JobRuntime:
    """Registers, runs and stops the jobs and elections of one Locks.

    Args:
        clock: the Locks' clock.
        events: where runs, skips and leadership are reported.
        default_ttl_ms: the lease length of jobs and elections that set none.
        min_ttl_ms: the shortest ttl the clock can honour (checked at start).
    """

    __slots__ = (
        "_calls",
        "_campaigns",
        "_clock",
        "_clock_offset",
        "_default_ttl_ms",
        "_engine",
        "_events",
        "_generation",
        "_loop",
        "_min_ttl_ms",
        "_phase",
        "_registry",
        "_runs",
        "_tasks",
    )

    def __init__(
        self, clock: Clock, events: Publisher, *, default_ttl_ms: int, min_ttl_ms: int
    ) -> None:
        """Create a runtime with nothing registered; :meth:`start` starts it."""
        self._clock = clock
        self._events = events
        self._default_ttl_ms = default_ttl_ms
        self._min_ttl_ms = min_ttl_ms
        self._registry = Registry()
        self._phase = _Phase.NEW
        self._generation = process_generation()
        self._engine: LockEngine | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runs: JobRuns | None = None
        self._clock_offset: ClockOffsetWatch | None = None
        self._campaigns: dict[ElectionSpec, Campaign] = {}
        # an ordered set: close() cancels them in the order they started
        self._tasks: dict[asyncio.Task[None], None] = {}
        self._calls: weakref.WeakKeyDictionary[JobSpec, _Call] = weakref.WeakKeyDictionary()

    # --- registration ----------------------------------------------------------------------

    def check(self) -> None:
        """Refuse key conflicts and ttls the clock cannot honour; make election participants.

        Raises:
            LocksConfigurationError: naming what is wrong and how to fix it.
        """
        self._registry.check(self._min_ttl_ms)
        self._registry.participants()

    def bind_job(self, spec: JobSpec) -> None:
        """Bind ``spec`` to this runtime for good (the bound form, ``@locks.on_one_instance``).

        Raises:
            LocksConfigurationError: ``spec`` is bound to another runtime already.
        """
        bound = _BOUND_FORMS.get(spec)
        if bound is not None and bound is not self:
            raise LocksConfigurationError(
                f"{spec.describe()} is bound to two different Locks; bind it to one"
            )
        _BOUND_FORMS[spec] = self
        self._registry.add_job(spec)

    def bind_election(self, spec: ElectionSpec) -> None:
        """Campaign in ``spec`` (the bound form, ``@locks.leader_election``)."""
        self._registry.add_election(spec, None)

    def register(self, target: object) -> None:
        """Record the jobs and elections ``target`` carries, run by this runtime.

        Raises:
            LocksConfigurationError: ``target`` carries none, or (once started) a key conflict.
        """
        found = False
        spec = job_spec_of(target)
        if spec is not None:
            self._registry.add_job(spec)
            BINDINGS.bind(spec, self)
            found = True
        election = election_spec_of(target)
        if election is not None:
            self._registry.add_election(election, None if isinstance(target, type) else target)
            found = True
        if not isinstance(target, type) and not inspect.isfunction(target):
            for _, member in inspect.getmembers_static(type(target)):
                method_spec = job_spec_of(member)
                if method_spec is not None:
                    self._registry.add_method_job(method_spec, target)
                    found = True
            if found:
                BINDINGS.bind(target, self)
        if not found:
            raise LocksConfigurationError(
                f"{target!r} carries no leaselock job or election; decorate its methods with "
                "@leaselock.on_one_instance / @leaselock.without_overlapping, or its class with "
                "@leaselock.leader_election(key), then register it"
            )
        if self._phase is _Phase.STARTED:
            self._serve_late_registrations()

    def _serve_late_registrations(self) -> None:
        """Check, watch and campaign for what was registered after the start."""
        self._registry.check(self._min_ttl_ms)
        if self._engine is not None:
            self._check_job_control(self._engine)
        if self._runs is not None:
            for job in self._registry.jobs:
                self._runs.overdue.watch(job)
        for campaign in self._new_campaigns():
            self._spawn(campaign.start())

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self, engine: LockEngine) -> None:
        """Start on the running loop: campaign once in every election, so each has a leader.

        What this context starts next (a scheduler, its jobs' tasks) runs under this runtime.
        """
        self._check_job_control(engine)
        self._engine = engine
        self._loop = asyncio.get_running_loop()
        self._generation = process_generation()
        self._runs = JobRuns(
            engine,
            self._clock,
            self._events,
            default_ttl_ms=self._default_ttl_ms,
            instance=engine.instance,
        )
        for spec in self._registry.jobs:
            self._runs.overdue.watch(spec)
        self._clock_offset = ClockOffsetWatch(
            engine.operator,
            self._clock,
            self._events,
            instance=engine.instance,
            bound_ms=lambda: offset_bound_ms(self._registry.jobs),
        )
        self._phase = _Phase.STARTED
        _STARTED.add(self)
        CURRENT_RUNTIME.set(self)
        await asyncio.gather(*(campaign.start() for campaign in self._new_campaigns()))

    def _check_job_control(self, engine: LockEngine) -> None:
        self._registry.check_job_control(
            engine.store.inner, keeps_job_control=engine.operator.keeps_job_control
        )

    async def close(self, grace_ms: int) -> None:
        """Step down from elections, let runs finish (up to ``grace_ms``), hand leases back."""
        self._phase = _Phase.CLOSING
        _STARTED.discard(self)
        BINDINGS.unbind(self)
        if CURRENT_RUNTIME.get() is self:
            CURRENT_RUNTIME.set(None)
        if self._clock_offset is not None:
            self._clock_offset.close()
        try:
            await asyncio.gather(*(campaign.stop() for campaign in self._campaigns.values()))
            if self._runs is not None:
                await self._runs.drain(grace_ms)
                await self._runs.hand_back_leases()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            self._phase = _Phase.CLOSED
            # a Locks whose start failed may start again: it campaigns afresh then
            self._campaigns.clear()

    def _new_campaigns(self) -> list[Campaign]:
        assert self._engine is not None  # noqa: S101 -- called once started
        fresh = []
        for spec, participant in self._registry.participants():
            if spec in self._campaigns:
                continue
            campaign = Campaign(
                spec,
                participant,
                self._engine,
                self._clock,
                self._events,
                default_ttl_ms=self._default_ttl_ms,
                spawn=self._spawn,
            )
            self._campaigns[spec] = campaign
            fresh.append(campaign)
        return fresh

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks[task] = None
        task.add_done_callback(self._forget_task)
        return task

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    # --- job status --------------------------------------------------------------------------

    async def job_statuses(self, jobs: Sequence[str] | None, engine: LockEngine) -> list[JobStatus]:
        """Return the status of ``jobs``; every job recorded or registered when ``None``.

        Raises:
            LocksConfigurationError: the store keeps no run records.
            LockStoreError: the store failed or did not answer in time.
        """
        overdue = None if self._runs is None else self._runs.overdue
        if jobs is None:
            recorded = {record.job for record in await engine.operator.job_records(None)}
            jobs = sorted(recorded | {spec.key for spec in self._registry.jobs})
        offset = None
        if self._clock_offset is not None:
            measured = self._clock_offset.last or await self._clock_offset.measure()
            offset = None if measured is None else measured.offset
        return await job_statuses(engine.operator, overdue, jobs, clock_offset=offset)

    def jobs_reader(self) -> JobsReader:
        """Return a reader of this store's job data, for a watcher that paces its store calls.

        Raises:
            LocksConfigurationError: not started.
        """
        engine = self._engine
        if engine is None or self._runs is None:
            raise LocksConfigurationError(
                "This Locks is not started; use `async with locks:` or `await locks.start()` first"
            )
        return JobsReader(
            engine.operator,
            self._runs.overdue,
            lambda: [spec.key for spec in self._registry.jobs],
        )

    # --- pauses ----------------------------------------------------------------------------

    async def pause(
        self, engine: LockEngine, target: object, *, note: object, until: object, by: object
    ) -> JobPause:
        """Pause ``target`` (a job key, or a prefix ending in ``*``) in the store, for everyone.

        Raises:
            LocksConfigurationError: a bad argument, or a store that keeps no job control.
            LockStoreError: the store failed or did not answer in time.
        """
        assert self._runs is not None  # noqa: S101 -- the facade calls it once started
        paused_by = engine.instance if by is None else by
        pause = build_pause(
            target, note=note, until=until, paused_by=paused_by, now=self._runs.records.wall.now()
        )
        await engine.operator.pause_jobs(pause)
        # no log line here: the facade's operator-acted event is the line, naming who asked
        return pause

    async def resume(self, engine: LockEngine, target: object) -> JobPause | None:
        """Remove the pause of ``target``; its next tick runs (no backlog). Returns the pause.

        Raises:
            LocksConfigurationError: a bad target, or a store that keeps no job control.
            LockStoreError: the store failed or did not answer in time.
        """
        # no log line here: the facade's operator-acted event is the line, naming who asked
        return await engine.operator.resume_jobs(checked_target(target))

    # --- running ticks -----------------------------------------------------------------------

    async def run_async(
        self,
        spec: JobSpec,
        function: Callable[..., Coroutine[Any, Any, T]],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> T | None:
        """Run one tick of an async job from any loop: a run under its lock, or ``None``."""
        self._calls[spec] = _Call(function, args, kwargs)
        return await self._run_async(spec, function, args, kwargs, "schedule")

    async def _run_async(
        self,
        spec: JobSpec,
        function: Callable[..., Coroutine[Any, Any, T]],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        trigger: RunTrigger,
        *,
        when: _When = _NOW,
    ) -> T | None:
        again = self._again(spec, function, args, kwargs) if trigger in _LOOKED_AGAIN else None
        run = await self._begin_from_any_loop(spec, trigger, again, when)
        if run is None:
            return None
        token = CURRENT_LOCK.set(run.lock)
        current = CURRENT_RUN.set(run.info)
        # a replaced run stops: its work is the newer run's now
        cancels = spec.cancel_on_loss or spec.overlap == "replace"
        cancelled_for_loss = CancelOnLoss(run) if cancels else None
        ending = _Ending()
        try:
            return await function(*args, **kwargs)
        except asyncio.CancelledError as cancelled:
            ending.cancelled()
            if cancelled_for_loss is not None:
                cancelled_for_loss.raise_the_loss_instead(cancelled)
            raise
        except BaseException as error:
            ending.failed(error)
            raise
        finally:
            if cancelled_for_loss is not None:
                cancelled_for_loss.stop()
            CURRENT_RUN.reset(current)
            CURRENT_LOCK.reset(token)
            if await self._on_own_loop(self._end(run, ending)):
                self._run_again(
                    spec, function, args, kwargs, "buffered", when=_When(follows=run.info.tick)
                )

    def run_sync(
        self,
        spec: JobSpec,
        function: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> T | None:
        """Run one tick of a sync job in this thread, while its lock is renewed on the loop.

        Raises:
            LocksConfigurationError: not started, or called on a thread that runs an event loop
                (waiting here would freeze it).
        """
        self._calls[spec] = _Call(function, args, kwargs)
        return self._run_sync(spec, function, args, kwargs, "schedule")

    def _run_sync(
        self,
        spec: JobSpec,
        function: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        trigger: RunTrigger,
        *,
        when: _When = _NOW,
    ) -> T | None:
        loop = self._usable_loop()
        if running_loop() is not None:
            raise LocksConfigurationError(
                "A sync leaselock job was called on a thread that runs an event loop (from a "
                "coroutine), which waiting would freeze, with the renewals it needs if it is "
                "this Locks' loop; make the job async, or run it in a worker thread "
                "(asyncio.to_thread; APScheduler does this for sync jobs)"
            )
        again = self._again(spec, function, args, kwargs) if trigger in _LOOKED_AGAIN else None
        run = call_in_loop(loop, self._begin(spec, trigger, again, when))
        if run is None:
            return None
        token = CURRENT_LOCK.set(run.lock)
        current = CURRENT_RUN.set(run.info)
        ending = _Ending()
        try:
            return function(*args, **kwargs)
        except BaseException as error:
            ending.failed(error)
            raise
        finally:
            CURRENT_RUN.reset(current)
            CURRENT_LOCK.reset(token)
            if call_in_loop(loop, self._end(run, ending)):
                self._run_again(
                    spec, function, args, kwargs, "buffered", when=_When(follows=run.info.tick)
                )

    def _again(
        self,
        spec: JobSpec,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> RunAgain:
        """Return how a later look at this tick runs the job again, for ``trigger``."""

        def run_again(trigger: RunTrigger, fired_ms: int) -> None:
            self._run_again(spec, function, args, kwargs, trigger, when=_When(fired_ms))

        return run_again

    def _run_again(
        self,
        spec: JobSpec,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        trigger: RunTrigger,
        *,
        when: _When,
    ) -> None:
        """Start a run no scheduler fired: buffered, caught up, or recovering a dead run.

        It runs on this runtime's loop (a sync job in a worker thread), recorded with
        ``trigger``; what it raises is logged, as no scheduler waits for it. ``when`` says
        which tick it is for.
        """
        run_sync = functools.partial(self._run_sync, when=when)

        async def again() -> None:
            try:
                if inspect.iscoroutinefunction(function):
                    await self._run_async(spec, function, args, kwargs, trigger, when=when)
                else:
                    await asyncio.to_thread(run_sync, spec, function, args, kwargs, trigger)
            except Exception:  # noqa: BLE001 -- no scheduler waits for this run: it is logged
                _log.exception("The %s run of %s raised", trigger, spec.key)

        loop = self._usable_loop()
        loop.call_soon_threadsafe(lambda: self._spawn(again()))

    def job_spec(self, key: str) -> JobSpec:
        """Return the registered job ``key``.

        Raises:
            LocksConfigurationError: no job ``key`` is registered with this Locks.
        """
        return self._registry.job(key)

    async def run_now(self, key: str) -> object:
        """Run the job ``key`` once here, now, under its run lock, whatever its pause or lease.

        Called with the arguments of its last tick on this instance, else with its registered
        object (a method), else with none. Recorded with ``trigger="manual"``.

        Raises:
            LocksConfigurationError: no job ``key`` is registered with this Locks, or not
                started.
            LockNotAcquiredError: a run of the job holds its run lock now.
            LockStoreError: the store failed or did not answer in time.
        """
        spec = self._registry.job(key)
        call = self._calls.get(spec) or _Call(spec.function, self._registry.bound_args(spec), {})
        if inspect.iscoroutinefunction(call.function):
            return await self._run_async(spec, call.function, call.args, call.kwargs, "manual")
        return await asyncio.to_thread(
            self._run_sync, spec, call.function, call.args, call.kwargs, "manual"
        )

    async def _begin(
        self,
        spec: JobSpec,
        trigger: RunTrigger = "schedule",
        run_again: RunAgain | None = None,
        when: _When = _NOW,
    ) -> JobRun | None:
        self._usable_loop()
        if running_loop() is not self._loop:
            raise LocksConfigurationError(
                "This Locks was started on another event loop; use it from the loop that "
                "started it, or SyncLocks from threads"
            )
        assert self._runs is not None  # noqa: S101 -- set by start()
        if self._clock_offset is not None and not self._clock_offset.started:
            # the first tick seen here: from now on this instance's clock decides ticks
            measured = self._clock_offset.start()
            if spec.schedule is None:
                self._spawn(measured)
            else:
                # this tick is placed on the schedule with the offset: measure it first
                await measured
        tick = self._tick(spec, trigger, when)
        return await self._runs.begin(spec, trigger, run_again, tick)

    def _tick(self, spec: JobSpec, trigger: RunTrigger, when: _When) -> datetime | None:
        """The scheduled time (UTC) a run of ``spec`` is for, where it declares a schedule.

        The moment the tick fired here (now, unless a later look runs it), on the store's
        clock as far as measured, falls nearest to it. A manual run is its own tick (``None``).
        A buffered run is for the tick after the one its run waited for, or a later one.
        """
        schedule = spec.schedule
        if schedule is None or trigger == "manual":
            return None
        assert self._runs is not None  # noqa: S101 -- set by start()
        fired_ms = self._clock.now_ms() if when.fired_ms is None else when.fired_ms
        measured = None if self._clock_offset is None else self._clock_offset.last
        at = self._runs.records.wall.at(fired_ms) + (
            timedelta(0) if measured is None else measured.offset
        )
        if when.follows is not None:
            return max(next_slot(schedule, when.follows), latest_slot(schedule, at))
        return nearest_slot(schedule, at)

    async def _end(self, run: JobRun, ending: _Ending) -> bool:
        assert self._runs is not None  # noqa: S101 -- a run exists only once started
        return await self._runs.end(run, ending.outcome, ending.error)

    async def _begin_from_any_loop(
        self,
        spec: JobSpec,
        trigger: RunTrigger,
        run_again: RunAgain | None,
        when: _When,
    ) -> JobRun | None:
        loop = self._usable_loop()
        if running_loop() is loop:
            return await self._begin(spec, trigger, run_again, when)
        begun = start_on_loop(loop, self._begin(spec, trigger, run_again, when))
        try:
            return await asyncio.wrap_future(begun)
        except asyncio.CancelledError:
            # the run may have begun on our loop as the caller left: end it there, or its run
            # lock would be renewed, and every later tick skipped, for ever
            begun.add_done_callback(functools.partial(self._end_orphaned_run, loop))
            raise

    def _end_orphaned_run(
        self,
        loop: asyncio.AbstractEventLoop,
        begun: concurrent.futures.Future[JobRun | None],
    ) -> None:
        if begun.cancelled() or begun.exception() is not None:
            return
        run = begun.result()
        if run is not None:
            ending = _Ending()
            ending.cancelled()
            start_on_loop(loop, self._end(run, ending))

    async def _on_own_loop(self, work: Coroutine[Any, Any, T]) -> T:
        loop = self._loop
        if loop is None:
            return await work
        return await await_on_loop(loop, work)

    def _usable_loop(self) -> asyncio.AbstractEventLoop:
        refuse_if_forked(self._generation, "Locks")
        # runs are served while started, and while closing: their ticks are skipped then
        if self._phase in (_Phase.STARTED, _Phase.CLOSING) and self._loop is not None:
            return self._loop
        raise LocksConfigurationError(
            f"This Locks is {self._phase.value}, not started; use `async with locks:` "
            "or `await locks.start()` first"
        )


@final
@dataclass(frozen=True, slots=True)
class _Call:
    """How a job was last called here: what ``run_now`` calls it with."""

    function: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]


@final
class _Ending:
    """How a run ended, as its caller saw it: ok until it raised or was cancelled."""

    __slots__ = ("error", "outcome")

    def __init__(self) -> None:
        self.outcome: RunOutcome = "ok"
        self.error: str | None = None

    def cancelled(self) -> None:
        self.outcome = "cancelled"

    def failed(self, error: BaseException) -> None:
        if isinstance(error, Exception):
            self.outcome, self.error = "error", describe_error(error)
        else:
            # KeyboardInterrupt, SystemExit: the run was stopped, it did not fail
            self.outcome = "cancelled"


BINDINGS: Bindings[JobRuntime] = Bindings()
"""Registrations of this process (``locks.register(obj)``); undone when their Locks closes."""

# the bound forms (@locks.on_one_instance): for good, like the decoration itself
_BOUND_FORMS: weakref.WeakKeyDictionary[JobSpec, JobRuntime] = weakref.WeakKeyDictionary()

CURRENT_RUNTIME: ContextVar[JobRuntime | None] = ContextVar(
    "leaselock.current_runtime", default=None
)
"""The runtime of the Locks running this code (set at its start, and inside its ``hold``)."""


_STARTED: Started[JobRuntime] = Started()


def current_runtime() -> JobRuntime | None:
    """Return the runtime running this code, else the one started in this process, else None.

    With several started and none running this code, there is no single answer: ``None``.
    """
    return CURRENT_RUNTIME.get() or _STARTED.only()


def resolve_runtime(spec: JobSpec, args: tuple[Any, ...]) -> JobRuntime:
    """Return the runtime that runs this call of the job.

    In order: the Locks the decorator was bound to, the one the function or its object was
    registered with, the one running the caller, the only one started in this process.

    Raises:
        LocksConfigurationError: no runtime can be found; the message names both fixes.
    """
    found = _BOUND_FORMS.get(spec) or BINDINGS.get(spec)
    if found is None and args:
        found = BINDINGS.get(args[0])
    found = found or current_runtime()
    if found is not None:
        return found
    raise LocksConfigurationError(
        f"{spec.describe()} is a leaselock job, but no Locks runs it. Register it with the Locks "
        "of this application (locks.register(job_object) or locks.register(function)), or call "
        "it where a Locks is started (inside `async with locks:`)"
    )
