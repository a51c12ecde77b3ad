"""RedisReleaseFollower: one pub/sub connection that subscribes to the channels of followed keys.

Each key's releases are published on a channel of its own, ``<prefix>released@db<n>:<key>``, so
a release reaches only the processes that follow that key: what a process receives does not
grow with the size of the fleet. A publish to a channel nobody follows costs Redis one lookup.

A follower in turn stands in each followed key's queue instead (``_redis_turns``), and listens
on a channel of its own per key, ``<prefix>released@db<n>:<key>`` + NUL + ``<its id>``: a
release reaches the one follower whose turn it is, and no other process even reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Final, NamedTuple, cast, final

from ..._cancellation import delivered
from .._common._followed_keys import FollowedKeys
from .._common._liveness import kept_alive
from ._keyspace import text
from ._turns import ReleaseQueue, turn_channel

if TYPE_CHECKING:
    import redis.asyncio
    from redis.asyncio.client import PubSub
    from redis.asyncio.connection import AbstractConnection

__all__ = ["RESUBSCRIBE_PAUSE_S", "SUBSCRIBE_TIMEOUT_S", "RedisReleaseFollower", "subscribe_fix"]

_log = logging.getLogger("leaselock.stores.redis")

# pause between attempts to get the subscription back; waiters poll meanwhile
RESUBSCRIBE_PAUSE_S: Final = 1.0
# how long a subscription's connection may be quiet before it is sent a PING, where its client
# sets no socket_timeout (the store's default)
QUIET_S: Final = 5.0
SUBSCRIBE_TIMEOUT_S: Final = 10.0
# an unsubscribe only saves the server a few messages: it is not worth a long wait
UNSUBSCRIBE_TIMEOUT_S: Final = 2.0


def subscribe_fix(error: BaseException, channels: str) -> str:
    """The fix for a failed SUBSCRIBE: reach the server, or allow it, as the error says.

    A refused or dropped connection is no permission problem, and ACL advice would mislead.
    """
    allow = f"allow SUBSCRIBE on these channels for this user (ACL: +subscribe &{channels}*)"
    if type(error) is TimeoutError:
        # no confirmation came: a refusal the connection swallowed, or a server gone silent
        return f"Fix: check that the Redis server is reachable from here, and {allow}"
    # redis-py's connection errors are its own classes, named as the builtins they stand for
    kinds = {kind.__name__ for kind in type(error).__mro__}
    if kinds & {"ConnectionError", "TimeoutError", "OSError"}:
        return (
            "Fix: check that the Redis server runs and is reachable from here, and the URL's "
            "password"
        )
    return f"Fix: {allow}"


@final
class RedisReleaseFollower:
    """Subscribes, on one connection opened at the first key followed, to followed keys' channels.

    Args:
        client: the store's client; the pub/sub connection comes from its pool settings.
        channel_prefix: ``<prefix>released@db<n>:``; a key's channel is this plus the key.
        on_release: called on this loop with the key of each release heard.
        store: how to name the store in log lines.
        queue: makes this a follower in turn: it queues for each key it follows, and hears a
            release only when it is its turn.
    """

    __slots__ = (
        "_client",
        "_confirmations",
        "_keys",
        "_on_release",
        "_prefix",
        "_pubsub",
        "_queue",
        "_reader",
        "_sending",
        "_store",
    )

    def __init__(
        self,
        client: redis.asyncio.Redis,
        channel_prefix: str,
        on_release: Callable[[str], None],
        store: str,
        *,
        queue: ReleaseQueue | None = None,
    ) -> None:
        """Follow nothing, and open nothing, yet."""
        self._queue = queue
        self._client = client
        self._prefix = channel_prefix
        self._on_release = on_release
        self._store = store
        self._pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None
        # one command at a time: concurrent first commands would each open a connection
        self._sending = asyncio.Lock()
        self._confirmations: dict[str, deque[asyncio.Future[None]]] = {}
        self._keys = FollowedKeys(self._subscribe, self._unsubscribe)

    def following(self, key: str) -> AbstractAsyncContextManager[None]:
        """Hear ``key``'s releases while entered (see :class:`ReleaseFollower`)."""
        return self._keys.following(key)

    @property
    def in_turn_id(self) -> str | None:
        """The id a release names to give this follower its turn; ``None``: not in turn."""
        return None if self._queue is None else self._queue.id

    def follows(self, key: str) -> bool:
        """Whether some caller is inside :meth:`following` of ``key`` now."""
        return self._keys.follows(key)

    async def aclose(self) -> None:
        """Stop reading, leave every queue, and close the pub/sub connection."""
        await self._keys.aclose()
        if self._queue is not None:
            await self._queue.aclose()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.wait([self._reader])
        if self._pubsub is not None:
            await close_pubsub(self._pubsub)

    async def _subscribe(self, key: str) -> None:
        """Subscribe to ``key``'s channel and wait for the server's confirmation."""
        channel = self._channel(key)
        confirmed = asyncio.get_running_loop().create_future()
        pending = self._confirmations.setdefault(channel, deque())
        pending.append(confirmed)
        try:
            async with asyncio.timeout(SUBSCRIBE_TIMEOUT_S):
                async with self._sending:
                    if self._pubsub is None:
                        self._pubsub = self._client.pubsub()
                    await delivered(self._pubsub.subscribe(channel))
                if self._reader is None:
                    self._reader = asyncio.get_running_loop().create_task(
                        self._read(self._pubsub), name=f"leaselock release follower {self._store}"
                    )
                await confirmed
            if self._queue is not None:
                await self._queue.join(key)
        except Exception as error:  # noqa: BLE001 -- any failure: waiters poll instead
            if confirmed in pending:
                pending.remove(confirmed)
            _log.warning(
                "%r could not subscribe to %r (%s): waiters on that key in this process wake up "
                "to 1 s after its release, instead of at once. %s",
                self._store,
                channel,
                str(error) or f"no confirmation within {SUBSCRIBE_TIMEOUT_S:.0f} s",
                subscribe_fix(error, self._prefix),
            )
        finally:
            if not pending:
                self._confirmations.pop(channel, None)

    def _channel(self, key: str) -> str:
        channel = self._prefix + key
        return channel if self._queue is None else turn_channel(channel, self._queue.id)

    async def _unsubscribe(self, key: str) -> None:
        if self._queue is not None:
            await self._queue.leave(key)
        if self._pubsub is None:
            return
        try:
            async with asyncio.timeout(UNSUBSCRIBE_TIMEOUT_S), self._sending:
                await delivered(self._pubsub.unsubscribe(self._channel(key)))
        except Exception as error:  # noqa: BLE001 -- only a few stray messages follow from it
            _log.debug("%r could not unsubscribe from %r: %s", self._store, key, error)

    async def _read(self, pubsub: PubSub) -> None:
        """Hand each message over; after a failed read, read again (redis-py reconnects).

        Each connection is kept alive (``_common._liveness``): asked a PING when quiet, and
        dropped when silent, then read again as a failed one is. Without it, a half-open
        connection (a partition, a load balancer that forgot an idle flow) would hear no
        release again, and never fail.
        """
        # typed through a name: redis-py annotates it in some versions the extra allows only
        get_encoder: Callable[[], Any] = self._client.get_encoder
        encoding = str(get_encoder().encoding)
        failures = 0
        while True:
            heard = _HeardPubSub(pubsub, self._sending)
            async with kept_alive(heard, heard.quiet_s, name=f"{self._store}'s releases"):
                failure = await self._read_until_failure(heard, encoding, back=failures > 0)
            failures = 1 if failure.lasted else failures + 1
            await _dropped(pubsub, self._store, failure.error, failures)

    async def _read_until_failure(
        self, heard: _HeardPubSub, encoding: str, *, back: bool
    ) -> _Failure:
        """Read from ``heard`` until a read fails or the keep-alive cuts it; return why.

        ``back``: the subscriptions were away, and are said to be back at the first message.
        """
        lasted = False
        while True:
            try:
                message = await heard.read()
            except Exception as error:  # noqa: BLE001 -- any failure: report, read again
                return _Failure(error if heard.silent_s is None else heard.silence(), lasted)
            if message is None:
                continue
            if not lasted:
                lasted = True
                if back:
                    _log.info("%r has its release subscriptions back", self._store)
            kind = message["type"]
            if kind == "subscribe":
                self._confirm(text(message["channel"], encoding))
            elif kind == "message":
                try:
                    self._on_release(text(message["data"], encoding))
                except Exception:  # noqa: BLE001 -- one bad callback must not stop the others
                    _log.exception("A release callback of %r failed", self._store)

    def _confirm(self, channel: str) -> None:
        pending = self._confirmations.get(channel)
        while pending:
            confirmed = pending.popleft()
            if not confirmed.done():
                confirmed.set_result(None)
                return


