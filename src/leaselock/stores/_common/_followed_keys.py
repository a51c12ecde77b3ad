"""FollowedKeys: the keys one release follower hears, counted, so each is subscribed to once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import final

__all__ = ["FollowedKeys"]


@final
class FollowedKeys:
    """Counts the followers of each key; subscribes at the first, unsubscribes after the last.

    Args:
        subscribe: makes the store deliver the key's releases from now on; returns once it
            does, or once it gave up (it logs why). It must not raise.
        unsubscribe: stops delivering them, in the background after the last follower left;
            bounded in time, it must not raise either.
    """

    __slots__ = ("_counts", "_leaving", "_subscribe", "_subscriptions", "_unsubscribe")

    def __init__(
        self,
        subscribe: Callable[[str], Awaitable[None]],
        unsubscribe: Callable[[str], Awaitable[None]],
    ) -> None:
        """Follow no key yet."""
        self._subscribe = subscribe
        self._unsubscribe = unsubscribe
        self._counts: dict[str, int] = {}
        self._subscriptions: dict[str, asyncio.Task[None]] = {}
        self._leaving: dict[str, asyncio.Task[None]] = {}

    @property
    def keys(self) -> list[str]:
        """The keys followed now: what to subscribe to again on a new connection."""
        return list(self._counts)

    def follows(self, key: str) -> bool:
        """Whether some caller is inside :meth:`following` of ``key`` now."""
        return key in self._counts

    @asynccontextmanager
    async def following(self, key: str) -> AsyncIterator[None]:
        """Hear ``key`` while entered; later followers of the key share the first's subscription."""
        self._counts[key] = self._counts.get(key, 0) + 1
        subscription = self._subscriptions.get(key)
        if subscription is None:
            # a task of its own: a follower that leaves early must not cut it short for the others
            subscription = asyncio.get_running_loop().create_task(self._subscribe_after_leave(key))
            self._subscriptions[key] = subscription
        try:
            await asyncio.shield(subscription)
            yield
        finally:
            self._counts[key] -= 1
            if self._counts[key] == 0:
                del self._counts[key]
                del self._subscriptions[key]
                leave = asyncio.get_running_loop().create_task(self._leave(key, subscription))
                self._leaving[key] = leave
                # not awaited: a waiter that won its key hands it over without this round trip
                leave.add_done_callback(lambda _: self._left(key, leave))

    async def aclose(self) -> None:
        """Stop what is still in flight: the connection it would talk on is closing."""
        in_flight = [*self._subscriptions.values(), *self._leaving.values()]
        for work in in_flight:
            work.cancel()
        if in_flight:
            await asyncio.wait(in_flight)

    def _left(self, key: str, leave: asyncio.Task[None]) -> None:
        if self._leaving.get(key) is leave:
            del self._leaving[key]

    async def _leave(self, key: str, subscription: asyncio.Task[None]) -> None:
        # an unsubscribe sent before its subscribe would leave the key subscribed
        await asyncio.wait([subscription])
        await self._unsubscribe(key)

    async def _subscribe_after_leave(self, key: str) -> None:
        # a subscribe sent before the last follower's unsubscribe would be undone by it
        leaving = self._leaving.get(key)
        if leaving is not None:
            await asyncio.wait([leaving])
        await self._subscribe(key)
