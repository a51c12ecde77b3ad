"""RedisClusterLockStore: locks on a Redis Cluster, each key's lock and token counter in one slot.

A cluster runs a script only on keys of one hash slot, so every key gets a counter of its own,
kept next to its lock by a hash tag (the part in braces decides the slot):

- ``<prefix>lock:{<tag>}<key>``: the lock, holding its owner, with ``PX`` expiry measured by the
  master of its slot;
- ``<prefix>fencing-token:{<tag>}<key>``: the key's own counter, incremented by each acquisition
  and never deleted, so the key's tokens only grow;
- ``<prefix>fencing-source:{<tag>}<key>``: the replication id of the master that drew the key's
  last token, in the counter's slot; a master with another id (the replica promoted when its
  master failed) first moves the counter up by ``2**32``, so the key's tokens never go back
  across a failover;
- channel ``<prefix>released:<key>``: a release publishes its key there; a cluster forwards a
  publish to every node, so a follower subscribed on any node hears it;
- ``<prefix>runs``: one hash of job run records (one key, one slot);
- ``<prefix>job-documents``: one hash of the documents job control keeps (one field per pause
  target and per job with something to say), so each call on them is one slot.

``<tag>`` is 16 hex digits of a BLAKE2b digest of the key: a key may hold any characters,
braces included, without moving its lock and counter apart. Locks of different keys spread
over the cluster's masters.

Talks to the cluster through ``redis.asyncio.RedisCluster`` (redis-py 5 or later); tested against
three Redis 6.2 masters started by the tests.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, cast, final

from ..._errors import LocksConfigurationError, LockStoreError
from .._common._capabilities import JobRecord, LockInfo, RunRecord
from .._common._job_documents import JobControlOnDocuments
from .._common._protocol import Acquired, AcquireResult, NotAcquired, ReleaseFollower, Renewal
from ..redis._follower import RedisReleaseFollower
from ..redis._keyspace import delete_prefixed, glob_escaped, lock_info, text
from ..redis._runs import RECORD_RUN, read_job_records, record_run_args
from ..redis._scripts import Script, script
from ..redis._settings import DEFAULT_PREFIX, DEFAULT_SOCKET_TIMEOUTS, check_options, check_prefix
from ..redis._store import ACQUIRE, RENEW
from ..redis._tokens import SOURCE_NAME
from ._documents import DOCUMENTS_SEGMENT, DOCUMENTS_UNDER, SWAP_DOCUMENT, documents_of, swap_args

try:
    import redis.asyncio
    import redis.exceptions
    from redis.asyncio.cluster import RedisCluster
    from redis.exceptions import NoScriptError
except ImportError:  # the extra is not installed: constructing the store says which to install
    _HAVE_DRIVER = False
else:
    _HAVE_DRIVER = True

__all__ = ["RedisClusterLockStore"]

_log = logging.getLogger("leaselock.stores.redis")

LOCKS_SEGMENT: Final = "lock:"
COUNTER_SEGMENT: Final = "fencing-token:"
SOURCE_SEGMENT: Final = SOURCE_NAME + ":"
CHANNEL_SEGMENT: Final = "released:"
TAG_BYTES: Final = 8
# redis-py's default connections per node
DEFAULT_MAX_CONNECTIONS: Final = 100
SCAN_BATCH: Final = 1000

RELEASE: Final = script(
    "release",
    """
-- KEYS[1] = lock key
-- ARGV[1] = owner, ARGV[2] = release channel, ARGV[3] = the caller's key (the message)
-- -> 1 if owner held the live lock (now deleted, release announced), else 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0
""",
)

BREAK_LOCK: Final = script(
    "break_lock",
    """
-- KEYS[1] = lock key
-- ARGV[1] = release channel, ARGV[2] = the caller's key (the message)
-- -> {owner, ms left} of the live lock now deleted (release announced), else false
local owner = redis.call('GET', KEYS[1])
if not owner then
  return false
end
local left = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], ARGV[2])
return {owner, left}
""",
)

READ_LOCK: Final = script(
    "read_lock",
    """
