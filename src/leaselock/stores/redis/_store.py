"""RedisLockStore: locks as Redis keys with a PX expiry, tokens from one counter that never resets.

Every method is one Lua script run with EVALSHA (one round trip, atomic on the server). Keys:

- ``<prefix>lock:<key>``: the lock, holding its owner, with ``PX`` expiry measured by Redis;
- ``<prefix>fencing-token``: the one counter every acquisition increments. No lock key can be
  equal to it: lock keys all start with ``<prefix>lock:``, the counter does not;
- ``<prefix>fencing-source``: the replication id of the master that drew the last token; a
  master with another id (a promoted replica) first moves the counter up by ``2**32``, so
  tokens never go back across a failover (see ``_redis_tokens``);
- channel ``<prefix>released@db<n>:<key>``: a release publishes its key there, so waiters in
  other processes wake at once, and only the processes that wait on that key hear it (``<n>``
  is the database number: pub/sub spans every database);
- ``<prefix>runs``: one hash of job run records, fields ``last:<job>`` and ``success:<job>``,
  each a JSON object (one key, so a cluster keeps it in one slot).

Talks to Redis or Valkey through ``redis.asyncio`` (redis-py 5.0.1 or later); tested against
Redis 6.2 and 7.0 and Valkey 9.1.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Final, final
from urllib.parse import urlsplit

from ..._durations import Duration
from ..._errors import LocksConfigurationError, LockStoreError
from .._common._capabilities import (
    JobRecord,
    LockInfo,
    RunRecord,
    epoch_ms,
    run_row,
)
from .._common._job_control import JobPause, JobState, RunStart, RunStartAnswer, pause_json
from .._common._protocol import (
    Acquired,
    AcquireResult,
    Grant,
    NotAcquired,
    ReleaseFollower,
    Renewal,
    WaitingLine,
)
from ._follower import RedisReleaseFollower
from ._jobs import (
    END_RUN,
    JOB_SCRIPTS,
    MISSED_FIELD,
    START_RUN,
    closing_open_run,
    job_states_from_fields,
    open_run_prefix,
    pauses_from_fields,
    start_answer,
    tick_run_prefix,
)
from ._keyspace import delete_prefixed, glob_escaped, lock_info, text
from ._line import (
    BREAK_LOCK,
    LINE_SCRIPTS,
    RELEASE,
    RedisWaitingLine,
    grant_channel,
    line_keys,
)
from ._pipe import RedisCommandPipe
from ._runs import RECORD_RUN, read_job_records, record_run_args
from ._scripts import Script, script
from ._sentinel import (
    DEFAULT_REPLICA_TIMEOUT,
    SENTINEL_SCHEMES,
    PrimaryFollower,
    ReplicationWait,
    replication_wait,
    sentinel_target,
    without_replication_params,
)
from ._settings import DEFAULT_PREFIX, DEFAULT_SOCKET_TIMEOUTS, check_options, check_prefix
from ._tokens import DRAW, SOURCE_NAME
from ._transport import RedisEndpoint, endpoint_of
from ._turns import QUEUE_SCRIPTS, ReleaseQueue, queue_name

try:
    import hiredis
    import redis.asyncio
    import redis.asyncio.sentinel
    import redis.exceptions
except ImportError:  # the extra is not installed: constructing the store says which to install
    _HAVE_DRIVER = False
else:
    # the command connection reads replies with hiredis; 3.2 is the first that tells a push
    # the server sends on its own from a reply. redis-py 5.0.1 is the first whose clients
    # close with aclose() and are made over a pool with from_pool()
    _HAVE_DRIVER = hasattr(hiredis, "PushNotification") and hasattr(
        redis.asyncio.Redis, "from_pool"
    )

__all__ = ["RedisLockStore"]

_log = logging.getLogger("leaselock.stores.redis")

LOCKS_SEGMENT: Final = "lock:"
COUNTER_NAME: Final = "fencing-token"
CHANNEL_NAME: Final = "released"
FOLLOWERS_NAME: Final = "followers"
RUNS_NAME: Final = "runs"
JOBS_NAME: Final = "jobs"
PAUSES_NAME: Final = "pauses"
# SCAN's COUNT hint: keys looked at per round trip when listing locks
SCAN_BATCH: Final = 1000


ACQUIRE: Final = script(
    "acquire",
    DRAW
    + """
-- KEYS[1] = lock key, KEYS[2] = fencing-token counter, KEYS[3] = the counter's source
-- ARGV[1] = owner, ARGV[2] = ttl_ms
-- -> the new fencing token (an integer) if the key was free (no live lock), else the live
--    lock's owner (a string; false if it expired meanwhile)
-- SET NX sees an expired key as absent: Redis expires keys on access, on its own clock
if redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then
  return draw(KEYS[2], KEYS[3])
end
return redis.call('GET', KEYS[1])
""",
)

RENEW: Final = script(
    "renew",
    """
-- KEYS[1] = lock key
-- ARGV[1] = owner, ARGV[2] = ttl_ms
-- -> 1 if owner holds the live lock (its expiry now ttl_ms from now), else 0
-- owner check and write in ONE script: a read first lets a takeover slip in
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
""",
)


RENEW_MANY: Final = script(
    "renew_many",
    """
-- KEYS[i] = lock key of renewal i (i = 1..n)
-- ARGV[2i-1] = owner of renewal i, ARGV[2i] = ttl_ms of renewal i
-- -> array of n integers: 1 where the owner held the live lock (expiry moved), else 0
local renewed = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[2 * i - 1] then
    renewed[i] = redis.call('PEXPIRE', key, ARGV[2 * i])
  else
    renewed[i] = 0
  end
