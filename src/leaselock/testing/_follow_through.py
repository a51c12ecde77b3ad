"""Release notifications passed through a store that wraps another (a faulty or recording one)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import final

from ..stores._protocol import LockStore, ReleaseFollower, SupportsReleaseNotifications

__all__ = ["follow_through"]


@final
class _FollowingNothing:
    """The follower of a store that announces no releases: following a key hears nothing."""

    def following(self, key: str) -> AbstractAsyncContextManager[None]:  # noqa: ARG002 -- as the protocol has it
        return nullcontext()


@asynccontextmanager
async def follow_through(
    inner: LockStore, on_release: Callable[[str], None]
) -> AsyncIterator[ReleaseFollower]:
    """Follow releases through ``inner``'s notifications; hear none if it has none."""
    if isinstance(inner, SupportsReleaseNotifications):
        async with inner.follow_releases(on_release) as follower:
            yield follower
    else:
        yield _FollowingNothing()
