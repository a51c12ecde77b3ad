"""LockSignal: the lock's promise to say when it is lost."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import final

from .._errors import DetectedBy, LockLostError

__all__ = ["Abort", "LockSignal", "SignalCallback", "new_signal"]

SignalCallback = Callable[[LockLostError], object]
Abort = Callable[[DetectedBy], LockLostError]

_log = logging.getLogger("leaselock")
# one lock for every signal's state: held for a few list operations, never across a callback
_GUARD = threading.Lock()


@final
class LockSignal:
    """Aborts, once, when its lock is lost; pass it to whatever the critical section calls.

    Read it from any thread: :attr:`aborted` and :meth:`raise_if_aborted` also compare the
    holder's deadline with the clock, so a process that resumes from a pause sees the loss before
    its overdue timer has run. :meth:`wait` is for coroutines, :meth:`wait_blocking` for threads.
    Callbacks run on the event loop of the lock's :class:`~leaselock.Locks`.

    .. versionadded:: 0.1
    """

    __slots__ = (
        "_callbacks",
        "_deadline_passed",
        "_fencing_token",
        "_key",
        "_reason",
        "_thread_event",
        "_waiters",
    )

    def __init__(
        self, key: str, fencing_token: int, *, deadline_passed: Callable[[], bool]
    ) -> None:
        """Create the signal of the lock on ``key`` acquired with ``fencing_token`` (internal)."""
        self._key = key
        self._fencing_token = fencing_token
        self._deadline_passed = deadline_passed
        self._reason: LockLostError | None = None
        self._callbacks: list[SignalCallback] = []
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        # made on the first wait_blocking(): most locks are never waited on from a thread
        self._thread_event: threading.Event | None = None

    @property
    def aborted(self) -> bool:
        """Whether the lock is lost (its deadline passing counts at once)."""
        return self.reason is not None

    @property
    def reason(self) -> LockLostError | None:
        """The :class:`~leaselock.LockLostError` that says how the lock was lost, or ``None``."""
        if self._reason is not None:
            return self._reason
        if self._deadline_passed():
            return LockLostError(self._key, self._fencing_token, "deadline")
        return None

    def raise_if_aborted(self) -> None:
        """Raise :attr:`reason` if the lock is lost; call it before each step worth fencing.

        Raises:
            LockLostError: the lock is lost.
        """
        reason = self.reason
        if reason is not None:
            raise reason

    async def wait(self) -> LockLostError:
        """Wait until the lock is lost and return the reason."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        entry = (loop, waiter)
        with _GUARD:
            # checked and registered in one step: _abort on another thread cannot slip between
            waiting = self._reason is None
            if waiting:
                self._waiters.append(entry)
        if waiting:
            try:
                await waiter
            finally:
                with _GUARD:
                    if entry in self._waiters:
                        self._waiters.remove(entry)
        assert self._reason is not None  # noqa: S101 -- the waiter is resolved only by _abort
        return self._reason

    def wait_blocking(self, timeout: float | None = None) -> bool:
        """Block this thread until the lock is lost or ``timeout`` seconds pass.

        Returns:
            Whether the lock is lost. Never call it on the event loop's thread.
        """
        with _GUARD:
            if self._thread_event is None:
                self._thread_event = threading.Event()
                if self._reason is not None:
                    self._thread_event.set()
            event = self._thread_event
        return event.wait(timeout)

    def add_callback(self, callback: SignalCallback) -> Callable[[], None]:
        """Call ``callback(reason)`` when the lock is lost (at once if it already is).

        Returns:
            A function that removes the callback.
        """
        with _GUARD:
            reason = self._reason
            if reason is None:
                self._callbacks.append(callback)
        if reason is not None:
            _call_logged(callback, reason)
            return _noop

        def remove() -> None:
            with _GUARD:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return remove

    def _abort(self, detected_by: DetectedBy) -> LockLostError:
        """Abort once with a reason built from ``detected_by``; return the reason (internal)."""
        with _GUARD:
            if self._reason is not None:
                return self._reason
            reason = LockLostError(self._key, self._fencing_token, detected_by)
            self._reason = reason
            if self._thread_event is not None:
                self._thread_event.set()
            waiters, self._waiters = self._waiters, []
            callbacks, self._callbacks = self._callbacks, []
        for loop, waiter in waiters:
            loop.call_soon_threadsafe(_resolve, waiter)
        for callback in callbacks:
            _call_logged(callback, reason)
        return reason

    def __repr__(self) -> str:
        """Show the key and the state."""
        state = "aborted" if self.aborted else "live"
        return f"<LockSignal {self._key!r} token={self._fencing_token} {state}>"


def new_signal(
    key: str, fencing_token: int, *, deadline_passed: Callable[[], bool]
) -> tuple[LockSignal, Abort]:
    """Return a signal and the one function that aborts it (kept by the lease, not the holder)."""
    signal = LockSignal(key, fencing_token, deadline_passed=deadline_passed)
    return signal, signal._abort  # noqa: SLF001 -- the signal's own module hands out its trigger


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _call_logged(callback: SignalCallback, reason: LockLostError) -> None:
    try:
        callback(reason)
    except Exception:  # noqa: BLE001 -- one callback must not stop the others; logged in full
        _log.exception("A LockSignal callback raised; it is ignored so other callbacks still run")


def _noop() -> None:
    return None
