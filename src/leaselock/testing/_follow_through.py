"""Release notifications passed through a store that wraps another (a faulty or recording one)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from ..stores._protocol import (
    FollowingNothing,
    LockStore,
    ReleaseFollower,
    SupportsReleaseNotifications,
)

__all__ = ["follow_through"]


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
