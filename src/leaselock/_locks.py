"""Locks: the entry point. Options, lifecycle, and the three ways to take a lock."""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from types import TracebackType
from typing import Any, Final, TypeVar, Unpack, final, overload

from ._clock import Clock, SystemClock
from ._durations import MIN_REAL_TTL_MS, Duration, check_ttl_floor, parse_ttl, parse_wait
from ._engine import CheckedStore, Lock, LockEngine, LockSignal, check_store_shape
from ._errors import LocksConfigurationError
from ._event_log import EventLog
from ._event_types import OperatorActed
from ._events import Events, Publisher
from ._forks import process_generation, refuse_if_forked
from ._hold import LockHold
from ._jobs import (
    F,
    JobDecorator,
    JobRuntime,
    JobStatus,
    OnOneInstanceOptions,
    WithoutOverlappingOptions,
    election_decorator,
    job_decorator,
)
from ._keys import default_instance, validate_instance, validate_key
from ._redact import redact_secrets
from ._telemetry import telemetry_for
from ._threads import run_sync_in_worker, running_loop
from .stores._common._capabilities import LockInfo
from .stores._common._job_control import JobPause
from .stores._common._protocol import LockStore, SupportsLifecycle
from .stores.memory import InMemoryLockStore

__all__ = ["Locks", "runtime_of"]

T = TypeVar("T")

_log = logging.getLogger("leaselock")

PRODUCTION_ENV_VARS = ("LEASELOCK_ENV", "ENV", "APP_ENV")


class _Phase(enum.Enum):
    NEW = "new"
    STARTED = "started"
    CLOSING = "closing"
    CLOSED = "closed"

    # by identity, as equality is: Enum's own hash is a Python call, and every call of a
    # Locks looks its phase up in _USABLE
    __hash__ = object.__hash__


# calls are served while started, and while closing: runs in progress may still take locks
_USABLE = frozenset({_Phase.STARTED, _Phase.CLOSING})


_ONE_PROCESS_ONLY: Final = (
    ": in-memory, it excludes callers in this process only; pass a store that every instance "
    "shares (SQLiteLockStore on one host, PostgresLockStore, RedisLockStore...) to exclude "
    "other processes"
)


