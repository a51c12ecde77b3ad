"""Releases in turn on Redis: a release wakes the process that has waited longest for its key.

A follower in turn has an id, and while it follows a key it stands in the key's queue:

- ``<prefix>queue`` + NUL + ``<key>``: a sorted set of follower ids, scored by when each
  joined (the server's clock, in microseconds, strictly growing). Neither a prefix nor a key
  holds a NUL, so no other name of any store is this one, and a scan of ``<prefix>lock:*`` (an
  operator's, or ``list_locks``) meets locks only;
- ``<prefix>followers@db<n>``: a sorted set of the follower ids alive, scored by when each
  stops being alive unless it says so again (every :data:`ALIVE_MS` / 3).

A release (or a break) announces itself on the key's channel, as always, and on the turn
channel (the key's channel + NUL + id) of the follower first in the queue that is alive, which
moves to the end: turns go round the waiting processes in the order they came, and only the one
whose turn it is reads of the release. The releasing process wakes its own waiters itself, so
its followers get the turn only when no other process waits. A follower found dead leaves the
queue then.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import TYPE_CHECKING, Final, final

from ..._cancellation import delivered
from ._scripts import Script, script

if TYPE_CHECKING:
    import redis.asyncio

__all__ = [
    "ALIVE_MS",
    "ANNOUNCE",
    "QUEUE_SCRIPTS",
    "ReleaseQueue",
    "queue_name",
    "turn_channel",
]

_log = logging.getLogger("leaselock.stores.redis")

# a follower whose process died holds its turn this long at most
ALIVE_MS: Final = 3000
# how many queued followers a release looks at for a live one before it tells everyone
_LOOK_AHEAD: Final = 16
_QUEUE_SEGMENT: Final = "queue\x00"

ANNOUNCE: Final = f"""
-- give_turn(queue, channel, key, id): id's turn is taken; it queues again at the end (a
-- process with waiters one after another must not keep every turn), and hears of it alone
local function give_turn(queue, channel, key, id)
  local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')[2]
  redis.call('ZADD', queue, 'XX', tonumber(last) + 1, id)
  redis.call('PUBLISH', channel .. '\\0' .. id, key)
end

