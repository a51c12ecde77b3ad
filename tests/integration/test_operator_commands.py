"""`leaselock locks`, `break` and `jobs`, end to end in subprocesses, on SQLite, PostgreSQL, Redis.

The holder is a Locks in the test's process; the command is another process on the same store.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import leaselock
from helpers import leaselock_command, unique_key
from leaselock import Lock, Locks
from leaselock.stores import LockStore, SupportsStoreClock, store_from_url
from leaselock.testing import ManualClock


class Target:
    """A store URL for the command, and the same store for the test's own Locks."""

    def __init__(self, url: str, redis_prefix: str | None) -> None:
        self.url = url
        self.redis_prefix = redis_prefix

    def arguments(self) -> list[str]:
        prefix = [] if self.redis_prefix is None else ["--redis-prefix", self.redis_prefix]
        return ["--url", self.url, *prefix]

    def store(self) -> LockStore:
        return store_from_url(self.url, prefix=self.redis_prefix)


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis_cluster", marks=pytest.mark.redis_cluster),
        pytest.param("mysql", marks=pytest.mark.mysql),
        pytest.param("etcd", marks=pytest.mark.etcd),
    ]
)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    if request.param == "sqlite":
        return Target(f"sqlite:///{tmp_path / 'locks.db'}", None)
    url = request.getfixturevalue(f"{request.param}_url")
    if request.param == "redis":
        return Target(url, f"cli-{uuid.uuid4().hex[:10]}:")
    if request.param == "etcd":
        return Target(url.replace("http://", "etcd://", 1), f"cli-{uuid.uuid4().hex[:10]}/")
    if request.param == "redis_cluster":
        return Target(
            url.replace("redis://", "redis+cluster://", 1), f"cli-{uuid.uuid4().hex[:10]}:"
        )
    return Target(url, None)


@pytest.fixture
async def holder(target: Target) -> AsyncIterator[Locks]:
    async with Locks(store=target.store(), instance="shop-3002", ttl="30s") as locks:
        yield locks


async def command(*arguments: str) -> tuple[int, str, str]:
    done = await asyncio.to_thread(leaselock_command, *arguments)
    return done.returncode, done.stdout, done.stderr


async def test_locks_lists_the_holder_and_break_frees_the_key_for_a_greater_token(
    target: Target, holder: Locks
):
    key = unique_key("orders:1")
    held = await holder.acquire(key)
    assert held is not None

    code, listed, _ = await command("locks", key, "--json", *target.arguments())
    table_code, table, _ = await command("locks", key, *target.arguments())
    broken_code, broken, _ = await command("break", key, "--yes", *target.arguments())
    successor = await holder.acquire(key)

    assert (code, table_code, broken_code) == (0, 0, 0)
    [info] = json.loads(listed)
    assert (info["key"], info["instance"], info["live"]) == (key, "shop-3002", True)
    assert info["owner"] == held.owner
    assert info["fencing_token"] in {None, held.fencing_token}
    assert 0 < info["expires_in_ms"] <= 30_000
    assert "shop-3002" in table
    assert table.splitlines()[0].split() == ["KEY", "HOLDER", "OWNER", "TOKEN", "EXPIRES", "IN"]
    assert "it was held by shop-3002" in broken
    assert successor is not None
    assert successor.fencing_token > held.fencing_token


async def test_break_without_yes_and_without_a_terminal_asks_for_yes_and_changes_nothing(
    target: Target, holder: Locks
):
    key = unique_key("orders:2")
    held = await holder.acquire(key)
    assert held is not None

    code, _, error = await command("break", key, *target.arguments())

    assert code == 2
    assert error.strip().endswith("stdin is not a terminal: pass --yes")
    still = await holder.read_lock(key)
    assert still is not None
    assert still.owner == held.owner


