"""Lock: the handle of one acquisition."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar, Token
from types import TracebackType
from typing import NoReturn, final

from .._errors import LockStoreError
from ._lease import Lease
from ._signal import LockSignal

__all__ = ["CURRENT_LOCK", "Lock", "refuse_sync_with"]

_log = logging.getLogger("leaselock")

CURRENT_LOCK: ContextVar[Lock | None] = ContextVar("leaselock.current_lock", default=None)


def refuse_sync_with(what: str) -> NoReturn:
    """Raise the error a plain ``with`` on an async context manager of leaselock deserves.

    Raises:
        TypeError: always, naming ``async with`` and :class:`~leaselock.sync.SyncLocks`.
    """
    raise TypeError(
        f"{what} is an async context manager: use `async with {what}`, or "
        "leaselock.sync.SyncLocks for code without an event loop"
    )


@final
class Lock:
    """A held lease on a key: its fencing token, its loss signal, and its release.

    Get one from :meth:`Locks.acquire`, :meth:`Locks.hold` or :func:`current_lock`. Inside
    ``async with lock:`` it is :func:`current_lock`; leaving the block releases it, whatever
    happens inside.

    .. versionadded:: 0.1
    """

    __slots__ = ("_current", "_lease", "_release")

    def __init__(self, lease: Lease, release: Callable[[Lease], Awaitable[bool]]) -> None:
        """Wrap a lease its engine holds (internal: locks come from :class:`Locks`)."""
        self._lease = lease
        self._release = release
        self._current: list[Token[Lock | None]] = []

    @property
    def key(self) -> str:
        """The key this lock holds."""
        return self._lease.key

    @property
    def owner(self) -> str:
        """This acquisition's owner id: 128 random bits, fresh for every acquisition."""
        return self._lease.owner

    @property
    def fencing_token(self) -> int:
        """Greater than the token of every earlier acquisition of this key.

        Send it with every write the lock protects; the resource keeps the highest token it has
        seen and refuses lower ones, which stops the late write of a holder that was paused past
        its lease.
        """
        return self._lease.fencing_token

    @property
    def ttl_ms(self) -> int:
        """The lease length in milliseconds; the lock is renewed every third of it."""
        return self._lease.ttl_ms

    @property
    def signal(self) -> LockSignal:
        """Aborts when the lock is lost; pass it to what the critical section calls."""
        return self._lease.signal

    @property
    def held(self) -> bool:
        """Whether the lock is still held: not released, not lost, deadline not passed."""
        return self._lease.held

    async def release(self) -> bool:
        """Give the lock back now.

        Returns:
            ``True`` if the store released it; ``False`` if it was already released or lost, or
            had expired at the store.

        Raises:
            LockStoreError: the store failed; the lock is not renewed any more and expires.
        """
        return await self._release(self._lease)

    async def __aenter__(self) -> Lock:
        """Return the lock, :func:`current_lock` inside the block; released when it ends."""
        self._current.append(CURRENT_LOCK.set(self))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release the lock; a store failure here is logged, never raised over the block."""
        if self._current:
            CURRENT_LOCK.reset(self._current.pop())
        await release_logged(self)

    def __enter__(self) -> NoReturn:
        """Refuse a plain ``with``: the lock is released by an ``await``.

        Raises:
            TypeError: always, naming ``async with`` and ``SyncLocks``.
        """
        refuse_sync_with("lock")

    def __exit__(self, *exc_info: object) -> None:
        """Never reached: :meth:`__enter__` refuses."""

    def __repr__(self) -> str:
        """Show the key, the token and whether it is held."""
        return f"<Lock {self.key!r} fencing_token={self.fencing_token} {self._lease.status}>"


async def release_logged(lock: Lock) -> bool:
    """Release ``lock``; log a store failure instead of raising it.

    The lock then expires on its own after its ttl; the failure must not replace the result or
    the error of the code that ran under it.
    """
    try:
        return await lock.release()
    except LockStoreError as error:
        _log.warning('Could not release "%s"; it expires on its own: %s', lock.key, error)
        return False
