"""Connections and users for tests of the Redis store's own connections (not a test module)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable

import redis
import redis.asyncio
from redis.asyncio.connection import AbstractConnection


def connections_named(url: str, name: str) -> int:
    """How many connections the server has open under the client name ``name``."""
    with redis.Redis.from_url(url) as client:
        return sum(1 for entry in client.client_list() if entry.get("name") == name)


def connection_maker(url: str, name: str, **options: object) -> Callable[[], AbstractConnection]:
    """Build connections to ``url`` named ``name``, as the store builds them: no socket timeout."""
    pool = redis.asyncio.ConnectionPool.from_url(url, client_name=name, **options)
    settings = {**pool.connection_kwargs, "socket_timeout": None}
    return lambda: pool.connection_class(**settings)


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