end
return renewed
""",
)


_SCRIPTS: Final = (
    ACQUIRE,
    RENEW,
    RENEW_MANY,
    RECORD_RUN,
    *LINE_SCRIPTS,
    *QUEUE_SCRIPTS,
    *JOB_SCRIPTS,
)


@final
class RedisLockStore:
    """Locks in Redis (or Valkey): one key per lock with a ``PX`` expiry, tokens from one counter.

    Each method is one Lua script, so the owner check and the write are one atomic step on the
    server, and expiry is measured by Redis's clock. Fencing tokens come from one ``INCR``
    counter, so they only grow **as long as the counter never goes back**: run Redis with
    persistence (``appendonly yes``) and ``maxmemory-policy noeviction``; :meth:`open` warns when
    it can see that the server has neither. An asynchronous failover can lose the latest
    acquisitions and counter increments (two holders, repeated tokens): fencing that must
    survive a failover belongs in :class:`~leaselock.stores.PostgresLockStore`.

    Releases are announced on a pub/sub channel per key, so waiters in other processes wake at
    once, and processes that do not wait on a key never hear of it (:meth:`follow_releases`);
    batches of renewals take one round trip (:meth:`renew_many`).

    The lock calls go on one connection of the store's own, pipelined (calls in flight share it),
    opened where and as the client's settings say (host or socket, TLS, password, database,
    client name); the pool serves the rest. A reply awaited
    longer than the client's ``socket_timeout`` (5 s without one) closes that connection, and
    the next call opens another.

    Example::

        store = RedisLockStore.from_url("redis://redis.internal:6379/0")
        async with Locks(store=store) as locks: ...

    .. versionadded:: 0.1
    """

    __slots__ = (
        "_channel",
        "_client",
        "_counter_key",
        "_counter_source",
        "_followers_key",
        "_grant_prefix",
        "_in_turn",
        "_jobs_key",
        "_lock_prefix",
        "_make_client",
        "_opens",
        "_pauses_key",
        "_pipe",
        "_prefix",
        "_primary_follower",
        "_replication",
        "_runs_key",
        "_sentinel",
        "_server",
    )

    def __init__(
        self,
        client: redis.asyncio.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        min_replicas: int = 0,
        replica_timeout: Duration = DEFAULT_REPLICA_TIMEOUT,
    ) -> None:
        """Keep locks through ``client``, which stays yours: the store never closes it.

        Args:
            client: a ``redis.asyncio.Redis`` client, with ``decode_responses`` on or off. Bind
                it to the event loop the locks run on (redis.asyncio connections belong to the
                loop they were first used on); :meth:`from_url` creates its client at
                :meth:`open` instead, on the loop that opens it. A client from a Sentinel's
                ``master_for`` follows the primary across failovers.
            prefix: the start of every key and channel name this store uses; ends with ``:``.
                Stores with different prefixes never see each other's locks or counter.
            min_replicas: how many replicas must have received a grant or a renewal before its
                holder is told (``WAIT`` on the same connection, right after the script: still
                one round trip). 0, the default, waits for none: an asynchronous failover can
                then lose a grant (two holders for at most one ttl; tokens never go back).
            replica_timeout: how long ``WAIT`` waits; a grant that fewer replicas received by
                then is released and counts as not acquired, and such a renewal as not
                confirmed (retried until the holder's deadline).

        Raises:
            LocksConfigurationError: the driver is missing, ``client`` is not an async Redis
                client, or ``prefix``, ``min_replicas`` or ``replica_timeout`` is unusable.

        .. versionchanged:: 0.4
           ``min_replicas`` and ``replica_timeout``.
        """
        _require_driver()
        if not isinstance(client, redis.asyncio.Redis):
            raise LocksConfigurationError(
                f"client={client!r} is not a redis.asyncio.Redis client; pass "
                "redis.asyncio.Redis(...) (not the blocking redis.Redis; for a cluster, use "
                "RedisClusterLockStore), or use RedisLockStore.from_url(url)"
            )
        self._setup(
            prefix,
            client=client,
            make_client=None,
            replication=replication_wait(min_replicas, replica_timeout),
            database=_database(client.connection_pool.connection_kwargs),
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        min_replicas: int | None = None,
        replica_timeout: Duration | None = None,
        **options: object,
    ) -> RedisLockStore:
        """Create a store that owns its connection pool, made at :meth:`open` on the running loop.

        The pool is a ``redis.asyncio.BlockingConnectionPool``: when all its connections are
        busy, callers wait for one (up to ``timeout`` seconds) instead of failing. It is closed
        when the last :meth:`aclose` leaves. A ``redis+sentinel://`` URL is
        :meth:`from_sentinel`'s.

        Args:
            url: ``redis://[[user]:[password]@]host[:port][/db]``, ``rediss://...`` (TLS),
                ``unix://path?db=0``, or
                ``redis+sentinel://[[user]:[password]@]host:port[,host:port...]/<service>[/db]``
                (the Sentinels, and the name they know the primary by; ``rediss+sentinel://``
                for TLS; ``sentinel_username`` and ``sentinel_password`` in the query for
                Sentinels that ask for them). Any of them may end with
                ``?min_replicas=1&replica_timeout=100ms``.
            prefix: as for the constructor.
            min_replicas: as for the constructor; the URL's, else 0.
            replica_timeout: as for the constructor; the URL's, else 100 ms.
            **options: passed to ``BlockingConnectionPool.from_url`` (to the data nodes'
                connections behind Sentinel): ``max_connections`` (default 50), ``timeout``
                (seconds to wait for a free connection, default 20), ``socket_timeout``,
                ``decode_responses``, TLS options, ...

        Raises:
            LocksConfigurationError: the driver is missing, or ``url``, ``options`` or
                ``prefix`` is unusable.

        .. versionadded:: 0.1
        .. versionchanged:: 0.4
           ``redis+sentinel://`` URLs, ``min_replicas`` and ``replica_timeout``.
        """
        _require_driver()
        if not isinstance(url, str):
            raise LocksConfigurationError(
                f"url={url!r} is a {type(url).__name__}; pass a str such as "
                '"redis://localhost:6379/0"'
            )
        url, asked = without_replication_params(url)
        replication = replication_wait(
            asked.get("min_replicas", 0) if min_replicas is None else min_replicas,
            asked.get("replica_timeout", DEFAULT_REPLICA_TIMEOUT)
            if replica_timeout is None
            else replica_timeout,
        )
        if urlsplit(url).scheme in SENTINEL_SCHEMES:
            target = sentinel_target(url)
            return cls.from_sentinel(
                target.sentinels,
                target.service,
                prefix=prefix,
                min_replicas=replication.replicas,
                replica_timeout=f"{replication.timeout_ms}ms",
                sentinel_options=target.sentinel_options,
                **{**target.options, **options},
            )
        check_options(options)
        options = {**DEFAULT_SOCKET_TIMEOUTS, **options}
        try:
            # builds no connection and binds to no loop: it only checks url and options now
            pool = redis.asyncio.BlockingConnectionPool.from_url(url, **options)
            pool.connection_class(**pool.connection_kwargs)
        except (TypeError, ValueError) as error:
            raise LocksConfigurationError(
                f"RedisLockStore.from_url: {error}; pass a URL such as "
                '"redis://localhost:6379/0" and options that '
                "redis.asyncio.BlockingConnectionPool accepts"
            ) from None
        store = cls.__new__(cls)
        store._setup(  # noqa: SLF001 -- same class
            prefix,
            client=None,
            make_client=lambda: (
                redis.asyncio.Redis.from_pool(
                    redis.asyncio.BlockingConnectionPool.from_url(url, **options)
                ),
                None,
            ),
            replication=replication,
            database=_database(pool.connection_kwargs),
        )
        store._server = _describe(pool)  # noqa: SLF001 -- same class
        return store

    @classmethod
    def from_sentinel(
        cls,
        sentinels: Sequence[tuple[str, int]],
        service_name: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        min_replicas: int = 0,
        replica_timeout: Duration = DEFAULT_REPLICA_TIMEOUT,
        sentinel_options: Mapping[str, object] | None = None,
        **options: object,
    ) -> RedisLockStore:
        """Create a store on the primary that Redis Sentinel names, following it across failovers.

        Made at :meth:`open` on the running loop, through redis-py's
        ``redis.asyncio.sentinel.Sentinel``: every connection the store opens asks the
        Sentinels where the primary is now. A connection answered ``READONLY`` (its server was
        demoted), closed or stalled is dropped, and the next call asks again. Tokens never go
        back across a failover: a promoted replica moves the counter past anything the old
        primary could have handed out (see ``docs/stores/redis.md``); with ``min_replicas``, a
        grant also survives one.

        Args:
            sentinels: ``(host, port)`` of each Sentinel.
            service_name: the name the Sentinels know the primary by (``sentinel monitor``).
            prefix: as for the constructor.
            min_replicas: as for the constructor.
            replica_timeout: as for the constructor.
            sentinel_options: connection options for the Sentinels (``password``, ``ssl``,
                ...); the socket timeouts of ``options`` by default.
            **options: connection options for the primary's connections (``db``,
                ``password``, ``socket_timeout``, ``decode_responses``, ``ssl``, ...).

        Raises:
            LocksConfigurationError: the driver is missing, or an argument is unusable.

        .. versionadded:: 0.4
        """
        _require_driver()
        given: object = sentinels
        if (
            isinstance(given, str)
            or not sentinels
            or not all(
                isinstance(address, tuple)
                and len(address) == 2  # noqa: PLR2004 -- host and port
                and isinstance(address[0], str)
                and isinstance(address[1], int)
                for address in sentinels
            )
        ):
            raise LocksConfigurationError(
                f"sentinels={sentinels!r}; pass (host, port) pairs, such as "
                '[("sentinel-1", 26379), ("sentinel-2", 26379), ("sentinel-3", 26379)]'
            )
        if not isinstance(service_name, str) or not service_name:
            raise LocksConfigurationError(
                f"service_name={service_name!r}; pass the name the Sentinels monitor the "
                'primary under (sentinel monitor <name> ...), such as "mymaster"'
            )
        replication = replication_wait(min_replicas, replica_timeout)
        check_options(options, "RedisLockStore.from_sentinel")
        settings: dict[str, Any] = {**DEFAULT_SOCKET_TIMEOUTS, **options}
        sentinel_settings = dict(
            sentinel_options
            if sentinel_options is not None
            else {k: v for k, v in settings.items() if k.startswith("socket_")}
        )
        addresses = [(host, port) for host, port in sentinels]
        try:
            # builds no connection: it only checks the options now
            redis.asyncio.Connection(**{k: v for k, v in settings.items() if k != "ssl"})
        except (TypeError, ValueError) as error:
            raise LocksConfigurationError(
                f"RedisLockStore.from_sentinel: {error}; pass options that a "
                "redis.asyncio connection accepts"
            ) from None

        def make_client() -> tuple[redis.asyncio.Redis, redis.asyncio.sentinel.Sentinel]:
            sentinel = redis.asyncio.sentinel.Sentinel(
                addresses, sentinel_kwargs=sentinel_settings, **settings
            )
            return sentinel.master_for(service_name, redis_class=redis.asyncio.Redis), sentinel

        store = cls.__new__(cls)
        store._setup(  # noqa: SLF001 -- same class
            prefix,
            client=None,
            make_client=make_client,
            replication=replication,
            database=_database(settings),
        )
        where = ",".join(f"{host}:{port}" for host, port in addresses)
        store._server = f"sentinel={where}, service={service_name!r}, db={_database(settings)}"  # noqa: SLF001 -- same class
        return store

    def _setup(
        self,
        prefix: str,
        *,
        client: redis.asyncio.Redis | None,
        make_client: Callable[[], tuple[redis.asyncio.Redis, Any]] | None,
        replication: ReplicationWait,
        database: int,
    ) -> None:
        check_prefix(prefix)
        self._prefix = prefix
        self._lock_prefix = prefix + LOCKS_SEGMENT
        self._counter_key = prefix + COUNTER_NAME
        self._counter_source = prefix + SOURCE_NAME
        # pub/sub is one namespace for every database of a server: the channel names the
        # database, or stores with one prefix on two databases would wake each other's waiters
        self._channel = f"{prefix}{CHANNEL_NAME}@db{database}"
        self._followers_key = f"{prefix}{FOLLOWERS_NAME}@db{database}"
        self._grant_prefix = grant_channel(prefix, database)
        self._in_turn: set[RedisReleaseFollower] = set()
        self._runs_key = prefix + RUNS_NAME
        self._jobs_key = prefix + JOBS_NAME
        self._pauses_key = prefix + PAUSES_NAME
        self._client = client
        self._make_client = make_client
        # the Sentinel client behind a client this store made, closed with it
        self._sentinel: Any = None
        self._replication = replication
        self._primary_follower: PrimaryFollower | None = None
        self._opens = 0
        self._pipe: RedisCommandPipe | None = None
        self._server = "" if client is None else _describe(client.connection_pool)

    # --- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, load the scripts, and warn if the server can lose the fencing counter.

        Reference-counted: every :meth:`open` is undone by one :meth:`aclose`. The first one
        checks the server in one round trip: the scripts are loaded, and a server without
        persistence (``save ""`` and ``appendonly no``) or with an evicting
        ``maxmemory-policy`` is logged as a warning on ``leaselock.stores.redis``, because the
        counter must never go back. Where ``CONFIG`` is not allowed (managed services), that
        check is skipped and logged at DEBUG.

        Behind Sentinel, it also subscribes to the Sentinels' announcements of a new primary,
        and moves the command connection there as soon as one is made.

        Raises:
            LockStoreError: the server could not be reached, or refused to load the scripts.
        """
        client = self._connected()
        self._opens += 1
        if self._opens > 1:
            return
        try:
            await self._prepare(client)
            pool = client.connection_pool
            if isinstance(pool, redis.asyncio.sentinel.SentinelConnectionPool):
                follower = self._primary_follower = PrimaryFollower(
                    pool,
                    self._primary_moved,
                    alive_s=float(
                        pool.connection_kwargs.get("socket_timeout")
                        or DEFAULT_SOCKET_TIMEOUTS["socket_timeout"]
                    ),
                    store=repr(self),
                )
                await follower.start()
        except BaseException:
            await self.aclose()
            raise

    def _primary_moved(self) -> None:
        """Move the command connection: the Sentinels announced a new primary."""
        pipe = self._pipe
        if pipe is not None and pipe.loop is asyncio.get_running_loop():
            pipe.reconnect("the Sentinels announced a new primary; asking them again")

    async def aclose(self) -> None:
        """Undo one :meth:`open`; the last one closes the store's command connection.

        It closes the pool that :meth:`from_url` made too; a client given to the constructor
        stays open.
        """
        if self._opens == 0:
            return
        self._opens -= 1
        if self._opens:
            return
        follower, self._primary_follower = self._primary_follower, None
        if follower is not None:
            await follower.aclose()
        pipe, self._pipe = self._pipe, None
        if pipe is not None and pipe.loop is asyncio.get_running_loop():
            await pipe.aclose()
        if self._make_client is not None and self._client is not None:
            client, self._client = self._client, None
            sentinel, self._sentinel = self._sentinel, None
            await client.aclose()
            if sentinel is not None:
                # one by one: redis-py 8.0 and earlier have no Sentinel.aclose()
                for sentinel_client in sentinel.sentinels:
                    await sentinel_client.aclose()

    def _connected(self) -> redis.asyncio.Redis:
        """Return the client; a store from :meth:`from_url` makes it now, on the running loop."""
        client = self._client
        if client is None:
            # no await between the check and the assignment: concurrent first calls share it
            assert self._make_client is not None  # noqa: S101 -- only from_url leaves it unset
            client, self._sentinel = self._make_client()
            self._client = client
        return client

    async def _prepare(self, client: redis.asyncio.Redis) -> None:
        pipe = client.pipeline(transaction=False)
        for lua in _SCRIPTS:
            pipe.script_load(lua.source)
        for parameter in ("save", "appendonly", "maxmemory-policy"):
            pipe.config_get(parameter)
        # every script that draws a token reads it (see _redis_tokens)
        pipe.info("replication")
        try:
            answers = await pipe.execute(raise_on_error=False)
        except redis.exceptions.RedisError as error:
            raise LockStoreError(
                f"{self!r} could not reach Redis: {type(error).__name__}: {error}. Check that "
                "the server runs and the URL, password and TLS options are right"
            ) from error
        loaded, config = answers[: len(_SCRIPTS)], answers[len(_SCRIPTS) : -1]
        for lua, answer in zip(_SCRIPTS, loaded, strict=True):
            if isinstance(answer, Exception):
                raise LockStoreError(
                    f"{self!r}: Redis refused to load the {lua.name} script: {answer}. "
                    "RedisLockStore needs SCRIPT LOAD and EVALSHA; allow them for this user"
                )
        replication = answers[-1]
        if isinstance(replication, Exception) or "master_replid" not in replication:
            raise LockStoreError(
                f"{self!r}: INFO replication gave {replication!r}, without master_replid, which "
                "every script that hands out a fencing token reads to tell a failover. Allow "
                "INFO for this user (ACL: +info), on Redis 5 or later or Valkey"
            )
        self._warn_if_counter_can_go_back(config)

    def _warn_if_counter_can_go_back(
        self, config: Sequence[Mapping[str | bytes, str | bytes] | Exception]
    ) -> None:
        settings: dict[str, str] = {}
        for answer in config:
            if isinstance(answer, Exception):
                _log.debug(
                    "%r could not check the server's persistence and eviction settings (CONFIG "
                    "GET is not allowed: %s); make sure the fencing counter survives restarts",
                    self,
                    answer,
                )
                return
            settings.update({text(name): text(value) for name, value in answer.items()})
        if settings.get("save") == "" and settings.get("appendonly") == "no":
            _log.warning(
                '%r: the Redis server keeps nothing on disk (save "", appendonly no): a restart '
                "resets the fencing-token counter and hands out old tokens again. Fix: "
                "CONFIG SET appendonly yes (and CONFIG REWRITE, or appendonly yes in redis.conf)",
                self,
            )
        policy = settings.get("maxmemory-policy", "noeviction")
        if policy != "noeviction":
            _log.warning(
                "%r: the Redis server's maxmemory-policy is %s: under memory pressure it can "
                "evict live locks (two holders) or the fencing-token counter (old tokens again). "
                "Fix: CONFIG SET maxmemory-policy noeviction (and in redis.conf)",
                self,
                policy,
            )

    # --- the store contract --------------------------------------------------------------------

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        """Take ``key`` for ``owner`` for ``ttl_ms`` if no live lock holds it; one round trip.

        With ``min_replicas``, a key taken but not acknowledged by that many replicas within
        ``replica_timeout`` is released again and counts as not acquired.
        """
        keys_and_args = (
            self._lock_prefix + key,
            self._counter_key,
            self._counter_source,
            owner,
            ttl_ms,
        )
        if not self._replication.replicas:
            reply = await self._run(ACQUIRE, 3, *keys_and_args)
        else:
            reply, acknowledged = await self._run_replicated(ACQUIRE, 3, *keys_and_args)
            if isinstance(reply, int) and acknowledged < self._replication.replicas:
                # released on the server that granted it, before any reconnection
                try:
                    await self.release(key, owner)
                finally:
                    _log.warning("%s", self._unreplicated(f"the grant of {key!r}", acknowledged))
                return NotAcquired()
        # an integer reply is an int whether or not the client decodes responses; the holder
        # comes back as bytes or str, or None when its lock expired in between
        if isinstance(reply, int):
            return Acquired(reply)
        return NotAcquired(holder=None if reply is None else text(reply))

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Move the expiry to ``ttl_ms`` from now if ``owner`` holds a live lock on ``key``.

        Raises:
            LockStoreError: with ``min_replicas``, the renewal reached fewer replicas within
                ``replica_timeout`` (a promoted replica would hold the older expiry); the
                engine retries it until the holder's deadline.
        """
        keys_and_args = (self._lock_prefix + key, owner, ttl_ms)
        if not self._replication.replicas:
            renewed: int = await self._run(RENEW, 1, *keys_and_args)
            return renewed == 1
        renewed, acknowledged = await self._run_replicated(RENEW, 1, *keys_and_args)
        if renewed == 1 and acknowledged < self._replication.replicas:
            raise self._unreplicated(f"the renewal of {key!r}", acknowledged)
        return renewed == 1

    async def release(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` holds a live lock on it: hand it on, or announce it.

        Where a waiter stands in the key's line (:meth:`wait_in_line`), the first live one
        holds the key as the release ends. Else the release is announced, naming the follower
        in turn that has waited longest for ``key`` (see :meth:`follow_releases_in_turn`), or,
        with none, reaching every follower of the key.
        """
        keys, args = self._release_args(key)
        released: int = await self._run(RELEASE, len(keys), *keys, owner, *args)
        return released == 1

    def _release_args(self, key: str) -> tuple[list[str], list[str | int]]:
        """The keys of a release of ``key``, and its arguments after the owner."""
        keys = [
            self._lock_prefix + key,
            *line_keys(self._prefix, key),
            self._counter_key,
            queue_name(self._prefix, key),
            self._followers_key,
            self._counter_source,
        ]
        return keys, [f"{self._channel}:{key}", key, self._grant_prefix, *self._own_followers(key)]

    def _own_followers(self, key: str) -> list[str | int]:
        """This store's followers in turn of ``key``, counted, then those that stopped following.

        The releasing process wakes its own waiters itself, so the turn goes to another process
        where one waits. A follower that just won the key and left its queue may still stand
        first in it: its own release must not give it the turn, or the turn would go to no one.
        """
        following: list[str | int] = []
        left: list[str | int] = []
        for follower in self._in_turn:
            if follower.in_turn_id is not None:
                (following if follower.follows(key) else left).append(follower.in_turn_id)
        return [len(following), *following, *left]

    async def renew_many(self, renewals: Sequence[Renewal]) -> Sequence[bool]:
        """Renew each lease as :meth:`renew` would, all in one script: one round trip.

        Raises:
            LockStoreError: as :meth:`renew`, for the whole batch.
        """
        if not renewals:
            return []
        lock_prefix = self._lock_prefix
        keys = [lock_prefix + renewal.key for renewal in renewals]
        args: list[str | int] = []
        for renewal in renewals:
            args += (renewal.owner, renewal.ttl_ms)
        if not self._replication.replicas:
            answers = await self._run(RENEW_MANY, len(keys), *keys, *args)
            return [answer == 1 for answer in answers]
        answers, acknowledged = await self._run_replicated(RENEW_MANY, len(keys), *keys, *args)
        if 1 in answers and acknowledged < self._replication.replicas:
            raise self._unreplicated(f"the renewal of {len(keys)} leases", acknowledged)
        return [answer == 1 for answer in answers]

    async def _run(self, script: Script, numkeys: int, *keys_and_args: str | int) -> Any:  # noqa: ANN401 -- a reply's type is its script's: an int, or a list of ints
        """Run ``script`` by its SHA on the command connection; load it once on NOSCRIPT."""
        pipe = self._pipe
        if pipe is None or pipe.loop is not asyncio.get_running_loop():
            pipe = self._new_pipe()
        try:
            return await pipe.execute("EVALSHA", script.sha, numkeys, *keys_and_args)
        except redis.exceptions.NoScriptError:
            # a restart, a failover or SCRIPT FLUSH emptied the script cache
            await pipe.execute("SCRIPT", "LOAD", script.source)
            return await pipe.execute("EVALSHA", script.sha, numkeys, *keys_and_args)

    async def _run_replicated(
        self, script: Script, numkeys: int, *keys_and_args: str | int
    ) -> tuple[Any, int]:
        """Run ``script`` as :meth:`_run` does, then ``WAIT`` for ``min_replicas``.

        ``WAIT`` goes right behind the script on the same connection, in the same write (one
        round trip), and counts the replicas that acknowledged every write of that connection
        so far: the script's included. Not allowed in a script, so never inside one.

        Returns:
            The script's reply and how many replicas acknowledged it.
        """
        pipe = self._pipe
        if pipe is None or pipe.loop is not asyncio.get_running_loop():
            pipe = self._new_pipe()
        wait = ("WAIT", self._replication.replicas, self._replication.timeout_ms)
        evalsha = ("EVALSHA", script.sha, numkeys, *keys_and_args)
        reply, acknowledged = await pipe.execute_then(evalsha, wait)
        if isinstance(reply, redis.exceptions.NoScriptError):
            # a restart, a failover or SCRIPT FLUSH emptied the script cache
            await pipe.execute("SCRIPT", "LOAD", script.source)
            reply, acknowledged = await pipe.execute_then(evalsha, wait)
        if isinstance(reply, Exception):
            raise reply
        return reply, int(acknowledged)

    def _unreplicated(self, what: str, acknowledged: int) -> LockStoreError:
        pipe, client = self._pipe, self._client
        if (
            pipe is not None
            and client is not None
            and isinstance(client.connection_pool, redis.asyncio.sentinel.SentinelConnectionPool)
        ):
            # a primary without its replicas may be one a failover left behind: the next
            # connection asks the Sentinels where the primary is now
            pipe.reconnect("too few replicas acknowledged; asking the Sentinels again")
        wait = self._replication
        return LockStoreError(
            f"{self!r}: {what} reached {acknowledged} replica(s) within {wait.timeout_ms} ms, "
            f"fewer than min_replicas={wait.replicas}: a failover could lose it. Check that the "
            "replicas run and keep up (INFO replication), or raise replica_timeout"
        )

    def _new_pipe(self) -> RedisCommandPipe:
        """Make the command connection of the running loop, from the client's pool settings.

        A store bound to a loop before (opened, closed, then used in another ``asyncio.run``)
        leaves that loop's connection behind: redis.asyncio connections cannot move loops.
        """
        endpoint, stall_s = self._own_connections()
        self._pipe = RedisCommandPipe(endpoint, stall_s=stall_s, name=repr(self))
        return self._pipe

    def _own_connections(self) -> tuple[RedisEndpoint, float]:
        """Where and how the store's own connections go, outside the client's pool.

        Returns the client's endpoint and the stall limit, the client's socket timeout
        (from_url's default if it has none): the connections' protocols read the socket
        themselves, and bound a stall with that limit.
        """
        pool = (self._client or self._connected()).connection_pool
        stall_s = (
            pool.connection_kwargs.get("socket_timeout")
            or DEFAULT_SOCKET_TIMEOUTS["socket_timeout"]
        )
        return endpoint_of(pool), float(stall_s)

    # --- run records and inspection ------------------------------------------------------------

    async def record_run(self, run: RunRecord) -> None:
        """Keep ``run`` as its job's last run, and its last success if it went well; one trip."""
        await self._run(RECORD_RUN, 1, self._runs_key, *record_run_args(run))

    async def start_run(self, start: RunStart) -> RunStartAnswer:
        """Start a run unless paused or its tick ran, taking its lock if asked: one script.

        The pause check, the tick check, the lock's acquire and the writes of the open run and
        its tick are one atomic step, in one round trip.

        Raises:
            LockStoreError: with ``min_replicas``, the run's lock was taken but reached fewer
                replicas in time: it is released again, and the run not started.
        """
        opened = start.open_run
        keys = [self._pauses_key, self._jobs_key, self._runs_key]
        if start.take_key is not None:
            keys += [self._lock_prefix + start.take_key, self._counter_key, self._counter_source]
        token = "" if opened.fencing_token is None else str(opened.fencing_token)
        keys_and_args = (
            *keys,
            start.job,
            start.owner,
            start.ttl_ms,
            open_run_prefix(opened),
            token,
            "1" if start.ignore_pause else "0",
            epoch_ms(opened.started_at),
            start.when_busy,
            "" if start.tick is None else epoch_ms(start.tick),
            "" if start.tick is None else tick_run_prefix(start.tick, opened.instance),
        )
        if start.take_key is None or not self._replication.replicas:
            reply = await self._run(START_RUN, len(keys), *keys_and_args)
            return start_answer(reply, took=start.take_key is not None)
        reply, acknowledged = await self._run_replicated(START_RUN, len(keys), *keys_and_args)
        if text(reply[0]) == "started" and acknowledged < self._replication.replicas:
            # the run's record stays open and its tick started, as a run whose process died
            # would leave them: no other instance runs that tick
            try:
                await self.release(start.take_key, start.owner)
            finally:
                error = self._unreplicated(f"the run lock of {start.job!r}", acknowledged)
            raise error
        return start_answer(reply, took=True)

    async def end_run(self, run: RunRecord) -> bool:
        """Record ``run``, close it if it is the open run, and count it: one script."""
        value = json.dumps(run_row(run), ensure_ascii=False, separators=(",", ":"))
        served: int = await self._run(
            END_RUN,
            2,
            self._runs_key,
            self._jobs_key,
            run.job,
            value,
            "1" if run.outcome == "ok" else "0",
            run.outcome,
            closing_open_run(run),
            epoch_ms(run.started_at),
            -1 if run.fencing_token is None else run.fencing_token,
        )
        return served == 1

    async def note_missed(self, job: str, missed_at: datetime) -> None:
        """Record that the tick of ``missed_at`` of ``job`` was never started."""
        client = self._client or self._connected()
        await client.hset(self._jobs_key, MISSED_FIELD + job, epoch_ms(missed_at))

    async def pause_jobs(self, pause: JobPause) -> None:
        """Keep ``pause``, replacing any pause of its target."""
        client = self._client or self._connected()
        await client.hset(self._pauses_key, pause.target, pause_json(pause))

    async def resume_jobs(self, target: str) -> JobPause | None:
        """Remove the pause of ``target``; return it, or ``None``: one transaction."""
        client = self._client or self._connected()
        async with client.pipeline(transaction=True) as pipe:
            pipe.hget(self._pauses_key, target)
            pipe.hdel(self._pauses_key, target)
            kept, _ = await pipe.execute()
        return None if kept is None else pauses_from_fields({target: text(kept)})[0]

    async def job_pauses(self) -> list[JobPause]:
        """Return every pause kept, by target."""
        client = self._client or self._connected()
        fields: Mapping[Any, Any] = await client.hgetall(self._pauses_key)
        return pauses_from_fields({text(k): text(v) for k, v in fields.items()})

    async def job_states(self, jobs: Sequence[str] | None = None) -> list[JobState]:
        """Return the states of ``jobs`` (every job when ``None``), by job."""
        client = self._client or self._connected()
        fields: Mapping[Any, Any] = await client.hgetall(self._jobs_key)
        return job_states_from_fields({text(k): text(v) for k, v in fields.items()}, jobs)

    async def job_records(self, jobs: Sequence[str] | None = None) -> list[JobRecord]:
        """Return the records of ``jobs`` (every job when ``None``) that have one, by job key."""
        return await read_job_records(self._client or self._connected(), self._runs_key, jobs)

    async def store_time_ms(self) -> int:
        """Return the server's wall clock now (``TIME``), in epoch milliseconds.

        The clock its keys' expiries are measured on; one round trip.
        """
        client = self._client or self._connected()
        seconds, microseconds = await client.time()
        return int(seconds) * 1000 + int(microseconds) // 1000

    async def read_lock(self, key: str) -> LockInfo | None:
        """Return ``key``'s live lock, or ``None``: Redis keeps no trace of a freed key.

        Redis keeps one token counter for all keys, so ``fencing_token`` is ``None``.
        """
        client = self._client or self._connected()
        lock_key = self._lock_prefix + key
        async with client.pipeline(transaction=True) as pipe:
            pipe.get(lock_key)
            pipe.pttl(lock_key)
            owner, left = await pipe.execute()
        return lock_info(key, owner, left)

    async def list_locks(self, prefix: str = "", limit: int = 1000) -> list[LockInfo]:
        """Return up to ``limit`` live locks whose key starts with ``prefix``, by key.

        Walks the keyspace with ``SCAN`` (never ``KEYS``): for operators, not hot paths.
        """
        client = self._client or self._connected()
        pattern = glob_escaped(self._lock_prefix + prefix) + "*"
        names = sorted(
            {text(name) async for name in client.scan_iter(match=pattern, count=SCAN_BATCH)}
        )
        found: list[LockInfo] = []
        for start in range(0, len(names), SCAN_BATCH):
            batch = names[start : start + SCAN_BATCH]
            async with client.pipeline(transaction=False) as pipe:
                for name in batch:
                    pipe.get(name)
                    pipe.pttl(name)
                answers = await pipe.execute()
            for index, name in enumerate(batch):
                info = lock_info(
                    name[len(self._lock_prefix) :], answers[2 * index], answers[2 * index + 1]
                )
                if info is not None:
                    found.append(info)
            if len(found) >= limit:
                break
        return found[:limit]

    async def discard_prefix(self) -> int:
        """Delete every key under this store's prefix; return how many went.

        For a prefix of one's own that nothing uses again (``leaselock check``'s). Never on a
        prefix an application uses: its fencing counter would start over, and a paused holder's
        stale token could be handed out again.
        """
        return await delete_prefixed(self._client or self._connected(), self._prefix)

    async def break_lock(self, key: str) -> LockInfo | None:
        """Free ``key`` whoever holds it; return what held it, if anything did.

        As at a release, the first live waiter in the key's line holds it next, or the freeing
        is announced.
        """
        keys, args = self._release_args(key)
        reply = await self._run(BREAK_LOCK, len(keys), *keys, *args)
        if not reply:
            return None
        owner, left = reply
        return LockInfo(key, text(owner), None, max(int(left), 0))

    # --- release notifications -----------------------------------------------------------------

    @asynccontextmanager
    async def follow_releases(
        self, on_release: Callable[[str], None]
    ) -> AsyncIterator[ReleaseFollower]:
        """Call ``on_release(key)`` on this loop for releases of the keys followed, while entered.

        A release is published on its key's own channel, ``<prefix>released@db<n>:<key>``, so
        only the processes that follow the key receive it. One pub/sub connection per entered
        context, opened at the first key followed. Notifications only make waiters wake
        sooner: where the server refuses a subscription, or while its connection is down, a
        warning is logged and waiters rely on their retries.
        """
        client = self._client or self._connected()
        follower = RedisReleaseFollower(client, self._channel + ":", on_release, repr(self))
        try:
            yield follower
        finally:
            await follower.aclose()

    @asynccontextmanager
    async def follow_releases_in_turn(
        self, on_release: Callable[[str], None]
    ) -> AsyncIterator[ReleaseFollower]:
        """As :meth:`follow_releases`, but hear a release only when it is this follower's turn.

        While it follows a key, the follower stands in the key's queue (in the order followers
        came, across processes); a release names the first one still alive, and only that one
        calls ``on_release``. A follower whose process died stops being alive within
        3 s and loses its turn. Where the server refuses the queue, a warning is logged and the
        follower hears every release of the keys it follows.
        """
        client = self._client or self._connected()
        queue = ReleaseQueue(client, self._prefix, self._followers_key, repr(self))
        follower = RedisReleaseFollower(
            client, self._channel + ":", on_release, repr(self), queue=queue
        )
        self._in_turn.add(follower)
        try:
            yield follower
        finally:
            self._in_turn.discard(follower)
            await follower.aclose()

    @asynccontextmanager
    async def wait_in_line(self, on_grant: Callable[[Grant], None]) -> AsyncIterator[WaitingLine]:
        """Wait in keys' lines while entered; ``on_grant`` hears each grant on this loop.

        A release hands the key to the first live place of its line in the same script, and
        publishes the grant on this line's own channel, so only the process that waits hears
        it. One pub/sub connection per entered context, opened at the first queue call and
        kept, outside the client's pool (it does not count against ``max_connections``);
        while the server refuses it or is away, a warning is logged and a waiter learns of its
        grant from its next queue call (every second).
        """
        endpoint, stall_s = self._own_connections()
        line = RedisWaitingLine(
            endpoint,
            alive_s=stall_s,
            grant_prefix=self._grant_prefix,
            run=self._run,
            release_args=self._release_args,
            on_grant=on_grant,
            store=repr(self),
            min_replicas=self._replication.replicas,
            run_replicated=self._run_replicated,
        )
        try:
            yield line
        finally:
            await line.aclose()

    def __repr__(self) -> str:
        """Show the server and the prefix; never a password."""
        return f"RedisLockStore({self._server}, prefix={self._prefix!r})"


def _require_driver() -> None:
    if not _HAVE_DRIVER:
        raise LocksConfigurationError(
            "RedisLockStore needs redis-py 5.0.1 or later and hiredis 3.2 or later; "
            "install them with: pip install 'leaselock[redis]'"
        )


def _describe(pool: redis.asyncio.ConnectionPool) -> str:
    """Describe where a pool connects, for logs: host, port, db, or socket path; no secrets."""
    kwargs = pool.connection_kwargs
    db = kwargs.get("db", 0)
    if kwargs.get("path"):
        return f"path={kwargs['path']!r}, db={db}"
    if "host" in kwargs:
        return f"host={kwargs['host']!r}, port={kwargs.get('port', 6379)}, db={db}"
    # a Sentinel pool finds its primary at connection time
    return f"{type(pool).__name__}, db={db}"


def _database(connection_kwargs: Mapping[str, object]) -> int:
    """The database number a client's connections select (0 unless told otherwise)."""
    database = connection_kwargs.get("db", 0)
    return int(database) if isinstance(database, int | str) else 0
