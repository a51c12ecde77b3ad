"""LockHold: the ``async with`` of ``Locks.hold``, and running sync code under a lock."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, final

from ._context import CURRENT_LOCK, CURRENT_LOCKS
from ._errors import LockLostError, LockNotAcquiredError
from ._lock import Lock, release_logged

if TYPE_CHECKING:
    from ._locks import Locks

__all__ = ["LockHold", "run_in_thread_to_end"]

T = TypeVar("T")


@final
class LockHold:
    """The ``async with`` of :meth:`Locks.hold`: acquire on entry, release on exit."""

    __slots__ = (
        "_acquire",
        "_cancel_on_loss",
        "_context_token",
        "_key",
        "_lock",
        "_locks",
        "_locks_token",
        "_loss_cancelled_task",
        "_remove_callback",
        "_wait_ms",
    )

    def __init__(
        self,
        locks: Locks,
        acquire: Callable[[], Awaitable[Lock | None]],
        *,
        key: str,
        wait_ms: int,
        cancel_on_loss: bool,
    ) -> None:
        """Prepare to take ``key`` with ``acquire`` for ``locks`` (internal)."""
        self._locks = locks
        self._acquire = acquire
        self._key = key
        self._wait_ms = wait_ms
        self._cancel_on_loss = cancel_on_loss
        self._lock: Lock | None = None
        self._context_token: contextvars.Token[Lock | None] | None = None
        self._locks_token: contextvars.Token[Locks | None] | None = None
        self._remove_callback: Callable[[], None] | None = None
        self._loss_cancelled_task: asyncio.Task[Any] | None = None

    async def __aenter__(self) -> Lock:
        """Take the lock, or raise :class:`LockNotAcquiredError`; set :func:`current_lock`."""
        lock = await self._acquire()
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
        """Release; with ``cancel_on_loss``, turn the loss's cancellation into the loss."""
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


async def run_in_thread_to_end(fn: Callable[[], T]) -> T:
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
