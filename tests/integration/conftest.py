"""The ``bench`` fixture: every story of this directory runs once per shipped store."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from leaselock.stores import InMemoryLockStore
from leaselock.testing import ManualClock
from store_benches import (
    STORES,
    Bench,
    MemoryStock,
    PostgresStock,
    RedisStock,
    SQLiteStock,
)

# the ttl of stores whose clock is the server's: real time passes, so a commit that waits for
# the disk (a few hundred ms on a loaded 2-core machine) must not cost the holder its lease
REAL_TTL_MS = 1200
# etcd's shortest lease (1.5 election timeouts, in whole seconds), which expires up to 0.7 s
# late: leases last whole seconds, and etcd deletes an expired lease's keys within 500 ms
ETCD_TTL_MS = 2000
ETCD_EXPIRY_SLACK_MS = 700


@pytest.fixture(params=STORES)
async def bench(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Bench]:
    """One store, with a fenced resource beside it (etcd's where a module asks for JOB_STORES)."""
    name = request.param
    run_id = uuid.uuid4().hex[:10]
    if name == "memory":
        clock = ManualClock()
        shared = InMemoryLockStore(clock=clock)
        yield Bench(name, lambda: shared, clock, 30_000, MemoryStock())
    elif name == "sqlite":
        from leaselock.stores import SQLiteLockStore  # noqa: PLC0415

        clock = ManualClock()
        path = tmp_path / "locks.db"
        yield Bench(
            name,
            lambda: SQLiteLockStore(path, clock=clock),
            clock,
            30_000,
            SQLiteStock(tmp_path / "stock.db"),
        )
    elif name == "postgres":
        from leaselock.stores import PostgresLockStore  # noqa: PLC0415

        url = request.getfixturevalue("postgres_url")
        stock = PostgresStock(url, f"fenced_stock_{run_id}")
        await stock.create()
        yield Bench(name, lambda: PostgresLockStore.from_url(url), None, REAL_TTL_MS, stock)
    elif name == "etcd":
        from leaselock.stores import EtcdLockStore  # noqa: PLC0415

        url = request.getfixturevalue("etcd_url")
        prefix = f"stories-{run_id}/"
        yield Bench(
            name,
            lambda: EtcdLockStore(url, prefix=prefix),
            None,
            ETCD_TTL_MS,
            # the fenced resource need not live in the store: the instances share this process
            MemoryStock(),
            ETCD_EXPIRY_SLACK_MS,
        )
    elif name == "redis":
        from leaselock.stores import RedisLockStore  # noqa: PLC0415

        url = request.getfixturevalue("redis_url")
        prefix = f"stories:{run_id}:"
        yield Bench(
            name,
            lambda: RedisLockStore.from_url(url, prefix=prefix),
            None,
            REAL_TTL_MS,
            RedisStock(url, f"{prefix}stock"),
        )
    else:
        from leaselock.stores import RedisClusterLockStore  # noqa: PLC0415

        url = request.getfixturevalue("redis_cluster_url")
        prefix = f"stories:{run_id}:"
        yield Bench(
            name,
            lambda: RedisClusterLockStore.from_url(url, prefix=prefix),
            None,
            REAL_TTL_MS,
            RedisStock(url, f"{prefix}stock", cluster=True),
        )
