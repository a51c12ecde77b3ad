"""Taking a redis-py connection's transport over, once redis-py has opened it.

redis-py opens the connection from the client's pool settings, so the URL, TLS, authentication,
database and protocol options all apply. Once its handshake is answered, a protocol of the
store's own takes the transport: it reads each reply where its bytes arrive, with hiredis, and
acts on it in that same turn of the loop. redis-py reads through a task and its stream layers,
which cost every reply a turn of the loop more (``benchmarks/bench_contention.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from redis.asyncio.connection import AbstractConnection

# only the Redis store takes a transport over, and it refuses to be made without redis-py and
# hiredis
with contextlib.suppress(ImportError):
    import hiredis
    import redis.exceptions

__all__ = ["INCOMPLETE", "packed", "reply_parser", "retrieved", "take_transport"]

# what the parser returns while a reply is incomplete: not False, which a RESP3 reply can be
INCOMPLETE: Final = object()


def take_transport(
    connection: AbstractConnection, protocol: asyncio.Protocol, name: str
) -> asyncio.Transport:
    """Hand ``connection``'s transport to ``protocol``, which hears every byte from now on.

    Raises:
        redis.exceptions.ConnectionError: the connection holds no open transport (it closed
            during the handshake).
    """
    # redis-py 5.0 to 8.x keep the connection's streams there
    reader, writer = connection._reader, connection._writer  # noqa: SLF001
    if (
        reader is None
        or writer is None
        or reader.at_eof()
        or reader.exception() is not None
        or writer.transport.is_closing()
    ):
        # an end of stream redis-py has read would never reach the protocol
        msg = f"{name}: its connection closed during the handshake"
        raise redis.exceptions.ConnectionError(msg)
    transport = writer.transport
    transport.set_protocol(protocol)
    # the type redis-py's streams declare, not the one asyncio gives them
    return transport  # type: ignore[return-value]


def reply_parser(connection: AbstractConnection, *, decoded: bool) -> hiredis.Reader:
    """A RESP parser that makes error replies the exception classes redis-py makes of them.

    Text replies come back as ``str`` when ``decoded``, in the client's encoding; else as
    ``bytes``. An incomplete reply reads as :data:`INCOMPLETE`.
    """
    encoder = connection.encoder
    return hiredis.Reader(
        protocolError=redis.exceptions.InvalidResponse,
        # NOSCRIPT, LOADING, READONLY, NOPERM... as redis-py's parser names them
        replyError=connection._parser.parse_error,  # noqa: SLF001 -- redis-py 5.0 to 8.x
        notEnoughData=INCOMPLETE,
        encoding=encoder.encoding if decoded else None,
        errors=encoder.encoding_errors,
    )


def packed(args: tuple[object, ...], encoding: str, errors: str) -> bytes:
    """Return ``args`` as one RESP command, text encoded as the client's settings say.

    The same bytes as redis-py's ``pack_command`` for these argument types, in a third of the
    time: a lock call's scripts take a dozen arguments, and packing them through redis-py was a
    fifth of the client's work for a handoff.

    Raises:
        TypeError: an argument is not ``str``, ``bytes`` or ``int``.
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


def retrieved(future: asyncio.Future[Any]) -> None:
    """Mark a future's failure read: nobody may be left to await it, and it is not a leak."""
    if not future.cancelled():
        future.exception()
