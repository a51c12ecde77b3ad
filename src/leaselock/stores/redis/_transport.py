"""The store's own connections to Redis: where they go, and opening one through asyncio.

The command pipe and the subscriptions read each reply where its bytes arrive, in a protocol
of their own; redis-py's connections read through a task and its stream layers, which cost
every reply a turn of the loop more (``benchmarks/bench_contention.py``). So they open their
connections themselves, with asyncio, and introduce themselves to the server as the
application's client would: :func:`endpoint_of` reads where and how from the client's public
settings, so the URL's host, port or socket path, TLS, username and password (or credential
provider), database, client name, protocol and keepalive apply to them too. Behind Sentinel,
every opening asks the client's pool where the primary is now.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast, final

from ..._errors import LocksConfigurationError
from ._resp import INCOMPLETE, packed, reply_parser

if TYPE_CHECKING:
    from redis.credentials import CredentialProvider

# only the Redis store opens connections of its own, and it refuses to be made without
# redis-py and hiredis
with contextlib.suppress(ImportError):
    import hiredis
    import redis.asyncio
    import redis.asyncio.sentinel
    import redis.exceptions

__all__ = ["Opened", "RedisEndpoint", "endpoint_of", "opened", "retrieved"]

DEFAULT_PORT: Final = 6379
_RESP3: Final = 3


@final
@dataclass(frozen=True, slots=True)
class RedisEndpoint:
    """Where the store's own connections go, and how they introduce themselves there.

    Attributes:
        address: ``(host, port)``, or a Unix socket's path.
        primary: behind Sentinel, asked at each opening for the primary's ``(host, port)``,
            which then stands for ``address``.
        tls: the TLS context, or ``None`` for none.
        username: the user to authenticate as; ``None`` for the server's default user.
        password: the password; ``None`` authenticates nobody (unless ``credentials``).
        credentials: redis-py's ``CredentialProvider``, asked at each opening; it stands for
            ``username`` and ``password``.
        database: the database selected.
        client_name: the name ``CLIENT SETNAME`` gives the connection, if any.
        protocol: 3 speaks RESP3 (``HELLO 3``), anything else RESP2.
        encoding: how text arguments are encoded, and replies decoded where asked.
        encoding_errors: the codec's error handler for both.
        decode_responses: whether the client decodes replies to ``str``.
        connect_timeout_s: how long a socket may take to connect (TLS included); ``None`` for
            no limit of its own.
        keepalive: TCP keepalive's options (``TCP_*`` to value), or ``None`` for no keepalive.
    """

    address: tuple[str, int] | str
    primary: Callable[[], Awaitable[tuple[str, int]]] | None = None
    tls: ssl.SSLContext | None = None
    username: str | None = None
    password: str | None = None
    credentials: CredentialProvider | None = None
    database: int = 0
    client_name: str | None = None
    protocol: int = 2
    encoding: str = "utf-8"
    encoding_errors: str = "strict"
    decode_responses: bool = False
    connect_timeout_s: float | None = None
    keepalive: Mapping[int, int | bytes] | None = None


def endpoint_of(pool: redis.asyncio.ConnectionPool) -> RedisEndpoint:
    """Read where ``pool``'s connections go and how they introduce themselves.

    From public settings only: a connection of the pool's ``connection_class``, built from its
    ``connection_kwargs`` and never connected, holds them as redis-py reads them, its defaults
    for this version included (keepalive, TLS checks); its TLS context is the one its
    ``ssl_context`` gives. Behind Sentinel, the pool's ``get_master_address`` finds the primary.

    Raises:
        LocksConfigurationError: the pool's connections are neither TCP (TLS included) nor a
            Unix socket's, so the store cannot open one of its own.
    """
    settings = pool.connection_class(**pool.connection_kwargs)
    address: tuple[str, int] | str
    keepalive: Mapping[int, int | bytes] | None = None
    if isinstance(settings, redis.asyncio.UnixDomainSocketConnection):
        address = settings.path
    elif isinstance(settings, redis.asyncio.Connection):
        address = (settings.host, int(settings.port))
        if settings.socket_keepalive:
            # redis-py 8 types it loosely: a placeholder it has replaced with its defaults
            keepalive = cast("Mapping[int, int | bytes]", settings.socket_keepalive_options)
    else:
        raise LocksConfigurationError(
            f"RedisLockStore cannot open connections of the client's {type(settings).__name__}; "
            "give it a client whose pool makes redis.asyncio.Connection (TCP, TLS) or "
            "UnixDomainSocketConnection"
        )
    encoder = settings.encoder
    return RedisEndpoint(
        address=address,
        primary=(
            pool.get_master_address
            if isinstance(pool, redis.asyncio.sentinel.SentinelConnectionPool)
            else None
        ),
        tls=(
            settings.ssl_context.get()
            if isinstance(settings, redis.asyncio.SSLConnection)
            else None
        ),
        username=settings.username,
        password=settings.password,
        credentials=settings.credential_provider,
        database=int(settings.db or 0),
        client_name=settings.client_name,
        # RESP3 where the application asked for it: the replies the store reads are alike in
        # both, and RESP2 needs no HELLO (redis-py 8 speaks RESP3 unless told, and falls back
        # to RESP2 on a server or proxy without HELLO)
        protocol=int(pool.connection_kwargs.get("protocol") or 2),
        encoding=encoder.encoding,
        encoding_errors=encoder.encoding_errors,
        decode_responses=bool(encoder.decode_responses),
        connect_timeout_s=settings.socket_connect_timeout,
        keepalive=keepalive,
    )


@final
@dataclass(frozen=True, slots=True)
class Opened:
    """A connection whose handshake the server answered, its reading paused until handed over.

    Attributes:
        transport: the connection's transport.
        parser: the parser that read the handshake's replies; what arrives after them is
            fed to it, so the next protocol reads on from there.
    """

    transport: asyncio.Transport
    parser: hiredis.Reader

    def hand_to(self, protocol: asyncio.Protocol, name: str) -> asyncio.Transport:
        """Make ``protocol`` hear every byte from now on; return the transport it writes to.

        Raises:
            redis.exceptions.ConnectionError: the connection closed since its handshake.
        """
        transport = self.transport
        if transport.is_closing():
            msg = f"{name}: its connection closed during the handshake"
            raise redis.exceptions.ConnectionError(msg)
        transport.set_protocol(protocol)
        transport.resume_reading()
        return transport


async def opened(endpoint: RedisEndpoint, *, decoded: bool) -> Opened:
    """Open a connection to ``endpoint``, and return it once the server answered its handshake.

    The handshake (``HELLO 3`` or ``AUTH``, ``CLIENT SETNAME``, ``SELECT``: what the endpoint
    asks for) goes in one write, so it costs one round trip. Replies are parsed as text when
    ``decoded``, else as bytes. The opening as a whole is the caller's to bound; only the
    socket's connection is bounded here, by ``connect_timeout_s``.

    Raises:
        redis.exceptions.ConnectionError: the socket could not connect, the connection broke,
            or the server refused the handshake (``AuthenticationError`` for a password it
            refused, with its words).
        redis.exceptions.TimeoutError: the socket did not connect within
            ``connect_timeout_s``.
        redis.exceptions.ResponseError: the server refused another part of the handshake
            (``SELECT`` of a database it does not have, a ``CLIENT SETNAME`` not allowed).
    """
    commands = await _introduction(endpoint)
    parser = reply_parser(endpoint.encoding, endpoint.encoding_errors, decoded=decoded)
    handshake = _Handshake(parser, len(commands))
    transport, where = await _connected(endpoint, handshake)
    try:
        transport.write(
            b"".join(
                packed(command, endpoint.encoding, endpoint.encoding_errors) for command in commands
            )
        )
        replies = await handshake.answered
        for command, reply in zip(commands, replies, strict=True):
            _check(command, reply, where)
    except BaseException:
        transport.abort()
        raise
    return Opened(transport, parser)


def retrieved(future: asyncio.Future[Any]) -> None:
    """Mark a future's failure read: nobody may be left to await it, and it is not a leak."""
    if not future.cancelled():
        future.exception()