async def test_jobs_shows_each_jobs_last_run_and_where_it_is_owned(target: Target, holder: Locks):
    key = unique_key("feed:poll")

    @leaselock.on_one_instance(key=key, every="1d")
    async def poll() -> None:
        raise ConnectionError("the feed is down")

    holder.register(poll)
    with pytest.raises(ConnectionError):
        await poll()

    code, output, _ = await command("jobs", "--json", *target.arguments())
    table_code, table, _ = await command("jobs", *target.arguments())

    assert (code, table_code) == (0, 0)
    job = next(job for job in json.loads(output) if job["job"] == key)
    assert job["last_run"]["outcome"] == "error"
    assert job["last_run"]["error"] == "ConnectionError: the feed is down"
    assert (job["last_success"], job["owner"]) == (None, "shop-3002")
    row = next(line for line in table.splitlines() if line.startswith(key))
    assert "error: ConnectionError: the feed is down" in row
    assert "never" in row
    # the declared schedule's tick the failed run started for, and where
    assert job["last_tick"]["instance"] == "shop-3002"
    assert job["last_tick"]["at"].endswith("T00:00:00+00:00")
    assert f"last tick {job['last_tick']['at'][:19]}" in row
    # the servers run on this host: its clock is the store's, give or take a round trip
    shows_clock = isinstance(target.store(), SupportsStoreClock)
    said = [line for line in table.splitlines() if line.startswith("This host's clock is ")]
    if shows_clock:
        assert abs(job["clock_offset_ms"]) < 1000
        assert len(said) == 1
        assert said[0].endswith("within the 1 s that jobs on one instance allow for")
    else:
        assert (job["clock_offset_ms"], said) == (None, [])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["locks", "--url", "postgresql://postgres@127.0.0.1:1/db"], "could not connect"),
        (["locks", "--url", "redis://127.0.0.1:1/0"], "could not reach Redis"),
        (["jobs", "--url", "sqlite:////nowhere/locks.db"], "no SQLite file at"),
        (["locks", "--url", "mysql://root@127.0.0.1:1/db"], "could not connect"),
        (["break", "k", "--url", "memcached://x"], "is not a store URL leaselock knows"),
    ],
)
async def test_a_store_that_cannot_be_read_is_one_line_and_exit_2(
    arguments: list[str], message: str
):
    code, output, error = await command(*arguments)
    assert code == 2
    assert output == ""
    assert message in error
    assert len(error.strip().splitlines()) == 1
    assert "Traceback" not in error


async def test_watch_tells_acquisitions_releases_and_expiries_until_ctrl_c(
    target: Target, holder: Locks
):
    key = unique_key("watched")
    watcher = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "leaselock",
        "watch",
        key,
        "--every",
        "100ms",
        *target.arguments(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert watcher.stdout is not None
    output = watcher.stdout

    async def next_line() -> list[str]:
        return (await asyncio.wait_for(output.readline(), 20)).decode().split()

    try:
        assert (await next_line())[:4] == ["Watching", "the", "locks", "under"]
        first = await holder.acquire(f"{key}:a")
        assert first is not None
        acquired = await next_line()
        await first.release()
        released = await next_line()
        # a holder whose clock never moves renews nothing: a paused process
        async with Locks(
            store=target.store(), clock=ManualClock(), instance="paused", ttl="1s"
        ) as paused:
            assert await paused.acquire(f"{key}:b") is not None
            taken = await next_line()
            expired = await next_line()
    finally:
        watcher.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(watcher.wait(), 20)
    assert code == 0
    assert acquired[1:] == ["acquired", f"{key}:a", "by", "shop-3002", *token_words(target, first)]
    assert released[1:] == ["released", f"{key}:a", "by", "shop-3002", *token_words(target, first)]
    assert taken[1:5] == ["acquired", f"{key}:b", "by", "paused"]
    assert expired[1:5] == ["expired", f"{key}:b", "by", "paused"]


def token_words(target: Target, lock: Lock) -> list[str]:
    """How the watch shows a lock's token: only where the store keeps one per key (not on a
    single Redis, whose one counter serves every key)."""
    if target.url.startswith("redis://"):
        return []
    return ["(token", f"{lock.fencing_token})"]
