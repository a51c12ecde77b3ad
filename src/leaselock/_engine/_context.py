"""The lock of the running critical section: ``current_lock()``, through a contextvar."""

from __future__ import annotations

from ._lock import CURRENT_LOCK, Lock

__all__ = ["CURRENT_LOCK", "current_lock"]


def current_lock() -> Lock | None:
    """Return the lock of the critical section this code runs in, or ``None`` outside one.

    Set inside :meth:`Locks.hold`, :meth:`Locks.with_lock`, ``async with lock:`` and decorated
    jobs; it follows
    ``await`` and the tasks created inside (they copy the context), and the calling thread of
    :meth:`SyncLocks.hold`.

    .. versionadded:: 0.1
    """
    return CURRENT_LOCK.get()
