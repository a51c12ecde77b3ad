"""Locks: the entry point. Options, lifecycle, and the three ways to take a lock."""

from __future__ import annotations

import asyncio
import contextvars
import enum
import inspect
import logging
import os
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar, final, overload

from ._checked_store import CheckedStore, check_store_shape
from ._clock import Clock, SystemClock
from ._context import CURRENT_LOCK, CURRENT_LOCKS, started_locks
from ._durations import Duration, parse_ttl, parse_wait
from ._engine import LockEngine
from ._errors import LockLostError, LockNotAcquiredError, LocksConfigurationError
from ._events import Events
from ._keys import validate_key
from ._lock import Lock, release_logged
from ._redact import redact_secrets
from ._signal import LockSignal
from .stores._protocol import LockStore, SupportsLifecycle
from .stores.memory import InMemoryLockStore

__all__ = ["Locks"]

T = TypeVar("T")

_log = logging.getLogger("leaselock")

PRODUCTION_ENV_VARS = ("LEASELOCK_ENV", "ENV", "APP_ENV")


class _Phase(enum.Enum):
    NEW = "new"
    STARTED = "started"
    CLOSED = "closed"


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

    Raises:
        LocksConfigurationError: an argument is wrong; the message says how to fix it.

    .. versionadded:: 0.1
    """

    __slots__ = (
        "_allow_in_memory_storage",
        "_clock",
        "_engine",
        "_loop",
        "_phase",
        "_store",
        "_store_defaulted",
        "_ttl_ms",
        "events",
    )

    def __init__(
        self,
        store: LockStore | None = None,
        ttl: Duration = "30s",
        clock: Clock | None = None,
        allow_in_memory_storage: bool = False,
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
        self._ttl_ms = parse_ttl(ttl)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._store_defaulted = store is None
        self._store: LockStore = (
            InMemoryLockStore(clock=self._clock) if store is None else check_store_shape(store)
        )
        self._allow_in_memory_storage = allow_in_memory_storage
        self._phase = _Phase.NEW
        self._engine: LockEngine | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.events = Events()

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
        if isinstance(self._store, SupportsLifecycle):
            await self._store.open()
        engine = LockEngine(CheckedStore(self._store), self._clock, self.events)
        await engine.start()
        self._engine = engine
        self._loop = asyncio.get_running_loop()
        self._phase = _Phase.STARTED
        started_locks.add(self)
        _log.info(
            "leaselock started on %s (ttl %d ms)", redact_secrets(repr(self._store)), self._ttl_ms
        )

    async def aclose(self) -> None:
        """Release every held lock and close the store; a failure here is logged, never raised.

        Locks still held are lost with ``detected_by="shutdown"``: their signals abort.
        """
        if self._phase is not _Phase.STARTED:
            self._phase = _Phase.CLOSED
            return
        self._phase = _Phase.CLOSED
        started_locks.discard(self)
        engine = self._engine
        assert engine is not None  # noqa: S101 -- set by start()
        try:
            await engine.close()
        except Exception:  # noqa: BLE001 -- shutdown goes on; the locks expire after their ttl
            _log.exception("Releasing locks at shutdown failed; they expire after their ttl")
        if isinstance(self._store, SupportsLifecycle):
            try:
                await self._store.aclose()
            except Exception:  # noqa: BLE001 -- the application's own shutdown must go on
                _log.exception("Closing %s failed", redact_secrets(repr(self._store)))
        self.events._close()  # noqa: SLF001 -- Locks owns its hub

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
        key, ttl_ms, wait_ms = self._checked(key, ttl, wait, signal)
        return await self._acquire(key, ttl_ms, wait_ms, signal)

    def hold(
        self,
        key: str,
        *,
        ttl: Duration | None = None,
        wait: Duration = 0,
        signal: LockSignal | None = None,
        cancel_on_loss: bool = False,
    ) -> _Hold:
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
        key, ttl_ms, wait_ms = self._checked(key, ttl, wait, signal)
        _check_flag("cancel_on_loss", cancel_on_loss)
        return _Hold(self, key, ttl_ms, wait_ms, signal, cancel_on_loss=cancel_on_loss)

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
            result = await fn() if is_async else await _run_in_thread_to_end(fn)
            if inspect.isawaitable(result):
                result = await result
            return result

    def _checked(
        self, key: object, ttl: object, wait: object, signal: object
    ) -> tuple[str, int, int]:
        checked_key = validate_key(key)
        ttl_ms = self._ttl_ms if ttl is None else parse_ttl(ttl)
        wait_ms = parse_wait(wait)
        if signal is not None and not isinstance(signal, LockSignal):
            raise LocksConfigurationError(
                f"signal={signal!r} is not a LockSignal; pass the signal of another lock "
                "(lock.signal), or cancel the waiting task instead"
            )
        self._running_engine()
        return checked_key, ttl_ms, wait_ms

    def _running_engine(self) -> LockEngine:
        if self._phase is not _Phase.STARTED or self._engine is None:
            raise LocksConfigurationError(
                f"This Locks is {self._phase.value}, not started; use `async with locks:` "
                "or `await locks.start()` first"
            )
        if _running_loop() is not self._loop:
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
        return None if lease is None else Lock(engine, lease)

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


@final
class _Hold:
    """The ``async with`` of :meth:`Locks.hold`."""

    __slots__ = (
        "_cancel_on_loss",
        "_context_token",
        "_key",
        "_lock",
        "_locks",
        "_locks_token",
        "_loss_cancelled_task",
        "_remove_callback",
        "_signal",
        "_ttl_ms",
        "_wait_ms",
    )

    def __init__(
        self,
        locks: Locks,
        key: str,
        ttl_ms: int,
        wait_ms: int,
        signal: LockSignal | None,
        *,
        cancel_on_loss: bool,
    ) -> None:
        self._locks = locks
        self._key = key
        self._ttl_ms = ttl_ms
        self._wait_ms = wait_ms
        self._signal = signal
        self._cancel_on_loss = cancel_on_loss
        self._lock: Lock | None = None
        self._context_token: contextvars.Token[Lock | None] | None = None
        self._locks_token: contextvars.Token[Locks | None] | None = None
        self._remove_callback: Callable[[], None] | None = None
        self._loss_cancelled_task: asyncio.Task[Any] | None = None

    async def __aenter__(self) -> Lock:
        lock = await self._locks._acquire(  # noqa: SLF001 -- _Hold is part of Locks
            self._key, self._ttl_ms, self._wait_ms, self._signal
        )
        if lock is None:
            raise LockNotAcquiredError(self._key, self._wait_ms)
        self._lock = lock
        self._context_token = CURRENT_LOCK.set(lock)
        self._locks_token = CURRENT_LOCKS.set(self._locks)
        if self._cancel_on_loss:
            task = asyncio.current_task()
            if task is not None:
                self._remove_callback = lock.signal.add_callback(
                    lambda reason: self._cancel_for_loss(task, reason)
                )
        return lock

    def _cancel_for_loss(self, task: asyncio.Task[Any], reason: LockLostError) -> None:
        self._loss_cancelled_task = task
        task.cancel(str(reason))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lock = self._lock
        assert lock is not None  # noqa: S101 -- __aexit__ runs only after a successful __aenter__
        if self._remove_callback is not None:
            self._remove_callback()
        if self._context_token is not None:
            CURRENT_LOCK.reset(self._context_token)
        if self._locks_token is not None:
            CURRENT_LOCKS.reset(self._locks_token)
        await release_logged(lock)
        task = self._loss_cancelled_task
        if task is None:
            return
        # take back our cancellation request, whether or not the block swallowed it
        others_pending = task.uncancel()
        if isinstance(exc, asyncio.CancelledError) and others_pending == 0:
            # the only cancellation was ours: tell the caller why, not just that it was cancelled
            reason = lock.signal.reason
            assert reason is not None  # noqa: S101 -- set before the task was cancelled
            raise reason from exc


async def _run_in_thread_to_end(fn: Callable[[], T]) -> T:
    """Run ``fn`` in a worker thread with this context; wait for it even through cancellation."""
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(None, contextvars.copy_context().run, fn)
    cancelled = False
    while not future.done():
        try:
            # asyncio.wait never cancels what it waits for: the thread's work keeps its lock
            await asyncio.wait([future])
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return future.result()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _check_flag(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise LocksConfigurationError(f"{name}={value!r}; pass True or False")