-- announce(queue, followers, channel, key, first): publish key's release on channel, and give
-- the turn to the first follower in the queue that is alive: turns go round the processes that
-- wait, in the order they came. ARGV[first] = n, then the n followers of the releasing store
-- that follow the key, then those that stopped (their leave in flight): the releasing process
-- wakes its own waiters itself, so its followers get the turn only when no other one is
-- waiting, and one that stopped never does. Dead followers leave the queue.
local function announce(queue, followers, channel, key, first)
  redis.call('PUBLISH', channel, key)
  if redis.call('EXISTS', queue) == 0 then
    return  -- nobody waits in turn: the common, uncontended release stops here
  end
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', followers, '-inf', '(' .. now)
  local own, left = {{}}, {{}}
  local count = tonumber(ARGV[first])
  for i = first + 1, #ARGV do
    if i <= first + count then
      own[ARGV[i]] = true
    else
      left[ARGV[i]] = true
    end
  end
  local fallback = nil
  for _, id in ipairs(redis.call('ZRANGE', queue, 0, {_LOOK_AHEAD - 1})) do
    if not redis.call('ZSCORE', followers, id) then
      redis.call('ZREM', queue, id)
    elseif own[id] then
      fallback = fallback or id
    elseif not left[id] then
      give_turn(queue, channel, key, id)
      return
    end
  end
  if fallback then
    give_turn(queue, channel, key, fallback)
  end
end
"""

JOIN_QUEUE: Final = script(
    "join_queue",
    """
-- KEYS[1] = a key's queue, KEYS[2] = the followers alive
-- ARGV[1] = follower id, ARGV[2] = ms it stays alive
-- -> 1: alive from now, and in the queue (at its end, unless already in it). Places are
--    microseconds of the server's clock, each after the last one of the queue: followers that
--    join in the same microsecond still keep the order they came in
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
local place = tonumber(time[1]) * 1000000 + tonumber(time[2])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
if last and tonumber(last) >= place then
  place = tonumber(last) + 1
end
redis.call('ZADD', KEYS[1], 'NX', place, ARGV[1])
return 1
""",
)

STAY_ALIVE: Final = script(
    "stay_alive",
    """
-- KEYS[1] = the followers alive; ARGV[1] = follower id, ARGV[2] = ms it stays alive -> 1
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return 1
""",
)

QUEUE_SCRIPTS: Final = (JOIN_QUEUE, STAY_ALIVE)


def queue_name(prefix: str, key: str) -> str:
    """The queue of ``key`` in a store of ``prefix``."""
    return prefix + _QUEUE_SEGMENT + key


def turn_channel(channel: str, follower: str) -> str:
    """The channel on which ``follower`` hears its turns at the releases of ``channel``'s key."""
    return f"{channel}\x00{follower}"


@final
class ReleaseQueue:
    """One follower's place in the queues of the keys it follows, kept alive while it lives.

    Args:
        client: the store's client (queue commands go on its pool, not on the pub/sub
            connection).
        prefix: the store's prefix; a key's queue is :func:`queue_name`.
        followers: the name of the sorted set of followers alive.
        store: how to name the store in log lines.
    """

    __slots__ = ("_client", "_followers", "_keeping_alive", "_prefix", "_store", "id")

    def __init__(
        self, client: redis.asyncio.Redis, prefix: str, followers: str, store: str
    ) -> None:
        """Stand in no queue yet."""
        self.id = secrets.token_hex(8)
        self._client = client
        self._prefix = prefix
        self._followers = followers
        self._store = store
        self._keeping_alive: asyncio.Task[None] | None = None

    async def join(self, key: str) -> None:
        """Stand at the end of ``key``'s queue; log, never raise, when the server refuses."""
        if self._keeping_alive is None:
            self._keeping_alive = asyncio.get_running_loop().create_task(self._stay_alive())
        try:
            await self._run(JOIN_QUEUE, queue_name(self._prefix, key), self._followers)
        except Exception as error:  # noqa: BLE001 -- without a place, releases reach all followers
            _log.warning(
                "%r could not queue for %r (%s): waiters on it in this process get no turn at "
                "its releases and find it free by retrying, up to 1 s late, until they wait again",
                self._store,
                key,
                error,
            )

    async def leave(self, key: str) -> None:
        """Leave ``key``'s queue; a failure only costs a release a look at a stale follower."""
        try:
            await delivered(self._client.zrem(queue_name(self._prefix, key), self.id))
        except Exception as error:  # noqa: BLE001 -- the next release skips this follower
            _log.debug("%r could not leave the queue of %r: %s", self._store, key, error)

    async def aclose(self) -> None:
        """Stop saying this follower is alive, and say it is gone."""
        if self._keeping_alive is None:
            return
        self._keeping_alive.cancel()
        await asyncio.wait([self._keeping_alive])
        try:
            await delivered(self._client.zrem(self._followers, self.id))
        except Exception as error:  # noqa: BLE001 -- it stops being alive within ALIVE_MS anyway
            _log.debug("%r could not withdraw follower %s: %s", self._store, self.id, error)

    async def _stay_alive(self) -> None:
        while True:
            await asyncio.sleep(ALIVE_MS / 3000)  # noqa: TID251 -- the server's clock sets the expiry; this only paces
            try:
                await self._run(STAY_ALIVE, self._followers)
            except Exception as error:  # noqa: BLE001 -- a missed beat only risks a skipped turn
                _log.debug("%r could not keep follower %s alive: %s", self._store, self.id, error)

    async def _run(self, lua: Script, *keys: str) -> None:
        client = self._client
        args: tuple[str | int, ...] = (*keys, self.id, ALIVE_MS)
        try:
            await delivered(client.evalsha(lua.sha, len(keys), *args))
        except Exception as error:
            if "NOSCRIPT" not in str(error):
                raise
            await delivered(client.script_load(lua.source))
            await delivered(client.evalsha(lua.sha, len(keys), *args))
