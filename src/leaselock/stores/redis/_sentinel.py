"""Redis behind Sentinel, and the replication a store may ask for: what the URLs say.

- ``redis+sentinel://[[user]:password@]host:port[,host:port...]/<service>[/<db>]`` names the
  Sentinels (not the data nodes) and the service they watch; ``rediss+sentinel://`` speaks TLS
  to both. The user and password are the data nodes'; ``sentinel_username`` and
  ``sentinel_password`` in the query are the Sentinels' own, if they have any.
- ``min_replicas`` and ``replica_timeout`` in the query of any Redis URL are the store's own
  (see :class:`ReplicationWait`), never passed to redis-py.

And :class:`PrimaryFollower`, which moves a store's connection as soon as the Sentinels
announce a new primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, final
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from ..._durations import parse_duration
from ..._errors import LocksConfigurationError
from ._subscription import RedisSubscription
from ._transport import endpoint_of

if TYPE_CHECKING:
    from redis.asyncio.sentinel import SentinelConnectionPool

# only the Redis store follows a Sentinel, and it refuses to be made without redis-py
with contextlib.suppress(ImportError):
    import redis.exceptions

__all__ = [
    "DEFAULT_REPLICA_TIMEOUT",
    "SENTINEL_SCHEMES",
    "PrimaryFollower",
    "ReplicationWait",
    "SentinelTarget",
    "replication_wait",
    "sentinel_target",
    "without_replication_params",
]

SENTINEL_SCHEMES: Final = ("redis+sentinel", "rediss+sentinel")
DEFAULT_REPLICA_TIMEOUT: Final = "100ms"
DEFAULT_SENTINEL_PORT: Final = 26379
_REPLICATION_PARAMS: Final = ("min_replicas", "replica_timeout")
_SENTINEL_PARAMS: Final = ("sentinel_username", "sentinel_password")
# Sentinel publishes "<service> <old ip> <old port> <new ip> <new port>" there at a failover
SWITCH_CHANNEL: Final = "+switch-master"
_SWITCH_ASKS: Final = 50
_SWITCH_ASK_PAUSE_S: Final = 0.1
_URL_FORM: Final = (
    '"redis+sentinel://[:password@]host1:26379,host2:26379,host3:26379/<service>[/<db>]'
    '[?min_replicas=1&replica_timeout=100ms]"'
)


@final
@dataclass(frozen=True, slots=True)
class ReplicationWait:
    """How many replicas must hold a grant or a renewal before its holder is told.

    Attributes:
        replicas: ``WAIT``'s first argument; 0 waits for none (the default, one round trip).
        timeout_ms: ``WAIT``'s second: past it, a grant counts as not acquired and a renewal
            as not confirmed.
    """

    replicas: int = 0
    timeout_ms: int = 100


def replication_wait(min_replicas: object, replica_timeout: object) -> ReplicationWait:
    """Check ``min_replicas`` (an int of 0 or more) and ``replica_timeout`` (a duration > 0).

    Raises:
        LocksConfigurationError: naming the parameter and what it takes.
    """
    if isinstance(min_replicas, str) and min_replicas.isdigit():
        min_replicas = int(min_replicas)
    if isinstance(min_replicas, bool) or not isinstance(min_replicas, int) or min_replicas < 0:
        raise LocksConfigurationError(
            f"min_replicas={min_replicas!r}; pass an int: how many replicas must hold a grant "
            "before its holder is told (0, the default, waits for none)"
        )
    timeout_ms = parse_duration(replica_timeout, name="replica_timeout")
    if timeout_ms == 0:
        # WAIT n 0 blocks for ever
        raise LocksConfigurationError(
            f"replica_timeout={replica_timeout!r} is zero; pass a positive duration such as "
            f'"{DEFAULT_REPLICA_TIMEOUT}": a grant not replicated by then counts as not acquired'
        )
    return ReplicationWait(min_replicas, timeout_ms)


def without_replication_params(url: str) -> tuple[str, dict[str, str]]:
    """Return ``url`` without ``min_replicas`` and ``replica_timeout``, and those found."""
    # split by hand: urlunsplit would drop the empty host of unix:///path
    base, _, rest = url.partition("?")
    query, hash_sign, fragment = rest.partition("#")
    pairs = parse_qsl(query, keep_blank_values=True)
    found = {name: value for name, value in pairs if name in _REPLICATION_PARAMS}
    if not found:
        return url, found
    kept = urlencode([(name, value) for name, value in pairs if name not in _REPLICATION_PARAMS])
    return base + ("?" + kept if kept else "") + hash_sign + fragment, found


@final
@dataclass(frozen=True, slots=True)
class SentinelTarget:
    """What a ``redis+sentinel://`` URL names.

    Attributes:
        sentinels: the Sentinels' ``(host, port)``.
        service: the name the Sentinels know the primary by.
        options: connection options of the data nodes (``db``, ``username``, ``password``,
            ``ssl``).
        sentinel_options: connection options of the Sentinels.
    """

    sentinels: tuple[tuple[str, int], ...]
    service: str
    options: dict[str, object] = field(default_factory=dict)
    sentinel_options: dict[str, object] = field(default_factory=dict)


def sentinel_target(url: str) -> SentinelTarget:
    """Read a ``redis+sentinel://`` URL (without the replication parameters).

    Raises:
        LocksConfigurationError: the URL names no Sentinel or no service, a port is not a
            number, or the query holds what this form does not take.
    """
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    sentinels: list[tuple[str, int]] = []
    for address in hosts.split(","):
        host, colon, port = address.rpartition(":") if ":" in address else (address, "", "")
        if not colon:
            host, port = address, str(DEFAULT_SENTINEL_PORT)
        if not host or not port.isdigit():
            raise _unusable(url, f"{address!r} is not host:port")
        sentinels.append((host.strip("[]"), int(port)))
    path = [unquote(segment) for segment in parts.path.split("/") if segment]
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):  # noqa: PLR2004 -- service, then db
        raise _unusable(url, "the path is /<service> or /<service>/<db>")
    options: dict[str, object] = {"db": int(path[1]) if len(path) == 2 else 0}  # noqa: PLR2004
    if parts.username:
        options["username"] = unquote(parts.username)
    if parts.password:
        options["password"] = unquote(parts.password)
    sentinel_options: dict[str, object] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name not in _SENTINEL_PARAMS:
            raise _unusable(
                url,
                f"{name!r} is not a parameter it takes ({', '.join(_SENTINEL_PARAMS)}, "
                f"{', '.join(_REPLICATION_PARAMS)})",
            )
        sentinel_options[name.removeprefix("sentinel_")] = value
    if parts.scheme.startswith("rediss"):
        options["ssl"] = True
        sentinel_options["ssl"] = True
    return SentinelTarget(tuple(sentinels), path[0], options, sentinel_options)


def _unusable(url: str, why: str) -> LocksConfigurationError:
    # the password stays out of the message
    parts = urlsplit(url)
    shown = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    return LocksConfigurationError(f"url={shown!r}: {why}; pass {_URL_FORM}")


@final
class PrimaryFollower:
    """Hears the Sentinels announce a new primary, and moves the store's connection to it at once.

    redis-py's Sentinel connections ask where the primary is only when they open, and the store
    keeps its command connection open: after a ``SENTINEL FAILOVER`` it would go on using the
    old primary, which serves as a primary until Sentinel demotes it, seconds later (a split
    brain whose tokens are below the new primary's). This one subscribes to ``+switch-master``
    on one Sentinel after another (the next when one is away), and on a switch of its service
    waits until the Sentinels that redis-py asks first name the new primary, then calls
    ``on_switch``.

    Args:
        pool: the client's ``SentinelConnectionPool`` (its public ``sentinel_manager`` and
            ``service_name``).
        on_switch: called on this loop once a switch is announced and asked.
        alive_s: a quiet subscription is sent a PING after this long.
        store: how log lines name the store.
    """

    __slots__ = ("_manager", "_moving", "_on_switch", "_service", "_subscription")

    def __init__(
        self,
        pool: SentinelConnectionPool,
        on_switch: Callable[[], None],
        *,
        alive_s: float,
        store: str,
    ) -> None:
        """Subscribe to nothing until :meth:`start`."""
        self._manager = pool.sentinel_manager
        self._service: str = pool.service_name
        self._on_switch = on_switch
        self._moving: set[asyncio.Task[None]] = set()
        # one after another: the next when one is away
        sentinels = itertools.cycle(
            [endpoint_of(sentinel.connection_pool) for sentinel in self._manager.sentinels]
        )
        self._subscription = RedisSubscription(
            lambda: next(sentinels),
            SWITCH_CHANNEL,
            self._heard,
            alive_s=alive_s,
            heard_as=f"{store}'s subscription to the Sentinels' failovers",
            unheard=(
                "after a failover the store moves to the new primary only once the old one "
                "answers READONLY or drops its connection. Fix: let this client SUBSCRIBE on "
                "the Sentinels"
            ),
        )

    async def start(self) -> None:
        """Subscribe (a failure is logged, and tried again every second)."""
        await self._subscription.subscribed()

    async def aclose(self) -> None:
        """Stop hearing the Sentinels."""
        for moving in self._moving:
            moving.cancel()
        if self._moving:
            await asyncio.wait(self._moving)
        await self._subscription.aclose()

    def _heard(self, message: str) -> None:
        # "<service> <old ip> <old port> <new ip> <new port>"
        fields = message.split()
        if len(fields) != 5 or fields[0] != self._service or not fields[4].isdigit():  # noqa: PLR2004 -- the five fields
            return
        moving = asyncio.get_running_loop().create_task(self._move((fields[3], int(fields[4]))))
        self._moving.add(moving)
        moving.add_done_callback(self._moving.discard)

    async def _move(self, primary: tuple[str, int]) -> None:
        # the other Sentinels learn of the switch within a few seconds: until the one asked
        # first names the new primary, a new connection could land on the old one again
        for _ in range(_SWITCH_ASKS):
            with contextlib.suppress(redis.exceptions.RedisError):
                if tuple(await self._manager.discover_master(self._service)) == primary:
                    break
            await asyncio.sleep(_SWITCH_ASK_PAUSE_S)  # noqa: TID251 -- pacing questions to the Sentinels
        self._on_switch()
