"""SyncLocks and SyncLock: the same locks for threads (Celery, Django, BackgroundScheduler).

The async engine runs on an event loop thread of its own (a portal); these classes only carry
calls across. Renewals keep running there while your thread works.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from types import MethodType, TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, Unpack, final, overload

from ._clock import Clock
from ._durations import Duration, parse_wait
from ._engine import CURRENT_LOCK, Lock, LockSignal, release_logged
from ._errors import LockNotAcquiredError, LocksConfigurationError
from ._event_log import EventLog
from ._events import Events
from ._forks import process_generation, refuse_if_forked
from ._jobs import (
    CURRENT_RUNTIME,
    F,
    JobDecorator,
    SyncOnOneInstanceOptions,
    SyncWithoutOverlappingOptions,
    job_decorator,
)
from ._locks import Locks, runtime_of
from ._threads import Portal
from .stores._common._protocol import LockStore

__all__ = ["SyncLock", "SyncLocks"]

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")


def _refuse_on_an_event_loop(method: str) -> None:
    """Refuse a blocking call from a thread that runs an event loop (from a coroutine).

    Raises:
        LocksConfigurationError: this thread runs an event loop, which the call would freeze.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise LocksConfigurationError(
        f"SyncLocks.{method} blocks its thread, and this thread runs an event loop (the call "
        "came from a coroutine or a loop callback): it would freeze that loop and every lock "
        f"renewal on it. Use the async API there, `await locks.{method}(...)` on a "
        "leaselock.Locks (SyncLocks.locks is the one underneath), or call it from a worker "
        "thread (asyncio.to_thread)"
    )


@final
class _Blocking(Generic[P, R]):
    """The blocking twin, on :class:`SyncLocks`, of an async method of :class:`~leaselock.Locks`.

    On the class, a function with the async method's name, docstring and signature (its result
    unawaited); on an instance, that function bound. A call refuses a thread that runs an event
    loop, then a ``SyncLocks`` not started, then runs the async method on the loop thread and
    blocks until it returns or raises.
    """

    __slots__ = ("_function",)

    def __init__(self, method: Callable[Concatenate[Locks, P], Coroutine[Any, Any, R]]) -> None:
        """Make the twin of ``method``, an async method of ``Locks`` taken from the class."""
        name = method.__name__

        def blocking(self: SyncLocks, /, *args: P.args, **kwargs: P.kwargs) -> R:
            _refuse_on_an_event_loop(name)
            return self._started_portal().call(method(self._locks, *args, **kwargs))

        # __wrapped__ is what inspect.signature() and help() read the signature from
        self._function = functools.wraps(method)(blocking)

    def __set_name__(self, owner: type[SyncLocks], name: str) -> None:
        """Name the function a method of ``owner``, not of ``Locks`` (its repr, help())."""
        self._function.__qualname__ = f"{owner.__qualname__}.{name}"
        self._function.__module__ = owner.__module__

    @overload
    def __get__(
        self, instance: None, owner: type[SyncLocks]
    ) -> Callable[Concatenate[SyncLocks, P], R]: ...

    @overload
    def __get__(
        self, instance: SyncLocks, owner: type[SyncLocks] | None = None
    ) -> Callable[P, R]: ...

    def __get__(
        self, instance: SyncLocks | None, owner: type[SyncLocks] | None = None
    ) -> Callable[..., R]:
        """Return the function on the class, and the method bound to ``instance`` on one."""
        if instance is None:
            return self._function
        return MethodType(self._function, instance)


@final
class SyncLock:
    """A held lock, for threads: :class:`~leaselock.Lock` with a blocking :meth:`release`.

    .. versionadded:: 0.1
    """

    __slots__ = ("_lock", "_portal")

    def __init__(self, lock: Lock, portal: Portal) -> None:
        """Wrap ``lock`` (internal: locks come from :class:`SyncLocks`)."""
        self._lock = lock
        self._portal = portal

    @property
    def key(self) -> str:
        """The key this lock holds."""
        return self._lock.key

    @property
    def owner(self) -> str:
        """This acquisition's owner id (128 random bits)."""
        return self._lock.owner

    @property
    def fencing_token(self) -> int:
        """Greater than every earlier acquisition's token of this key; fence writes with it."""
        return self._lock.fencing_token

    @property
    def ttl_ms(self) -> int:
        """The lease length in milliseconds."""
        return self._lock.ttl_ms

    @property
    def signal(self) -> LockSignal:
        """Aborts when the lock is lost; poll ``aborted`` or call ``wait_blocking()``."""
        return self._lock.signal

    @property
    def held(self) -> bool:
        """Whether the lock is still held."""
        return self._lock.held

    def release(self) -> bool:
        """Give the lock back now; see :meth:`leaselock.Lock.release`.

        Raises:
            LocksConfigurationError: called from a coroutine (use ``await lock.release()``).
        """
        _refuse_on_an_event_loop("release")
        return self._portal.call(self._lock.release())

    def __enter__(self) -> SyncLock:
        """Return the lock; it is released when the block ends."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release; a store failure is logged, never raised over the block."""
        _refuse_on_an_event_loop("release")
        self._portal.call(release_logged(self._lock))

    def __repr__(self) -> str:
        """Show the wrapped lock."""
        return f"<SyncLock of {self._lock!r}>"


