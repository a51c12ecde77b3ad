"""A Lua script of RedisLockStore, known by its SHA1 so it runs with EVALSHA."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final, final

__all__ = ["KEEP_NEWER_RUN", "Script", "script"]


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


KEEP_NEWER_RUN: Final = """
-- keep(runs, field, run, started_ms, token): HSET runs[field] = run (JSON) unless the run kept
-- there started later, or in the same millisecond with a greater token (-1: none): a replaced
-- or late run ending last does not hide a newer one
local function keep(runs, field, run, started, token)
  local kept = redis.call('HGET', runs, field)
  if kept then
    local was = cjson.decode(kept)
    local was_token = was['fencing_token']
    if was_token == cjson.null then
      was_token = -1
    end
    if was.started_at_ms > started or (was.started_at_ms == started and was_token > token) then
      return
    end
  end
  redis.call('HSET', runs, field, run)
end
"""
