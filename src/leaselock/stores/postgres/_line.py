"""PostgresWaitingLine: one process's places in the keys' lines, and the channel grants reach.

The lines are rows of ``<table>_line``; every step is one call of the table's line function
(``_postgres_line_sql``). A release that hands a key over NOTIFYs the waiting process on the
channel its place remembers: ``<store's channel>:w<15 hex digits>``, one per line, never a key's
(``<channel>:<16 hex digits>``), so only that process hears it. The line LISTENs on its channel
on a listening session of its own, opened at the first queue call: a process that never waits
opens nothing.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Final, final

from ..._errors import LockStoreError
from .._common._protocol import Acquired, Grant, Queued
from ._executors import Row
from ._listening import ListeningSession

__all__ = [
    "LISTEN_TIMEOUT_S",
    "RELISTEN_PAUSE_S",
    "PostgresWaitingLine",
    "line_channel",
    "parse_grant",
]

_log = logging.getLogger("leaselock.stores.postgres")

# how long opening the listening session may take; past it, queue calls go on without it
LISTEN_TIMEOUT_S: Final = 10.0
# after a failure to listen, queue calls go without a channel this long before it is tried again
RELISTEN_PAUSE_S: Final = 1.0
# '<token> <ticket> <char length of key> <key><owner>': keys may hold spaces and start with
# digits, so the key is cut by its length
_GRANT: Final = re.compile(r"([0-9]+) ([0-9]+) ([0-9]+) (.*)", re.DOTALL)

OpenSession = Callable[
    [Callable[[str], None], Callable[[], None]], AbstractAsyncContextManager[ListeningSession]
]
# runs one line step (LINE_STEP_SQL) with its seven arguments: its row, or None
Step = Callable[[tuple[object, ...]], Awaitable[Row | None]]


def line_channel(channel: str) -> str:
    """Return a new line's channel: the store's, ``:w`` and 15 hex digits, in 63 characters."""
    return f"{channel}:w{secrets.token_hex(8)[:15]}"


def parse_grant(payload: str) -> Grant | None:
    """Read ``<token> <ticket> <char length of key> <key><owner>``; ``None`` if it is not one."""
    matched = _GRANT.fullmatch(payload)
    if matched is None:
        return None
    token, ticket, length, rest = matched.groups()
    if int(length) > len(rest):
        return None
    return Grant(rest[: int(length)], rest[int(length) :], int(token), int(ticket))


@final
class PostgresWaitingLine:
    """One process's places in a store's lines, and the LISTEN its grants arrive by.

    Args:
        open_session: opens a listening session (the executor's ``listening``).
        step: runs one line step on the store's connections.
        token: reads a fencing token as the store does (refusing a driver's text or Decimal).
        channel: this line's channel (:func:`line_channel`).
        on_grant: called on this loop for each grant heard.
        store: how to name the store in log lines.
    """

    __slots__ = (
        "_channel",
        "_closed",
        "_failed_at",
        "_generation",
        "_listening",
        "_lost",
        "_on_grant",
        "_open_session",
        "_opening",
        "_stack",
        "_step",
        "_store",
        "_token",
        "_warned",
    )

    def __init__(
        self,
        open_session: OpenSession,
        step: Step,
        *,
        token: Callable[[object], int],
        channel: str,
        on_grant: Callable[[Grant], None],
        store: str,
    ) -> None:
        """Listen to nothing, and open nothing, until the first queue call."""
        self._open_session = open_session
        self._step = step
        self._token = token
        self._channel = channel
        self._on_grant = on_grant
        self._store = store
        self._stack = AsyncExitStack()
        self._listening = False
        self._lost = False
        # sessions opened: a lost session's late callback must not mark its successor lost
        self._generation = 0
        self._opening: asyncio.Task[None] | None = None
        self._failed_at: float | None = None
        self._warned = False
        self._closed = False

    async def queue(
        self, key: str, owner: str, ttl_ms: int, queue_ms: int, ticket: int
    ) -> Acquired | Queued:
        """Take ``key``, or keep ``owner``'s place in its line (see ``WaitingLine.queue``).

        The LISTEN is in place before the call is sent, so a grant to the place it keeps is
        heard; without it (it failed), the place hears nothing and a grant is answered by the
        next queue call.
        """
        channel = await self._listened()
        row = await self._step(("queue", key, owner, ttl_ms, queue_ms, ticket, channel))
        if row is None:
            raise LockStoreError(
                f"{self._store}'s line function returned no row for a queue call; recreate it: "
                "await store.create_schema(), or apply the Alembic migration from the docs"
            )
        if row[0] is not None:
            return Acquired(self._token(row[0]))
        return Queued(holder=None if row[1] is None else str(row[1]))

    async def leave(self, key: str, owner: str) -> bool:
        """Leave ``key``'s line; release what was granted to ``owner`` (see ``WaitingLine``)."""
        return await self._step(("leave", key, owner, None, None, None, None)) is not None

    async def aclose(self) -> None:
        """Stop listening and close the listening session."""
        self._closed = True
        if self._opening is not None:
            self._opening.cancel()
            await asyncio.wait([self._opening])
        await self._end_session()

    async def _listened(self) -> str | None:
        """Return the channel once LISTEN is in place, opening (again) if needed; else None."""
        if self._listening and not self._lost:
            return self._channel
        if self._closed:
            return None
        loop = asyncio.get_running_loop()
        if self._opening is None:
            # the pace of a reconnect, not lock timing: no lease depends on it
            if self._failed_at is not None and loop.time() < self._failed_at + RELISTEN_PAUSE_S:
                return None
            self._opening = loop.create_task(self._listen())
        opening = self._opening
        try:
            # one opening for every caller meanwhile; a cancelled caller leaves it running
            await asyncio.shield(opening)
        finally:
            if opening.done() and self._opening is opening:
                self._opening = None
        return self._channel if self._listening else None

    async def _listen(self) -> None:
        """Open a listening session and LISTEN on the line's channel; a failure is logged."""
        await self._end_session()
        self._generation += 1
        generation = self._generation

        def lost() -> None:
            if generation == self._generation:
                self._lost = True

        try:
            async with asyncio.timeout(LISTEN_TIMEOUT_S):
                session = await self._stack.enter_async_context(
                    self._open_session(self._heard, lost)
                )
                await session.listen(self._channel)
        except Exception as error:  # noqa: BLE001 -- any failure: grants come by asking
            await self._end_session()
            self._failed_at = asyncio.get_running_loop().time()
            if self._warned:
                _log.debug("%s could not listen for its grants again: %s", self._store, error)
                return
            self._warned = True
            _log.warning(
                "%s could not listen for its grants (%s): waiters in this process take a key "
                "handed to them up to 1 s late, at their next queue call. Fix: let the role "
                "open one more connection (it LISTENs; not through a transaction-pooling "
                "PgBouncer)",
                self._store,
                str(error) or f"not within {LISTEN_TIMEOUT_S:.0f} s",
            )
            return
        if self._failed_at is not None:
            _log.info("%s listens for its grants again", self._store)
        self._listening, self._lost, self._failed_at = True, False, None

    async def _end_session(self) -> None:
        self._listening = False
        stack, self._stack = self._stack, AsyncExitStack()
        try:
            await stack.aclose()
        except Exception as error:  # noqa: BLE001 -- the connection is gone either way
            _log.debug("%s: closing a listening connection failed: %s", self._store, error)

    def _heard(self, payload: str) -> None:
        grant = parse_grant(payload)
        if grant is None:
            _log.warning("%s heard a grant it cannot read: %r", self._store, payload)
            return
        try:
            self._on_grant(grant)
        except Exception:  # noqa: BLE001 -- one bad callback must not stop the listening
            _log.exception("A grant callback of %s failed", self._store)