@final
class SyncLocks:
    """:class:`~leaselock.Locks` for threads: same options, same method names, blocking calls.

    Example::

        locks = SyncLocks(store=SQLiteLockStore("locks.db"))
        with locks:
            with locks.hold("invoice:42", wait="2s") as lock:
                export(fencing_token=lock.fencing_token)

    Its operator methods (:meth:`job_status`, :meth:`inspect`, :meth:`pause`, :meth:`run_now`...)
    are those of ``Locks``, blocking, with their arguments, results, errors and docs; like every
    blocking method here, each also raises ``LocksConfigurationError`` from a coroutine.

    Raises:
        LocksConfigurationError: an argument is wrong (checked here, before any thread starts).

    .. versionadded:: 0.1
    """

    __slots__ = ("_generation", "_locks", "_portal")

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
        """Configure as :class:`~leaselock.Locks` does; :meth:`start` starts the loop thread."""
        self._locks = Locks(
            store=store,
            ttl=ttl,
            clock=clock,
            allow_in_memory_storage=allow_in_memory_storage,
            shutdown_grace=shutdown_grace,
            instance=instance,
            event_log=event_log,
            opentelemetry=opentelemetry,
        )
        self._portal: Portal | None = None
        self._generation = process_generation()

    @property
    def locks(self) -> Locks:
        """The async :class:`~leaselock.Locks` underneath, for code on its event loop."""
        return self._locks

    @property
    def events(self) -> Events:
        """The events hub; callbacks run on the loop thread."""
        return self._locks.events

    def start(self) -> None:
        """Start the loop thread and the ``Locks`` on it; see :meth:`leaselock.Locks.start`.

        Raises:
            LocksConfigurationError: already started, or called from a coroutine (use
                :class:`~leaselock.Locks` there).
        """
        _refuse_on_an_event_loop("start")
        if self._portal is not None:
            raise LocksConfigurationError(
                "This SyncLocks is already started; create a new SyncLocks to start again"
            )
        portal = Portal(name="leaselock-portal")
        try:
            portal.call(self._locks.start())
        except BaseException:
            portal.stop()
            raise
        self._portal = portal
        self._generation = process_generation()

    def close(self) -> None:
        """Release every lock, close the store and stop the loop thread.

        In a forked child of the process that started it, it only forgets what it inherited:
        the loop thread, the connections and the leases are the parent's.

        Raises:
            LocksConfigurationError: called from a coroutine (use :class:`~leaselock.Locks`).
        """
        _refuse_on_an_event_loop("close")
        portal, self._portal = self._portal, None
        if portal is None or self._generation != process_generation():
            return
        try:
            portal.call(self._locks.aclose())
        finally:
            portal.stop()

    def __enter__(self) -> SyncLocks:
        """Start, and return this ``SyncLocks``."""
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close (see :meth:`close`)."""
        self.close()

    def acquire(
        self,
        key: str,
        *,
        ttl: Duration | None = None,
        wait: Duration = 0,
        signal: LockSignal | None = None,
    ) -> SyncLock | None:
        """Take the lock on ``key``, blocking up to ``wait``.

        See :meth:`leaselock.Locks.acquire` for the arguments, the result and the errors; it
        also raises :class:`~leaselock.LocksConfigurationError` when called from a coroutine.
        """
        _refuse_on_an_event_loop("acquire")
        portal = self._started_portal()
        lock = portal.call(self._locks.acquire(key, ttl=ttl, wait=wait, signal=signal))
        return None if lock is None else SyncLock(lock, portal)

    @contextmanager
    def hold(
        self,
        key: str,
        *,
        ttl: Duration | None = None,
        wait: Duration = 0,
        signal: LockSignal | None = None,
    ) -> Iterator[SyncLock]:
        """Hold the lock on ``key`` for a ``with`` block; see :meth:`leaselock.Locks.hold`.

        A thread cannot be cancelled, so there is no ``cancel_on_loss`` here: check
        ``lock.signal.aborted`` (or call ``lock.signal.raise_if_aborted()``) between steps.

        Raises:
            LockNotAcquiredError: the key stayed held for the whole wait.
            LocksConfigurationError: called from a coroutine (use ``Locks.hold`` there).
        """
        _refuse_on_an_event_loop("hold")
        portal = self._started_portal()
        # made on the loop: a Locks is used from the loop that started it
        manager = portal.call(_hold(self._locks, key, ttl, wait, signal))
        with portal.wrap_async_context_manager(manager) as lock:
            if not lock.held:
                # lost between the loop thread's answer and this thread: never run the block
                raise LockNotAcquiredError(key, parse_wait(wait))
            lock_token = CURRENT_LOCK.set(lock)
            runtime_token = CURRENT_RUNTIME.set(runtime_of(self._locks))
            try:
                yield SyncLock(lock, portal)
            finally:
                CURRENT_RUNTIME.reset(runtime_token)
                CURRENT_LOCK.reset(lock_token)

    def with_lock(
        self,
        key: str,
        fn: Callable[[], T],
        *,
        ttl: Duration | None = None,
        wait: Duration = 0,
        signal: LockSignal | None = None,
    ) -> T:
        """Run ``fn()`` in this thread while holding the lock on ``key``; return its result.

        Raises:
            LockNotAcquiredError: the key stayed held for the whole wait; ``fn`` did not run.
            LocksConfigurationError: ``fn`` is not a sync callable.
        """
        _refuse_on_an_event_loop("with_lock")
        if not callable(fn) or inspect.iscoroutinefunction(fn):
            raise LocksConfigurationError(
                f"fn={fn!r} is not a sync function; SyncLocks.with_lock runs fn in this thread. "
                "Pass a plain function, or use Locks.with_lock for coroutines"
            )
        with self.hold(key, ttl=ttl, wait=wait, signal=signal):
            return fn()

    def on_one_instance(
        self,
        key: str | None = None,
        ttl: Duration | None = None,
        **options: Unpack[SyncOnOneInstanceOptions],
    ) -> JobDecorator:
        """Bind a job to run on ONE instance; see :meth:`leaselock.Locks.on_one_instance`.

        A sync job runs in the thread that calls it (a ``BackgroundScheduler`` worker, a Celery
        worker) while its lease is renewed on the loop thread. Its options are those of
        :class:`~leaselock.SyncOnOneInstanceOptions`.
        """
        return job_decorator(
            "on_one_instance", key, ttl, runtime_of(self._locks), sync=True, **options
        )

    def without_overlapping(
        self,
        key: str | None = None,
        ttl: Duration | None = None,
        **options: Unpack[SyncWithoutOverlappingOptions],
    ) -> JobDecorator:
        """Bind a job that never overlaps itself; see ``Locks.without_overlapping``.

        A thread cannot be cancelled: past ``max_run`` the run's signal aborts and its lock is
        given up; check ``current_lock().signal`` between steps. Its options are those of
        :class:`~leaselock.SyncWithoutOverlappingOptions`.
        """
        return job_decorator(
            "without_overlapping", key, ttl, runtime_of(self._locks), sync=True, **options
        )

    def leader_election(self, key: str, ttl: Duration | None = None) -> Callable[[F], F]:
        """Bind an election; see :meth:`leaselock.Locks.leader_election` (hooks run on the loop)."""
        return self._locks.leader_election(key, ttl)

    def register(self, target: T) -> T:
        """Bind the jobs and elections of ``target``; see :meth:`leaselock.Locks.register`."""
        portal = self._portal
        if portal is None:
            return self._locks.register(target)
        return portal.call(_registered(self._locks, target))

    job_status = _Blocking(Locks.job_status)
    jobs = _Blocking(Locks.jobs)
    inspect = _Blocking(Locks.inspect)
    read_lock = _Blocking(Locks.read_lock)
    break_lock = _Blocking(Locks.break_lock)
    pause = _Blocking(Locks.pause)
    resume = _Blocking(Locks.resume)
    pauses = _Blocking(Locks.pauses)
    run_now = _Blocking(Locks.run_now)

    def _started_portal(self) -> Portal:
        refuse_if_forked(self._generation, "SyncLocks")
        if self._portal is None or not self._locks.started:
            raise LocksConfigurationError(
                "This SyncLocks is not started; use `with locks:` or call locks.start() first"
            )
        return self._portal

    def __repr__(self) -> str:
        """Show the wrapped ``Locks``."""
        return f"<SyncLocks of {self._locks!r}>"


async def _registered(locks: Locks, target: T) -> T:
    return locks.register(target)


async def _hold(
    locks: Locks, key: str, ttl: Duration | None, wait: Duration, signal: LockSignal | None
) -> AbstractAsyncContextManager[Lock]:
    return locks.hold(key, ttl=ttl, wait=wait, signal=signal)
