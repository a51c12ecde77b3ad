"""The design's stories, on every shipped store: one instance, overlap, handover, fencing,
elections. Each test runs once per store (in-memory, SQLite, PostgreSQL, Redis)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Self

import pytest

import leaselock
from helpers import Instances, unique_key, wait_for_real
from leaselock import Lock, LockLostError, Locks, current_lock
from leaselock._clock import Clock
from leaselock.testing import ManualClock, wait_all_tasks_blocked
from store_benches import Bench


def job_class(key: str) -> type:
    """A reconciliation job under ``key``; a run can be held open, and reads the warehouse."""

    class StockReconciliationJob:
        def __init__(self, name: str) -> None:
            self.name = name
            self.tokens: list[int] = []
            self.locks_seen: list[Lock] = []
            self.hold_open: asyncio.Event | None = None
            self.started = asyncio.Event()

        @leaselock.on_one_instance(key=key)
        @leaselock.without_overlapping()
        async def reconcile_stock(self) -> str:
            lock = current_lock()
            assert lock is not None
            self.tokens.append(lock.fencing_token)
            self.locks_seen.append(lock)
            self.started.set()
            if self.hold_open is not None:
                await self.hold_open.wait()
            return self.name

    return StockReconciliationJob


def instances(bench: Bench, clocks: Sequence[Clock], key: str) -> Instances[Any]:
    """Instances of the shop on ``bench``'s store, each with a store object of its own."""
    return Instances(
        lambda clock: Locks(
            store=bench.new_store(), clock=clock, ttl=timedelta(milliseconds=bench.ttl_ms)
        ),
        clocks,
        job_class(key),
    )


async def test_a_tick_runs_once_and_always_on_the_same_instance(
    bench: Bench, caplog: pytest.LogCaptureFixture
):
    key = unique_key("inventory:stock-reconciliation")
    with caplog.at_level(logging.DEBUG, logger="leaselock"):
        async with instances(bench, [bench.instance_clock()] * 3, key) as app:
            first = await app.tick()
            await bench.pass_time(100)
            second = await app.tick()
    assert [r for r in first if r] == [r for r in second if r]
    assert first.count(None) == second.count(None) == 2
    assert caplog.text.count(f"Skipped {key}: it runs on another instance") == 4
    assert caplog.text.count(f"{key} runs on this instance") == 1


async def test_a_crashed_owner_hands_over_after_ttl_with_a_greater_token(bench: Bench):
    key = unique_key("inventory:stock-reconciliation")
    crashed = ManualClock()
    running = bench.instance_clock()
    async with instances(bench, [crashed, running, running], key) as app:
        assert await app.tick(0) == ["instance-0"]
        assert await app.tick(1, 2) == [None, None]
        await bench.pass_time(bench.ttl_ms + 100)
        taken_over = await app.tick(1, 2)
        assert taken_over.count(None) == 1
        new_owner = app.jobs[1] if taken_over[0] else app.jobs[2]
        assert new_owner.tokens[0] > app.jobs[0].tokens[0]


async def test_after_a_clean_shutdown_the_next_tick_elsewhere_runs_at_once(bench: Bench):
    key = unique_key("invoices:nightly-export")
    async with instances(bench, [bench.instance_clock()] * 2, key) as app:
        assert await app.tick(0) == ["instance-0"]
        await bench.pass_time(1100)
        await app.locks[0].aclose()
        assert await app.tick(1) == ["instance-1"]


async def test_a_tick_right_after_a_shutdown_in_the_same_second_is_skipped(bench: Bench):
    key = unique_key("invoices:nightly-export")
    async with instances(bench, [bench.instance_clock()] * 2, key) as app:
        assert await app.tick(0) == ["instance-0"]
        await app.locks[0].aclose()
        assert await app.tick(1) == [None]
        await bench.pass_time(1100)
        assert await app.tick(1) == ["instance-1"]


async def test_a_run_held_open_through_three_ticks_skips_them_then_the_next_tick_runs(
    bench: Bench, caplog: pytest.LogCaptureFixture
):
    key = unique_key("inventory:stock-reconciliation")
    async with instances(bench, [bench.instance_clock()] * 2, key) as app:
        owner = app.jobs[0]
        owner.hold_open = asyncio.Event()
        long_count = asyncio.create_task(owner.reconcile_stock())
        await asyncio.wait_for(owner.started.wait(), timeout=10)
        with caplog.at_level(logging.DEBUG, logger="leaselock"):
            for _ in range(3):
                await bench.pass_time(50)
                assert await app.tick() == [None, None]
        owner.hold_open.set()
        assert await long_count == "instance-0"
        owner.hold_open = None
        assert await app.tick() == ["instance-0", None]
    assert caplog.text.count(f"Skipped {key}: a run is still in progress") == 3
    assert caplog.text.count(f"Skipped {key}: it runs on another instance") == 3
    assert len(owner.tokens) == 2
    assert owner.tokens[1] > owner.tokens[0]


