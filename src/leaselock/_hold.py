"""LockHold: the ``async with`` of ``Locks.hold``."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, final

from ._engine import CURRENT_LOCK, Lock, refuse_sync_with, release_logged
from ._errors import LockLostError, LockNotAcquiredError
from ._jobs import CURRENT_RUNTIME, JobRuntime
from ._telemetry import Telemetry

if TYPE_CHECKING:
    from ._telemetry import EnteredSpan

__all__ = ["LockHold"]


@final
class LockHold:
    """The ``async with`` of :meth:`Locks.hold`: acquire on entry, release on exit."""

    __slots__ = (
        "_acquire",
        "_cancel_on_loss",
        "_context_token",
        "_key",
        "_lock",
        "_loss_cancelled_task",
        "_remove_callback",
        "_runtime",
        "_runtime_token",
        "_span",
        "_telemetry",
        "_wait_ms",
    )

    def __init__(
        self,
        runtime: JobRuntime,
        acquire: Callable[[], Awaitable[Lock | None]],
        *,
        key: str,
        wait_ms: int,
        cancel_on_loss: bool,
        telemetry: Telemetry | None = None,
    ) -> None:
        """Prepare to take ``key`` with ``acquire``; jobs called inside run on ``runtime``.

        With ``telemetry``, the block is a span (the current one inside it).
        """
        self._runtime = runtime
        self._acquire = acquire
        self._key = key
        self._wait_ms = wait_ms
        self._cancel_on_loss = cancel_on_loss
        self._lock: Lock | None = None
        self._context_token: contextvars.Token[Lock | None] | None = None
        self._runtime_token: contextvars.Token[JobRuntime | None] | None = None
        self._remove_callback: Callable[[], None] | None = None
        self._loss_cancelled_task: asyncio.Task[Any] | None = None
        self._telemetry = telemetry
        self._span: EnteredSpan | None = None

    async def __aenter__(self) -> Lock:
        """Take the lock, or raise :class:`LockNotAcquiredError`; set :func:`current_lock`."""
        lock = await self._acquire()
        if lock is None:
            raise LockNotAcquiredError(self._key, self._wait_ms)
        self._lock = lock
        if self._telemetry is not None:
            # a key can be anything ("orders:12345"): it goes in an attribute, never in the
            # name, which tracing backends group by
            self._span = self._telemetry.enter_span("leaselock.hold", lock.key, lock.fencing_token)
        self._context_token = CURRENT_LOCK.set(lock)
        self._runtime_token = CURRENT_RUNTIME.set(self._runtime)
        if self._cancel_on_loss:
            task = asyncio.current_task()
            if task is not None:
                self._remove_callback = lock.signal.add_callback(
                    lambda reason: self._cancel_for_loss(task, reason)
                )
        return lock

    def __enter__(self) -> NoReturn:
        """Refuse a plain ``with``: taking the lock awaits the store.

        Raises:
            TypeError: always, naming ``async with`` and ``SyncLocks``.
        """
        refuse_sync_with("locks.hold(...)")

    def __exit__(self, *exc_info: object) -> None:
        """Never reached: :meth:`__enter__` refuses."""

    def _cancel_for_loss(self, task: asyncio.Task[Any], reason: LockLostError) -> None:
        self._loss_cancelled_task = task
        task.cancel(str(reason))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release; with ``cancel_on_loss``, turn the loss's cancellation into the loss."""
        lock = self._lock
        assert lock is not None  # noqa: S101 -- __aexit__ runs only after a successful __aenter__
        if self._remove_callback is not None:
            self._remove_callback()
        if self._context_token is not None:
            CURRENT_LOCK.reset(self._context_token)
        if self._runtime_token is not None:
            CURRENT_RUNTIME.reset(self._runtime_token)
        lost = lock.signal.reason is not None
        await release_logged(lock)
        if self._telemetry is not None and self._span is not None:
            error = None if exc is None else f"{type(exc).__name__}: {exc}"
            self._telemetry.exit_span(self._span, error, lost=lost)
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