@final
class Locks:
    """Distributed lease locks with fencing tokens, on one store shared by every instance.

    Example::

        locks = Locks(store=SQLiteLockStore("locks.db"), ttl="30s")
        async with locks:
            async with locks.hold("invoice:42", wait="2s") as lock:
                await export(fencing_token=lock.fencing_token, signal=lock.signal)

    Args:
        store: where every instance's locks meet. ``None`` means the in-memory store, which
            excludes callers in ONE process only; refused at start when ``LEASELOCK_ENV``,
            ``ENV`` or ``APP_ENV`` is ``production``, unless ``allow_in_memory_storage``.
        ttl: the default lease length; a holder renews every ``ttl / 3``.
        clock: the source of time; :class:`~leaselock.testing.ManualClock` in tests.
        allow_in_memory_storage: accept the in-memory default even in production (one process).
        shutdown_grace: how long shutdown waits for job runs in progress to finish.
        instance: this instance's label, kept with every lease it takes so that messages and
            tools name a place a person recognises (default ``hostname:pid``, read at start).
        event_log: append every event, as a line of JSON, to this file from start to close:
            what ``leaselock timeline`` draws who held what from. Each instance may write
            its own file, or all one. An instance that writes nothing else between two
            renewals also records the second (``"renewed"``), so a holder that dies without a
            recorded end is drawn as held up to its last renewal. The file is rotated past 50
            MB (two backups kept); pass an :class:`EventLog` to choose its bound.
        opentelemetry: record OpenTelemetry metrics and spans through the process's providers
            (see ``leaselock[otel]``): ``None`` (default) where ``opentelemetry-api`` is
            installed, ``True`` to require it, ``False`` never.

    Raises:
        LocksConfigurationError: an argument is wrong; the message says how to fix it.

    .. versionadded:: 0.1
    """

    __slots__ = (
        "_allow_in_memory_storage",
        "_clock",
        "_closing",
        "_engine",
        "_event_log",
        "_generation",
        "_instance",
        "_loop",
        "_min_ttl_ms",
        "_phase",
        "_publisher",
        "_runtime",
        "_shutdown_grace_ms",
        "_store",
        "_store_defaulted",
        "_telemetry",
        "_ttl_ms",
        "events",
    )

    def __init__(
        self,
        store: LockStore | None = None,
        ttl: Duration = "30s",
        clock: Clock | None = None,
        allow_in_memory_storage: bool = False,
        *,
        shutdown_grace: Duration = "30s",
        instance: str | None = None,
        event_log: str | os.PathLike[str] | EventLog | None = None,
        opentelemetry: bool | None = None,
    ) -> None:
        """Configure; nothing touches the store before :meth:`start`."""
        if not isinstance(allow_in_memory_storage, bool):
            raise LocksConfigurationError(
                f"allow_in_memory_storage={allow_in_memory_storage!r}; pass True or False"
            )
        if clock is not None and not isinstance(clock, Clock):
            raise LocksConfigurationError(
                f"clock={clock!r} is not a clock; pass None (the system clock) or "
                "leaselock.testing.ManualClock() in tests"
            )
        self._clock: Clock = clock if clock is not None else SystemClock()
        # a test clock moves only when told, so any ttl it can divide by three works on it
        self._min_ttl_ms = MIN_REAL_TTL_MS if isinstance(self._clock, SystemClock) else 3
        self._ttl_ms = check_ttl_floor(parse_ttl(ttl), self._min_ttl_ms)
        self._shutdown_grace_ms = parse_wait(shutdown_grace, name="shutdown_grace")
        self._instance = None if instance is None else validate_instance(instance)
        self._telemetry = telemetry_for(opentelemetry, self.instance)
        self._event_log = (
            event_log
            if event_log is None or isinstance(event_log, EventLog)
            else EventLog(event_log)
        )
        self._store_defaulted = store is None
        self._store: LockStore = (
            InMemoryLockStore(clock=self._clock) if store is None else check_store_shape(store)
        )
        self._allow_in_memory_storage = allow_in_memory_storage
        self._phase = _Phase.NEW
        self._generation = process_generation()
        self._engine: LockEngine | None = None
        self._closing: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.events = Events()
        self._publisher = Publisher(self.events)
        self._runtime = JobRuntime(
            self._clock, self._publisher, default_ttl_ms=self._ttl_ms, min_ttl_ms=self._min_ttl_ms
        )

    @property
    def store(self) -> LockStore:
        """The store every lock of this ``Locks`` lives in."""
        return self._store

    @property
    def clock(self) -> Clock:
        """The clock every wait, renewal and deadline reads."""
        return self._clock

    @property
    def ttl_ms(self) -> int:
        """The default lease length, in milliseconds."""
        return self._ttl_ms

    @property
    def instance(self) -> str:
        """This instance's label: the one given, else ``hostname:pid`` of this process."""
        return self._instance or default_instance()

    @property
    def started(self) -> bool:
        """Whether :meth:`start` ran and :meth:`aclose` has not."""
        return self._phase is _Phase.STARTED

    async def start(self) -> None:
        """Check the configuration, open the store, and log which store is in use.

        Raises:
            LocksConfigurationError: started twice, or the in-memory default in production.
        """
        if self._phase is not _Phase.NEW:
            raise LocksConfigurationError(
                f"This Locks is already {self._phase.value}; create a new Locks to start again"
            )
        self._refuse_in_memory_default_in_production()
        self._runtime.check()
        self._generation = process_generation()
        if self._event_log is not None:
            self._event_log.open(self.instance)
            self.events.subscribe(self._event_log.write)
        if isinstance(self._store, SupportsLifecycle):
            await self._store.open()
        try:
            engine = LockEngine(
                CheckedStore(self._store),
                self._clock,
                self._publisher,
                instance=self.instance,
                telemetry=self._telemetry,
                on_renewed=None if self._event_log is None else self._event_log.renewed,
            )
            self._engine = engine
            await engine.start()
            self._loop = asyncio.get_running_loop()
            self._phase = _Phase.STARTED
            _log.info(
                "leaselock started on %s (ttl %d ms)%s",
                redact_secrets(repr(self._store)),
                self._ttl_ms,
                _ONE_PROCESS_ONLY if isinstance(self._store, InMemoryLockStore) else "",
            )
            # what this context starts next (a scheduler, its jobs' tasks) runs under this Locks
            await self._runtime.start(engine)
        except BaseException:
            # undo what started, so a failed start leaves no pool, listener or lease behind
            await self._close_everything()
            self._phase, self._closing = _Phase.NEW, None
            raise

    async def aclose(self) -> None:
        """Release every held lock and close the store; a failure here is logged, never raised.

        In order: elections step down, job runs in progress finish (up to ``shutdown_grace``),
        their leases are handed back, and locks still held are lost with
        ``detected_by="shutdown"`` (their signals abort). Waiting for runs reads this Locks'
        clock: with a :class:`~leaselock.testing.ManualClock` that is never advanced (a paused
        instance in a test), end the runs first, or advance it past the grace.
        """
        if self._phase is _Phase.NEW:
            self._phase = _Phase.CLOSED
            return
        if self._closing is None:
            if self._phase is not _Phase.STARTED:
                return
            self._closing = asyncio.get_running_loop().create_task(self._close_everything())
        # shielded: a shutdown timeout that cancels this wait must not stop the closing half-way;
        # another aclose() waits for the same closing
        await asyncio.shield(self._closing)

    async def _close_everything(self) -> None:
        self._phase = _Phase.CLOSING
        try:
            await self._runtime.close(self._shutdown_grace_ms)
        except Exception:  # noqa: BLE001 -- shutdown goes on; leases expire after their ttl
            _log.exception("Stopping jobs and elections failed; their leases expire after ttl")
        self._phase = _Phase.CLOSED
        if self._engine is not None:
            try:
                await self._engine.close()
            except Exception:  # noqa: BLE001 -- shutdown goes on; the locks expire after ttl
                _log.exception("Releasing locks at shutdown failed; they expire after their ttl")
        if isinstance(self._store, SupportsLifecycle):
            try:
                await self._store.aclose()
            except Exception:  # noqa: BLE001 -- the application's own shutdown must go on
                _log.exception("Closing %s failed", redact_secrets(repr(self._store)))
        self._publisher.close()
        if self._event_log is not None:
            self._event_log.close()

    async def __aenter__(self) -> Locks:
        """Start, and return this ``Locks``."""
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close (see :meth:`aclose`)."""
        await self.aclose()

    async def acquire(
        self,
        key: str,
        *,
        ttl: Duration | None = None,
        wait: Duration = 0,
        signal: LockSignal | None = None,
    ) -> Lock | None:
        """Take the lock on ``key``, waiting up to ``wait`` for it.

        Waiting retries with backoff (50 ms doubling to 1 s, jittered), and wakes at once when the
        key is released in this process, or anywhere where the store can tell.

        Args:
            key: what the lock protects; 1 to 500 characters, compared exactly.
            ttl: the lease length (default: the ``Locks`` ttl); renewed every ``ttl / 3``.
            wait: how long to keep trying; 0 tries once.
            signal: stop waiting when this signal aborts (e.g. the signal of an outer lock).

        Returns:
            The held :class:`Lock` (release it, or use ``async with``), or ``None`` if the key
            stayed held by another owner for the whole wait.

        Raises:
            LocksConfigurationError: an argument is wrong, or this ``Locks`` is not started.
            LockStoreError: the store failed (on the last attempt, when waiting).
            LockLostError: ``signal`` aborted before the lock was taken.
        """
        key, ttl_ms, wait_ms, engine = self._checked(key, ttl, wait, signal)
        lease = await engine.acquire(key, ttl_ms, wait_ms, signal)
        return None if lease is None else engine.lock(lease)

    def hold(
        self,
        key: str,
        *,
        ttl: Duration | None = None,
        wait: Duration = 0,
        signal: LockSignal | None = None,
        cancel_on_loss: bool = False,
    ) -> AbstractAsyncContextManager[Lock]:
        """Hold the lock on ``key`` for an ``async with`` block; release it when the block ends.

        Inside the block, :func:`current_lock` returns the lock.

        Args:
            key: as for :meth:`acquire`.
            ttl: as for :meth:`acquire`.
            wait: as for :meth:`acquire`.
            signal: as for :meth:`acquire`.
            cancel_on_loss: cancel the task running the block when the lock is lost; the block
                then raises :class:`LockLostError` instead of ``CancelledError``.

        Raises:
            LockNotAcquiredError: (on entry) the key stayed held for the whole wait.
            LocksConfigurationError: an argument is wrong.
        """
        key, ttl_ms, wait_ms, engine = self._checked(key, ttl, wait, signal)
        _check_flag("cancel_on_loss", cancel_on_loss)
        return LockHold(
            self._runtime,
            lambda: self._acquire(key, ttl_ms, wait_ms, signal),
            key=key,
            wait_ms=wait_ms,
            cancel_on_loss=cancel_on_loss,
            telemetry=engine.telemetry,
        )

    @overload
    async def with_lock(
        self,
        key: str,
        fn: Callable[[], Awaitable[T]],
        *,
        ttl: Duration | None = ...,
        wait: Duration = ...,
        signal: LockSignal | None = ...,
        cancel_on_loss: bool = ...,
    ) -> T: ...

    @overload
    async def with_lock(
        self,
        key: str,
        fn: Callable[[], T],
        *,
        ttl: Duration | None = ...,
        wait: Duration = ...,
        signal: LockSignal | None = ...,
        cancel_on_loss: bool = ...,
    ) -> T: ...

    async def with_lock(
        self,
        key: str,
        fn: Callable[[], Any],
        *,
        ttl: Duration | None = None,
        wait: Duration = 0,
        signal: LockSignal | None = None,
        cancel_on_loss: bool = False,
    ) -> Any:
        """Run ``fn()`` while holding the lock on ``key``, and return its result.

        ``fn`` may be async, or sync: a sync ``fn`` runs in a worker thread so that renewals go on,
        and the lock is kept until it returns even if the caller is cancelled (a thread cannot be
        stopped). The lock is always released; a failed release is logged, never raised over
        ``fn``'s result or error.

        Raises:
            LockNotAcquiredError: the key stayed held for the whole wait; ``fn`` did not run.
            LockLostError: with ``cancel_on_loss``, the lock was lost while ``fn`` ran.
            LocksConfigurationError: an argument is wrong.
        """
        if not callable(fn):
            raise LocksConfigurationError(
                f"fn={fn!r} is not callable; pass the function itself (export, not export()), "
                "with functools.partial for arguments"
            )
        is_async = inspect.iscoroutinefunction(fn)
        if cancel_on_loss and not is_async:
            raise LocksConfigurationError(
                f"cancel_on_loss=True needs an async fn, and {fn!r} is sync: a thread cannot be "
                "cancelled. Check current_lock().signal.aborted between steps instead"
            )
        async with self.hold(key, ttl=ttl, wait=wait, signal=signal, cancel_on_loss=cancel_on_loss):
            result = await fn() if is_async else await run_sync_in_worker(fn)
            if inspect.isawaitable(result):
                result = await result
            return result

    def on_one_instance(
        self,
        key: str | None = None,
        ttl: Duration | None = None,
        **options: Unpack[OnOneInstanceOptions],
    ) -> JobDecorator:
        """Run the decorated job on ONE instance of the application.

        The first instance whose tick finds the lease ``<key>:owner`` free takes it, keeps it
        renewed while its ticks keep coming, and runs that tick and every later one: ownership
        is sticky on purpose (instances' clocks differ; a tick is not an instant). Other
        instances' calls return ``None`` without running (``Skipped <key>: it runs on another
        instance (<its label>)``, the first of a streak at INFO, then one summary a minute).
        Works on async and sync functions and methods; their signature is kept.

        Args:
            key: the job's key, default the function's ``__qualname__``; set it on any job
                that must never run twice: a rename changes the default.
            ttl: the lease length (default: this ``Locks``' ttl). A crashed owner costs up to
                ``ttl`` of ticks; they are not caught up.
            **options: see :class:`OnOneInstanceOptions` (owner_idle, cancel_on_loss,
                expect_every, alert_after_failures, pause_after_failures, catch_up,
                catch_up_window, recover).

        Raises:
            LocksConfigurationError: a bad argument (now), or a key conflict (at start).
        """
        return job_decorator("on_one_instance", key, ttl, self._runtime, **options)

    def without_overlapping(
        self,
        key: str | None = None,
        ttl: Duration | None = None,
        **options: Unpack[WithoutOverlappingOptions],
    ) -> JobDecorator:
        """Never let the decorated job overlap itself, on any instance.

        Each run holds the lock ``<key>`` for the whole run (renewed, released at the end); a
        tick that finds it held returns ``None`` (``Skipped <key>: a run is still in
        progress``). With :meth:`on_one_instance` on the same function both share the key, and
        :func:`current_lock` in the run is the run lock: a new fencing token every run. Without
        ``max_run``, a WARNING says so when three ticks in a row found a run in progress.

        Args:
            key: the job's key (default: the function's ``__qualname__``).
            ttl: the run lock's lease length (default: this ``Locks``' ttl).
            **options: see :class:`WithoutOverlappingOptions` (min_hold, max_run,
                cancel_on_loss, expect_every, alert_after_failures, pause_after_failures,
                overlap, recover).

        Raises:
            LocksConfigurationError: a bad argument (now), or a key conflict (at start).
        """
        return job_decorator("without_overlapping", key, ttl, self._runtime, **options)

    def leader_election(self, key: str, ttl: Duration | None = None) -> Callable[[F], F]:
        """Elect one leader for ``key`` among every instance.

        Decorates a class with ``on_leadership_acquired(self, lock)`` and
        ``on_leadership_lost(self, lock)`` (sync or async; an instance is made at start unless
        one is registered), or an async ``duty(lock)`` function run while leading. From start,
        every instance campaigns every ``ttl / 3``, and at once when the key is released (a
        leader stepping down; other processes hear it where the store tells: PostgreSQL,
        Redis); the leader renews its lease. One that steps down leaves the key to the others
        until its own next campaign.

        Raises:
            LocksConfigurationError: a bad key, ttl or target (now), or a key conflict (start).
        """
        return election_decorator(key, ttl, self._runtime)

    def register(self, target: T) -> T:
        """Bind the jobs and elections of ``target`` to this ``Locks``; return ``target``.

        ``target`` is an object whose methods carry the shared decorators
        (``@leaselock.on_one_instance``...), a decorated function, an instance of a class under
        ``leader_election``, or a duty function. Several application instances in one process
        each register their own objects with their own ``Locks``.

        Raises:
            LocksConfigurationError: ``target`` carries no job or election, or a key conflict
                (checked now when already started).
        """
        self._runtime.register(target)
        return target

    # --- for operators -----------------------------------------------------------------------

    async def job_status(self, key: str) -> JobStatus:
        """Return how the job ``key`` last ran (anywhere), and whether and where it runs now.

        Reads the store's run records (every decorated job's runs are recorded, on every
        instance) and the job's two locks: three round trips.

        Raises:
            LocksConfigurationError: not started, a bad key, or a store that keeps no run
                records.
            LockStoreError: the store failed or did not answer in time.

        .. versionadded:: 0.2
        """
        checked = validate_key(key)
        (status,) = await self._runtime.job_statuses([checked], self._running_engine())
        return status

    async def jobs(self) -> list[JobStatus]:
        """Return the status of every job the store has run records of, and this Locks' jobs.

        Sorted by job key. See :meth:`job_status`.

        .. versionadded:: 0.2
        """
        return await self._runtime.job_statuses(None, self._running_engine())

    async def inspect(self, prefix: str = "", *, limit: int = 1000) -> list[LockInfo]:
        """Return the locks whose key starts with ``prefix``, by key, at most ``limit``.

        Each says who holds it (``owner``, and its instance label ``instance``), its token
        where the store keeps one per key, and the time left on the store's clock. Stores that
        keep released keys (SQL) list them too, with ``live`` false.

        Raises:
            LocksConfigurationError: not started, a bad argument, or a store that cannot be
                inspected.
            LockStoreError: the store failed or did not answer in time.

        .. versionadded:: 0.2
        """
        engine = self._running_engine()
        if not isinstance(prefix, str):
            raise LocksConfigurationError(f"prefix={prefix!r}; pass the start of a key, a str")
        if type(limit) is not int or limit < 1:
            raise LocksConfigurationError(f"limit={limit!r}; pass a whole number of 1 or more")
        return await engine.operator.list_locks(prefix, limit)

    async def read_lock(self, key: str) -> LockInfo | None:
        """Return the lock on ``key`` as the store sees it now, or ``None`` if it has no trace.

        Raises:
            LocksConfigurationError: not started, a bad key, or a store that cannot be inspected.
            LockStoreError: the store failed or did not answer in time.

        .. versionadded:: 0.2
        """
        checked = validate_key(key)
        return await self._running_engine().operator.read_lock(checked)

    async def break_lock(self, key: str, *, by: str | None = None) -> LockInfo | None:
        """Free ``key`` whoever holds it; return what held it (``None``: nothing live did).

        For a lock whose holder is stuck or gone: the next acquire anywhere wins at once, with a
        token greater than every earlier one, so a late write of the broken holder is refused
        by fencing. The broken holder learns it at its next renewal (its signal aborts with
        ``detected_by="renewal"``). A break is an :class:`~leaselock.OperatorActed` event
        (logged at WARNING) naming ``by``.

        Args:
            key: the lock to free.
            by: who asks, for the audit trail (default: this instance's label).

        Raises:
            LocksConfigurationError: not started, a bad key, or a store that cannot break locks.
            LockStoreError: the store failed or did not answer in time.

        .. versionadded:: 0.2
        .. versionchanged:: 0.3 ``by``, and the ``operator-acted`` event.
        """
        checked = validate_key(key)
        operator = _operator(by, self.instance)
        broken = await self._running_engine().operator.break_lock(checked)
        if broken is None:
            _log.warning(
                'Asked to break the lock on "%s": no live lock held it; asked by %s',
                checked,
                operator,
            )
        else:
            self._publisher.emit(
                OperatorActed(
                    key=checked,
                    fencing_token=broken.fencing_token,
                    owner=broken.owner,
                    action="break",
                    operator=operator,
                )
            )
        return broken

    async def pause(
        self,
        key_or_prefix: str,
        *,
        note: str = "",
        until: datetime | Duration | None = None,
        by: str | None = None,
    ) -> JobPause:
        """Pause a job, or every job under a prefix, on every instance, in the store.

        Its ticks are skipped (``Skipped <job>: it is paused by <by>: <note>``, a
        ``tick-skipped`` event with ``reason="paused"``) on every instance from their next
        tick, and its overdue alerts are silenced, until :meth:`resume` (or ``until``). A run in
        progress finishes. Resuming runs the job from its next tick: paused ticks are not
        replayed.

        Args:
            key_or_prefix: a job's key, or a prefix ending in ``*`` (``"reports:*"``; ``"*"``:
                every job).
            note: why, shown with every skipped tick and in ``leaselock jobs``.
            until: an aware datetime, or a duration from now (``"2h"``), after which the pause
                ends by itself; ``None``: until resumed.
            by: who pauses (default: this instance's label); kept with the pause, and named
                by its :class:`~leaselock.OperatorActed` event.

        Raises:
            LocksConfigurationError: not started, a bad argument, or a store that keeps no job
                control.
            LockStoreError: the store failed or did not answer in time.

        .. versionadded:: 0.2
        """
        engine = self._running_engine()
        pause = await self._runtime.pause(engine, key_or_prefix, note=note, until=until, by=by)
        self._publisher.emit(
            OperatorActed(
                key=pause.target,
                fencing_token=None,
                owner=None,
                action="pause",
                operator=pause.paused_by,
                note=pause.note,
                until=pause.until,
            )
        )
        return pause

    async def resume(self, key_or_prefix: str, *, by: str | None = None) -> JobPause | None:
        """Remove the pause of ``key_or_prefix`` (as given to :meth:`pause`); return it.

        ``None`` when it was not paused. Its next tick runs, on whichever instance. A resume
        that lifted a pause is an :class:`~leaselock.OperatorActed` event naming ``by``
        (default: this instance's label).

        Raises:
            LocksConfigurationError: not started, a bad argument, or a store that keeps no job
                control.
            LockStoreError: the store failed or did not answer in time.

        .. versionadded:: 0.2
        .. versionchanged:: 0.3 ``by``, and the ``operator-acted`` event.
        """
        operator = _operator(by, self.instance)
        removed = await self._runtime.resume(self._running_engine(), key_or_prefix)
        if removed is not None:
            note = f"paused by {removed.paused_by}: {removed.note or 'no note'}"
            self._publisher.emit(
                OperatorActed(
                    key=removed.target,
                    fencing_token=None,
                    owner=None,
                    action="resume",
                    operator=operator,
                    note=note,
                )
            )
        return removed

    async def pauses(self) -> list[JobPause]:
        """Return every pause kept in the store, by target (a job key or a prefix).

        Raises:
            LocksConfigurationError: not started, or a store that keeps no job control.
            LockStoreError: the store failed or did not answer in time.

        .. versionadded:: 0.2
        """
        return await self._running_engine().operator.job_pauses()

    async def run_now(self, key: str, *, by: str | None = None) -> Any:  # noqa: ANN401 -- the job's own return value
        """Run the registered job ``key`` once, here, now; return what it returned.

        It runs under its run lock ``<key>`` (so never beside another run of it), whatever its
        pause and whichever instance owns it, with :func:`current_run` saying
        ``trigger="manual"``; its run is recorded so, and a success counts for its
        ``expect_every``. It is called with the arguments of its last tick on this instance,
        else with its registered object (a method job), else with none. What it raises is
        raised here. Asking is an :class:`~leaselock.OperatorActed` event naming ``by``
        (default: this instance's label), once the job is known to be registered.

        Raises:
            LocksConfigurationError: not started, or no job ``key`` registered with this Locks.
            LockNotAcquiredError: a run of the job holds its run lock now.
            LockStoreError: the store failed or did not answer in time.

        .. versionadded:: 0.2
        .. versionchanged:: 0.3 ``by``, and the ``operator-acted`` event.
        """
        self._running_engine()
        checked = validate_key(key)
        operator = _operator(by, self.instance)
        self._runtime.job_spec(checked)
        self._publisher.emit(
            OperatorActed(
                key=checked, fencing_token=None, owner=None, action="run", operator=operator
            )
        )
        return await self._runtime.run_now(checked)

    def _checked(
        self, key: object, ttl: object, wait: object, signal: object
    ) -> tuple[str, int, int, LockEngine]:
        checked_key = validate_key(key)
        ttl_ms = self._ttl_ms if ttl is None else check_ttl_floor(parse_ttl(ttl), self._min_ttl_ms)
        wait_ms = parse_wait(wait)
        if signal is not None and not isinstance(signal, LockSignal):
            raise LocksConfigurationError(
                f"signal={signal!r} is not a LockSignal; pass the signal of another lock "
                "(lock.signal), or cancel the waiting task instead"
            )
        return checked_key, ttl_ms, wait_ms, self._running_engine()

    def _running_engine(self) -> LockEngine:
        refuse_if_forked(self._generation, "Locks")
        if self._phase not in _USABLE or self._engine is None:
            raise LocksConfigurationError(
                f"This Locks is {self._phase.value}, not started; use `async with locks:` "
                "or `await locks.start()` first"
            )
        if running_loop() is not self._loop:
            raise LocksConfigurationError(
                "This Locks was started on another event loop; use it from the loop that "
                "started it, or SyncLocks from threads"
            )
        return self._engine

    async def _acquire(
        self, key: str, ttl_ms: int, wait_ms: int, signal: LockSignal | None
    ) -> Lock | None:
        engine = self._running_engine()
        lease = await engine.acquire(key, ttl_ms, wait_ms, signal)
        return None if lease is None else engine.lock(lease)

    def _refuse_in_memory_default_in_production(self) -> None:
        if not self._store_defaulted or self._allow_in_memory_storage:
            return
        for name in PRODUCTION_ENV_VARS:
            if os.environ.get(name, "").strip().lower() == "production":
                raise LocksConfigurationError(
                    f"{name}=production, but this Locks has no store and would use the in-memory "
                    "store, which excludes callers in ONE process only: every replica would run "
                    "every job. Pass a shared store: store=SQLiteLockStore(path) for one host, "
                    "PostgresLockStore.from_url(url) or RedisLockStore.from_url(url) across "
                    "hosts; or pass allow_in_memory_storage=True if this process is the only one"
                )

    def __repr__(self) -> str:
        """Show the store, the ttl and the phase."""
        return (
            f"<Locks {self._phase.value} store={redact_secrets(repr(self._store))} "
            f"ttl_ms={self._ttl_ms}>"
        )


def runtime_of(locks: Locks) -> JobRuntime:
    """Return the job runtime of ``locks`` (for ``SyncLocks``, which sets it in its threads)."""
    return locks._runtime  # noqa: SLF001 -- the facade's own module


def _operator(by: object, instance: str) -> str:
    """Return who acts, for an audit event: ``by``, or this instance's label when ``None``."""
    if by is None:
        return instance
    if not isinstance(by, str) or not by.strip():
        raise LocksConfigurationError(
            f"by={by!r}; pass who asks (a person's name), or leave it out for this instance"
        )
    return by


def _check_flag(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise LocksConfigurationError(f"{name}={value!r}; pass True or False")