class _Failure(NamedTuple):
    """Why a connection's reading ended, and whether it had heard anything first."""

    error: object
    lasted: bool


@final
class _HeardPubSub:
    """A PubSub's connection as the keep-alive sees it: heard by its reader, asked by a PING.

    Args:
        pubsub: the follower's PubSub, whose connection redis-py opens and reopens.
        sending: held while a command is sent, one at a time.
    """

    __slots__ = ("_answered", "_pubsub", "_reading", "_sending", "heard_at", "quiet_s", "silent_s")

    def __init__(self, pubsub: PubSub, sending: asyncio.Lock) -> None:
        """Heard now: a connection is quiet only from here on."""
        self._pubsub = pubsub
        self._sending = sending
        # where the client sets no socket_timeout (the store's default), QUIET_S
        self.quiet_s: float = getattr(pubsub.connection, "socket_timeout", None) or QUIET_S
        self.heard_at = asyncio.get_running_loop().time()
        # settled by the first message after a PING
        self._answered: asyncio.Future[None] | None = None
        # the bound on the read under way, brought forward to now by a cut
        self._reading: asyncio.Timeout | None = None
        # set by the cut: how long the connection had been silent
        self.silent_s: float | None = None

    async def read(self) -> dict[str, object] | None:
        """The next message, or ``None`` when none came for a while.

        Raises:
            TimeoutError: the keep-alive cut the connection (see :attr:`silent_s`).
            Exception: the read failed.
        """
        if self.silent_s is not None:
            raise TimeoutError
        async with asyncio.timeout(None) as self._reading:
            message: dict[str, object] | None = await delivered(
                self._pubsub.get_message(timeout=self.quiet_s)
            )
        self._reading = None
        if message is not None:
            self.heard_at = asyncio.get_running_loop().time()
            if self._answered is not None and not self._answered.done():
                self._answered.set_result(None)
        return message

    def silence(self) -> str:
        """Why the connection was dropped, for the log lines."""
        return f"no answer to a PING within {self.quiet_s:g} s"

    def asking(self) -> contextlib.nullcontext[None]:
        """Nothing to wait for: the PING takes the sending turn only while it is sent."""
        return contextlib.nullcontext()

    async def ask(self) -> None:
        """Send a PING; return once a message arrives, its answer or another."""
        answered = self._answered = asyncio.get_running_loop().create_future()
        async with self._sending:
            await delivered(self._pubsub.ping())
        await answered

    def cut(self, silent_s: float) -> None:
        """End the read under way, or the next one, as failed."""
        self.silent_s = silent_s
        if self._reading is not None:
            self._reading.reschedule(asyncio.get_running_loop().time())


