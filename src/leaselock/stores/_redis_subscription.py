"""RedisSubscription: one channel heard on a connection of its own, each message where it arrives.

A waiting line's grants arrive on a channel of the line's own (``_redis_line``). Read through
redis-py's ``PubSub``, a grant went from the socket to a reader task, through redis-py's stream
layers, and then took one more turn of the loop before the waiter ran. Here the connection's
protocol parses the message with hiredis and hands it over in the turn its bytes arrive:
with 8 processes taking one key in turn, that cut a tenth of leaselock's CPU per critical
section (``benchmarks/bench_contention.py``).

The connection is opened by redis-py from the client's pool settings (see
``_redis_transport``); once subscribed, it is kept: a connection that breaks is opened and
subscribed again, at once after a subscription that had lasted, then every
:data:`RESUBSCRIBE_PAUSE_S` while the server stays away or refuses. Messages published while
it is away are not heard, so a caller must learn what it missed another way (a waiter learns of
its grant from its next queue call).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, final

from .._cancellation import delivered
from ._redis_follower import RESUBSCRIBE_PAUSE_S, SUBSCRIBE_TIMEOUT_S
from ._redis_transport import INCOMPLETE, packed, reply_parser, retrieved, take_transport

if TYPE_CHECKING:
    from collections.abc import Callable

    from redis.asyncio.connection import AbstractConnection

# only the Redis store subscribes, and it refuses to be made without redis-py and hiredis
with contextlib.suppress(ImportError):
    import redis.exceptions

__all__ = ["RedisSubscription"]

_log = logging.getLogger("leaselock.stores.redis")


@final
class RedisSubscription:
    """Hears one channel, on a connection of its own, from :meth:`subscribed` to :meth:`aclose`.

    Args:
        make_connection: builds an unconnected redis-py connection (the pool's class and
            settings); called again for each connection after one broke.
        channel: the channel heard.
        on_message: called on this loop with each message's data, decoded as the client's
            settings say, in the turn of the loop it arrives; an exception it raises is logged.
        heard_as: how log lines name the subscription ("<store>'s grant subscription").
        unheard: what follows while it is away, and the fix, for the warning that says so.
    """

    __slots__ = (
        "_channel",
        "_first",
        "_heard_as",
        "_keeping",
        "_make_connection",
        "_on_message",
        "_unheard",
    )

    def __init__(
        self,
        make_connection: Callable[[], AbstractConnection],
        channel: str,
        on_message: Callable[[str], None],
        *,
        heard_as: str,
        unheard: str,
    ) -> None:
        """Open nothing until :meth:`subscribed`."""
        self._make_connection = make_connection
        self._channel = channel
        self._on_message = on_message
        self._heard_as = heard_as
        self._unheard = unheard
        self._keeping: asyncio.Task[None] | None = None
        # settled by the first attempt to subscribe, whether it worked or not
        self._first: asyncio.Future[None] | None = None

    async def subscribed(self) -> None:
        """Return once the first attempt to subscribe has been answered, or has failed.

        The first call starts the subscription; later calls return at once. A failure is not
        raised: it is logged, and the subscription is tried again every
        :data:`RESUBSCRIBE_PAUSE_S`. The attempt is bounded by :data:`SUBSCRIBE_TIMEOUT_S`.
        """
        first = self._first
        if first is None:
            first = self._first = asyncio.get_running_loop().create_future()
            self._keeping = asyncio.get_running_loop().create_task(
                self._keep(first), name=f"leaselock {self._heard_as}"
            )
        if not first.done():
            # shielded: a caller that gives up does not stop the attempt the others wait for
            await asyncio.shield(first)

    async def aclose(self) -> None:
        """Stop hearing the channel and close the connection."""
        keeping, self._keeping = self._keeping, None
        if keeping is not None:
            keeping.cancel()
            await asyncio.wait([keeping])
        if self._first is not None and not self._first.done():
            # closed during the first attempt: whoever waits for it goes on, unsubscribed
            self._first.set_result(None)

    async def _keep(self, first: asyncio.Future[None]) -> None:
        """Subscribe, and subscribe again whenever the connection breaks, until cancelled."""
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            try:
                connection = await self._subscribe()
            except Exception as error:  # noqa: BLE001 -- any failure: say so, try again
                failures += 1
                self._failed(error, failures)
            else:
                if failures:
                    _log.info("%s is back", self._heard_as)
                failures = 0
                if not first.done():
                    first.set_result(None)
                since = loop.time()
                try:
                    broken_by = await connection.lost
                finally:
                    await connection.close()
                _log.info("%s was lost (%s); subscribing again", self._heard_as, broken_by)
                if loop.time() - since >= RESUBSCRIBE_PAUSE_S:
                    continue
            if not first.done():
                first.set_result(None)
            # the server is away or refuses, or drops each connection at once: do not spin
            await asyncio.sleep(RESUBSCRIBE_PAUSE_S)  # noqa: TID251 -- resubscribe pacing

    async def _subscribe(self) -> _SubscribedConnection:
        """Open a connection, subscribe on it, and return it once the server confirmed.

        Raises:
            TimeoutError: no confirmation within :data:`SUBSCRIBE_TIMEOUT_S`.
            redis.exceptions.RedisError: the connection failed or the server refused.
        """
        opened = self._make_connection()
        connection = None
        try:
            async with asyncio.timeout(SUBSCRIBE_TIMEOUT_S):
                await delivered(opened.connect())  # type: ignore[no-untyped-call] # unannotated in redis-py
                connection = _SubscribedConnection(
                    opened, self._channel, self._on_message, self._heard_as
                )
                await connection.confirmed
        except BaseException:
            if connection is None:
                await opened.disconnect(nowait=True)
            else:
                await connection.close()
            raise
        return connection

    def _failed(self, error: Exception, failures: int) -> None:
        """Log a failed attempt: a warning for the first of a run of them, debug after."""
        if failures > 1:
            _log.debug("%s is still away (%s)", self._heard_as, error)
            return
        _log.warning(
            "%s could not subscribe (%s): %s. Trying again every %g s",
            self._heard_as,
            str(error) or f"no confirmation within {SUBSCRIBE_TIMEOUT_S:g} s",
            self._unheard,
            RESUBSCRIBE_PAUSE_S,
        )


@final
class _SubscribedConnection(asyncio.Protocol):
    """One connection's transport, taken over from redis-py to subscribe to one channel.

    Writes the SUBSCRIBE at once; :attr:`confirmed` settles when the server confirms or
    refuses it, and :attr:`lost` gets the error that broke the connection.

    Raises:
        redis.exceptions.ConnectionError: at construction, when redis-py's connection holds no
            open transport to take over.
    """

    __slots__ = (
        "_channel",
        "_heard_as",
        "_on_message",
        "_parser",
        "_transport",
        "confirmed",
        "lost",
        "redis",
    )

    def __init__(
        self,
        connection: AbstractConnection,
        channel: str,
        on_message: Callable[[str], None],
        heard_as: str,
    ) -> None:
        """Take ``connection``'s transport over and subscribe to ``channel`` on it."""
        loop = asyncio.get_running_loop()
        self.redis = connection
        self._on_message = on_message
        self._heard_as = heard_as
        self._parser = reply_parser(connection, decoded=True)
        encoder = connection.encoder
        self._channel = channel
        self.confirmed: asyncio.Future[None] = loop.create_future()
        # a refusal the subscriber stopped waiting for must not be logged as never retrieved
        self.confirmed.add_done_callback(retrieved)
        self.lost: asyncio.Future[redis.exceptions.RedisError] = loop.create_future()
        self._transport = take_transport(connection, self, heard_as)
        self._transport.write(
            packed(("SUBSCRIBE", channel), encoder.encoding, encoder.encoding_errors)
        )

    async def close(self) -> None:
        """Close the socket now, and redis-py's side of the connection."""
        self._break(redis.exceptions.ConnectionError(f"{self._heard_as} was closed"))
        await self.redis.disconnect(nowait=True)

    def data_received(self, data: bytes) -> None:
        """Hand each message in ``data`` over; note the confirmation; break on an error."""
        parser = self._parser
        parser.feed(data)
        while not self.lost.done():
            try:
                answer = parser.gets()
            except redis.exceptions.InvalidResponse as unreadable:
                self._broke(f"read what is not a Redis reply ({unreadable})")
                return
            if answer is INCOMPLETE:
                return
            if isinstance(answer, redis.exceptions.RedisError):
                # the SUBSCRIBE refused (NOPERM), or a server that cannot serve it (LOADING)
                self._break(answer)
                return
            # a list in RESP2, a push (a list too) in RESP3: [kind, channel, data or count]
            if not isinstance(answer, list) or len(answer) != 3 or answer[1] != self._channel:  # noqa: PLR2004
                continue
            kind = answer[0]
            if kind == "message":
                try:
                    self._on_message(answer[2])
                except Exception:  # noqa: BLE001 -- one bad callback must not stop the others
                    _log.exception("A message callback of %s failed", self._heard_as)
            elif kind == "subscribe" and not self.confirmed.done():
                self.confirmed.set_result(None)

    def eof_received(self) -> bool:
        """Break now, and let the transport close."""
        self._broke("closed by the server")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """Break, with what closed the connection."""
        self._broke(str(exc) if exc else "closed")

    def _broke(self, what: str) -> None:
        self._break(redis.exceptions.ConnectionError(f"{self._heard_as}: {what}"))

    def _break(self, error: redis.exceptions.RedisError) -> None:
        if not self.lost.done():
            self.lost.set_result(error)
        if not self.confirmed.done():
            self.confirmed.set_exception(error)
        # at once: a close would first wait to send what a stalled server does not read
        self._transport.abort()
