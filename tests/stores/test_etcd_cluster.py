"""EtcdLockStore on a three-member cluster: a leader killed, a member cut off, and the locks hold.

Raft makes every write of the store linearizable, and etcd extends every lease when a new
leader takes over; what these tests prove is the store's side of it: a keep-alive that fails
on one member moves to another before the holder's deadline, a watch outlives its member, and
nothing a cut-off member is asked for is ever granted. The cluster is a throwaway one of this
module's own (``tests/etcd_cluster.py``); every test leaves it whole again.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime

import httpx
import pytest

from etcd_cluster import EtcdCluster, etcd_cluster
from helpers import wait_for_real
from leaselock import Locks, LockStoreError
from leaselock.stores import Acquired, JobPause, NotAcquired, OpenRun, Renewal, RunStart
from leaselock.stores.etcd import EtcdLockStore
from servers import ServerUnavailable

pytestmark = pytest.mark.etcd

RUN_PREFIX = f"leaselock-test-{uuid.uuid4().hex[:12]}/"


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[EtcdCluster]:
    """Three members of one cluster, started for this module."""
    try:
        with etcd_cluster() as started:
            yield started
    except ServerUnavailable as unavailable:
        if request.config.getoption("--require-servers"):
            pytest.fail(f"--require-servers: no throwaway etcd cluster: {unavailable}")
        pytest.skip(f"no throwaway etcd cluster: {unavailable}")


@pytest.fixture(autouse=True)
def whole(cluster: EtcdCluster) -> Iterator[None]:
    """After each test: every link healed, every member running and following one leader."""
    yield
    cluster.heal()
    for index, member in enumerate(cluster.members):
        if not member.running:
            cluster.restart(index)
    cluster.await_all_healthy()


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own."""
    return f"{RUN_PREFIX}{uuid.uuid4().hex[:8]}/"


@contextlib.asynccontextmanager
async def opened(store: EtcdLockStore) -> AsyncIterator[EtcdLockStore]:
    await store.open()
    try:
        yield store
    finally:
        await store.aclose()


def others(cluster: EtcdCluster, index: int) -> list[str]:
    """The client URLs of every member but ``index``."""
    return [url for other, url in enumerate(cluster.client_urls) if other != index]


async def gone_from(cluster: EtcdCluster, key: str) -> bool:
    async with httpx.AsyncClient(trust_env=False) as client:
        answer = await client.post(
            f"{cluster.client_urls[cluster.leader()]}/v3/kv/range",
            json={"key": base64.b64encode(key.encode()).decode()},
        )
    return not answer.json().get("kvs")


# --- a lock held across changes of leader ---------------------------------------------------


class RenewalsSeen:
    """An etcd store that sets :attr:`renewed` at each renewal it confirms; the rest as is."""

    def __init__(self, store: EtcdLockStore) -> None:
        self._store = store
        self.renewed = asyncio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        renewed = await self._store.renew(key, owner, ttl_ms)
        if renewed:
            self.renewed.set()
        return renewed

    async def renew_many(self, renewals: Sequence[Renewal]) -> Sequence[bool]:
        answers = await self._store.renew_many(renewals)
        if any(answers):
            self.renewed.set()
        return answers


async def test_a_lock_held_through_leader_kills_that_outlast_its_ttl_is_never_lost(
    cluster: EtcdCluster, prefix: str
) -> None:
    # an election takes 1 to 2 s here (up to 2.1 s measured on a quiet machine), and a renewal
    # sent during one waits for it: the ttl leaves a renewal interval (a third) beside that
    ttl_ms = 6_000
    leader = cluster.leader()
    # the store talks to the leader first: its keep-alives die with it
    endpoints = [cluster.client_urls[leader], *others(cluster, leader)]
    lost: list[object] = []
    store = RenewalsSeen(EtcdLockStore(endpoints, prefix=prefix))
    async with Locks(store=store, ttl=f"{ttl_ms}ms") as locks:
        locks.events.subscribe(lost.append, "lock-lost")
        lock = await locks.acquire("k")
        assert lock is not None
        # changes of leader, each an election and a restart, until together they outlast the
        # ttl; after each, the next waits for a renewal to get through (within a ttl, or the
        # lock would be lost), however long the election took on a loaded machine
        loop = asyncio.get_running_loop()
        kills, started = 0, loop.time()
        while kills < 2 or loop.time() - started < ttl_ms / 1000:
            await asyncio.to_thread(cluster.kill_leader_and_restart)
            kills += 1
            store.renewed.clear()
            await asyncio.wait_for(store.renewed.wait(), ttl_ms / 1000)
        # a lock none of whose renewals got through since the last change is lost by now
        await wait_for_real(ttl_ms + 500)
        assert lock.held
        assert lost == []
        async with opened(EtcdLockStore.from_url(cluster.url, prefix=prefix)) as other:
            taken = await other.acquire("k", "intruder", ttl_ms)
            assert isinstance(taken, NotAcquired)
            assert taken.holder == lock.owner
            info = await other.read_lock("k")
            assert info is not None
            assert info.fencing_token == lock.fencing_token
        await lock.release()


async def test_an_acquire_through_a_killed_leader_moves_to_another_member(
    cluster: EtcdCluster, prefix: str
) -> None:
    leader = cluster.leader()
    endpoints = [cluster.client_urls[leader], *others(cluster, leader)]
    async with opened(EtcdLockStore(endpoints, prefix=prefix)) as store:
        first = await store.acquire("before", "o1", 60_000)
        assert isinstance(first, Acquired)
        cluster.kill(leader)
        after = await store.acquire("after", "o2", 60_000)
        assert isinstance(after, Acquired)
        assert after.fencing_token > first.fencing_token
        assert await store.release("after", "o2") is True