async def _connected(
    endpoint: RedisEndpoint, handshake: _Handshake
) -> tuple[asyncio.Transport, str]:
    """Connect a socket to ``endpoint`` for ``handshake``; return it and where it went."""
    loop = asyncio.get_running_loop()
    address = await endpoint.primary() if endpoint.primary is not None else endpoint.address
    where = address if isinstance(address, str) else f"{address[0]}:{address[1]}"
    try:
        async with asyncio.timeout(endpoint.connect_timeout_s):
            if isinstance(address, str):
                transport, _ = await loop.create_unix_connection(
                    lambda: handshake, address, ssl=endpoint.tls
                )
            else:
                transport, _ = await loop.create_connection(
                    lambda: handshake, address[0], address[1], ssl=endpoint.tls
                )
    except TimeoutError:
        msg = f"could not connect to {where} within {endpoint.connect_timeout_s:g} s"
        raise redis.exceptions.TimeoutError(msg) from None
    except OSError as error:
        msg = f"could not connect to {where}: {error}"
        raise redis.exceptions.ConnectionError(msg) from error
    sock = transport.get_extra_info("socket")
    if endpoint.keepalive is not None and sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for option, value in endpoint.keepalive.items():
            sock.setsockopt(socket.IPPROTO_TCP, option, value)
    return transport, where