async def _dropped(pubsub: PubSub, store: str, failure: object, failures: int) -> None:
    """Drop ``pubsub``'s connection after its ``failures``-th failure in a row; say so once."""
    # redis-py types it as always None
    connection = cast("AbstractConnection | None", pubsub.connection)
    if connection is not None:
        # the next read opens a new connection and subscribes again
        await connection.disconnect(nowait=True)
    if failures == 1:
        _log.info("%r lost its release subscriptions (%s); reconnecting", store, failure)
        return
    if failures == 2:  # noqa: PLR2004 -- the first failed reconnection
        _log.warning(
            "%r cannot get its release subscriptions back (%s); retrying every %.0f s. "
            "Waiters in this process poll meanwhile, so they wake up to 1 s late",
            store,
            failure,
            RESUBSCRIBE_PAUSE_S,
        )
    # the server is away: do not spin; waiters poll meanwhile
    await asyncio.sleep(RESUBSCRIBE_PAUSE_S)  # noqa: TID251 -- reconnect pacing


async def close_pubsub(pubsub: PubSub) -> None:
    """Close ``pubsub`` and give its connection back.

    redis-py annotates ``PubSub.aclose`` from 8.2 on only: called through a typed name, it
    type-checks against every version the extra allows.
    """
    aclose: Callable[[], Awaitable[None]] = pubsub.aclose
    await aclose()
