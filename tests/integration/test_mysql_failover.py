"""MariaDB failover: what a promoted replica keeps of the old primary's grants and tokens.

The limits docs/stores/mysql.md states, shown on a primary and a replica of the test's own
(``mysql_replicas``): with asynchronous replication a failover can lose the latest grant and
hand out tokens again, until the counter is raised as after a restore; with semi-synchronous
replication (``AFTER_SYNC``) it loses nothing a holder was told. One failover, step by step:
the store takes one host, so a run of many failovers would need a proxy in front of the
servers, as production has.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from helpers import unique_key, until_real
from leaselock import LockStoreError
from leaselock.stores import Acquired, NotAcquired
from leaselock.stores.mysql import MySQLLockStore
from mysql_replicas import MySQLReplicas, mysql_replicas
from servers import ServerUnavailable

asyncmy = pytest.importorskip("asyncmy")

pytestmark = [pytest.mark.mysql, pytest.mark.nemesis]

ROUNDS = 10
TTL_MS = 60_000


def started(request: pytest.FixtureRequest, *, semi_synchronous: bool) -> Iterator[MySQLReplicas]:
    try:
        with mysql_replicas(semi_synchronous=semi_synchronous) as replicas:
            yield replicas
    except ServerUnavailable as unavailable:
        if request.config.getoption("--require-servers"):
            pytest.fail(f"--require-servers: no MariaDB primary and replica: {unavailable}")
        pytest.skip(f"no MariaDB primary and replica to fail over: {unavailable}")


@pytest.fixture
def async_replicas(request: pytest.FixtureRequest) -> Iterator[MySQLReplicas]:
    yield from started(request, semi_synchronous=False)


@pytest.fixture
def semi_sync_replicas(request: pytest.FixtureRequest) -> Iterator[MySQLReplicas]:
    yield from started(request, semi_synchronous=True)


async def hand_out(url: str, key: str, held: str) -> list[int]:
    """Take and free ``key`` ROUNDS times, then take ``held`` and keep it; every token."""
    store = MySQLLockStore.from_url(url)
    try:
        tokens = []
        for number in range(ROUNDS):
            taken = await store.acquire(key, f"owner-{number}", TTL_MS)
            assert isinstance(taken, Acquired)
            tokens.append(taken.fencing_token)
            assert await store.release(key, f"owner-{number}")
        holding = await store.acquire(held, "holder", TTL_MS)
        assert isinstance(holding, Acquired)
        return [*tokens, holding.fencing_token]
    finally:
        await store.aclose()


def waiting_for_the_replica(replicas: MySQLReplicas) -> bool:
    return any(
        "semi-sync ack" in " ".join(row).lower() for row in replicas.query("SHOW FULL PROCESSLIST")
    )


async def test_a_semi_synchronous_failover_keeps_every_grant_and_token_a_holder_was_told_of(
    semi_sync_replicas: MySQLReplicas,
):
    key, held, unheard = unique_key("tokens"), unique_key("held"), unique_key("unheard")
    before = await hand_out(semi_sync_replicas.url, key, held)
    semi_sync_replicas.stop_replication()
    store = MySQLLockStore.from_url(semi_sync_replicas.url)
    try:
        # a grant the replica never acknowledges is never answered: its commit waits
        waiting = asyncio.create_task(store.acquire(unheard, "unheard", TTL_MS))
        await until_real(lambda: waiting_for_the_replica(semi_sync_replicas), within_s=10)
        assert not waiting.done()
        semi_sync_replicas.crash_primary()
        # never answered with a token: the connection is gone
        with pytest.raises((LockStoreError, asyncmy.errors.OperationalError)):
            await waiting
    finally:
        await store.aclose()
    semi_sync_replicas.promote()
    store = MySQLLockStore.from_url(semi_sync_replicas.url)
    try:
        taken = await store.acquire(held, "other", TTL_MS)
        after = await store.acquire(key, "after", TTL_MS)
    finally:
        await store.aclose()

    assert isinstance(taken, NotAcquired)
    assert isinstance(after, Acquired)
    assert after.fencing_token > max(before)


async def test_an_asynchronous_failover_loses_the_latest_grant_and_tokens_until_raised(
    async_replicas: MySQLReplicas,
):
    key, held = unique_key("tokens"), unique_key("held")
    store = MySQLLockStore.from_url(async_replicas.url)
    try:
        assert isinstance(await store.acquire(key, "first", TTL_MS), Acquired)
        assert await store.release(key, "first")
    finally:
        await store.aclose()
    async_replicas.wait_until_applied()
    async_replicas.stop_replication()
    before = await hand_out(async_replicas.url, key, held)
    async_replicas.crash_primary()
    async_replicas.promote()
    store = MySQLLockStore.from_url(async_replicas.url)
    try:
        taken = await store.acquire(held, "other", TTL_MS)
        repeated = await store.acquire(key, "after", TTL_MS)
        assert await store.release(key, "after")
        # the documented remedy: raise the counter above every token handed out
        async_replicas.query(
            f"ALTER TABLE test.leaselock_locks AUTO_INCREMENT = {max(before) + 1_000_000}"
        )
        raised = await store.acquire(key, "raised", TTL_MS)
    finally:
        await store.aclose()

    # what asynchronous replication may cost, as documented: a second holder, a token again
    assert isinstance(taken, Acquired)
    assert isinstance(repeated, Acquired)
    assert repeated.fencing_token <= max(before)
    assert isinstance(raised, Acquired)
    assert raised.fencing_token > max(before)
