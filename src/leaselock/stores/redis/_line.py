"""Waiting lines on Redis: a release hands the key to the first live place of its line.

A key's line is two keys, both outside the ``lock:`` namespace (a NUL after the prefix's
segment, as for the turns' queues), and the last grant is a third:

- ``<prefix>line`` + NUL + ``<key>``: a sorted set of the owners waiting, scored by arrival;
- ``<prefix>place`` + NUL + ``<key>``: a hash, owner -> ``"<expires ms> <ticket> <line id>"``
  (the expiry on the server's clock, the ticket of the queue call that kept the place, and the
  line, hence the process, that hears the grant);
- ``<prefix>granted`` + NUL + ``<key>``: ``"<token> <owner>"`` of the key's last grant (or of
  a free key taken by a queue call), living as long as that lock before its first renewal, so
  a queue call whose grant went unheard learns its token.

A grant is published on ``<prefix>granted@db<n>`` + NUL + ``<line id>`` as
``<token> NUL <ticket> NUL <key> NUL <owner>``. Lines and places live as long as their longest
place, so a line whose waiters all died goes away on its own.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, final

from .._common._protocol import Acquired, Grant, Queued
from ._keyspace import text
from ._scripts import script
from ._subscription import RedisSubscription
from ._tokens import DRAW
from ._turns import ANNOUNCE

if TYPE_CHECKING:
    from ._transport import RedisEndpoint

__all__ = [
    "BREAK_LOCK",
    "LEAVE",
    "LINE_SCRIPTS",
    "QUEUE",
    "RELEASE",
    "RedisWaitingLine",
    "grant_channel",
    "line_keys",
]

_log = logging.getLogger("leaselock.stores.redis")

_LINE_SEGMENTS: Final = ("line\x00", "place\x00", "granted\x00")
_GRANTED_NAME: Final = "granted"

_LINES: Final = (
    DRAW
    + """
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- first_live(line, places, now) -> the owner and place of the first place whose time is not
-- up, or nil; dead places found on the way leave the line
local function first_live(line, places, now)
  while true do
    local first = redis.call('ZRANGE', line, 0, 0)[1]
    if not first then
      return nil
    end
    local place = redis.call('HGET', places, first)
    if place and tonumber(string.match(place, '^(%d+)')) > now then
      return first, place
    end
    redis.call('ZREM', line, first)
    redis.call('HDEL', places, first)
  end
end

-- grant(lock, granted, counter, source, owner, left, ticket, id, prefix, key): owner holds
-- the lock for left ms with a new token, remembered in granted for as long, and its line
-- hears of it
local function grant(lock, granted, counter, source, owner, left, ticket, id, prefix, key)
  redis.call('SET', lock, owner, 'PX', left)
  local token = string.format('%d', draw(counter, source))
  redis.call('SET', granted, token .. ' ' .. owner, 'PX', left)
  redis.call('PUBLISH', prefix .. '\\0' .. id,
             token .. '\\0' .. ticket .. '\\0' .. key .. '\\0' .. owner)
end

-- hand_on(lock, line, places, granted, counter, source, prefix, key, now) -> whether the
-- freed lock went to the first live place of its line
local function hand_on(lock, line, places, granted, counter, source, prefix, key, now)
  local first, place = first_live(line, places, now)
  if not first then
    return false
  end
  redis.call('ZREM', line, first)
  redis.call('HDEL', places, first)
  local expires, ticket, id = string.match(place, '^(%d+) (%d+) (.+)$')
  grant(lock, granted, counter, source, first, string.format('%d', tonumber(expires) - now),
        ticket, id, prefix, key)
  return true
end

"""
)

_FREE: Final = """
-- free(first): free KEYS[1]: hand it on, else delete it and announce the release
-- (KEYS[1..8] and ARGV[first..] as for RELEASE; ARGV[first - 3..first - 1] = release channel,
-- caller's key, grant channel prefix)
local function free(first)
  local channel, key, prefix = ARGV[first - 3], ARGV[first - 2], ARGV[first - 1]
  if not hand_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[8], prefix, key,
                 now_ms()) then
    redis.call('DEL', KEYS[1])
    announce(KEYS[6], KEYS[7], channel, key, first)
  end
end
"""

_KEYS_HEADER: Final = """
-- KEYS[1] = lock key, KEYS[2] = its line, KEYS[3] = its places, KEYS[4] = its last grant,
-- KEYS[5] = fencing-token counter, KEYS[6] = its turns' queue, KEYS[7] = the followers alive,
-- KEYS[8] = the counter's source"""

RELEASE: Final = script(
    "release",
    ANNOUNCE
    + _LINES
    + _FREE
    + _KEYS_HEADER
    + """
-- ARGV[1] = owner, ARGV[2] = release channel, ARGV[3] = the caller's key, ARGV[4] = grant
-- channel prefix, ARGV[5..] = this store's followers in turn of the key (see announce)
-- -> 1 if owner held the live lock (now handed to the first in line, or deleted and the
--    release announced), else 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  free(5)
  return 1
end
return 0
""",
)

