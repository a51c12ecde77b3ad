"""Release notifications and waiting lines passed through a store that wraps another.

A faulty or recording store offers what its inner store offers: its followers as they are, and
its lines with each call passed through the wrapper's own ``through`` (faulted, recorded).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Literal, Protocol, TypeVar, final

from ..stores._common._protocol import (
    Acquired,
    FollowingNothing,
    Grant,
    LockStore,
    Queued,
    ReleaseFollower,
    SupportsHandoff,
    SupportsReleaseNotifications,
    WaitingLine,
)

__all__ = ["LineCall", "follow_through", "line_through"]

T = TypeVar("T")


class LineCall(Protocol):
    """How a wrapper sends one call of a line.

    It gets ``method``, the key and owner, the call itself (not awaited yet: a fault may stop
    it before it reaches the store), and the call's other arguments by name.
    """

    def __call__(
        self,
        method: Literal["queue", "leave"],
        key: str,
        owner: str,
        call: Awaitable[T],
        **arguments: int,
    ) -> Awaitable[T]: ...


@asynccontextmanager
async def follow_through(
    inner: LockStore, on_release: Callable[[str], None]
) -> AsyncIterator[ReleaseFollower]:
    """Follow releases through ``inner``'s notifications; hear none if it has none."""
    if isinstance(inner, SupportsReleaseNotifications):
        async with inner.follow_releases(on_release) as follower:
            yield follower
    else:
        yield FollowingNothing()


@asynccontextmanager
async def line_through(
    inner: LockStore, on_grant: Callable[[Grant], None], through: LineCall
) -> AsyncIterator[WaitingLine | None]:
    """Wait in ``inner``'s lines, each call sent by ``through``; ``None`` if it has none."""
    if not isinstance(inner, SupportsHandoff):
        yield None
        return
    async with inner.wait_in_line(on_grant) as line:
        yield None if line is None else _LineThrough(line, through)


@final
class _LineThrough:
    """A waiting line of the inner store, each call sent through its wrapper."""

    __slots__ = ("_line", "_through")

    def __init__(self, line: WaitingLine, through: LineCall) -> None:
        self._line = line
        self._through = through

    async def queue(
        self, key: str, owner: str, ttl_ms: int, queue_ms: int, ticket: int
    ) -> Acquired | Queued:
        """Send the inner line's ``queue`` through the wrapper."""
        call = self._line.queue(key, owner, ttl_ms, queue_ms, ticket)
        return await self._through(
            "queue", key, owner, call, ttl_ms=ttl_ms, queue_ms=queue_ms, ticket=ticket
        )

    async def leave(self, key: str, owner: str) -> bool:
        """Send the inner line's ``leave`` through the wrapper."""
        return await self._through("leave", key, owner, self._line.leave(key, owner))
