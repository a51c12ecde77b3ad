"""EtcdLockStore: locks as etcd v3 keys under shared leases, fencing tokens from etcd's revisions.

A lock is the key ``<prefix>locks/<key>``, whose value is its owner, put under an etcd lease:
when the lease expires, etcd deletes the key. Locks of one ttl share a lease, so one keep-alive
renews them all (``_etcd_leases`` says how each lock still expires on its own). An acquire is
one transaction that creates the key only if it does not exist; its revision is the token.
A watch of a key's deletions wakes the waiters on it at once. Job run records are keys of
their own under ``<prefix>runs/`` (``_etcd_runs`` says how one transaction keeps the newer run);
job control's pauses and job states are keys under ``<prefix>jobs/`` (``_documents``).

Talks to etcd 3.4 or later through etcd's own gRPC JSON gateway (``POST /v3/...`` on the client
URL) with httpx: no gRPC stack, and nothing between leaselock and etcd but an HTTP client.
Given several members, a call moves to the next one when a member dies, loses its leader or
holds the call (``_etcd_gateway`` says when a call may be sent again, and when not).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, final
from urllib.parse import urlsplit

from ..._durations import Duration, parse_ttl
from ..._errors import LocksConfigurationError, LockStoreError
from ..._redact import redact_secrets
from .._common._capabilities import JobRecord, LockInfo, RunRecord
from .._common._job_documents import JobControlOnDocuments
from .._common._protocol import (
    MAX_FENCING_TOKEN,
    Acquired,
    AcquireResult,
    NotAcquired,
    ReleaseFollower,
    Renewal,
)
from ._documents import JOBS_SEGMENT, documents_under, read_documents, swap_txn
from ._follower import EtcdReleaseFollower
from ._gateway import (
    EtcdGateway,
    LeaseGoneError,
    as_int,
    decoded,
    encoded,
    encoded_bytes,
    prefix_end,
)
from ._leases import Cohort, LeaseBook, lease_seconds
from ._requests import MAX_CHECKS, MAX_MOVES, acquire_txn, held_txn, move_txn, release_txn
from ._runs import RUNS_SEGMENT, read_job_records, record_run_txn

try:
    import httpx
except ImportError:  # the extra is not installed: constructing the store says which to install
    _HAVE_DRIVER = False
else:
    _HAVE_DRIVER = True

__all__ = ["EtcdLockStore"]

DEFAULT_ENDPOINT: Final = "http://127.0.0.1:2379"
DEFAULT_PREFIX: Final = "leaselock/"
DEFAULT_TIMEOUT: Final = "5s"
LOCKS_SEGMENT: Final = "locks/"
MAX_PREFIX_LENGTH: Final = 100
URL_SCHEMES: Final = {"etcd": "http", "etcd+http": "http", "etcd+https": "https"}
# every gateway path this store calls exists from etcd 3.4 on (3.3 served /v3beta)
_MIN_VERSION: Final = (3, 4)
# an owned client keeps this many idle connections: enough for 32 racing callers
_KEEPALIVE_CONNECTIONS: Final = 64


@final
class EtcdLockStore(JobControlOnDocuments):
    """Locks in etcd v3: a key per lock under a shared lease, tokens from etcd's revisions.

    - **acquire** is one transaction: create ``<prefix>locks/<key>`` (value: the owner) under
      the lease of its ttl if the key does not exist, else read its owner. The token is the
      revision of that write (the key's ``create_revision``): etcd's revision grows with every
      write of the cluster, in raft order, so it is greater than every token the key had.
    - **renew** keeps the lease alive (one keep-alive for every lock under it) when every lock
      under the lease is renewed in that call and etcd confirms each is its owner's; other
      renewals move their key (owner-checked) to a lease already confirmed to outlive the
      renewal. A lock whose holder stops renewing expires with its lease.
    - **release** deletes the key if the owner holds it: one transaction.
    - a watch of a key's deletions (release, break, expiry) wakes waiters at once
      (:meth:`follow_releases`).
    - job run records are keys with no lease, ``<prefix>runs/last/<job>`` and
      ``<prefix>runs/success/<job>`` (:meth:`record_run`).
    - job control (pauses, open runs, overlap policies, failure streaks, missed ticks) is
      written once above the stores (``JobControlOnDocuments``), over documents that are keys
      with no lease, ``<prefix>jobs/pause:<target>`` and ``<prefix>jobs/job:<key>``, each
      changed by one transaction that compares it with what was read
      (:meth:`swap_document`).

    **Expiry precision.** etcd leases last whole seconds, and etcd deletes an expired lease's
    keys within about 500 ms: a lock lives from its ttl rounded up to a second, to that plus
    half a second, and a lock that shared its lease with one taken up to 200 ms later lives
    that much longer. Never shorter than asked, so exclusion holds; etcd's minimum lease (2 s
    with the default ``--election-timeout``) raises shorter ttls. Use ttls of seconds.

    Example::

        store = EtcdLockStore("http://etcd-1:2379")
        async with Locks(store=store, ttl="30s") as locks: ...

    Args:
        endpoints: the client URL (``http(s)://host:port``) of one or more members of the
            cluster. A call goes to the member that answered last, and moves to the next one
            when that one is down, has no leader, or does not answer: a leader's death or a
            member cut off from the others costs an election (about a second with etcd's
            defaults), not the lock (``docs/stores/etcd.md`` says what is promised).
        client: an ``httpx.AsyncClient`` of the application (TLS settings, client
            certificates); it stays the application's: the store never closes it. Without
            one, the store makes its own at :meth:`open`, on the loop that opens it, and
            closes it at the last :meth:`aclose`.
        prefix: the start of every key this store writes; ends with ``/``, and has no
            ``locks``, ``runs`` or ``jobs`` segment. Stores with different prefixes never see
            each other's locks, runs or job documents.
        timeout: the bound of every call to etcd, all its attempts on every member
            included; an attempt that may be resent gets a third of it. The engine bounds its
            calls too.

    Raises:
        LocksConfigurationError: httpx is missing, or an argument is unusable.

    .. versionadded:: 0.3
    """

    __slots__ = (
        "_book",
        "_client",
        "_endpoints",
        "_gateway",
        "_granting",
        "_jobs_prefix",
        "_key_prefix",
        "_opens",
        "_owns_client",
        "_prefix",
        "_runs_prefix",
        "_timeout_s",
    )

    def __init__(
        self,
        endpoints: str | Sequence[str] = DEFAULT_ENDPOINT,
        *,
        client: httpx.AsyncClient | None = None,
        prefix: str = DEFAULT_PREFIX,
        timeout: Duration = DEFAULT_TIMEOUT,
    ) -> None:
        """Keep locks in the etcd cluster at ``endpoints``."""
        _require_driver()
        self._endpoints = _checked_endpoints(endpoints)
        if client is not None and not isinstance(client, httpx.AsyncClient):
            raise LocksConfigurationError(
                f"client={client!r} is not an httpx.AsyncClient; pass httpx.AsyncClient(...) "
                "(not the blocking httpx.Client), or leave it out and the store makes its own"
            )
        _check_prefix(prefix)
        self._timeout_s = parse_ttl(timeout, name="timeout") / 1000
        self._prefix = prefix
        self._key_prefix = prefix + LOCKS_SEGMENT
        self._runs_prefix = prefix + RUNS_SEGMENT
        self._jobs_prefix = prefix + JOBS_SEGMENT
        self._client = client
        self._owns_client = client is None
        self._gateway: EtcdGateway | None = None
        self._opens = 0
        self._book = LeaseBook()
        # per lease class: a grant in flight, and when it was started
        self._granting: dict[int, tuple[float, asyncio.Task[Cohort]]] = {}

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = DEFAULT_PREFIX, timeout: Duration = DEFAULT_TIMEOUT
    ) -> EtcdLockStore:
        """Create a store from ``etcd://host:2379`` (several members: ``etcd://h1:2379,h2:2379``).

        ``etcd://`` and ``etcd+http://`` talk plain HTTP, ``etcd+https://`` TLS (with the
        system's certificate authorities; pass a ``client`` to the constructor for more).

        Raises:
            LocksConfigurationError: httpx is missing, or the URL or an argument is unusable.

        .. versionadded:: 0.3
        """
        _require_driver()
        if not isinstance(url, str):
            raise LocksConfigurationError(
                f'url={url!r} is a {type(url).__name__}; pass a str such as "etcd://etcd:2379"'
            )
        scheme, _, rest = url.partition("://")
        hosts = rest.rstrip("/")
        if scheme not in URL_SCHEMES or not hosts or "/" in hosts or "@" in hosts:
            raise LocksConfigurationError(
                f"url={redact_secrets(url)!r}; pass etcd://host:2379 (several members separated "
                "by commas; etcd+https:// for TLS), with no path and no user"
            )
        endpoints = [f"{URL_SCHEMES[scheme]}://{host}" for host in hosts.split(",")]
        return cls(endpoints, prefix=prefix, timeout=timeout)

    # --- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and check that the server is etcd 3.4 or later; reference-counted.

        Raises:
            LockStoreError: no member could be reached, or it is not etcd 3.4 or later.
        """
        self._opens += 1
        if self._opens > 1:
            return
        try:
            await self._check_server()
        except BaseException:
            await self.aclose()
            raise

    async def _check_server(self) -> None:
        status = await self._ready().call("maintenance/status", {})
        version = str(status.get("version", ""))
        if _version(version) < _MIN_VERSION:
            raise LockStoreError(
                f"{self!r}: the server is etcd {version or '(unknown version)'}; "
                "EtcdLockStore needs etcd 3.4 or later (its /v3 gateway paths)"
            )

    async def aclose(self) -> None:
        """Undo one :meth:`open`; the last one closes the client the store made."""
        if self._opens == 0:
            return
        self._opens -= 1
        if self._opens > 0:
            return
        self._gateway = None
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    def _ready(self) -> EtcdGateway:
        """Return the gateway; a store without a client of its own makes it now, on this loop."""
        gateway = self._gateway
        if gateway is None:
            client = self._client
            if client is None:
                client = self._client = httpx.AsyncClient(
                    timeout=self._timeout_s,
                    limits=httpx.Limits(max_keepalive_connections=_KEEPALIVE_CONNECTIONS),
                    # proxies from the environment are for the application's own traffic
                    trust_env=False,
                )
            gateway = self._gateway = EtcdGateway(
                client, self._endpoints, self._timeout_s, repr(self)
            )
        return gateway

    # --- the store contract --------------------------------------------------------------------

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        """Take ``key`` for ``owner`` for ``ttl_ms`` if no live lock holds it.

        One transaction, under a lease that etcd confirmed a moment before (the lock's ttl
        then counts from that confirmation, and the answer's ``lease_age_ms`` says how much
        earlier), else with a keep-alive of that lease sent beside it (answered in about one
        round trip, not two; a refused attempt's keep-alive only renews the lease's young keys
        early, and is waited for too), or a lease grant before it. A transaction whose answer
        was lost (its member died, or held it for a leader that died) is sent again to the next
        member; if the first had been applied, the second finds the key held by this very
        owner, and the acquire answers the token the first created.
        """
        gateway = self._ready()
        loop = asyncio.get_running_loop()
        for _ in range(2):
            since = loop.time()
            cohort = await self._cohort(lease_seconds(ttl_ms), since)
            # a lease confirmed a moment ago: the lock counts its ttl from that confirmation;
            # else a keep-alive sent now makes the lease last its ttl from the acquire's start
            # on, as one sent once the key joined would: the key joins a young lease, whose
            # keys it may renew
            age_s = cohort.age_at_join(since, ttl_ms)
            refreshing = None if age_s is not None else self._refreshing(cohort, since)
            put = self._book.putting(cohort, key, owner)
            try:
                answer, resent = await gateway.resent_call(
                    "kv/txn", acquire_txn(self._key_prefix + key, owner, cohort.lease_id)
                )
            except LeaseGoneError:
                await _settled(refreshing)
                self._book.forget(cohort)
                continue
            except BaseException as failure:
                # the put may still be applied: no new key joins a lease with one in doubt,
                # so the doubt leaves with the lease
                self._book.close(cohort)
                if isinstance(failure, Exception):
                    await _settled(refreshing)
                raise
            if answer.get("succeeded"):
                token = self._token(answer)
            else:
                kv = _ranged(answer)
                if kv is None or not (resent and _written_by(kv, owner, cohort.lease_id)):
                    self._book.refused(cohort, key, put)
                    # its keep-alive is answered too: no call of this acquire outlives it
                    await _settled(refreshing)
                    return NotAcquired(holder=None if kv is None else decoded(kv.get("value")))
                # the gateway sent the txn again after an attempt whose answer was lost, and
                # that attempt had been applied (the engine's owners are fresh for every
                # acquire, but a caller asking twice is refused: hence `resent`): the key is
                # this call's, and its token the revision that created it
                token = self._checked_token(as_int(kv.get("create_revision")))
            self._book.applied(put)
            self._book.joined(cohort, key, owner, loop.time())
            if refreshing is None:
                return Acquired(token, math.ceil((age_s or 0.0) * 1000))
            if await asyncio.shield(refreshing):
                return Acquired(token)
            # the lease expired between the put and its keep-alive, and took the key along
        raise LockStoreError(
            f"{self!r}: the lease of a new lock on {key!r} expired twice before its keep-alive; "
            "the server or the network is too slow for its ttl: check the load, or raise ttl"
        )

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Move the expiry to ``ttl_ms`` from now if ``owner`` holds a live lock on ``key``."""
        (renewed,) = await self.renew_many([Renewal(key, owner, ttl_ms)])
        return renewed

    async def release(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` holds a live lock on it; the deletion wakes its watchers.

        An attempt whose answer was lost is sent again: if it had freed the key, the second
        answers ``False``, as for a lock that had expired, never a ``True`` it cannot prove.
        """
        sent_at_step = self._book.step()
        answer = await self._ready().call("kv/txn", release_txn(self._key_prefix + key, owner))
        self._book.left(key, owner)
        self._book.absent(key, owner, sent_at_step)
        return bool(answer.get("succeeded"))

    async def renew_many(self, renewals: Sequence[Renewal]) -> Sequence[bool]:
        """Renew each lease as :meth:`renew` would.

        Per lease class (ttl in whole seconds): where every lock under one lease is renewed
        here, etcd is asked for the keys under that lease (one call; one more per 64 locks
        whose key another owner of this store may have put there too), then the lease is kept
        alive (one call). The other renewals move their key, owner-checked, to a lease
        etcd confirmed after this call began: that one once kept alive, or a new one (one
        transaction per 127 keys, once). A renewal answers ``True`` only once etcd confirmed
        that its key lives ``ttl_ms`` from the call's start or longer.
        """
        if not renewals:
            return []
        loop = asyncio.get_running_loop()
        since = loop.time()
        self._book.forget_expired(since)
        answers = [False] * len(renewals)
        classes: dict[int, list[int]] = {}
        for index, renewal in enumerate(renewals):
            classes.setdefault(lease_seconds(renewal.ttl_ms), []).append(index)
        for seconds, indexes in classes.items():
            await self._renew_class(renewals, indexes, seconds, since, answers)
        return answers

    async def _renew_class(
        self,
        renewals: Sequence[Renewal],
        indexes: Sequence[int],
        seconds: int,
        since: float,
        answers: list[bool],
    ) -> None:
        plan = self._book.plan(renewals, indexes, seconds)
        kept, move = None, list(plan.move)
        if plan.target is not None:
            moving, alive = await self._keep(plan.target, renewals, plan.keep, since, answers)
            move += moving
            if alive:
                kept = plan.target
        if move:
            await self._move(
                renewals, move, seconds=seconds, kept=kept, since=since, answers=answers
            )

    async def _keep(
        self,
        target: Cohort,
        renewals: Sequence[Renewal],
        keep: Sequence[int],
        since: float,
        answers: list[bool],
    ) -> tuple[list[int], bool]:
        """Keep ``target`` alive for its renewals; return those that move, and whether it was.

        etcd lists the keys under the lease (one call). A listed key is its renewal's owner's
        where every put of it under the lease the book knows of was that owner's, and none came
        or went while etcd listed it (``LeaseBook.sole_puts``); etcd checks the owner of every
        other renewal's key at the same time (one more call per 64). A renewal whose key is not
        there moves, owner-checked: a move whose answer was lost may have put it elsewhere, or
        it is gone (the move says which). A key under the lease that no renewal here holds (an
        acquire whose answer never came, another owner's key of the same name) must not be
        kept alive: then every renewal moves, and the lease is left to expire.
        """
        book = self._book
        sole = {i: book.sole_puts(target, renewals[i].key, renewals[i].owner) for i in keep}
        listing, held = await asyncio.gather(
            self._ready().call("lease/timetolive", {"ID": str(target.lease_id), "keys": True}),
            self._held(target, renewals, [i for i in keep if sole[i] is None]),
        )
        # TTL is the time left in whole seconds, rounded down: 0 still lives, -1 is gone
        if as_int(listing.get("TTL")) < 0:
            self._book.forget(target)
            return list(keep), False
        under = {decoded(raw) for raw in listing.get("keys", ())}
        listed = [i for i in keep if self._key_prefix + renewals[i].key in under]
        # a put of the key came or went while etcd listed the lease: etcd says whose it is
        late = [
            i
            for i in listed
            if sole[i] is not None and book.puts_of(target, renewals[i].key) is not sole[i]
        ]
        confirmed = set(held).union(await self._held(target, renewals, late) if late else ())
        confirmed.update(i for i in listed if sole[i] is not None and i not in late)
        present = [i for i in listed if i in confirmed]
        if len(under) != len(present):
            # a key no renewal here holds: no keep-alive may extend it
            self._book.close(target)
            return list(keep), False
        if not present or not await self._refreshed(target, since):
            return list(keep), False
        for index in present:
            answers[index] = True
        return sorted(set(keep).difference(present)), True

    async def _held(
        self, target: Cohort, renewals: Sequence[Renewal], keep: Sequence[int]
    ) -> list[int]:
        """Return the renewals whose owner holds the key under ``target``'s lease, per etcd."""
        gateway = self._ready()
        lease = str(target.lease_id)
        held: list[int] = []
        for start in range(0, len(keep), MAX_CHECKS):
            chunk = keep[start : start + MAX_CHECKS]
            holders = [(self._key_prefix + renewals[i].key, renewals[i].owner) for i in chunk]
            sent_at_step = self._book.step()
            answer = await gateway.call("kv/txn", held_txn(holders, target.lease_id))
            if answer.get("succeeded"):
                held += chunk
                continue
            for index, response in zip(chunk, answer.get("responses", ()), strict=True):
                kvs = response.get("response_range", {}).get("kvs") or []
                renewal = renewals[index]
                if not kvs or decoded(kvs[0].get("value")) != renewal.owner:
                    self._book.absent(renewal.key, renewal.owner, sent_at_step)
                elif str(as_int(kvs[0].get("lease"))) == lease:
                    held.append(index)
        return held

    async def _move(
        self,
        renewals: Sequence[Renewal],
        move: Sequence[int],
        *,
        seconds: int,
        kept: Cohort | None,
        since: float,
        answers: list[bool],
    ) -> None:
        """Put each moving renewal's key, owner-checked, under a lease confirmed since ``since``.

        That lease already outlives ``since`` plus the ttl, so nothing needs confirming after
        the move: a slow or lost answer leaves each key under a lease that keeps every
        promise made for it.
        """
        gateway = self._ready()
        loop = asyncio.get_running_loop()
        for _ in range(2):
            cohort = await self._destination(seconds, since, kept)
            moved: list[int] = []
            book = self._book
            try:
                for chunk in _chunks(renewals, move):
                    holders = [
                        (self._key_prefix + renewals[i].key, renewals[i].owner) for i in chunk
                    ]
                    puts = [book.putting(cohort, renewals[i].key, renewals[i].owner) for i in chunk]
                    sent_at_step = book.step()
                    answer = await gateway.call("kv/txn", move_txn(holders, cohort.lease_id))
                    responses = answer.get("responses", ())
                    for index, put, response in zip(chunk, puts, responses, strict=True):
                        renewal = renewals[index]
                        if response.get("response_txn", {}).get("succeeded"):
                            book.applied(put)
                            book.moved_away(cohort, renewal.key, renewal.owner, sent_at_step)
                            book.joined(cohort, renewal.key, renewal.owner, loop.time())
                            moved.append(index)
                        else:
                            book.refused(cohort, renewal.key, put)
                            book.absent(renewal.key, renewal.owner, sent_at_step)
                            book.left(renewal.key, renewal.owner)
            except LeaseGoneError:
                book.forget(cohort)
                kept = None
                continue
            except BaseException:
                # a move in doubt may still be applied: see acquire
                book.close(cohort)
                raise
            for index in moved:
                answers[index] = True
            return

    # --- leases --------------------------------------------------------------------------------

    async def _cohort(self, seconds: int, now: float) -> Cohort:
        """Return a lease of ``seconds`` that new keys may join: the open one, or a new one.

        Concurrent callers share one grant: the key is kept alive after it joins.
        """
        cohort = self._book.joinable(seconds, now)
        if cohort is not None:
            return cohort
        return await self._new_cohort(seconds, None)

    async def _destination(self, seconds: int, since: float, kept: Cohort | None) -> Cohort:
        """Return a lease of ``seconds`` that keys renewed at ``since`` may move onto.

        Only one that etcd confirmed, by a grant or keep-alive sent at ``since`` or later,
        to last ``seconds`` from then: ``kept`` (kept alive by this renewal), the open one, or
        a new one. Never one to keep alive after the move: its key would die with it, before
        the holder's deadline, if that keep-alive were slow or lost.
        """
        for cohort in (kept, self._book.open_cohort(seconds)):
            if cohort is not None and cohort.confirmed_since(since):
                return cohort
        return await self._new_cohort(seconds, since)

    async def _new_cohort(self, seconds: int, sent_after: float | None) -> Cohort:
        """Grant a lease of ``seconds``, or share a grant in flight sent after ``sent_after``."""
        loop = asyncio.get_running_loop()
        granting = self._granting.get(seconds)
        if granting is None or (sent_after is not None and granting[0] < sent_after):
            # the grant's own send time, taken in _grant, is this or later
            task = loop.create_task(self._grant(seconds))
            granting = self._granting[seconds] = (loop.time(), task)
            task.add_done_callback(lambda done: self._granted(seconds, done))
        return await asyncio.shield(granting[1])

    def _granted(self, seconds: int, done: asyncio.Task[Cohort]) -> None:
        granting = self._granting.get(seconds)
        if granting is not None and granting[1] is done:
            del self._granting[seconds]
        if not done.cancelled():
            done.exception()  # retrieved here too: every caller waiting on it may have left

    async def _grant(self, seconds: int) -> Cohort:
        loop = asyncio.get_running_loop()
        sent_at = loop.time()
        answer = await self._ready().call("lease/grant", {"TTL": seconds})
        granted_s = as_int(answer.get("TTL"))
        cohort = Cohort(as_int(answer.get("ID")), seconds, granted_s, sent_at, loop.time())
        self._book.granted(cohort)
        return cohort

    async def _refreshed(self, cohort: Cohort, since: float) -> bool:
        """Make the lease last its ttl from ``since`` on; ``False`` if it is gone.

        A grant or keep-alive sent at ``since`` or later already does; concurrent callers
        share one keep-alive.
        """
        refreshing = self._refreshing(cohort, since)
        return refreshing is None or await asyncio.shield(refreshing)

    def _refreshing(self, cohort: Cohort, since: float) -> asyncio.Future[bool] | None:
        """Return the keep-alive that makes the lease last its ttl from ``since`` on.

        Sent now, or shared with another caller's sent since then; ``None`` where a grant or
        keep-alive sent at ``since`` or later already did. It answers ``False`` if the lease
        is gone.
        """
        if cohort.sent_at >= since:
            return None
        pending = cohort.refreshing
        if pending is None or pending[0] < since:
            loop = asyncio.get_running_loop()
            sent_at = loop.time()
            task = loop.create_task(self._keep_alive(cohort, sent_at))
            task.add_done_callback(_retrieve)
            pending = cohort.refreshing = (sent_at, task)
        return pending[1]

    async def _keep_alive(self, cohort: Cohort, sent_at: float) -> bool:
        answer = await self._ready().call("lease/keepalive", {"ID": str(cohort.lease_id)})
        granted_s = as_int(answer.get("result", {}).get("TTL"))
        if granted_s <= 0:
            self._book.forget(cohort)
            return False
        cohort.refreshed(sent_at, asyncio.get_running_loop().time(), granted_s)
        return True

    # --- inspection ----------------------------------------------------------------------------

    async def read_lock(self, key: str) -> LockInfo | None:
        """Return ``key``'s live lock, or ``None``: etcd keeps no trace of a freed key.

        ``fencing_token`` is the key's ``create_revision``; ``expires_in_ms`` is its lease's
        time left, which etcd tells in whole seconds.
        """
        answer = await self._ready().call("kv/range", {"key": encoded(self._key_prefix + key)})
        kvs = answer.get("kvs") or []
        if not kvs:
            return None
        return (await self._lock_infos(kvs))[0]

    async def list_locks(self, prefix: str = "", limit: int = 1000) -> list[LockInfo]:
        """Return up to ``limit`` live locks whose key starts with ``prefix``, by key."""
        if limit <= 0:
            return []
        start = (self._key_prefix + prefix).encode()
        answer = await self._ready().call(
            "kv/range",
            {
                "key": encoded_bytes(start),
                "range_end": encoded_bytes(prefix_end(start)),
                "limit": str(limit),
            },
        )
        return await self._lock_infos(answer.get("kvs") or [])

    async def discard_prefix(self) -> int:
        """Delete every key under this store's prefix; return how many went.

        For a prefix of one's own that nothing uses again (``leaselock check``'s). Never on a
        prefix an application uses: its fencing counter would start over, and a paused holder's
        stale token could be handed out again.
        """
        start = self._prefix.encode()
        answer = await self._ready().call(
            "kv/deleterange",
            {"key": encoded_bytes(start), "range_end": encoded_bytes(prefix_end(start))},
            # sent again, it would answer fewer deletions than were made
            resend=False,
        )
        return int(answer.get("deleted", 0))

    async def break_lock(self, key: str) -> LockInfo | None:
        """Free ``key`` whoever holds it (its watchers hear it); return what held it, if any."""
        sent_at_step = self._book.step()
        answer = await self._ready().call(
            "kv/deleterange",
            {"key": encoded(self._key_prefix + key), "prev_kv": True},
            # sent again, it would answer that nothing held the key it had just freed
            resend=False,
        )
        # whoever held it, and whether its lease is still there: the key is gone
        self._book.gone(key)
        self._book.absent(key, None, sent_at_step)
        kvs = answer.get("prev_kvs") or []
        if not kvs:
            return None
        (info,) = await self._lock_infos(kvs)
        return info

    async def _lock_infos(self, kvs: Sequence[dict[str, Any]]) -> list[LockInfo]:
        leases = sorted({as_int(kv.get("lease")) for kv in kvs} - {0})
        left = await asyncio.gather(*(self._time_left_ms(lease) for lease in leases))
        time_left = dict(zip(leases, left, strict=True))
        infos = []
        for kv in kvs:
            name = decoded(kv.get("key"))
            expires_in_ms = time_left.get(as_int(kv.get("lease")))
            infos.append(
                LockInfo(
                    name.removeprefix(self._key_prefix),
                    decoded(kv.get("value")) if expires_in_ms != 0 else None,
                    self._checked_token(as_int(kv.get("create_revision"))),
                    expires_in_ms or None,
                )
            )
        return infos

    async def _time_left_ms(self, lease_id: int) -> int:
        """Return the lease's time left in ms (0: expired); at least 1 ms while it lives."""
        answer = await self._ready().call("lease/timetolive", {"ID": str(lease_id)})
        seconds = as_int(answer.get("TTL"))
        return 0 if seconds < 0 else max(seconds * 1000, 1)

    # --- run records ----------------------------------------------------------------------------

    async def record_run(self, run: RunRecord) -> None:
        """Keep ``run`` as its job's last run, and as its last success if it went well.

        Unless the run kept there started later, or in the same millisecond with a greater
        token. One transaction, so one round trip, whether or not other calls race it: each
        value starts with its run's order, and etcd puts each key only if it is absent or its
        value sorts below that order, comparing and writing in one step, in raft order.
        Racing calls cost nothing more: nothing is read first, nothing is retried, and the
        newest run stays whatever order they arrive in. Both keys are written whole, together.

        Raises:
            LockStoreError: etcd could not be reached or refused the write, or the run's token
                is outside 0..2**53-1.
        """
        await self._ready().call("kv/txn", record_run_txn(self._runs_prefix, run))

    async def job_records(self, jobs: Sequence[str] | None = None) -> list[JobRecord]:
        """Return the records of ``jobs`` (every job when ``None``), sorted by job key.

        Every job: one range read of ``<prefix>runs/``; given jobs: one transaction of range
        reads per 64 jobs.
        """
        return await read_job_records(self._ready(), self._runs_prefix, jobs)

    # --- job documents -------------------------------------------------------------------------

    async def read_documents(self, names: Sequence[str]) -> list[str | None]:
        """Return the job document of each name, in order; ``None`` where there is none.

        One transaction of range reads per 128 names (etcd's ``--max-txn-ops``), sent
        together: one round trip.

        Raises:
            LockStoreError: etcd could not be reached or refused the read.
        """
        if not names:
            return []
        return await read_documents(self._ready(), self._jobs_prefix, names)

    async def documents_under(self, prefix: str) -> dict[str, str]:
        """Return every job document whose name starts with ``prefix``, by name: one range read.

        Raises:
            LockStoreError: etcd could not be reached or refused the read.
        """
        return await documents_under(self._ready(), self._jobs_prefix, prefix)

    async def swap_document(self, name: str, expected: str | None, document: str | None) -> bool:
        """Make ``document`` the job document under ``name`` (``None``: remove it) if ``expected``.

        One transaction: etcd compares the key's value with ``expected`` (``None``: the key
        does not exist) and puts ``document`` (with no lease) or deletes the key in the same
        step. An attempt whose answer was lost is not sent again: applied, a second attempt
        would answer ``False`` for a swap that went through, and the caller would apply its
        change twice.

        Raises:
            LockStoreError: etcd could not be reached or refused the write, or an attempt's
                answer was lost (the swap may have been applied: read the document again).
        """
        answer = await self._ready().call(
            "kv/txn", swap_txn(self._jobs_prefix + name, expected, document), resend=False
        )
        return bool(answer.get("succeeded"))

    # --- release notifications -----------------------------------------------------------------

    @asynccontextmanager
    async def follow_releases(
        self, on_release: Callable[[str], None]
    ) -> AsyncIterator[ReleaseFollower]:
        """Call ``on_release(key)`` on this loop for releases of the keys followed, while entered.

        Each followed key is one etcd watch of its key's deletions (a release, a break, or its
        lease's expiry), a streaming request of its own, opened when the first waiter follows
        the key and closed after the last leaves. Notifications only make waiters wake sooner:
        where a watch cannot be opened, a warning is logged and waiters rely on their retries.
        """
        follower = EtcdReleaseFollower(
            self._ready(), self._key_prefix, on_release, repr(self), self._timeout_s
        )
        try:
            yield follower
        finally:
            await follower.aclose()

    # --- plumbing ------------------------------------------------------------------------------

    def _token(self, answer: dict[str, Any]) -> int:
        return self._checked_token(as_int(answer.get("header", {}).get("revision")))

    def _checked_token(self, revision: int) -> int:
        if not 0 < revision <= MAX_FENCING_TOKEN:
            raise LockStoreError(
                f"{self!r}: etcd answered revision {revision}, outside the tokens' "
                "1..2**53-1; a revision this large is not a real cluster's: check the URL"
            )
        return revision

    def __repr__(self) -> str:
        """Show the endpoints and the prefix; never a password."""
        return redact_secrets(
            f"EtcdLockStore({', '.join(self._endpoints)}, prefix={self._prefix!r})"
        )


def _require_driver() -> None:
    if not _HAVE_DRIVER:
        raise LocksConfigurationError(
            "EtcdLockStore needs the httpx package (0.27 or later); "
            "install it with: pip install 'leaselock[etcd]'"
        )


def _checked_endpoints(endpoints: object) -> tuple[str, ...]:
    """Return the client URLs as ``scheme://host:port``, refusing what cannot be one.

    Raises:
        LocksConfigurationError: naming the URL and the form it takes.
    """
    given = [endpoints] if isinstance(endpoints, str) else endpoints
    if not isinstance(given, Sequence) or not given:
        raise LocksConfigurationError(
            f"endpoints={endpoints!r}; pass a client URL such as {DEFAULT_ENDPOINT!r}, "
            "or a list of them (one per member)"
        )
    checked = []
    for endpoint in given:
        parts = urlsplit(endpoint) if isinstance(endpoint, str) else None
        if (
            parts is None
            or parts.scheme not in ("http", "https")
            or not parts.hostname
            or parts.path not in ("", "/")
            or parts.query
            or parts.username is not None
        ):
            raise LocksConfigurationError(
                f"endpoint {redact_secrets(str(endpoint))!r}; pass an etcd client URL "
                f"http(s)://host:port with no path and no user, such as {DEFAULT_ENDPOINT!r}"
            )
        checked.append(f"{parts.scheme}://{parts.netloc}")
    return tuple(checked)


def _check_prefix(prefix: object) -> None:
    """Refuse a prefix under which one store's keys could be another store's.

    Keys are ``<prefix>locks/<key>``, ``<prefix>runs/<kind>/<job>`` and ``<prefix>jobs/<name>``:
    with prefixes that end with ``/`` and have no ``locks``, ``runs`` or ``jobs`` segment, no key
    of one prefix starts with another prefix's ``<prefix>locks/``, ``<prefix>runs/`` or
    ``<prefix>jobs/``.
    """
    if (
        not isinstance(prefix, str)
        or not prefix.endswith("/")
        or len(prefix) > MAX_PREFIX_LENGTH
        or {"locks", "runs", "jobs"}.intersection(prefix.split("/"))
    ):
        raise LocksConfigurationError(
            f"prefix={prefix!r}; pass a str of at most {MAX_PREFIX_LENGTH} characters that ends "
            'with "/" and has no "locks", "runs" or "jobs" segment (which would overlap the keys '
            "of another prefix's locks, runs or job documents), such as "
            f'{DEFAULT_PREFIX!r} or "myapp/leaselock/"'
        )


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(".")[:2])
    except ValueError:
        return ()


