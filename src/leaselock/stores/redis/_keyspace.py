"""Reading RedisLockStore's keys back: replies as text, a lock's owner and expiry, SCAN patterns."""

from __future__ import annotations

from typing import Any, Final, cast

from .._common._capabilities import LockInfo

__all__ = ["delete_prefixed", "glob_escaped", "lock_info", "text"]

_SCAN_BATCH: Final = 1000


def lock_info(key: str, owner: object, left: object, token: int | None = None) -> LockInfo | None:
    """Return the lock of ``key`` read as its owner and PTTL replies, or ``None`` if free."""
    if owner is None:
        return None
    # PTTL: -1 no expiry (never set by leaselock), -2 gone since the GET (not in a MULTI)
    return LockInfo(key, text(owner), token, int(cast("int", left)) if left else None)


def glob_escaped(text: str) -> str:
    """Return ``text`` with SCAN's pattern characters escaped, so it matches only itself."""
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)


def text(value: object, encoding: str = "utf-8") -> str:
    """Return a reply as ``str``, whether or not the client decodes responses."""
    return value.decode(encoding) if isinstance(value, bytes) else str(value)


async def delete_prefixed(client: Any, prefix: str) -> int:  # noqa: ANN401 -- a Redis or a RedisCluster client
    """Delete every key whose name starts with ``prefix``; return how many were deleted.

    Walks the keyspace with ``SCAN`` (on every master of a cluster), and deletes key by key:
    keys of a prefix sit in many slots of a cluster.
    """
    names = {
        name async for name in client.scan_iter(match=glob_escaped(prefix) + "*", count=_SCAN_BATCH)
    }
    deleted = 0
    for name in names:
        deleted += int(await client.unlink(name))
    return deleted
