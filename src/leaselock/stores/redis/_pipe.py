"""RedisCommandPipe: the store's scripts on one connection of its own, pipelined.

redis-py's pool spends more on a command than Redis does: a checkout (a lock, a condition, a
liveness probe of the socket, metric hooks), a task per write under a socket timeout
(``asyncio.wait_for``), and a release. ``benchmarks/bench_redis.py`` measured 92-115 us of
client CPU per command through the pool, and 48-56 us written straight to a connection that
stays open (10-14 us against 55-67 us with 64 in flight). Locks live on those round trips (a
handoff is one, an uncontended cycle two), so the store sends its scripts this way.

Every call writes its command at once, in call order, and waits for its reply. Replies are read
where the bytes arrive: the connection's protocol parses them with hiredis and hands each to
the oldest caller in the same turn of the loop, with no reader task between the socket and the
caller. A reader task cost every reply a turn of the loop more and redis-py's stream layers:
with 8 processes taking one key in turn, a tenth of leaselock's CPU per critical section
(``benchmarks/bench_contention.py``). Calls in flight share the connection (they are
pipelined), so concurrency costs no further connections. A caller that stops waiting
(cancelled, or its bound passed) leaves its reply to be read and dropped, which keeps the order.

The pipe opens its connection itself, through asyncio, where and as the client's settings say
(see ``_transport``: the URL, TLS, authentication, database and protocol all apply). The
client's socket timeout is replaced by a stall limit: a reply awaited longer than that means
the connection is dead, and the next call replaces it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from typing import TYPE_CHECKING, Any, final

from ._resp import INCOMPLETE, packed
from ._transport import Opened, RedisEndpoint, opened, retrieved

if TYPE_CHECKING:
    from collections.abc import Callable

# only RedisLockStore builds a pipe, and it refuses to be made without redis-py and hiredis
with contextlib.suppress(ImportError):
    import hiredis
    import redis.exceptions

__all__ = ["RedisCommandPipe"]

_log = logging.getLogger("leaselock.stores.redis")


@final
class RedisCommandPipe:
    """Sends commands on one connection, pipelined, on the loop that first uses it.

    Args:
        endpoint: where and how to connect (the client's settings); connected again after a
            connection died.
        stall_s: how long the oldest reply may be awaited before the connection is replaced,
            and how long opening a connection (its handshake included) may take.
        name: how log lines name the store.
    """

    __slots__ = (
        "_closed",
        "_closing",
        "_connecting",
        "_connection",
        "_endpoint",
        "_name",
        "_opening",
        "_stall_s",
        "loop",
    )

    def __init__(
        self,
        endpoint: RedisEndpoint,
        *,
        stall_s: float,
        name: str,
    ) -> None:
        """Connect nothing until the first call."""
        self.loop = asyncio.get_running_loop()
        self._endpoint = endpoint
        self._stall_s = stall_s
        self._name = name
        self._connection: _CommandConnection | None = None
        # while a connection opens: the future its callers wait on, and the task opening it
        self._connecting: asyncio.Future[_CommandConnection] | None = None
        self._opening: asyncio.Task[None] | None = None
        # connections dropped, until their sockets are closed: aclose waits for them
        self._closing: set[asyncio.Future[None]] = set()
        self._closed = False

    async def execute(self, *args: str | int | bytes) -> Any:  # noqa: ANN401 -- a reply's type is its command's
        """Send one command and return its reply.

        Raises:
            redis.exceptions.ResponseError: the server answered with an error (a script's
                ``NOSCRIPT`` among them); the connection stays.
            redis.exceptions.ConnectionError: the connection failed, stalled or was closed;
                the next call opens another (unless the pipe was closed).
        """
        connection = self._connection
        while connection is None or not connection.open or self._stalled():
            await self._connected()
            # checked again: the connection opened may have been dropped before this resumed,
            # and a command written on it would take the place of another's reply
            connection = self._connection
        # written before any await: a cancellation lands only while the reply is awaited
        return await connection.send(
            packed(args, connection.encoding, connection.encoding_errors), self.loop.time()
        )

    async def execute_then(
        self, first: tuple[str | int | bytes, ...], then: tuple[str | int | bytes, ...]
    ) -> tuple[Any, Any]:
        """Send two commands in one write, back to back on the connection; return both replies.

        For a command that must follow another on the same connection, with nothing between
        them and no round trip more: ``WAIT`` after a script counts that script's writes.

        Returns:
            Both replies; an error reply of the first (``NOSCRIPT``) comes back as its
            exception, so the second's reply is still read.

        Raises:
            redis.exceptions.ResponseError: the second command's error reply.
            redis.exceptions.ConnectionError: as for :meth:`execute`.
        """
        connection = self._connection
        while connection is None or not connection.open or self._stalled():
            await self._connected()
            connection = self._connection
        encoding, errors = connection.encoding, connection.encoding_errors
        now = self.loop.time()
        # one write: nothing another caller sends can come between the two
        first_reply, then_reply = connection.send_both(
            packed(first, encoding, errors) + packed(then, encoding, errors), now
        )
        try:
            answer: Any = await first_reply
        except redis.exceptions.ResponseError as error:
            answer = error
        return answer, await then_reply

    async def aclose(self) -> None:
        """Close the connection; replies still awaited fail, and later calls are refused."""
        self._closed = True
        error = redis.exceptions.ConnectionError(f"{self._name} was closed")
        connecting, self._connecting = self._connecting, None
        if connecting is not None and not connecting.done():
            connecting.set_exception(error)
        opening = self._opening
        if opening is not None:
            # a handshake held up by a partition must not hold up the close
            opening.cancel()
            await asyncio.wait([opening])
        self._drop(error)
        if self._closing:
            await asyncio.wait(self._closing)

    def reconnect(self, why: str) -> None:
        """Drop the connection, failing the replies still awaited; the next call opens another.

        For a server that answers but should not be the one answered by: a Sentinel's
        connection asks again where the primary is.
        """
        self._drop(redis.exceptions.ConnectionError(f"{self._name}: {why}"))

    def _stalled(self) -> bool:
        """Whether the oldest reply has been awaited past the stall limit (the socket is dead)."""
        connection = self._connection
        sent_at = None if connection is None else connection.oldest_sent_at()
        if sent_at is not None and self.loop.time() - sent_at > self._stall_s:
            _log.warning(
                "%s got no reply within %.1f s on its command connection, and opens another: "
                "check that the Redis server is reachable and not overloaded",
                self._name,
                self._stall_s,
            )
            self._drop(
                redis.exceptions.ConnectionError(
                    f"{self._name}: no reply within {self._stall_s} s; the connection was closed"
                )
            )
            return True
        return False

    async def _connected(self) -> _CommandConnection:
        """Return the connection, opening one (once, for every caller waiting) if there is none."""
        if self._closed:
            msg = f"{self._name} is closed; open the store again"
            raise redis.exceptions.ConnectionError(msg)
        if self._connection is not None and self._connection.open:
            return self._connection
        connecting = self._connecting
        if connecting is None:
            connecting = self._connecting = self.loop.create_future()
            # the failure is handed to every caller waiting; with none left, nobody must read it
            connecting.add_done_callback(retrieved)
            self._opening = self.loop.create_task(self._open(connecting))
        # shielded: a caller that gives up does not stop the opening the others wait for
        return await asyncio.shield(connecting)

    async def _open(self, connecting: asyncio.Future[_CommandConnection]) -> None:
        endpoint = self._endpoint
        handshaken: Opened | None = None
        try:
            # the stall limit bounds the opening as a whole, or a server that accepted and
            # went silent would keep every later call waiting on this opening
            async with asyncio.timeout(self._stall_s):
                handshaken = await opened(endpoint, decoded=endpoint.decode_responses)
            connection = _CommandConnection(handshaken, endpoint, self._lost, self._name)
        except BaseException as error:
            if self._connecting is connecting:
                self._connecting = None
            if not connecting.done():
                connecting.set_exception(self._opening_failed(error))
            if handshaken is not None:
                handshaken.transport.abort()
            if isinstance(error, asyncio.CancelledError):
                raise
            return
        if self._connecting is connecting:
            self._connecting = None
        if self._closed or connecting.done():
            connection.abort()
            return
        self._connection = connection
        connecting.set_result(connection)

    def _opening_failed(self, error: BaseException) -> BaseException:
        """Return what the callers waiting for an opening that failed with ``error`` get."""
        if isinstance(error, TimeoutError):
            return redis.exceptions.ConnectionError(
                f"{self._name} could not open its command connection within {self._stall_s} s"
            )
        if isinstance(error, asyncio.CancelledError):
            return redis.exceptions.ConnectionError(f"{self._name} was closed")
        return error

    def _lost(self, connection: _CommandConnection, error: BaseException) -> None:
        """Drop ``connection`` if it is still the pipe's: it broke with ``error``."""
        if connection is self._connection:
            self._drop(error)

    def _drop(self, error: BaseException) -> None:
        """Forget the connection, fail every reply still awaited on it, and close it."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.fail(error)
            # at once: a close would first wait to send what a stalled server does not read
            connection.abort()
            if not connection.closed.done():
                self._closing.add(connection.closed)
                connection.closed.add_done_callback(self._closing.discard)


@final
class _CommandConnection(asyncio.Protocol):
    """One connection of the pipe's, handed over once the server answered its handshake.

    It writes commands and hands each reply, parsed as it arrives, to the oldest caller still
    owed one. Error replies are redis-py's exception classes. A connection that breaks
    (closed by the server, reset, a reply it cannot parse, or a server that cannot serve it:
    ``LOADING`` after a restart, ``READONLY`` from a primary demoted in a failover) fails every
    caller still owed a reply, and tells its pipe once. Pushes the server sends on its own
    (RESP3) are read and dropped: the pipe acts on none of them.

    Raises:
        redis.exceptions.ConnectionError: at construction, when the connection closed since
            its handshake.
    """

    __slots__ = (
        "_lost",
        "_name",
        "_parser",
        "_pending",
        "_transport",
        "closed",
        "encoding",
        "encoding_errors",
        "open",
    )

    def __init__(
        self,
        handshaken: Opened,
        endpoint: RedisEndpoint,
        lost: Callable[[_CommandConnection, BaseException], None],
        name: str,
    ) -> None:
        """Take ``handshaken`` over; ``lost`` hears when it breaks."""
        self._lost = lost
        self._name = name
        self.encoding = endpoint.encoding
        self.encoding_errors = endpoint.encoding_errors
        self._parser: hiredis.Reader = handshaken.parser
        # (the caller's reply, when its command was written), in the order written
        self._pending: collections.deque[tuple[asyncio.Future[Any], float]] = collections.deque()
        self.open = True
        # settled once the socket is closed
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._transport = handshaken.hand_to(self, name)

    def send(self, command: bytes, now: float) -> asyncio.Future[Any]:
        """Write ``command`` (the caller checked :attr:`open`); return its reply to await."""
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((reply, now))
        self._transport.write(command)
        return reply

    def send_both(
        self, commands: bytes, now: float
    ) -> tuple[asyncio.Future[Any], asyncio.Future[Any]]:
        """Write two commands packed together; return their replies, in order, to await."""
        loop = asyncio.get_running_loop()
        first: asyncio.Future[Any] = loop.create_future()
        then: asyncio.Future[Any] = loop.create_future()
        # a caller that stops waiting after the first leaves the second's failure unread
        then.add_done_callback(retrieved)
        self._pending.append((first, now))
        self._pending.append((then, now))
        self._transport.write(commands)
        return first, then

    def oldest_sent_at(self) -> float | None:
        """When the oldest command still owed a reply was written, on the loop's clock."""
        return self._pending[0][1] if self._pending else None

    def abort(self) -> None:
        """Close the socket now, dropping what is not sent yet."""
        self._transport.abort()

    def fail(self, error: BaseException) -> None:
        """Fail every caller still owed a reply with ``error``; write nothing more."""
        self.open = False
        pending, self._pending = self._pending, collections.deque()
        for reply, _ in pending:
            if not reply.done():
                reply.set_exception(error)

    def data_received(self, data: bytes) -> None:
        """Hand each complete reply in ``data`` to its caller, oldest first."""
        parser = self._parser
        parser.feed(data)
        while self.open:
            try:
                answer = parser.gets()
            except redis.exceptions.InvalidResponse as unreadable:
                self._broke(f"read what is not a Redis reply ({unreadable})")
                return
            if answer is INCOMPLETE:
                return
            if isinstance(answer, hiredis.PushNotification):
                # a message the server pushes on its own (RESP3), not a command's reply
                continue
            if not self._pending:
                self._broke("read a reply no command was waiting for")
                return
            if isinstance(answer, redis.exceptions.ConnectionError):
                # as redis-py raises it (LOADING): this server cannot serve the connection now
                self._break(answer)
                return
            reply, _ = self._pending.popleft()
            if not reply.done():
                if isinstance(answer, redis.exceptions.ResponseError):
                    reply.set_exception(answer)
                else:
                    reply.set_result(answer)
            if isinstance(answer, redis.exceptions.ReadOnlyError):
                # a replica answered: the next connection goes where the client's settings
                # name the primary now (Sentinel's pool asks again)
                self._broke("was answered by a replica (READONLY)")
                return

    def eof_received(self) -> bool:
        """Fail the callers owed a reply now, and let the transport close."""
        self._broke("lost its command connection (closed by the server)")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """Fail the callers still owed a reply, and tell the pipe; the socket is closed."""
        self._broke(f"lost its command connection ({exc or 'closed by the server'})")
        if not self.closed.done():
            self.closed.set_result(None)

    def _broke(self, what: str) -> None:
        self._break(
            redis.exceptions.ConnectionError(
                f"{self._name} {what}; the next call opens another connection"
            )
        )

    def _break(self, error: redis.exceptions.ConnectionError) -> None:
        if self.open:
            self.fail(error)
            self._lost(self, error)