async def _introduction(endpoint: RedisEndpoint) -> list[tuple[str | int, ...]]:
    """The commands that open a connection as the endpoint says: who, what name, which database."""
    credentials = await _credentials(endpoint)
    commands: list[tuple[str | int, ...]] = []
    if endpoint.protocol == _RESP3:
        hello: list[str | int] = ["HELLO", _RESP3]
        if credentials:
            # HELLO takes a user always; a password alone is the default user's
            hello += [
                "AUTH",
                *(("default", *credentials) if len(credentials) == 1 else credentials),
            ]
        if endpoint.client_name:
            hello += ["SETNAME", endpoint.client_name]
        commands.append(tuple(hello))
    else:
        if credentials:
            commands.append(("AUTH", *credentials))
        if endpoint.client_name:
            commands.append(("CLIENT", "SETNAME", endpoint.client_name))
    if endpoint.database:
        commands.append(("SELECT", endpoint.database))
    return commands


async def _credentials(endpoint: RedisEndpoint) -> tuple[str, ...]:
    """``(password,)`` or ``(username, password)``, from the provider if there is one."""
    provider = endpoint.credentials
    if provider is not None:
        # redis-py 5.3 and later ask providers without blocking the loop, where they can
        ask = getattr(provider, "get_credentials_async", None)
        answer = await ask() if ask is not None else provider.get_credentials()
        return tuple(str(part) for part in answer)
    if not endpoint.password:
        return ()
    if endpoint.username:
        return (endpoint.username, endpoint.password)
    return (endpoint.password,)


def _check(command: tuple[str | int, ...], reply: object, where: str) -> None:
    """Raise what refused ``command``'s part of the handshake, if anything did."""
    if isinstance(reply, Exception):
        raise reply
    # HELLO answers with the server's description; the others with OK
    if command[0] != "HELLO" and reply not in (b"OK", "OK"):
        msg = f"{where} answered {command[0]} with {reply!r}, not OK"
        raise redis.exceptions.ConnectionError(msg)


@final
class _Handshake(asyncio.Protocol):
    """Reads a handshake's replies, then pauses reading until the connection is handed over."""

    __slots__ = ("_expected", "_parser", "_replies", "_transport", "answered")

    def __init__(self, parser: hiredis.Reader, expected: int) -> None:
        self._parser = parser
        self._expected = expected
        self._replies: list[object] = []
        self._transport: asyncio.Transport | None = None
        self.answered: asyncio.Future[list[object]] = asyncio.get_running_loop().create_future()
        # a handshake given up on must not leave its failure unread
        self.answered.add_done_callback(retrieved)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport; with nothing to ask, the handshake is done at once."""
        self._transport = transport  # type: ignore[assignment]
        if not self._expected:
            self._done()

    def data_received(self, data: bytes) -> None:
        """Read the replies owed; leave anything after them in the parser for the next owner."""
        self._parser.feed(data)
        if self.answered.done():
            return
        while len(self._replies) < self._expected:
            try:
                reply = self._parser.gets()
            except redis.exceptions.InvalidResponse as unreadable:
                self._fail(f"read what is not a Redis reply ({unreadable})")
                return
            if reply is INCOMPLETE:
                return
            if not isinstance(reply, hiredis.PushNotification):
                self._replies.append(reply)
        self._done()

    def eof_received(self) -> bool:
        """Fail the handshake, and let the transport close."""
        self._fail("closed by the server during the handshake")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """Fail the handshake, if it was still awaited."""
        self._fail(f"lost during the handshake ({exc or 'closed'})")

    def _done(self) -> None:
        assert self._transport is not None  # noqa: S101 -- only after connection_made
        # what arrives next waits in the socket for the protocol the connection is handed to
        self._transport.pause_reading()
        self.answered.set_result(self._replies)

    def _fail(self, what: str) -> None:
        if not self.answered.done():
            self.answered.set_exception(redis.exceptions.ConnectionError(what))
