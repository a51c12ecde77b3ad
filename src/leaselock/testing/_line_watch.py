"""LineWatch: a store under test as a contract case's ``Locks`` see it, its lines watched.

A case that drives the store through :class:`~leaselock.Locks` cannot see the store's lines
itself; this wrapper tells it when every waiter has its place, holds the waiters' leaves back
until the case lets them go, and records the grants heard and every key a waiter freed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Literal, TypeVar, final

from ..stores._common._protocol import AcquireResult, Grant, LockStore, WaitingLine
from ._follow_through import line_through

__all__ = ["LineWatch"]

T = TypeVar("T")


@final
class LineWatch:
    """Wraps the store under test; the case's ``Locks`` go through it.

    Args:
        inner: the store under test.
        places: how many queue calls :attr:`queued` waits for.

    Attributes:
        queued: set once ``places`` queue calls were answered.
        leaves_go: leaves wait for it before they are sent.
        grants: the grants heard, in order.
        freed: the owners whose leave or release freed a live lock, in order.
    """

    __slots__ = ("_inner", "_places", "freed", "grants", "leaves_go", "queued")

    def __init__(self, inner: LockStore, *, places: int) -> None:
        """Watch ``inner``; nothing is sent until the ``Locks`` call."""
        self._inner = inner
        self._places = places
        self.queued = asyncio.Event()
        self.leaves_go = asyncio.Event()
        self.grants: list[Grant] = []
        self.freed: list[str] = []

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        """Pass the acquire through."""
        return await self._inner.acquire(key, owner, ttl_ms)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Pass the renewal through."""
        return await self._inner.renew(key, owner, ttl_ms)

    async def release(self, key: str, owner: str) -> bool:
        """Pass the release through; record its owner if it freed a live lock."""
        released = await self._inner.release(key, owner)
        if released:
            self.freed.append(owner)
        return released

    @asynccontextmanager
    async def wait_in_line(
        self, on_grant: Callable[[Grant], None]
    ) -> AsyncIterator[WaitingLine | None]:
        """Pass the inner store's lines through, watched (``None`` if it has none)."""

        def heard(grant: Grant) -> None:
            self.grants.append(grant)
            on_grant(grant)

        async with line_through(self._inner, heard, self._through) as line:
            yield line

    async def _through(
        self,
        method: Literal["queue", "leave"],
        key: str,  # noqa: ARG002 -- the LineCall's signature
        owner: str,
        call: Awaitable[T],
        **arguments: int,  # noqa: ARG002 -- the LineCall's signature
    ) -> T:
        try:
            if method == "leave":
                await self.leaves_go.wait()
            answer = await call
        finally:
            # a leave cancelled while held back never reaches the store
            if asyncio.iscoroutine(call):
                call.close()
        if method == "queue":
            self._places -= 1
            if self._places == 0:
                self.queued.set()
        elif answer is True:
            self.freed.append(owner)
        return answer

    def __repr__(self) -> str:
        """Name the inner store."""
        return f"LineWatch({self._inner!r})"