def _ranged(answer: dict[str, Any]) -> dict[str, Any] | None:
    """The key in a failed acquire's range, or ``None`` if it went meanwhile."""
    for response in answer.get("responses", ()):
        kvs = response.get("response_range", {}).get("kvs") or []
        if kvs:
            kv: dict[str, Any] = kvs[0]
            return kv
    return None


def _written_by(kv: dict[str, Any] | None, owner: str, lease_id: int) -> bool:
    """Whether the key a failed acquire read is that acquire's own earlier write."""
    return (
        kv is not None and decoded(kv.get("value")) == owner and as_int(kv.get("lease")) == lease_id
    )


def _chunks(renewals: Sequence[Renewal], indexes: Sequence[int]) -> list[list[int]]:
    """Split ``indexes`` into txns of at most MAX_MOVES, each key once a txn (etcd's rule)."""
    chunks: list[tuple[list[int], set[str]]] = []
    for index in indexes:
        key = renewals[index].key
        for chunk, keys in chunks:
            if len(chunk) < MAX_MOVES and key not in keys:
                chunk.append(index)
                keys.add(key)
                break
        else:
            chunks.append(([index], {key}))
    return [chunk for chunk, _ in chunks]


async def _settled(refreshing: asyncio.Future[bool] | None) -> None:
    """Wait until a keep-alive is answered or failed (its outcome is retrieved elsewhere)."""
    if refreshing is not None:
        await asyncio.wait([refreshing])


def _retrieve(task: asyncio.Task[bool]) -> None:
    if not task.cancelled():
        task.exception()  # every caller waiting on it may have left
