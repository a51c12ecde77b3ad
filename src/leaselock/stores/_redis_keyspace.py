"""Reading RedisLockStore's keys back: replies as text, a lock's owner and expiry, SCAN patterns."""

from __future__ import annotations

from typing import cast

from ._capabilities import LockInfo

__all__ = ["glob_escaped", "lock_info", "text"]


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