BREAK_LOCK: Final = script(
    "break_lock",
    ANNOUNCE
    + _LINES
    + _FREE
    + _KEYS_HEADER
    + """
-- ARGV[1] = release channel, ARGV[2] = the caller's key, ARGV[3] = grant channel prefix,
-- ARGV[4..] = as ARGV[5..] of release
-- -> {owner, ms left} of the live lock now freed (handed on, or deleted), else false
local owner = redis.call('GET', KEYS[1])
if not owner then
  return false
end
local left = redis.call('PTTL', KEYS[1])
free(4)
return {owner, left}
""",
)

LEAVE: Final = script(
    "leave",
    ANNOUNCE
    + _LINES
    + _FREE
    + _KEYS_HEADER
    + """
-- ARGV[1] = owner, then as ARGV[2..] of release
-- -> 1 if owner held the live lock (a grant it did not take; freed as at a release), else 0;
--    owner has left the line either way
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  free(5)
  return 1
end
return 0
""",
)

QUEUE: Final = script(
    "queue",
    _LINES
    + """
-- KEYS[1] = lock key, KEYS[2] = its line, KEYS[3] = its places, KEYS[4] = its last grant,
-- KEYS[5] = fencing-token counter, KEYS[6] = the counter's source
-- ARGV[1] = owner, ARGV[2] = ttl_ms, ARGV[3] = queue_ms, ARGV[4] = ticket, ARGV[5] = line id,
-- ARGV[6] = grant channel prefix, ARGV[7] = the caller's key
-- -> {1, token}: owner holds the key: it was free with no live place ahead (taken now, for
--    ttl_ms), or granted to owner before (its expiry now ttl_ms from now)
--    {0, holder}: a live lock holds the key (holder false if unknown); owner's place, kept
--    where it was or taken at the end of the line, lives queue_ms from now
local now = now_ms()
local owner = ARGV[1]
local holder = redis.call('GET', KEYS[1])
if holder == owner then
  local granted = redis.call('GET', KEYS[4])
  local token, to = string.match(granted or '', '^(%d+) (.*)$')
  if to == owner then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(token)}
  end
  return {0, holder}
end
if not holder then
  local first = first_live(KEYS[2], KEYS[3], now)
  if not first or first == owner then
    redis.call('ZREM', KEYS[2], owner)
    redis.call('HDEL', KEYS[3], owner)
    redis.call('SET', KEYS[1], owner, 'PX', ARGV[2])
    local token = draw(KEYS[5], KEYS[6])
    redis.call('SET', KEYS[4], string.format('%d', token) .. ' ' .. owner, 'PX', ARGV[3])
    return {1, token}
  end
  hand_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[6], ARGV[7], now)
  holder = first
end
local place = string.format('%d', now + tonumber(ARGV[3])) .. ' ' .. ARGV[4] .. ' ' .. ARGV[5]
if redis.call('HSET', KEYS[3], owner, place) == 1 then
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
  redis.call('ZADD', KEYS[2], last and tonumber(last) + 1 or 0, owner)
end
-- the line lives as long as its longest place: a line whose waiters all died goes away
for i = 2, 3 do
  if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', KEYS[i], ARGV[3])
  end
end
return {0, holder}
""",
)

CONFIRM_GRANT: Final = script(
    "confirm_grant",
    """
-- KEYS[1] = lock key, KEYS[2] = its last grant
-- ARGV[1] = owner, ARGV[2] = the grant's token
-- -> 1 if owner holds the live lock by that grant, its expiry written again as it is: a write
--    of this connection, after the grant's, that a WAIT behind this script then counts; else 0
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('GET', KEYS[2]) == ARGV[2] .. ' ' ..
   ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], redis.call('PTTL', KEYS[1]))
  return 1
end
return 0
""",
)

LINE_SCRIPTS: Final = (RELEASE, BREAK_LOCK, LEAVE, QUEUE, CONFIRM_GRANT)


def line_keys(prefix: str, key: str) -> tuple[str, str, str]:
    """The line, places and last grant of ``key`` in a store of ``prefix``."""
    line, places, granted = (prefix + segment + key for segment in _LINE_SEGMENTS)
    return line, places, granted


def grant_channel(prefix: str, database: int) -> str:
    """The start of every grant channel of a store of ``prefix`` on database ``database``."""
    return f"{prefix}{_GRANTED_NAME}@db{database}"


