"""InMemoryLockStore: the reference semantics of the store contract, for one process."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import final

from .._clock import Clock, SystemClock
from ._protocol import Acquired, AcquireResult, NotAcquired, Renewal

__all__ = ["InMemoryLockStore"]


@dataclass(slots=True)
class _Row:
    owner: str
    expires_at_ms: int


@final
class InMemoryLockStore:
    """Locks in a dict: they exclude callers in ONE process only.

    Every method runs without an ``await`` between its check and its write, under a thread lock,
    so each is atomic, even for several event loops in one process (``SyncLocks`` runs one).
    Tokens come from one counter that only grows, so a released key's row can be dropped without
    any risk of a token coming back.

    Use it for tests and single-process programs. Several processes (gunicorn workers, replicas)
    need a shared store: :class:`~leaselock.stores.SQLiteLockStore` on one host,
    :class:`~leaselock.stores.PostgresLockStore` or :class:`~leaselock.stores.RedisLockStore`
    across hosts.

    .. versionadded:: 0.1
    """

    __slots__ = ("_clock", "_guard", "_last_token", "_rows")

    def __init__(self, *, clock: Clock | None = None) -> None:
        """Create an empty store whose expiries are measured on ``clock``.

        Args:
            clock: the store's clock; pass the :class:`~leaselock.testing.ManualClock` of a test
                so that expiries move with it. Defaults to the system's monotonic clock.
        """
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._rows: dict[str, _Row] = {}
        self._last_token = 0
        self._guard = threading.Lock()

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        """Take ``key`` if no live lock holds it; the token is greater than any it had."""
        with self._guard:
            now_ms = self._clock.now_ms()
            row = self._rows.get(key)
            if row is not None and row.expires_at_ms > now_ms:
                return NotAcquired(holder=row.owner)
            self._last_token += 1
            self._rows[key] = _Row(owner, now_ms + ttl_ms)
            return Acquired(self._last_token)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Move the expiry to ``ttl_ms`` from now if ``owner`` holds a live lock on ``key``."""
        with self._guard:
            now_ms = self._clock.now_ms()
            row = self._rows.get(key)
            if row is None or row.owner != owner or row.expires_at_ms <= now_ms:
                return False
            row.expires_at_ms = now_ms + ttl_ms
            return True

    async def renew_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        """Renew each lease as :meth:`renew` would, in order."""
        return [await self.renew(key, owner, ttl_ms) for key, owner, ttl_ms in renewals]

    async def release(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` holds a live lock on it."""
        with self._guard:
            row = self._rows.get(key)
            if row is None or row.owner != owner or row.expires_at_ms <= self._clock.now_ms():
                return False
            del self._rows[key]
            return True

    def __repr__(self) -> str:
        """Describe the store as the start-up log shows it."""
        return f"InMemoryLockStore(clock={self._clock!r}, keys={len(self._rows)})"
