"""A Lua script of RedisLockStore, known by its SHA1 so it runs with EVALSHA."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import final

__all__ = ["Script", "script"]


@final
@dataclass(frozen=True, slots=True)
class Script:
    """A named Lua script and the SHA1 Redis knows it by."""

    name: str
    source: str
    sha: str


def script(name: str, source: str) -> Script:
    """Return ``source`` as a script named ``name``."""
    return Script(name, source, hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest())
