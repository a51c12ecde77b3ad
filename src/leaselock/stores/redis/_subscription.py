"""RedisSubscription: one channel heard on a connection of its own, each message where it arrives.

A waiting line's grants arrive on a channel of the line's own (``_redis_line``). Read through
redis-py's ``PubSub``, a grant went from the socket to a reader task, through redis-py's stream
layers, and then took one more turn of the loop before the waiter ran. Here the connection's
protocol parses the message with hiredis and hands it over in the turn its bytes arrive:
with 8 processes taking one key in turn, leaselock's CPU per critical section went from
0.31-0.32 to 0.27 ms (``benchmarks/bench_contention.py``).

The connection is opened by the subscription itself, where and as the client's settings say
(see ``_transport``); once subscribed, it is kept. A connection that breaks, or stops
answering the PING it is sent whenever it has been quiet, is opened and subscribed again: at
once after a subscription that had lasted, then every :data:`RESUBSCRIBE_PAUSE_S` while the
server stays away or refuses. Messages published while it is away are not heard, so a caller
must learn what it missed another way (a waiter learns of its grant from its next queue call).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Final, final

from .._common._liveness import kept_alive
from ._follower import RESUBSCRIBE_PAUSE_S, SUBSCRIBE_TIMEOUT_S, subscribe_fix
from ._resp import INCOMPLETE, packed
from ._transport import Opened, RedisEndpoint, opened, retrieved

if TYPE_CHECKING:
    from collections.abc import Callable

# only the Redis store subscribes, and it refuses to be made without redis-py and hiredis
with contextlib.suppress(ImportError):
    import redis.exceptions

__all__ = ["RedisSubscription"]

_log = logging.getLogger("leaselock.stores.redis")

_MESSAGE: Final = b"message"
_SUBSCRIBE: Final = b"subscribe"


@final
class RedisSubscription:
    """Hears one channel, on a connection of its own, from :meth:`subscribed` to :meth:`aclose`.

    Args:
        endpoint: where and how to connect (the client's settings); asked again for each
            connection after one broke.
        channel: the channel heard.
        on_message: called on this loop with each message's data, in the turn of the loop it
            arrives, decoded with the client's encoding whether or not the client decodes
            replies; an exception it raises is logged, and so is data it cannot decode.
        alive_s: a connection quiet this long is sent a PING; one that stays silent for twice
            as long is dead, and replaced.
        heard_as: how log lines name the subscription ("<store>'s grant subscription").
        unheard: what follows while it is away, for the warning that says so (the fix is
            told from the error).
    """

    __slots__ = (
        "_alive_s",
        "_channel",
        "_closed",
        "_endpoint",
        "_first",
        "_heard_as",
        "_keeping",
        "_on_message",
        "_unheard",
    )

    def __init__(
        self,
        endpoint: Callable[[], RedisEndpoint],
        channel: str,
        on_message: Callable[[str], None],
        *,
        alive_s: float,
        heard_as: str,
        unheard: str,
    ) -> None:
        """Open nothing until :meth:`subscribed`."""
        self._endpoint = endpoint
        self._channel = channel
        self._on_message = on_message
        self._alive_s = alive_s
        self._heard_as = heard_as
        self._unheard = unheard
        self._keeping: asyncio.Task[None] | None = None
        # settled by the first attempt to subscribe, whether it worked or not
        self._first: asyncio.Future[None] | None = None
        self._closed = False

    async def subscribed(self) -> None:
        """Return once the first attempt to subscribe has been answered, or has failed.

        The first call starts the subscription; later calls return at once, and so does any
        call after :meth:`aclose`. A failure is not raised: it is logged, and the subscription
        is tried again every :data:`RESUBSCRIBE_PAUSE_S`. The attempt is bounded by
        :data:`SUBSCRIBE_TIMEOUT_S`.
        """
        if self._closed:
            return
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
        """Stop hearing the channel and close the connection; subscribe no more."""
        self._closed = True
        keeping, self._keeping = self._keeping, None
        if keeping is not None:
            keeping.cancel()
            await asyncio.wait([keeping])

    async def _keep(self, first: asyncio.Future[None]) -> None:
        """Subscribe, and subscribe again whenever the connection breaks, until cancelled."""
        try:
            await self._keep_subscribed(first)
        finally:
            # stopped during the first attempt: whoever waits for it goes on, unsubscribed
            if not first.done():
                first.set_result(None)

    async def _keep_subscribed(self, first: asyncio.Future[None]) -> None:
        failures = 0
        while True:
            try:
                connection = await self._subscribe()
            except Exception as error:  # noqa: BLE001 -- any failure: say so, try again
                failure: Exception = error
            else:
                if not first.done():
                    first.set_result(None)
                lasted, failure = await self._held(connection, back=failures > 0)
                if lasted:
                    failures = 0
                    _log.info("%s was lost (%s); subscribing again", self._heard_as, failure)
                    continue
            if not first.done():
                first.set_result(None)
            failures += 1
            self._failed(failure, failures)
            # the server is away or refuses, or drops each connection at once: do not spin
            await asyncio.sleep(RESUBSCRIBE_PAUSE_S)  # noqa: TID251 -- resubscribe pacing

    async def _held(
        self, connection: _SubscribedConnection, *, back: bool
    ) -> tuple[bool, redis.exceptions.RedisError]:
        """Keep ``connection`` until it breaks, then close it.

        Returns whether it had lasted :data:`RESUBSCRIBE_PAUSE_S` (a server that drops each
        connection at once is as good as away), and what broke it. ``back``: the subscription
        was away before, and is said to be back once the connection has lasted.
        """
        try:
            await asyncio.wait([connection.lost], timeout=RESUBSCRIBE_PAUSE_S)
            lasted = not connection.lost.done()
            if lasted and back:
                _log.info("%s is back", self._heard_as)
            # a partition or a peer that vanished without a reset would otherwise look
            # subscribed for ever, while every message it should carry goes unheard
            async with kept_alive(connection, self._alive_s, name=self._heard_as):
                return lasted, await connection.lost
        finally:
            await connection.close()

    async def _subscribe(self) -> _SubscribedConnection:
        """Open a connection, subscribe on it, and return it once the server confirmed.

        Raises:
            TimeoutError: no confirmation within :data:`SUBSCRIBE_TIMEOUT_S`.
            redis.exceptions.RedisError: the connection failed or the server refused.
        """
        endpoint = self._endpoint()
        handshaken: Opened | None = None
        connection = None
        try:
            async with asyncio.timeout(SUBSCRIBE_TIMEOUT_S):
                handshaken = await opened(endpoint, decoded=False)
                connection = _SubscribedConnection(
                    handshaken, endpoint, self._channel, self._on_message, self._heard_as
                )
                await connection.confirmed
        except BaseException:
            if connection is not None:
                await connection.close()
            elif handshaken is not None:
                handshaken.transport.abort()
            raise
        return connection

    def _failed(self, error: Exception, failures: int) -> None:
        """Log a failed attempt: a warning for the first of a run of them, debug after."""
        if failures > 1:
            _log.debug("%s is still away (%s)", self._heard_as, error)
            return
        _log.warning(
            "%s could not subscribe (%s): %s. %s. Trying again every %g s",
            self._heard_as,
            str(error) or f"no confirmation within {SUBSCRIBE_TIMEOUT_S:g} s",
            self._unheard,
            subscribe_fix(error, self._channel.partition("\x00")[0]),
            RESUBSCRIBE_PAUSE_S,
        )


@final
class _SubscribedConnection(asyncio.Protocol):
    """One connection, handed over once its handshake was answered, subscribed to one channel.

    Writes the SUBSCRIBE at once; :attr:`confirmed` settles when the server confirms or
    refuses it, and :attr:`lost` gets the error that broke the connection. Replies are read
    as bytes, so the channel matches whatever the client's encoding makes of it.

    Raises:
        redis.exceptions.ConnectionError: at construction, when the connection closed since
            its handshake.
    """

    __slots__ = (
        "_answered",
        "_channel",
        "_encoding",
        "_encoding_errors",
        "_heard_as",
        "_on_message",
        "_parser",
        "_transport",
        "closed",
        "confirmed",
        "heard_at",
        "lost",
    )

    def __init__(
        self,
        handshaken: Opened,
        endpoint: RedisEndpoint,
        channel: str,
        on_message: Callable[[str], None],
        heard_as: str,
    ) -> None:
        """Take ``handshaken`` over and subscribe to ``channel`` on it."""
        loop = asyncio.get_running_loop()
        self._on_message = on_message
        self._heard_as = heard_as
        self._parser = handshaken.parser
        self._encoding = endpoint.encoding
        self._encoding_errors = endpoint.encoding_errors
        self._channel = channel.encode(self._encoding, self._encoding_errors)
        self.confirmed: asyncio.Future[None] = loop.create_future()
        # a refusal the subscriber stopped waiting for must not be logged as never retrieved
        self.confirmed.add_done_callback(retrieved)
        self.lost: asyncio.Future[redis.exceptions.RedisError] = loop.create_future()
        # settled once the socket is closed
        self.closed: asyncio.Future[None] = loop.create_future()
        # when the last bytes arrived, on the loop's clock
        self.heard_at = loop.time()
        # settled by the first bytes after a PING, or by the break
        self._answered: asyncio.Future[None] | None = None
        self._transport = handshaken.hand_to(self, heard_as)
        self._send("SUBSCRIBE", self._channel)

    def asking(self) -> contextlib.nullcontext[None]:
        """Nothing to wait for: a PING goes out beside whatever else the connection carries."""
        return contextlib.nullcontext()

    async def ask(self) -> None:
        """Send a PING; return once anything arrives, which shows the connection alive.

        Raises:
            redis.exceptions.RedisError: the connection broke meanwhile.
        """
        if self._answered is None or self._answered.done():
            self._answered = asyncio.get_running_loop().create_future()
            self._answered.add_done_callback(retrieved)
            self._send("PING")
        await asyncio.shield(self._answered)

    def cut(self, silent_s: float) -> None:
        """Break: nothing arrived for ``silent_s``, a PING's answer included."""
        self._broke(f"nothing heard for {silent_s:.1f} s, not even an answer to a PING")

    async def close(self) -> None:
        """Close the socket now, and return once it is closed."""
        self._break(redis.exceptions.ConnectionError("closed by this process"))
        await self.closed

    def data_received(self, data: bytes) -> None:
        """Hand each message in ``data`` over; note the confirmation; break on an error."""
        self.heard_at = asyncio.get_running_loop().time()
        if self._answered is not None and not self._answered.done():
            self._answered.set_result(None)
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
            # [kind, channel, data or count]: a list in RESP2, a push (a list too) in RESP3;
            # anything else is a PING's answer, which has done its work by arriving
            if isinstance(answer, list) and len(answer) == 3 and answer[1] == self._channel:  # noqa: PLR2004
                if answer[0] == _MESSAGE:
                    self._hand_over(answer[2])
                elif answer[0] == _SUBSCRIBE and not self.confirmed.done():
                    self.confirmed.set_result(None)

    def eof_received(self) -> bool:
        """Break now, and let the transport close."""
        self._broke("closed by the server")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """Break, with what closed the connection; the socket is closed."""
        self._broke(str(exc) if exc else "closed")
        if not self.closed.done():
            self.closed.set_result(None)

    def _hand_over(self, data: bytes) -> None:
        try:
            message = data.decode(self._encoding, self._encoding_errors)
        except UnicodeDecodeError:
            _log.warning("%s heard a message it cannot decode: %r", self._heard_as, data)
            return
        try:
            self._on_message(message)
        except Exception:  # noqa: BLE001 -- one bad callback must not stop the others
            _log.exception("A message callback of %s failed", self._heard_as)

    def _send(self, *args: str | bytes) -> None:
        self._transport.write(packed(args, self._encoding, self._encoding_errors))

    def _broke(self, what: str) -> None:
        # the log lines that report it name the subscription already
        self._break(redis.exceptions.ConnectionError(what))

    def _break(self, error: redis.exceptions.RedisError) -> None:
        if not self.lost.done():
            self.lost.set_result(error)
        if not self.confirmed.done():
            self.confirmed.set_exception(error)
        if self._answered is not None and not self._answered.done():
            self._answered.set_exception(error)
        # at once: a close would first wait to send what a stalled server does not read
        self._transport.abort()
