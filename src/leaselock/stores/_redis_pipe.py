"""RedisCommandPipe: the store's scripts on one connection of its own, pipelined.

redis-py's pool spends more on a command than Redis does: a checkout (a lock, a condition, a
liveness probe of the socket, metric hooks), a task per write under a socket timeout
(``asyncio.wait_for``), and a release. ``benchmarks/bench_redis.py`` measured 92-115 us of
client CPU per command through the pool, and 48-53 us written straight to a connection that
stays open with one reader handing out the replies (10-14 us against 56-60 us with 64 in
flight). Locks live on those round trips (a handoff is one, an uncontended cycle two), so the
store sends its scripts this way.

Every call writes its command at once, in call order, and waits for its reply; one reader task
reads replies in the same order and hands each to its caller. Calls in flight share the
connection (they are pipelined), so concurrency costs no further connections. A caller that
stops waiting (cancelled, or its bound passed) leaves its reply to be read and dropped, which
keeps the order. The connection is redis-py's own, made from the client's pool settings, so the
URL, TLS, authentication, database and protocol options all apply; only its socket timeout is
left out (a write under one costs a task), and replaced by a stall limit: a reply awaited longer
than that means the connection is dead, and the next call replaces it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from typing import TYPE_CHECKING, Any, final

from .._cancellation import delivered

if TYPE_CHECKING:
    from collections.abc import Callable

    from redis.asyncio.connection import AbstractConnection

# only RedisLockStore builds a pipe, and it refuses to be made without the driver
with contextlib.suppress(ImportError):
    import redis.exceptions

__all__ = ["RedisCommandPipe"]

_log = logging.getLogger("leaselock.stores.redis")


@final
class RedisCommandPipe:
    """Sends commands on one connection, pipelined, on the loop that first uses it.

    Args:
        make_connection: builds an unconnected redis-py connection (the pool's class and
            settings, without a socket timeout); called again after a connection died.
        stall_s: how long the oldest reply may be awaited before the connection is replaced,
            and how long opening a connection (its handshake included) may take.
        name: how log lines name the store.
    """

    __slots__ = (
        "_closed",
        "_closing",
        "_connecting",
        "_connection",
        "_make_connection",
        "_name",
        "_opening",
        "_pending",
        "_reader",
        "_stall_s",
        "loop",
    )

    def __init__(
        self,
        make_connection: Callable[[], AbstractConnection],
        *,
        stall_s: float,
        name: str,
    ) -> None:
        """Connect nothing until the first call."""
        self.loop = asyncio.get_running_loop()
        self._make_connection = make_connection
        self._stall_s = stall_s
        self._name = name
        self._connection: AbstractConnection | None = None
        # while a connection opens: the future its callers wait on, and the task opening it
        self._connecting: asyncio.Future[AbstractConnection] | None = None
        self._opening: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        # (the caller's reply, when its command was written), in the order written
        self._pending: collections.deque[tuple[asyncio.Future[Any], float]] = collections.deque()
        # connections dropped and being closed: aclose waits for them
        self._closing: set[asyncio.Task[None]] = set()
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
        while connection is None or not connection.is_connected or self._stalled():
            if connection is not None and connection is self._connection:
                # redis-py closed it on a failed write: the reader may not have seen it yet
                self._drop(
                    redis.exceptions.ConnectionError(
                        f"{self._name}: its command connection broke on a write; the next call "
                        "opens another"
                    )
                )
            await self._connected()
            # checked again: the connection opened may have been dropped before this resumed,
            # and a command written on it would take the place of another's reply
            connection = self._connection
        reply: asyncio.Future[Any] = self.loop.create_future()
        self._pending.append((reply, self.loop.time()))
        try:
            # the command is in the transport's buffer before any await: a cancellation can only
            # land while the buffer is over its high-water mark, and then redis-py closes the
            # connection, which fails every reply awaited on it
            await connection.send_packed_command(
                _packed(args, connection.encoder.encoding, connection.encoder.encoding_errors),
                False,  # noqa: FBT003 -- check_health, positional in every redis-py version
            )
        except BaseException:
            reply.cancel()
            raise
        return await reply

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

    def _stalled(self) -> bool:
        """Whether the oldest reply has been awaited past the stall limit (the socket is dead)."""
        if self._pending and self.loop.time() - self._pending[0][1] > self._stall_s:
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

    async def _connected(self) -> AbstractConnection:
        """Return the connection, opening one (once, for every caller waiting) if there is none."""
        if self._closed:
            msg = f"{self._name} is closed; open the store again"
            raise redis.exceptions.ConnectionError(msg)
        if self._connection is not None:
            return self._connection
        connecting = self._connecting
        if connecting is None:
            connecting = self._connecting = self.loop.create_future()
            # the failure is handed to every caller waiting; with none left, nobody must read it
            connecting.add_done_callback(_retrieved)
            self._opening = self.loop.create_task(self._open(connecting))
        # shielded: a caller that gives up does not stop the opening the others wait for
        return await asyncio.shield(connecting)

    async def _open(self, connecting: asyncio.Future[AbstractConnection]) -> None:
        connection = self._make_connection()
        try:
            # the handshake's replies are read with no socket timeout: the stall limit bounds
            # the opening as a whole, or a server that accepted and went silent would keep
            # every later call waiting on this opening
            async with asyncio.timeout(self._stall_s):
                await delivered(connection.connect())  # type: ignore[no-untyped-call] # unannotated in redis-py
        except BaseException as error:
            if self._connecting is connecting:
                self._connecting = None
            if not connecting.done():
                connecting.set_exception(self._opening_failed(error))
            await connection.disconnect(nowait=True)
            if isinstance(error, asyncio.CancelledError):
                raise
            return
        if self._connecting is connecting:
            self._connecting = None
        if self._closed or connecting.done():
            await connection.disconnect(nowait=True)
            return
        self._connection = connection
        self._reader = self.loop.create_task(
            self._read(connection), name=f"leaselock replies {self._name}"
        )
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

    async def _read(self, connection: AbstractConnection) -> None:
        """Hand out each reply to the oldest caller; on a broken connection, fail them all."""
        while True:
            error: BaseException | None = None
            try:
                answer = await connection.read_response()
            except redis.exceptions.ResponseError as refused:
                # an error reply: the command's own, the stream is intact
                error = refused
            except Exception as broken:  # noqa: BLE001 -- any other failure ends the connection
                if connection is self._connection:
                    self._drop(broken)
                return
            if connection is not self._connection:
                return
            pending = self._pending
            if not pending:
                self._drop(
                    redis.exceptions.ConnectionError(
                        f"{self._name} read a reply no command was waiting for"
                    )
                )
                return
            reply, _ = pending.popleft()
            if reply.done():
                continue
            if error is None:
                reply.set_result(answer)
            else:
                reply.set_exception(error)

    def _drop(self, error: BaseException) -> None:
        """Forget the connection, fail every reply still awaited on it, and close it."""
        connection, self._connection = self._connection, None
        reader, self._reader = self._reader, None
        pending, self._pending = self._pending, collections.deque()
        for reply, _ in pending:
            if not reply.done():
                reply.set_exception(error)
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()
        if connection is not None:
            closing = self.loop.create_task(_close(connection, reader))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)


async def _close(connection: AbstractConnection, reader: asyncio.Task[None] | None) -> None:
    """Close ``connection`` once its reader stopped reading it."""
    if reader is not None and reader is not asyncio.current_task():
        await asyncio.wait([reader])
    await connection.disconnect(nowait=True)


def _packed(args: tuple[object, ...], encoding: str, errors: str) -> bytes:
    """Return ``args`` as one RESP command, text encoded as the client's settings say.

    The same bytes as redis-py's ``pack_command`` for these argument types, in a third of the
    time: a lock call's scripts take a dozen arguments, and packing them through redis-py was a
    fifth of the client's work for a handoff.
    """
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, str):
            data = arg.encode(encoding, errors)
        elif isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, int):
            data = b"%d" % arg
        else:
            msg = f"a Redis command argument must be str, bytes or int, not {type(arg).__name__}"
            raise TypeError(msg)
        parts.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Read a future's failure, so one its callers already got is not logged again."""
    if not future.cancelled():
        future.exception()
