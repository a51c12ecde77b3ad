"""PostgresReleaseFollower: one listening connection that follows keys for waiters.

Following a key is two commands on that connection: ``LISTEN`` on the key's own channel, then a
shared advisory lock that tells releasers a process waits on the key (:data:`FOLLOW_SQL`). A
release notifies only when such a lock is held, so releases nobody waits for cost no NOTIFY,
and a NOTIFY reaches only the sessions that listen on that key's channel. The order matters: a
release that saw the lock is committed after the LISTEN, so its notification is heard.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Final, final

from .._common._followed_keys import FollowedKeys
from ._listening import ListeningSession
from ._sql import FOLLOW_SQL, UNFOLLOW_SQL, key_channel

__all__ = ["FOLLOW_TIMEOUT_S", "RELISTEN_PAUSE_S", "PostgresReleaseFollower"]

_log = logging.getLogger("leaselock")

# how long following a key may take (a connection, a LISTEN, an interest lock that waits for a
# release's commit); past it waiters on the key poll
FOLLOW_TIMEOUT_S: Final = 10.0
RELISTEN_PAUSE_S: Final = 1.0

OpenSession = Callable[
    [Callable[[str], None], Callable[[], None]], AbstractAsyncContextManager[ListeningSession]
]


@final
class PostgresReleaseFollower:
    """Follows keys on one connection, opened at the first key and listened again if lost.

    Args:
        open_session: opens a listening session (the executor's ``listening``).
        channel: the store's channel; a key's is :func:`key_channel` of it.
        interest_class: the first key of the store's interest locks.
        on_release: called on this loop with the key of each release heard.
        store: how to name the store in log lines.
    """

    __slots__ = (
        "_channel",
        "_closed",
        "_commands",
        "_interest",
        "_keys",
        "_on_release",
        "_open_session",
        "_recovery",
        "_registered",
        "_session",
        "_session_stack",
        "_store",
    )

    def __init__(
        self,
        open_session: OpenSession,
        channel: str,
        interest_class: int,
        on_release: Callable[[str], None],
        store: str,
    ) -> None:
        """Follow nothing, and open nothing, yet."""
        self._open_session = open_session
        self._channel = channel
        self._interest = interest_class
        self._on_release = on_release
        self._store = store
        self._session: ListeningSession | None = None
        self._session_stack = AsyncExitStack()
        # the keys the current session listens on and holds the interest of
        self._registered: set[str] = set()
        # one command at a time on the one connection
        self._commands = asyncio.Lock()
        self._recovery: asyncio.Task[None] | None = None
        self._closed = False
        self._keys = FollowedKeys(self._subscribe, self._unsubscribe)

    def following(self, key: str) -> AbstractAsyncContextManager[None]:
        """Hear ``key``'s releases while entered (see :class:`ReleaseFollower`)."""
        return self._keys.following(key)

    async def aclose(self) -> None:
        """Stop following and close the connection (its interest locks go with it)."""
        self._closed = True
        await self._keys.aclose()
        if self._recovery is not None:
            self._recovery.cancel()
            await asyncio.wait([self._recovery])
        async with self._commands:
            await self._end_session()

    async def _subscribe(self, key: str) -> None:
        try:
            async with asyncio.timeout(FOLLOW_TIMEOUT_S), self._commands:
                await self._register(await self._session_now(), key)
        except Exception as error:  # noqa: BLE001 -- any failure: waiters poll instead
            _log.warning(
                "%s could not follow the releases of %r (%s): waiters on it in this process wake "
                "up to 1 s after its release, instead of at once",
                self._store,
                key,
                str(error) or f"not within {FOLLOW_TIMEOUT_S:.0f} s",
            )

    async def _unsubscribe(self, key: str) -> None:
        try:
            async with asyncio.timeout(FOLLOW_TIMEOUT_S), self._commands:
                if self._session is not None and key in self._registered:
                    self._registered.discard(key)
                    await self._session.execute(UNFOLLOW_SQL, (self._interest, key))
                    await self._session.unlisten(key_channel(self._channel, key))
        except Exception as error:  # noqa: BLE001 -- at worst a few stray notifications
            _log.debug("%s could not unfollow %r: %s", self._store, key, error)

    async def _register(self, session: ListeningSession, key: str) -> None:
        if key in self._registered:
            return
        # LISTEN first: a release that sees the interest lock then commits after the LISTEN
        await session.listen(key_channel(self._channel, key))
        await session.execute(FOLLOW_SQL, (self._interest, key))
        self._registered.add(key)

    async def _session_now(self) -> ListeningSession:
        if self._session is None:
            self._session = await self._session_stack.enter_async_context(
                self._open_session(self._on_release, self._lost)
            )
        return self._session

    async def _end_session(self) -> None:
        self._session = None
        self._registered.clear()
        stack, self._session_stack = self._session_stack, AsyncExitStack()
        try:
            await stack.aclose()
        except Exception as error:  # noqa: BLE001 -- the connection is gone either way
            _log.debug("%s: closing a lost listening connection failed: %s", self._store, error)

    def _lost(self) -> None:
        if self._closed or (self._recovery is not None and not self._recovery.done()):
            return
        self._recovery = asyncio.get_running_loop().create_task(self._recover())

    async def _recover(self) -> None:
        """Listen again on a new connection and follow again every key followed now."""
        async with self._commands:
            await self._end_session()
        attempts = 0
        while not self._closed and self._keys.keys:
            attempts += 1
            # once per outage: a server away for a minute is one warning, not sixty
            _log.log(
                logging.WARNING if attempts == 1 else logging.DEBUG,
                "Lost the release notifications of %s; waiters poll until they are back. "
                "Listening again in %.0f s",
                self._store,
                RELISTEN_PAUSE_S,
            )
            # the pause of a reconnect loop, not lock timing: no lease depends on it
            await asyncio.sleep(RELISTEN_PAUSE_S)  # noqa: TID251
            try:
                async with asyncio.timeout(FOLLOW_TIMEOUT_S), self._commands:
                    session = await self._session_now()
                    for key in self._keys.keys:
                        await self._register(session, key)
            except Exception as error:  # noqa: BLE001 -- any failure: try again
                _log.debug("%s: listening again failed: %s", self._store, error)
                async with self._commands:
                    await self._end_session()
                continue
            _log.info("Listening for releases on %s again", self._store)
            return
