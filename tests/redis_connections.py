"""Connections and users for tests of the Redis store's own connections (not a test module)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import hiredis
import redis
import redis.asyncio

from leaselock.stores.redis._transport import RedisEndpoint, endpoint_of


def connections_named(url: str, name: str) -> int:
    """How many connections the server has open under the client name ``name``."""
    with redis.Redis.from_url(url) as client:
        return sum(1 for entry in client.client_list() if entry.get("name") == name)


def endpoint_to(url: str, name: str, **options: object) -> RedisEndpoint:
    """Where connections to ``url`` named ``name`` go, as the store reads it from a client."""
    return endpoint_of(redis.asyncio.ConnectionPool.from_url(url, client_name=name, **options))


@contextlib.asynccontextmanager
async def user_without(url: str, command: str) -> AsyncIterator[str]:
    """Yield the URL of a user that may run every command but ``command``; delete it after."""
    user, password = f"without-{command}-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    async with redis.asyncio.Redis.from_url(url) as admin:
        await admin.acl_setuser(
            user,
            enabled=True,
            passwords=[f"+{password}"],
            keys=["*"],
            channels=["*"],
            commands=["+@all", f"-{command}"],
        )
        try:
            yield url.replace("redis://", f"redis://{user}:{password}@")
        finally:
            await admin.acl_deluser(user)


@dataclass(frozen=True)
class ThenClose:
    """A fake server's answer after which it closes the connection."""

    data: bytes


@dataclass
class FakeRedis:
    """A server that speaks RESP and answers as a test says; ``opened`` counts connections."""

    url: str = ""
    opened: int = 0


@contextlib.asynccontextmanager
async def fake_redis(
    answer: Callable[[list[bytes], int], bytes | ThenClose],
) -> AsyncIterator[FakeRedis]:
    """Serve each command with ``answer(command, n)``, n counting connections from 1.

    For what Redis itself cannot be made to answer: bytes that are not RESP, ``LOADING``,
    ``READONLY``, a connection closed right after an answer.
    """
    fake = FakeRedis()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        fake.opened += 1
        connection = fake.opened
        commands = hiredis.Reader()
        # closed however the handler ends: a client that aborts its connection (a reset) ends
        # the read with an error, and an unclosed transport would warn in a later test
        try:
            while data := await reader.read(65536):
                commands.feed(data)
                while (command := commands.gets()) is not False:
                    answered = answer(command, connection)
                    if isinstance(answered, ThenClose):
                        writer.write(answered.data)
                        await writer.drain()
                        return
                    writer.write(answered)
        except ConnectionError:
            return
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    fake.url = f"redis://127.0.0.1:{server.sockets[0].getsockname()[1]}/0"
    async with server:
        yield fake


def subscribe_confirmed(channel: bytes) -> bytes:
    """What Redis answers a SUBSCRIBE of ``channel`` with (RESP2)."""
    return b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%b\r\n:1\r\n" % (len(channel), channel)


def message_on(channel: bytes, data: bytes) -> bytes:
    """What Redis sends a subscriber of ``channel`` for a PUBLISH of ``data`` (RESP2)."""
    return b"*3\r\n$7\r\nmessage\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (
        len(channel),
        channel,
        len(data),
        data,
    )
