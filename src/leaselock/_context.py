"""Context: the lock of the running critical section, and the Locks running this code."""

from __future__ import annotations

import threading
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._lock import Lock
    from ._locks import Locks

__all__ = ["CURRENT_LOCK", "CURRENT_LOCKS", "current_lock", "current_locks", "started_locks"]

CURRENT_LOCK: ContextVar[Lock | None] = ContextVar("leaselock.current_lock", default=None)
CURRENT_LOCKS: ContextVar[Locks | None] = ContextVar("leaselock.current_locks", default=None)


def current_lock() -> Lock | None:
    """Return the lock of the critical section this code runs in, or ``None`` outside one.

    Set inside :meth:`Locks.hold`, :meth:`Locks.with_lock` and decorated jobs; it follows
    ``await`` and the tasks created inside (they copy the context).

    .. versionadded:: 0.1
    """
    return CURRENT_LOCK.get()


class _StartedLocks:
    """The ``Locks`` started in this process, oldest first, for code that runs outside them."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._started: list[Locks] = []

    def add(self, locks: Locks) -> None:
        with self._guard:
            self._started.append(locks)

    def discard(self, locks: Locks) -> None:
        with self._guard:
            if locks in self._started:
                self._started.remove(locks)

    def snapshot(self) -> tuple[Locks, ...]:
        with self._guard:
            return tuple(self._started)


started_locks = _StartedLocks()


def current_locks() -> Locks | None:
    """Return the ``Locks`` running this code, else the one started in this process, else None.

    With several started and none running this code, there is no single answer: ``None``.
    """
    running = CURRENT_LOCKS.get()
    if running is not None:
        return running
    started = started_locks.snapshot()
    return started[0] if len(started) == 1 else None
