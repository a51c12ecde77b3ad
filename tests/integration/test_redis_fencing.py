"""A fenced write to a Redis hash: a holder paused past its lease has its late write refused."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import redis
import redis.asyncio

from helpers import wait_for_real
from leaselock import Locks, LocksConfigurationError
from leaselock.integrations.redis import fenced_hset, fenced_hset_sync
from leaselock.stores.redis import RedisLockStore
from leaselock.testing import ManualClock

pytestmark = pytest.mark.redis


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    made = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    yield made
    await made.aclose()


async def test_a_paused_holders_late_write_is_refused_and_the_newer_one_kept(
    redis_url: str, client: redis.asyncio.Redis
) -> None:
    prefix = f"fenced:{uuid.uuid4().hex[:8]}:"
    stock = f"{prefix}stock:salmon"
    # the paused instance's clock never moves: it neither renews nor sees its deadline pass
    async with (
        Locks(
            store=RedisLockStore.from_url(redis_url, prefix=prefix), clock=ManualClock()
        ) as paused,
        Locks(store=RedisLockStore.from_url(redis_url, prefix=prefix), ttl="1s") as running,
    ):
        stale = await paused.acquire("reconcile", ttl="300ms")
        assert stale is not None
        await wait_for_real(400)  # Redis expires the paused holder's lease
        fresh = await running.acquire("reconcile")
        assert fresh is not None
        assert fresh.fencing_token > stale.fencing_token
        assert await fenced_hset(client, stock, fresh.fencing_token, {"in_stock": 9})
        assert not await fenced_hset(client, stock, stale.fencing_token, {"in_stock": 12})
        assert await fenced_hset(client, stock, fresh.fencing_token, {"in_stock": 8})
        await fresh.release()
    assert await client.hgetall(stock) == {
        "in_stock": "8",
        "fencing_token": str(fresh.fencing_token),
    }
    await client.delete(stock)


def test_the_blocking_twin_fences_the_same_way(redis_url: str) -> None:
    key = f"fenced:{uuid.uuid4().hex[:8]}:hash"
    with redis.Redis.from_url(redis_url) as client:
        assert fenced_hset_sync(client, key, 7, {"count": 1, "by": "worker-1"})
        assert not fenced_hset_sync(client, key, 6, {"count": 2})
        assert client.hget(key, "count") == b"1"
        client.delete(key)


async def test_bad_arguments_are_refused_naming_the_fix(client: redis.asyncio.Redis) -> None:
    with pytest.raises(LocksConfigurationError, match="not a fencing token"):
        await fenced_hset(client, "k", 0, {"a": 1})
    with pytest.raises(LocksConfigurationError, match="at least one field"):
        await fenced_hset(client, "k", 1, {})
    with pytest.raises(LocksConfigurationError, match="leave it out of the values"):
        await fenced_hset(client, "k", 1, {"fencing_token": 9})