async def test_job_documents_kept_before_a_leader_is_killed_are_read_and_swapped_after(
    cluster: EtcdCluster, prefix: str
) -> None:
    leader = cluster.leader()
    endpoints = [cluster.client_urls[leader], *others(cluster, leader)]
    at = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    pause = JobPause("reports.*", "stock-taking", "ops", at, None)
    async with opened(EtcdLockStore(endpoints, prefix=prefix)) as store:
        await store.pause_jobs(pause)
        await store.note_missed("reports.daily", at)
        cluster.kill(leader)
        stopped = await store.start_run(RunStart("reports.daily", OpenRun("shop-3001", 1, at)))
        assert stopped.pause == pause
        assert await store.resume_jobs("reports.*") == pause
        started = await store.start_run(RunStart("reports.daily", OpenRun("shop-3001", 2, at)))
        assert started.started
        (state,) = await store.job_states(["reports.daily"])
        assert (state.open_run, state.missed_at) == (OpenRun("shop-3001", 2, at), at)


# --- a member cut off from the others --------------------------------------------------------


@pytest.mark.parametrize("role", ["leader", "follower"])
async def test_a_cut_off_member_grants_nothing_it_is_asked_for(
    cluster: EtcdCluster, prefix: str, role: str
) -> None:
    leader = cluster.leader()
    cut = leader if role == "leader" else (leader + 1) % 3
    async with opened(
        EtcdLockStore(cluster.client_urls[cut], prefix=prefix, timeout="3s")
    ) as alone:
        cluster.isolate(cut)
        with pytest.raises(LockStoreError):
            await alone.acquire("free", "o", 60_000)
    cluster.heal()
    cluster.await_all_healthy()
    assert await gone_from(cluster, f"{prefix}locks/free")


@pytest.mark.parametrize("role", ["leader", "follower"])
async def test_a_store_pointed_first_at_a_cut_off_member_is_refused_a_held_key_by_the_others(
    cluster: EtcdCluster, prefix: str, role: str
) -> None:
    leader = cluster.leader()
    cut = leader if role == "leader" else (leader + 1) % 3
    async with (
        opened(EtcdLockStore(others(cluster, cut), prefix=prefix)) as holder,
        opened(
            EtcdLockStore([cluster.client_urls[cut], *others(cluster, cut)], prefix=prefix)
        ) as contender,
    ):
        held = await holder.acquire("held", "holder", 60_000)
        assert isinstance(held, Acquired)
        cluster.isolate(cut)
        refused = await contender.acquire("held", "contender", 60_000)
        assert refused == NotAcquired(holder="holder")
        free = await contender.acquire("free", "contender", 60_000)
        assert isinstance(free, Acquired)
        assert free.fencing_token > held.fencing_token
        assert await contender.renew("free", "contender", 60_000) is True
        assert await holder.renew("held", "holder", 60_000) is True


async def test_a_lock_renewed_through_a_cut_off_leader_is_taken_only_after_its_deadline(
    cluster: EtcdCluster, prefix: str
) -> None:
    """The old leader may still believe it leads; etcd's new leader extends every lease."""
    ttl_ms = 3_000
    leader = cluster.leader()
    loop = asyncio.get_running_loop()
    async with (
        opened(EtcdLockStore(cluster.client_urls[leader], prefix=prefix, timeout="1s")) as holder,
        opened(EtcdLockStore(others(cluster, leader), prefix=prefix, timeout="1s")) as contender,
    ):
        sent = loop.time()
        assert isinstance(await holder.acquire("k", "holder", ttl_ms), Acquired)
        deadline = sent + ttl_ms / 1000
        cluster.isolate(leader)
        taken_at: float | None = None

        async def renew_while_it_confirms() -> None:
            nonlocal deadline
            while taken_at is None:
                sent = loop.time()
                with contextlib.suppress(LockStoreError):
                    if await holder.renew("k", "holder", ttl_ms):
                        deadline = max(deadline, sent + ttl_ms / 1000)
                await wait_for_real(200)

        renewing = asyncio.get_running_loop().create_task(renew_while_it_confirms())
        try:
            async with asyncio.timeout(30):
                while taken_at is None:
                    with contextlib.suppress(LockStoreError):
                        if isinstance(await contender.acquire("k", "contender", ttl_ms), Acquired):
                            taken_at = loop.time()
                    await wait_for_real(100)
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
        assert taken_at > deadline, f"taken {deadline - taken_at:.2f} s before the deadline"


# --- release wake-ups across a member's loss --------------------------------------------------


@pytest.mark.parametrize("fault", ["kill", "isolate"])
async def test_a_watch_whose_member_is_lost_hears_the_release_made_meanwhile(
    cluster: EtcdCluster, prefix: str, fault: str
) -> None:
    leader = cluster.leader()
    lost = (leader + 1) % 3
    heard: asyncio.Queue[str] = asyncio.Queue()
    async with (
        opened(EtcdLockStore(others(cluster, lost), prefix=prefix)) as holder,
        opened(
            EtcdLockStore([cluster.client_urls[lost], *others(cluster, lost)], prefix=prefix)
        ) as waiter,
        waiter.follow_releases(heard.put_nowait) as follower,
    ):
        assert isinstance(await holder.acquire("k", "holder", 60_000), Acquired)
        async with follower.following("k"):
            if fault == "kill":
                cluster.kill(lost)
            else:
                cluster.isolate(lost)
            # released while the watch's member is gone: the watch, opened again on another
            # member from the last revision it heard, hears the deletion it missed
            assert await holder.release("k", "holder") is True
            assert await asyncio.wait_for(heard.get(), 20) == "k"
