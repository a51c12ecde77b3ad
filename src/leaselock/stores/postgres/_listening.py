"""Listening sessions: one connection that LISTENs and runs the follower's own statements.

A session belongs to one :class:`~._postgres_follower.PostgresReleaseFollower` (or one waiting
line), which sends it one command at a time. asyncpg delivers notifications between commands
by itself; psycopg hands them out only from ``notifies()``, which holds the connection, so its
session stops reading around each command (notifications that arrive meanwhile wait in
psycopg's backlog). Either session asks the server ``SELECT 1`` when it has heard nothing for a
while, to notice a connection that went silent (``_common._liveness``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final, Protocol, final

from .._common._liveness import kept_alive

if TYPE_CHECKING:
    import asyncpg

__all__ = ["ListeningSession", "asyncpg_session", "psycopg_session"]

# how long the teardown of a session may take before its connection is cut instead
TEARDOWN_TIMEOUT_S: Final = 5.0
# how long a session may hear nothing before it asks SELECT 1, and how long it waits for the
# answer before it gives the connection up as lost
QUIET_S: Final = 5.0
_NUMBERED_PARAMETER: Final = re.compile(r"\$\d+")
_LISTENING: Final = "a listening connection"


class ListeningSession(Protocol):
    """One connection's LISTENs and statements; one command at a time."""

    async def listen(self, channel: str) -> None:
        """LISTEN on ``channel``; its notifications go to the session's ``on_notify``."""

    async def unlisten(self, channel: str) -> None:
        """Stop listening on ``channel``."""

    async def execute(self, sql: str, args: tuple[object, ...]) -> None:
        """Run one statement with ``$n`` parameters, numbered in the order they appear."""


@final
class _AsyncpgSession:
    __slots__ = ("_connection", "_on_notify", "channels", "commands", "heard_at")

    def __init__(
        self,
        connection: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy[Any],
        on_notify: Callable[[str], None],
    ) -> None:
        self._connection = connection
        self._on_notify = on_notify
        self.channels: set[str] = set()
        # the follower's commands and the liveness probe: asyncpg runs one at a time
        self.commands = asyncio.Lock()
        self.heard_at = asyncio.get_running_loop().time()

    def _deliver(self, _connection: object, _pid: int, _channel: str, payload: object) -> None:
        self.heard_at = asyncio.get_running_loop().time()
        self._on_notify(str(payload))

    async def listen(self, channel: str) -> None:
        self.channels.add(channel)
        async with self.commands:
            await self._connection.add_listener(channel, self._deliver)

    async def unlisten(self, channel: str) -> None:
        self.channels.discard(channel)
        async with self.commands:
            await self._connection.remove_listener(channel, self._deliver)

    def asking(self) -> asyncio.Lock:
        return self.commands

    async def ask(self) -> None:
        await self._connection.execute("SELECT 1")
        self.heard_at = asyncio.get_running_loop().time()

    def cut(self, _silent_s: float) -> None:
        # the termination listener then reports the loss, as for a connection the server ended
        self._connection.terminate()

    async def forget_all(self) -> None:
        """Stop every LISTEN and drop every advisory lock: the connection may be reused."""
        for channel in list(self.channels):
            await self.unlisten(channel)
        await self._connection.execute("SELECT pg_advisory_unlock_all()")

    async def execute(self, sql: str, args: tuple[object, ...]) -> None:
        async with self.commands:
            await self._connection.execute(sql, *args)
            self.heard_at = asyncio.get_running_loop().time()


@asynccontextmanager
async def asyncpg_session(
    connection: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy[Any],
    on_notify: Callable[[str], None],
    on_lost: Callable[[], None],
) -> AsyncIterator[ListeningSession]:
    """Listen on an asyncpg connection; ``on_lost()`` when it ends, or stops answering.

    A connection that hears nothing for :data:`QUIET_S` is asked ``SELECT 1``; one that does
    not answer within as long again is cut, and ``on_lost()`` follows. At the end the
    connection forgets its LISTENs and advisory locks, or is cut if it cannot: it may go back
    to an application's pool.
    """

    def terminated(_connection: object) -> None:
        on_lost()

    connection.add_termination_listener(terminated)
    session = _AsyncpgSession(connection, on_notify)
    try:
        async with kept_alive(session, QUIET_S, name=_LISTENING):
            yield session
    finally:
        connection.remove_termination_listener(terminated)
        if not connection.is_closed():
            try:
                # a server that stopped answering must not hold the application's shutdown
                async with asyncio.timeout(TEARDOWN_TIMEOUT_S):
                    await session.forget_all()
            except Exception:  # noqa: BLE001 -- a session that may still listen is not reused
                connection.terminate()


@final
class _PsycopgSession:
    __slots__ = ("_connection", "_on_lost", "_on_notify", "_reader", "commands", "heard_at")

    def __init__(
        self,
        connection: Any,  # noqa: ANN401 -- a psycopg.AsyncConnection, typed loosely by SQLAlchemy
        on_notify: Callable[[str], None],
        on_lost: Callable[[], None],
    ) -> None:
        self._connection = connection
        self._on_notify = on_notify
        self._on_lost = on_lost
        self._reader: asyncio.Task[None] | None = None
        # the follower's commands and the liveness probe: each stops the reader around it
        self.commands = asyncio.Lock()
        self.heard_at = asyncio.get_running_loop().time()

    def asking(self) -> asyncio.Lock:
        return self.commands

    async def ask(self) -> None:
        await self._run("SELECT 1")

    def cut(self, _silent_s: float) -> None:
        # the follower ends the session, and the executor invalidates the connection
        self._on_lost()

    def read(self) -> None:
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def stop_reading(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.wait([self._reader])
            self._reader = None

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for notification in self._connection.notifies():
                self.heard_at = loop.time()
                # on the loop, apart: a failing callback must not stop the reading
                loop.call_soon(self._on_notify, notification.payload)
        except Exception:  # noqa: BLE001 -- the connection is gone; the follower reconnects
            self._on_lost()

    async def _command(self, sql: str, args: tuple[object, ...] = ()) -> None:
        async with self.commands:
            await self._run(sql, args)

    async def _run(self, sql: str, args: tuple[object, ...] = ()) -> None:
        await self.stop_reading()
        try:
            await self._connection.execute(sql, args or None)
        finally:
            self.read()
        self.heard_at = asyncio.get_running_loop().time()

    async def listen(self, channel: str) -> None:
        await self._command(f'LISTEN "{channel}"')

    async def unlisten(self, channel: str) -> None:
        await self._command(f'UNLISTEN "{channel}"')

    async def execute(self, sql: str, args: tuple[object, ...]) -> None:
        await self._command(_NUMBERED_PARAMETER.sub("%s", sql), args)


@asynccontextmanager
async def psycopg_session(
    connection: Any,  # noqa: ANN401 -- a psycopg.AsyncConnection, typed loosely by SQLAlchemy
    on_notify: Callable[[str], None],
    on_lost: Callable[[], None],
) -> AsyncIterator[ListeningSession]:
    """Listen on a psycopg connection in autocommit mode; ``on_lost()`` when it fails.

    As on asyncpg, a connection that hears nothing for :data:`QUIET_S` is asked ``SELECT 1``,
    and one that does not answer within as long again is reported lost.
    """
    session = _PsycopgSession(connection, on_notify, on_lost)
    session.read()
    try:
        async with kept_alive(session, QUIET_S, name=_LISTENING):
            yield session
    finally:
        await session.stop_reading()
