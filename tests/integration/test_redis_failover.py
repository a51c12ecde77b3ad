"""Fencing across Redis failovers: a promoted replica never hands out a token that went back.

Replication is asynchronous: a replica promoted after its primary died may have missed the
primary's last grants and token increments. The store's scripts notice the promotion (the
master's replication id changed since the last token was drawn) and move the counter past
anything the old primary could have handed out. With ``min_replicas``, a grant no replica
acknowledged in time is not a grant at all.

The step-by-step tests hold a replica back by hand; the torture runs (leaselock.testing's
check, as `leaselock check` runs it) go through Sentinel's failovers (``SENTINEL FAILOVER`` and
a kill of the primary, in turns) and Redis Cluster's (``CLUSTER FAILOVER`` and a kill of the
key's master) while workers pause, die and write with their tokens. Run the torture longer
with LEASELOCK_FAILOVER_SECONDS=260 (about 20 failovers).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio
import redis.exceptions

from helpers import unique_key, until_real
from leaselock import Locks, LockStoreError
from leaselock.stores import Acquired, NotAcquired
from leaselock.stores.redis import RedisLockStore
from leaselock.stores.redis._tokens import TOKEN_GAP
from leaselock.testing.check import CheckResult, check_store
from leaselock.testing.history import HistoryReport
from redis_replicas import (
    ReplicatedRedis,
    redis_cluster_with_replicas,
    replicated_redis,
    sentinel_redis,
)
from servers import REDIS_URL_ENV, ServerUnavailable

SECONDS = float(os.environ.get("LEASELOCK_FAILOVER_SECONDS", "24"))
WORKERS = 4
TTL = "1s"
TTL_NS = 1_000_000_000
ONE_MINUTE_MS = 60_000


@contextlib.contextmanager
def servers(request: pytest.FixtureRequest) -> Iterator[None]:
    """Turn a missing throwaway server into a skip, or a failure under --require-servers."""
    if os.environ.get(REDIS_URL_ENV):
        # the machine's own server cannot fail over; the run without the variable did this
        pytest.skip(
            "fails over throwaway servers of its own: runs where LEASELOCK_TEST_REDIS_URL is unset"
        )
    try:
        yield
    except ServerUnavailable as unavailable:
        if request.config.getoption("--require-servers"):
            pytest.fail(f"--require-servers: no throwaway replicated Redis: {unavailable}")
        pytest.skip(f"no throwaway replicated Redis: {unavailable}")


@pytest.fixture
def replicated(request: pytest.FixtureRequest) -> Iterator[ReplicatedRedis]:
    with servers(request), replicated_redis() as made:
        yield made


@contextlib.asynccontextmanager
async def opened(store: RedisLockStore) -> AsyncIterator[RedisLockStore]:
    await store.open()
    try:
        yield store
    finally:
        await store.aclose()


async def counter(url: str, prefix: str) -> int:
    async with redis.asyncio.Redis.from_url(url) as raw:
        return int(await raw.get(prefix + "fencing-token") or 0)


# --- step by step ----------------------------------------------------------------------------


@pytest.mark.redis
async def test_a_promoted_replica_that_missed_increments_hands_out_tokens_above_every_old_one(
    replicated: ReplicatedRedis,
) -> None:
    prefix, key = f"{unique_key('failover')}:", unique_key("key")
    async with opened(RedisLockStore.from_url(replicated.primary_url, prefix=prefix)) as old:
        first = await old.acquire(key, "first", ONE_MINUTE_MS)
        assert isinstance(first, Acquired)
        assert await old.release(key, "first")
        handed_out = [first.fencing_token]
        with replicated.replica_held_back():
            for n in range(5):
                taken = await old.acquire(key, f"unreplicated-{n}", ONE_MINUTE_MS)
                assert isinstance(taken, Acquired)
                handed_out.append(taken.fencing_token)
                assert await old.release(key, f"unreplicated-{n}")
            # dies before the replica hears of those five
            replicated.primary.kill()
    replicated.promote_replica()
    # the promoted replica's counter went back: it never saw the last five increments
    assert await counter(replicated.replica_url, prefix) == first.fencing_token
    async with opened(RedisLockStore.from_url(replicated.replica_url, prefix=prefix)) as new:
        taken = await new.acquire(key, "after the failover", ONE_MINUTE_MS)
    assert isinstance(taken, Acquired)
    assert taken.fencing_token > max(handed_out)


@pytest.mark.redis
async def test_a_restarted_primary_with_its_data_keeps_tokens_growing(
    replicated: ReplicatedRedis,
) -> None:
    prefix, key = f"{unique_key('restart')}:", unique_key("key")
    tokens = []
    for _ in range(2):
        async with opened(RedisLockStore.from_url(replicated.primary_url, prefix=prefix)) as store:
            for n in range(3):
                taken = await store.acquire(key, f"owner-{n}", ONE_MINUTE_MS)
                assert isinstance(taken, Acquired)
                tokens.append(taken.fencing_token)
                assert await store.release(key, f"owner-{n}")
        replicated.primary.kill()
        replicated.primary.start()
    assert tokens == sorted(tokens)
    assert len(set(tokens)) == len(tokens)


@pytest.mark.redis
async def test_with_min_replicas_a_grant_no_replica_acknowledged_in_time_is_not_acquired(
    replicated: ReplicatedRedis,
) -> None:
    prefix, key, other = f"{unique_key('wait')}:", unique_key("key"), unique_key("other")
    store = RedisLockStore.from_url(
        replicated.primary_url, prefix=prefix, min_replicas=1, replica_timeout="200ms"
    )
    async with opened(store):
        held = await store.acquire(key, "replicated", ONE_MINUTE_MS)
        assert isinstance(held, Acquired)
        with replicated.replica_held_back():
            assert await store.acquire(other, "alone", ONE_MINUTE_MS) == NotAcquired()
            # released again: nobody holds what nobody was told it holds
            assert await store.read_lock(other) is None
            with pytest.raises(LockStoreError, match="min_replicas=1"):
                await store.renew(key, "replicated", ONE_MINUTE_MS)
        assert isinstance(await store.acquire(other, "later", ONE_MINUTE_MS), Acquired)
        assert await store.renew(key, "replicated", ONE_MINUTE_MS) is True


@pytest.mark.redis
async def test_with_min_replicas_a_waiter_in_line_takes_its_grant_once_a_replica_has_it(
    replicated: ReplicatedRedis,
) -> None:
    url = f"{replicated.primary_url}?min_replicas=1&replica_timeout=500ms"
    prefix, key = f"{unique_key('line')}:", unique_key("key")
    async with (
        Locks(store=RedisLockStore.from_url(url, prefix=prefix), ttl="30s") as first,
        Locks(store=RedisLockStore.from_url(url, prefix=prefix), ttl="30s") as second,
    ):
        held = await first.acquire(key)
        assert held is not None
        waiting = asyncio.create_task(second.acquire(key, wait="10s"))
        await until_real(lambda: replicated_line_length(replicated, prefix, key) == 1)
        await held.release()
        taken = await waiting
        assert taken is not None
        assert taken.fencing_token > held.fencing_token
        await taken.release()


def replicated_line_length(replicated: ReplicatedRedis, prefix: str, key: str) -> int:
    """How many wait in ``key``'s line, as the replica has it."""
    with redis.Redis.from_url(replicated.replica_url) as raw:
        return int(raw.zcard(f"{prefix}line\x00{key}"))