async def test_a_stale_run_sees_its_signal_abort_and_its_fenced_write_is_refused(bench: Bench):
    key = unique_key("inventory:stock-reconciliation")
    paused = ManualClock()
    async with instances(bench, [paused, bench.instance_clock()], key) as app:
        stale, fresh = app.jobs
        stale.hold_open = asyncio.Event()
        stale_run = asyncio.create_task(stale.reconcile_stock())
        await asyncio.wait_for(stale.started.wait(), timeout=10)
        counted_by_stale = (await bench.stock.read())[0]
        await bench.pass_time(bench.ttl_ms + 100)
        assert await fresh.reconcile_stock() == "instance-1"
        assert await bench.stock.write(9, fresh.tokens[0])
        await paused.advance(timedelta(milliseconds=bench.ttl_ms // 3))
        await wait_all_tasks_blocked()
        reason = stale.locks_seen[0].signal.reason
        assert isinstance(reason, LockLostError)
        assert reason.detected_by == "renewal"
        assert not await bench.stock.write(counted_by_stale, stale.tokens[0])
        stale.hold_open.set()
        await stale_run
    assert await bench.stock.read() == (9, fresh.tokens[0])


def feed_class(key: str) -> type:
    @leaselock.leader_election(key)
    class WarehouseFeed:
        def __init__(self, name: str) -> None:
            self.name = name
            self.log: list[tuple[str, int]] = []
            self.refuse = False

        async def on_leadership_acquired(self, lock: Lock) -> None:
            self.log.append(("acquired", lock.fencing_token))
            if self.refuse:
                raise ConnectionRefusedError("warehouse refused the feed")

        async def on_leadership_lost(self, lock: Lock) -> None:
            self.log.append(("lost", lock.fencing_token))

        @property
        def leading(self) -> bool:
            return bool(self.log) and self.log[-1][0] == "acquired"

    return WarehouseFeed


class Feeds:
    def __init__(
        self, bench: Bench, clocks: Sequence[Clock], key: str, ttl_ms: int | None = None
    ) -> None:
        feed = feed_class(key)
        ttl = timedelta(milliseconds=ttl_ms or bench.ttl_ms)
        self.locks = [Locks(store=bench.new_store(), clock=clock, ttl=ttl) for clock in clocks]
        self.feeds = [locks.register(feed(f"instance-{n}")) for n, locks in enumerate(self.locks)]

    async def __aenter__(self) -> Self:
        for locks in self.locks:
            await locks.start()
        await wait_all_tasks_blocked()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for locks in self.locks:
            await locks.aclose()

    def leaders(self) -> list[str]:
        return [feed.name for feed in self.feeds if feed.leading]


async def test_three_instances_elect_exactly_one_leader(bench: Bench):
    async with Feeds(bench, [bench.instance_clock()] * 3, unique_key("feed")) as cluster:
        await bench.pass_time(bench.ttl_ms * 2)
        assert cluster.leaders() == ["instance-0"]
        assert [len(feed.log) for feed in cluster.feeds] == [1, 0, 0]


async def test_a_paused_leader_is_replaced_after_ttl_and_learns_at_its_next_renewal(
    bench: Bench,
):
    paused = ManualClock()
    running = bench.instance_clock()
    async with Feeds(bench, [paused, running, running], unique_key("feed")) as cluster:
        old = cluster.feeds[0].log[0][1]
        await bench.eventually(lambda: len(cluster.leaders()) == 2, within_ms=bench.ttl_ms * 3)
        new_leader = next(feed for feed in cluster.feeds[1:] if feed.leading)
        assert new_leader.log[0][1] > old
        assert cluster.feeds[0].leading, "a paused leader cannot know before its next renewal"
        await paused.advance(timedelta(milliseconds=bench.ttl_ms // 3))
        await wait_all_tasks_blocked()
        assert cluster.feeds[0].log == [("acquired", old), ("lost", old)]


async def _until(check: Callable[[], bool], within_ms: int) -> None:
    """Let real time pass (never a manual clock) until ``check()`` holds."""
    for _ in range(within_ms // 10):
        if check():
            return
        await wait_for_real(10)
    assert check(), f"not true within {within_ms} ms"


async def test_a_leader_that_shuts_down_hands_over_at_once(bench: Bench):
    # campaigns every 10 s, and a manual clock never moves here: a takeover within 2 s is the
    # release's wake-up, not a campaign
    ttl_ms = 30_000
    async with Feeds(bench, [bench.instance_clock()] * 3, unique_key("feed"), ttl_ms) as cluster:
        await cluster.locks[0].aclose()
        assert not cluster.feeds[0].leading
        await _until(lambda: len(cluster.leaders()) == 1, within_ms=2000)
        assert cluster.feeds[0].name not in cluster.leaders()


async def test_an_acquired_hook_that_raises_steps_down_and_leaves_the_key_to_the_others(
    bench: Bench,
):
    # campaigns every 10 s: what happens within 2 s comes from the step-down's release
    clock = bench.instance_clock()
    cluster = Feeds(bench, [clock, clock], unique_key("feed"), ttl_ms=30_000)
    cluster.feeds[0].refuse = True
    async with cluster:
        await _until(lambda: cluster.feeds[1].leading, within_ms=2000)
        # it heard its own release too, and let it be
        assert [event for event, _ in cluster.feeds[0].log] == ["acquired", "lost"]