@final
class RedisWaitingLine:
    """One process's places in keys' lines, and the one subscription its grants arrive on.

    Args:
        endpoint: where and how the client connects; the subscription opens a connection
            there at the first queue call, and keeps it.
        alive_s: how long the subscription's connection may be quiet before it is sent a
            PING (see :class:`RedisSubscription`).
        grant_prefix: :func:`grant_channel` of the store; this line hears ``<it> NUL <id>``.
        run: runs a store script (the store's ``_run``: EVALSHA, loading it if needed).
        release_args: for a key, the keys and the arguments after the owner of its release
            (``LEAVE`` takes the same; ``QUEUE`` the first five keys and the eighth).
        on_grant: called on this loop for each grant heard, in the turn of the loop it arrives.
        store: how to name the store in log lines.
    """

    __slots__ = (
        "_confirming",
        "_grant_prefix",
        "_min_replicas",
        "_on_grant",
        "_release_args",
        "_run",
        "_run_replicated",
        "_store",
        "_subscription",
        "id",
    )

    def __init__(
        self,
        endpoint: RedisEndpoint,
        *,
        alive_s: float,
        grant_prefix: str,
        run: Callable[..., Awaitable[Any]],
        release_args: Callable[[str], tuple[Sequence[str], Sequence[str | int]]],
        on_grant: Callable[[Grant], None],
        store: str,
        min_replicas: int = 0,
        run_replicated: Callable[..., Awaitable[tuple[Any, int]]] | None = None,
    ) -> None:
        """Hear nothing, and open nothing, until the first queue call."""
        self.id = secrets.token_hex(8)
        self._min_replicas = min_replicas
        self._run_replicated = run_replicated
        # grants heard, being confirmed as replicated before the waiter is told
        self._confirming: set[asyncio.Task[None]] = set()
        self._grant_prefix = grant_prefix
        self._run = run
        self._release_args = release_args
        self._on_grant = on_grant
        self._store = store
        self._subscription = RedisSubscription(
            lambda: endpoint,
            f"{grant_prefix}\x00{self.id}",
            self._heard,
            alive_s=alive_s,
            heard_as=f"{store}'s grant subscription",
            unheard="waiters in this process take a key handed to them up to 1 s late",
        )

    async def queue(
        self, key: str, owner: str, ttl_ms: int, queue_ms: int, ticket: int
    ) -> Acquired | Queued:
        """Take ``key``, or keep ``owner``'s place in its line (see ``WaitingLine.queue``).

        The first call subscribes to this line's grants before it queues, so no grant of its
        place goes unheard; a failure to subscribe is logged, and grants then come by asking.
        """
        await self._subscription.subscribed()
        keys, _ = self._release_args(key)
        keys_and_args = (
            *keys[:5],
            keys[7],
            owner,
            ttl_ms,
            queue_ms,
            ticket,
            self.id,
            self._grant_prefix,
            key,
        )
        if self._run_replicated is None or not self._min_replicas:
            taken, value = await self._run(QUEUE, 6, *keys_and_args)
        else:
            (taken, value), acknowledged = await self._run_replicated(QUEUE, 6, *keys_and_args)
            if taken == 1 and acknowledged < self._min_replicas:
                # owner holds the key, but a failover could lose it: not told yet. Its next
                # queue call asks again; leaving releases it
                return Queued(holder=owner)
        if taken == 1:
            return Acquired(int(value))
        return Queued(holder=None if value is None else text(value))

    async def leave(self, key: str, owner: str) -> bool:
        """Leave ``key``'s line; release what was granted to ``owner`` (see ``WaitingLine``)."""
        keys, args = self._release_args(key)
        left = await self._run(LEAVE, len(keys), *keys, owner, *args)
        return bool(left == 1)

    async def aclose(self) -> None:
        """Stop hearing grants and close the subscription's connection."""
        for confirming in self._confirming:
            confirming.cancel()
        if self._confirming:
            await asyncio.wait(self._confirming)
        await self._subscription.aclose()

    def _heard(self, message: str) -> None:
        grant = _parse_grant(message)
        if grant is None:
            _log.warning("%s heard a grant it cannot read: %r", self._store, message)
            return
        if self._run_replicated is None or not self._min_replicas:
            self._on_grant(grant)
            return
        # published as the grant was made, before any replica had it: told once they have
        confirming = asyncio.get_running_loop().create_task(self._confirm(grant))
        self._confirming.add(confirming)
        confirming.add_done_callback(self._confirming.discard)

    async def _confirm(self, grant: Grant) -> None:
        """Tell the waiter of ``grant`` once ``min_replicas`` replicas hold it; else never.

        A grant not confirmed stays with its owner: the waiter's next queue call answers it
        (confirmed then), or its leaving releases it.
        """
        assert self._run_replicated is not None  # noqa: S101 -- only called with it
        keys, _ = self._release_args(grant.key)
        lock, granted = keys[0], keys[3]
        try:
            held, acknowledged = await self._run_replicated(
                CONFIRM_GRANT, 2, lock, granted, grant.owner, grant.fencing_token
            )
        except Exception as error:  # noqa: BLE001 -- the waiter's next queue call asks again
            _log.debug("%s could not confirm a grant of %r: %s", self._store, grant.key, error)
            return
        if held == 1 and acknowledged >= self._min_replicas:
            self._on_grant(grant)


def _parse_grant(data: str) -> Grant | None:
    """Read ``<token> NUL <ticket> NUL <key> NUL <owner>`` (keys hold no NUL; owners may)."""
    parts = data.split("\x00", 3)
    if len(parts) != 4 or not parts[0].isdigit() or not parts[1].isdigit():  # noqa: PLR2004 -- the four fields
        return None
    token, ticket, key, owner = parts
    return Grant(key, owner, int(token), int(ticket))
