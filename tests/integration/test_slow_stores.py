"""Real stores that answer late or not at all: every call is bounded, no block runs unheld.

A partition is a TCP proxy that stops forwarding; the SQLite case is another connection that
holds the file's write lock past the ttl. Time is real here: the servers' clocks and drivers
are what is under test.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from helpers import Partition, unique_key, wait_for_real
from leaselock import Locks, LockStoreError, SystemClock
from leaselock.stores import Acquired, LockStore

# acquire(wait="1s") may take the wait plus one bounded attempt (1 s), then its departure from
# the line: the place that attempt may have kept ends by then plus the wait and PLACE_GRACE_MS
# (2 s), and no leave gets through a partition; the rest is slack for CI
WAIT_ATTEMPT_AND_PLACE_S = 3.0
SLACK_S = 1.5
CLOCK = SystemClock()


def through(url: str, port: int) -> str:
    """Return ``url`` pointing at ``port`` on 127.0.0.1 instead of its own host and port."""
    parts = urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = f"{credentials}@127.0.0.1:{port}" if credentials else f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
async def partitioned(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[Partition, Callable[[], LockStore]]]:
    """A partition in front of a real server, and a factory of stores that talk through it."""
    url = request.getfixturevalue(f"{request.param}_url")
    target = urlsplit(url)
    async with Partition(target.hostname or "127.0.0.1", target.port or 0) as partition:
        proxied = through(url, partition.port)
        if request.param == "postgres":
            from leaselock.stores import PostgresLockStore  # noqa: PLC0415

            yield partition, lambda: PostgresLockStore.from_url(proxied)
        else:
            from leaselock.stores import RedisLockStore  # noqa: PLC0415

            yield partition, lambda: RedisLockStore.from_url(proxied, prefix="partition:")


async def test_acquire_with_a_wait_answers_in_time_during_a_partition(partitioned):
    partition, make_store = partitioned
    async with Locks(store=make_store(), ttl="30s") as locks:
        partition.cut()
        started = CLOCK.now_ms() / 1000
        with pytest.raises(LockStoreError, match="did not answer acquire"):
            await locks.acquire(unique_key("partitioned"), wait="1s")
        elapsed = CLOCK.now_ms() / 1000 - started
        partition.heal()
    assert elapsed < WAIT_ATTEMPT_AND_PLACE_S + SLACK_S, f"took {elapsed:.1f} s"


async def test_release_and_the_end_of_a_hold_answer_in_time_during_a_partition(partitioned):
    partition, make_store = partitioned
    async with Locks(store=make_store(), ttl="30s") as locks:
        lock = await locks.acquire(unique_key("released"))
        assert lock is not None
        partition.cut()
        started = CLOCK.now_ms() / 1000
        with pytest.raises(LockStoreError, match="did not answer release"):
            await lock.release()
        released_in = CLOCK.now_ms() / 1000 - started
        partition.heal()
        async with locks.hold(unique_key("held")):
            partition.cut()
            started = CLOCK.now_ms() / 1000
        left_in = CLOCK.now_ms() / 1000 - started
        partition.heal()
    assert released_in < 2 + SLACK_S, f"release took {released_in:.1f} s"
    assert left_in < 2 + SLACK_S, f"leaving the hold block took {left_in:.1f} s"


async def test_sqlite_answering_after_the_ttl_never_runs_the_block(tmp_path: Path):
    from leaselock.stores import SQLiteLockStore  # noqa: PLC0415

    path = tmp_path / "locks.db"
    store = SQLiteLockStore(path)
    key = unique_key("busy")
    ran = False
    async with Locks(store=store, ttl="500ms") as locks:
        assert await locks.acquire("warm-up") is not None
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")

        async def enter() -> None:
            nonlocal ran
            async with locks.hold(key):
                ran = True

        entering = asyncio.create_task(enter())
        await wait_for_real(800)
        blocker.execute("COMMIT")
        blocker.close()
        with pytest.raises(LockStoreError, match=r"did not answer acquire\(.*\) within 500 ms"):
            await entering
        assert not ran
        # the attempt did commit once the file was free; it was handed back under its own owner
        for _ in range(50):
            if isinstance(await store.acquire(key, "probe", 1000), Acquired):
                break
            await wait_for_real(20)
        else:
            pytest.fail("the late acquire was never handed back")