@pytest.mark.redis
async def test_min_replicas_from_the_url_query(replicated: ReplicatedRedis) -> None:
    url = f"{replicated.primary_url}?min_replicas=1&replica_timeout=150ms"
    async with opened(RedisLockStore.from_url(url, prefix=f"{unique_key('query')}:")) as store:
        with replicated.replica_held_back():
            assert await store.acquire(unique_key("key"), "me", ONE_MINUTE_MS) == NotAcquired()
        assert isinstance(await store.acquire(unique_key("key"), "me", ONE_MINUTE_MS), Acquired)


@pytest.mark.redis
async def test_a_sentinel_store_follows_the_primary_through_failovers(
    request: pytest.FixtureRequest,
) -> None:
    prefix = f"{unique_key('sentinel')}:"
    with servers(request), sentinel_redis() as group:
        store = RedisLockStore.from_url(group.url, prefix=prefix)
        async with opened(store):
            tokens = []
            # after SENTINEL FAILOVER the old primary still serves, until Sentinel demotes it:
            # the store hears the Sentinels' announcement and moves at once
            for failover in (group.sentinel_failover, group.kill_failover):
                taken = await store.acquire(unique_key("key"), "me", ONE_MINUTE_MS)
                assert isinstance(taken, Acquired)
                tokens.append(taken.fencing_token)
                primary = group.primary_port()
                await asyncio.to_thread(failover)
                assert group.primary_port() != primary
                key = unique_key("after")
                found: list[int] = []

                async def taken_there(key: str = key, found: list[int] = found) -> bool:
                    # a call that meets the old primary's closed connection fails; the next one
                    # asks the Sentinels again
                    with contextlib.suppress(LockStoreError, redis.exceptions.RedisError):
                        answer = await store.acquire(key, "me", ONE_MINUTE_MS)
                        if isinstance(answer, Acquired):
                            found.append(answer.fencing_token)
                    return bool(found)

                await until_real(taken_there, within_s=30)
                tokens += found
                new_primary = f"redis://127.0.0.1:{group.primary_port()}/0"
                async with redis.asyncio.Redis.from_url(new_primary) as raw:
                    assert await raw.get(f"{prefix}lock:{key}") == b"me"
    assert tokens == sorted(tokens)
    assert len(set(tokens)) == len(tokens)