-- KEYS[1] = lock key, KEYS[2] = its fencing-token counter
-- -> {owner or false, ms left, the key's last token or false}, read in one atomic step: the
--    token is the holder's, since only an acquisition increments the counter
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
""",
)

_SCRIPTS: Final = (
    ACQUIRE,
    RENEW,
    RELEASE,
    BREAK_LOCK,
    READ_LOCK,
    RECORD_RUN,
    SWAP_DOCUMENT,
    DOCUMENTS_UNDER,
)


@final
class RedisClusterLockStore(JobControlOnDocuments):
    """Locks on a Redis Cluster (or Valkey cluster): per-key slots, per-key fencing tokens.

    Each method is one Lua script on the master of the key's slot, so the owner check and the
    write are one atomic step there, and expiry is measured by that master's clock. Each key's
    tokens come from its own counter in its lock's slot: they grow strictly **as long as the
    counter never goes back**. Replication is asynchronous: a master that fails over before
    its replica received the latest acquisition gives the replica an older counter and, for a
    moment, no lock, so the next acquisition can repeat a token and two holders can overlap
    until the first one's lease runs out. Fencing that must survive a failover belongs in
    :class:`~leaselock.stores.PostgresLockStore`; see ``docs/stores/redis.md``.

    Renewals due together take one pipelined round trip per master (:meth:`renew_many`);
    releases are published, so waiters in other processes wake at once
    (:meth:`follow_releases`). Job control (pauses, ``run_now``, overlap policies, abandoned
    runs, catch-up) comes from ``JobControlOnDocuments`` (written once for every store), over
    the run lock's :meth:`acquire` and the documents of one hash: a run lock and its job's
    documents sit in different slots, so a start is a few round trips instead of one script.

    Example::

        store = RedisClusterLockStore.from_url("redis://node-1.redis.internal:6379")
        async with Locks(store=store) as locks: ...

    .. versionadded:: 0.3
    """

    __slots__ = (
        "_calls",
        "_channel",
        "_client",
        "_documents_key",
        "_opens",
        "_options",
        "_prefix",
        "_runs_key",
        "_url",
    )

    def __init__(self, client: RedisCluster, *, prefix: str = DEFAULT_PREFIX) -> None:
        """Keep locks through ``client``, which stays yours: the store never closes it.

        Args:
            client: a ``redis.asyncio.RedisCluster``, bound to the event loop the locks run
                on; :meth:`from_url` creates its client at :meth:`open` instead.
            prefix: the start of every key and channel name this store uses; ends with ``:``
                and holds no brace (a brace would move a key's lock and counter apart).

        Raises:
            LocksConfigurationError: the driver is missing, ``client`` is not an async
                cluster client, or ``prefix`` is unusable.
        """
        _require_driver()
        if not isinstance(client, RedisCluster):
            raise LocksConfigurationError(
                f"client={client!r} is not a redis.asyncio.RedisCluster; pass "
                "redis.asyncio.RedisCluster(...), use RedisClusterLockStore.from_url(url), or, "
                "for a single server, RedisLockStore"
            )
        self._setup(prefix, client=client, url=None, options={})

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = DEFAULT_PREFIX, **options: object
    ) -> RedisClusterLockStore:
        """Create a store that owns its cluster client, made at :meth:`open` on the running loop.

        The client finds every master from the one node the URL names, and follows the
        cluster's slot moves and failovers. It is closed when the last :meth:`aclose` leaves.

        Args:
            url: ``redis://[[user]:[password]@]host[:port]`` or ``rediss://...`` (TLS): any
                node of the cluster.
            prefix: as for the constructor.
            **options: passed to ``redis.asyncio.RedisCluster.from_url``:
                ``max_connections`` (per node), ``socket_timeout``, ``decode_responses``,
                ``require_full_coverage``, TLS options, ...

        Raises:
            LocksConfigurationError: the driver is missing, or ``url``, ``options`` or
                ``prefix`` is unusable.
        """
        _require_driver()
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://")):
            raise LocksConfigurationError(
                f"url={url!r}; pass a str naming any node of the cluster, such as "
                '"redis://node-1.redis.internal:6379" (or "rediss://..." for TLS)'
            )
        check_options(options, "RedisClusterLockStore")
        options = {**DEFAULT_SOCKET_TIMEOUTS, **options}
        store = cls.__new__(cls)
        store._setup(prefix, client=None, url=url, options=options)  # noqa: SLF001 -- same class
        return store

    def _setup(
        self,
        prefix: str,
        *,
        client: RedisCluster | None,
        url: str | None,
        options: Mapping[str, object],
    ) -> None:
        check_prefix(prefix)
        if "{" in prefix or "}" in prefix:
            raise LocksConfigurationError(
                f"prefix={prefix!r} holds a brace; on a cluster the part in braces decides a "
                'key\'s slot. Pass a prefix without braces, such as "myapp:leaselock:"'
            )
        self._prefix = prefix
        self._channel = prefix + CHANNEL_SEGMENT
        self._runs_key = prefix + "runs"
        self._documents_key = prefix + DOCUMENTS_SEGMENT
        self._client = client
        self._url = url
        self._options = dict(options)
        self._opens = 0
        # a cluster client fails a command when a node's pool is full, where the single-server
        # store's pool makes it wait: no more calls in flight than one node has connections
        connections = (
            options.get("max_connections", DEFAULT_MAX_CONNECTIONS)
            if client is None
            else client.get_connection_kwargs().get("max_connections", DEFAULT_MAX_CONNECTIONS)
        )
        self._calls = asyncio.Semaphore(int(cast("int", connections)))

    # --- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, find the cluster's masters, and load the scripts on each.

        Reference-counted: every :meth:`open` is undone by one :meth:`aclose`.

        Raises:
            LockStoreError: no node could be reached, or a master refused the scripts.
        """
        client = self._connected()
        self._opens += 1
        if self._opens > 1:
            return
        try:
            await self._load_scripts(client)
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Undo one :meth:`open`; the last one closes the client that :meth:`from_url` made."""
        if self._opens == 0:
            return
        self._opens -= 1
        if self._opens == 0 and self._url is not None and self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    def _connected(self) -> RedisCluster:
        client = self._client
        if client is None:
            # no await between the check and the assignment: concurrent first calls share it
            assert self._url is not None  # noqa: S101 -- only from_url leaves the client unset
            client = self._client = RedisCluster.from_url(self._url, **self._options)
        return client

    async def _load_scripts(self, client: RedisCluster) -> None:
        try:
            for lua in _SCRIPTS:
                # SCRIPT LOAD goes to every master: each may run any of them
                await client.script_load(lua.source)
        except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as error:
            raise LockStoreError(
                f"{self!r} could not load its scripts on the cluster: "
                f"{type(error).__name__}: {error}. Check that the nodes run, that the URL, "
                "password and TLS options are right, and that SCRIPT LOAD and EVALSHA are allowed"
            ) from error

    # --- the store contract --------------------------------------------------------------------

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        """Take ``key`` for ``owner`` for ``ttl_ms`` if no live lock holds it; one round trip."""
        reply = await self._run(
            ACQUIRE,
            [self._lock_key(key), self._counter_key(key), self._source_key(key)],
            owner,
            ttl_ms,
        )
        if isinstance(reply, int):
            return Acquired(reply)
        return NotAcquired(holder=None if reply is None else text(reply))

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Move the expiry to ``ttl_ms`` from now if ``owner`` holds a live lock on ``key``."""
        renewed: int = await self._run(RENEW, [self._lock_key(key)], owner, ttl_ms)
        return renewed == 1

    async def release(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` holds a live lock on it, and announce the release."""
        released: int = await self._run(
            RELEASE, [self._lock_key(key)], owner, self._channel + key, key
        )
        return released == 1

    async def renew_many(self, renewals: Sequence[Renewal]) -> Sequence[bool]:
        """Renew each lease as :meth:`renew` would: one pipelined round trip per master.

        The renewals are sent as one pipeline, which the client splits by master and sends to
        all of them at once; each renewal stays one atomic script on its slot.

        Raises:
            the first error a master answered, after renewals refused for an unknown script
            (a failover, a restart) were sent again with the script loaded.
        """
        if not renewals:
            return []
        client = self._client or self._connected()
        answers = await self._renew_pipelined(client, renewals)
        unknown = [n for n, answer in enumerate(answers) if isinstance(answer, NoScriptError)]
        if unknown:
            await client.script_load(RENEW.source)
            again = await self._renew_pipelined(client, [renewals[n] for n in unknown])
            for n, answer in zip(unknown, again, strict=True):
                answers[n] = answer
        for answer in answers:
            if isinstance(answer, Exception):
                raise answer
        return [answer == 1 for answer in answers]

    async def _renew_pipelined(
        self, client: RedisCluster, renewals: Sequence[Renewal]
    ) -> list[object]:
        """Send :data:`RENEW` for each renewal in one pipeline; answers or errors, in order."""
        pipe = client.pipeline()
        for renewal in renewals:
            # the method evalsha is barred from cluster pipelines; the command routes by its key
            pipe.execute_command(
                "EVALSHA", RENEW.sha, 1, self._lock_key(renewal.key), renewal.owner, renewal.ttl_ms
            )
        async with self._calls:
            answers: list[object] = await pipe.execute(raise_on_error=False)
        return answers

    async def _run(self, script: Script, keys: Sequence[str], *args: str | int) -> Any:  # noqa: ANN401 -- a reply's type is its script's
        """Run ``script`` by its SHA; load it everywhere if a master does not know it (NOSCRIPT)."""
        client = self._client or self._connected()
        async with self._calls:
            try:
                return await client.evalsha(script.sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                # a failover to a replica, a restart or SCRIPT FLUSH emptied a script cache
                await client.script_load(script.source)
                return await client.evalsha(script.sha, len(keys), *keys, *args)

    # --- run records and inspection ------------------------------------------------------------

    async def record_run(self, run: RunRecord) -> None:
        """Keep ``run`` as its job's last run, and its last success if it went well; one trip."""
        await self._run(RECORD_RUN, [self._runs_key], *record_run_args(run))

    async def job_records(self, jobs: Sequence[str] | None = None) -> list[JobRecord]:
        """Return the records of ``jobs`` (every job when ``None``) that have one, by job key."""
        client = self._client or self._connected()
        # a run's start reads these beside its documents: counted with the other calls in flight
        async with self._calls:
            return await read_job_records(client, self._runs_key, jobs)

    # --- job documents (job control) -----------------------------------------------------------

    async def read_documents(self, names: Sequence[str]) -> list[str | None]:
        """Return the document of each name in ``names``, in order, ``None`` where there is none.

        One ``HMGET`` on the documents hash.
        """
        if not names:
            return []
        client = self._client or self._connected()
        async with self._calls:
            values = await client.hmget(self._documents_key, list(names))
        return [None if value is None else text(value) for value in values]

    async def documents_under(self, prefix: str) -> dict[str, str]:
        """Return every document whose name starts with ``prefix``, by name; one script."""
        reply = await self._run(DOCUMENTS_UNDER, [self._documents_key], prefix)
        return documents_of(reply)

    async def swap_document(self, name: str, expected: str | None, document: str | None) -> bool:
        """Make ``document`` the one under ``name`` (``None``: remove it) if ``expected`` is.

        One script on the documents hash compares and writes in one atomic step; it answers
        whether it wrote (``expected`` ``None``: only where there was no document).
        """
        swapped: int = await self._run(
            SWAP_DOCUMENT, [self._documents_key], *swap_args(name, expected, document)
        )
        return swapped == 1

    async def store_time_ms(self) -> int:
        """Return the server's wall clock now (``TIME`` on one node), in epoch milliseconds.

        The clock its keys' expiries are measured on; one round trip.
        """
        client = self._client or self._connected()
        seconds, microseconds = await client.time()
        return int(seconds) * 1000 + int(microseconds) // 1000

    async def read_lock(self, key: str) -> LockInfo | None:
        """Return ``key``'s lock with its last token, or ``None`` if it never had one."""
        reply = await self._run(READ_LOCK, [self._lock_key(key), self._counter_key(key)])
        owner, left, token = reply
        if owner is None and token is None:
            return None
        last = None if token is None else int(token)
        return lock_info(key, owner, left, last) or LockInfo(key, None, last, None)

    async def list_locks(self, prefix: str = "", limit: int = 1000) -> list[LockInfo]:
        """Return up to ``limit`` live locks whose key starts with ``prefix``, by key.

        Walks every master's keyspace with ``SCAN`` (never ``KEYS``): for operators, not hot
        paths.
        """
        client = self._client or self._connected()
        locks_start = self._prefix + LOCKS_SEGMENT + "{"
        keys: set[str] = set()
        async for name in client.scan_iter(match=glob_escaped(locks_start) + "*", count=SCAN_BATCH):
            key = text(name)[len(locks_start) + 2 * TAG_BYTES + 1 :]
            if key.startswith(prefix):
                keys.add(key)
        found: list[LockInfo] = []
        for key in sorted(keys):
            info = await self.read_lock(key)
            if info is not None and info.live:
                found.append(info)
                if len(found) == limit:
                    break
        return found

    async def discard_prefix(self) -> int:
        """Delete every key under this store's prefix; return how many went.

        For a prefix of one's own that nothing uses again (``leaselock check``'s). Never on a
        prefix an application uses: its fencing counter would start over, and a paused holder's
        stale token could be handed out again.
        """
        return await delete_prefixed(self._client or self._connected(), self._prefix)

    async def break_lock(self, key: str) -> LockInfo | None:
        """Free ``key`` whoever holds it (announced to waiters); return what held it, if any."""
        reply = await self._run(BREAK_LOCK, [self._lock_key(key)], self._channel + key, key)
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

        One pub/sub connection per entered context, to one node (the cluster client's default
        node), opened at the first key followed: a cluster forwards every publish to every
        node. Notifications only make waiters wake sooner: while that node is unreachable,
        waiters rely on their retries.
        """
        node = (self._client or self._connected()).get_default_node()
        # a client of that one node, with its settings: a node subscribes as any server does,
        # and redis-py's cluster client has no pubsub() before 8.0, which the extra allows
        node_client = redis.asyncio.Redis(
            connection_pool=redis.asyncio.ConnectionPool(
                connection_class=node.connection_class, **node.connection_kwargs
            )
        )
        follower = RedisReleaseFollower(node_client, self._channel, on_release, repr(self))
        try:
            yield follower
        finally:
            await follower.aclose()
            await node_client.aclose()

    # --- keys ------------------------------------------------------------------------------------

    def _lock_key(self, key: str) -> str:
        return f"{self._prefix}{LOCKS_SEGMENT}{{{_tag(key)}}}{key}"

    def _counter_key(self, key: str) -> str:
        return f"{self._prefix}{COUNTER_SEGMENT}{{{_tag(key)}}}{key}"

    def _source_key(self, key: str) -> str:
        return f"{self._prefix}{SOURCE_SEGMENT}{{{_tag(key)}}}{key}"

    def __repr__(self) -> str:
        """Show where the cluster was found and the prefix; never a password."""
        where = "a client" if self._url is None else self._url.partition("@")[2] or self._url
        return f"RedisClusterLockStore({where}, prefix={self._prefix!r})"


def _tag(key: str) -> str:
    """The hash tag of ``key``: its lock and its counter share it, hence one slot."""
    return hashlib.blake2b(key.encode(), digest_size=TAG_BYTES).hexdigest()


def _require_driver() -> None:
    if not _HAVE_DRIVER:
        raise LocksConfigurationError(
            "RedisClusterLockStore needs the redis package (redis-py 5 or later); "
            "install it with: pip install 'leaselock[redis]'"
        )
