"""What a fenced session reads of a lock, without importing SQLAlchemy or the sync twins."""

from __future__ import annotations

from typing import Protocol

__all__ = ["HeldLock"]


class HeldLock(Protocol):
    """What ``fenced()`` reads of a lock: a :class:`~leaselock.Lock` or a ``SyncLock`` is one.

    .. versionadded:: 0.3
    """

    @property
    def key(self) -> str:
        """The lock's key."""
        ...

    @property
    def fencing_token(self) -> int:
        """The token the lock was acquired with."""
        ...

    @property
    def held(self) -> bool:
        """Whether the lock is still held, as far as this process knows."""
        ...