# --- torture under failovers -----------------------------------------------------------------


def two_holder_windows_ns(report: HistoryReport) -> list[int]:
    """How long each pair of overlapping leases overlapped."""
    windows = []
    latest = None
    for lease in report.leases:
        if latest is not None and lease.start_ns < latest.end_ns:
            windows.append(min(latest.end_ns, lease.end_ns) - lease.start_ns)
        if latest is None or lease.end_ns > latest.end_ns:
            latest = lease
    return windows


def table_row(name: str, result: CheckResult) -> str:
    """The run as a row of the failover table in docs/check.md."""
    rules = [violation.rule for violation in result.report.violations]
    windows = two_holder_windows_ns(result.report)
    longest = f"{max(windows) / 1e6:.0f} ms" if windows else "-"
    return (
        f"| {name} | {result.faults['failovers']} | {result.report.acquisitions} | "
        f"{len(windows)} (longest {longest}) | {rules.count('tokens went back')} | "
        f"{rules.count('a token given twice')} | {rules.count('a stale fenced write accepted')} |"
    )


def regressions_within_a_reign(report: HistoryReport) -> list[tuple[int, int]]:
    """Pairs (earlier token, later lower token) drawn under one master's counter move.

    Each master moves the counter up by TOKEN_GAP at its first draw, so ``token // TOKEN_GAP``
    tells which master's reign a token is from. A lower token from an earlier reign, later, is
    a deposed primary still serving in a split brain (its writes lose to the new holder's); a
    lower token from the same reign would be the counter itself going back.
    """
    found = []
    highest = 0
    for lease in sorted(report.leases, key=lambda lease: lease.start_ns):
        token = lease.fencing_token
        if token < highest and token // TOKEN_GAP >= highest // TOKEN_GAP:
            found.append((highest, token))
        highest = max(highest, token)
    return found


def assert_fencing_held(result: CheckResult) -> None:
    """What holds without min_replicas: no token twice, no stale write accepted.

    A lease lost to a failover (the replica promoted before it heard of the grant) makes two
    holders, each for less than one ttl: fencing orders their writes. A deposed primary that
    still serves a client for a moment (a split brain) hands out tokens of its reign, below the
    new primary's: those acquisitions come later with lower tokens, and their writes are refused
    once the new holder has written. Within one reign, tokens never go back.
    """
    summary = result.summary()
    rules = {violation.rule for violation in result.report.violations}
    assert rules <= {"two live leases", "tokens went back"}, summary
    assert regressions_within_a_reign(result.report) == [], summary
    assert all(window < TTL_NS for window in two_holder_windows_ns(result.report)), summary
    assert not result.missing, summary


def run_check(url: str, failover: object, tmp_path: Path) -> CheckResult:
    assert callable(failover)
    return check_store(
        url,
        seconds=SECONDS,
        at_most=SECONDS * 3,
        workers=WORKERS,
        ttl=TTL,
        failover=failover,
        directory=tmp_path,
    )


@pytest.mark.redis
@pytest.mark.nemesis
@pytest.mark.timeout(SECONDS + 120)
@pytest.mark.parametrize("min_replicas", [1, 0], ids=["min_replicas=1", "asynchronous"])
def test_fencing_holds_through_sentinel_failovers(
    min_replicas: int, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if min_replicas == 0 and "LEASELOCK_FAILOVER_SECONDS" not in os.environ:
        pytest.skip("the asynchronous run is the long one (LEASELOCK_FAILOVER_SECONDS=260)")
    with servers(request), sentinel_redis() as group:
        query = f"?min_replicas={min_replicas}&replica_timeout=250ms" if min_replicas else ""
        result = run_check(group.url + query, group.failover, tmp_path)
    name = f"Redis Sentinel, min_replicas={min_replicas}"
    print(f"\n{name}: {group.failovers}\n{result.summary()}\n{table_row(name, result)}")  # noqa: T201 -- the run's counts, for the record
    assert result.faults["failovers"] >= 2, result.summary()
    if min_replicas:
        # every grant and renewal a holder counted on was on a replica before it was told
        assert result.ok, result.summary()
    else:
        assert_fencing_held(result)


@pytest.mark.redis_cluster
@pytest.mark.nemesis
@pytest.mark.timeout(SECONDS + 120)
def test_fencing_holds_through_redis_cluster_failovers(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with servers(request), redis_cluster_with_replicas() as cluster:
        url = cluster.url.replace("redis://", "redis+cluster://", 1)
        result = run_check(url, lambda: cluster.failover("leaselock-check:*"), tmp_path)
    name = "Redis Cluster, a replica per master"
    print(f"\n{name}: {cluster.failovers}\n{result.summary()}\n{table_row(name, result)}")  # noqa: T201 -- the run's counts, for the record
    assert result.faults["failovers"] >= 2, result.summary()
    assert_fencing_held(result)
