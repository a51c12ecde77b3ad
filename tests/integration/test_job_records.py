"""Jobs that never go silent, on every shipped store: run records, job status, the overdue
alert, an owner that lets go, a cap on a run, and a broken lock. PostgreSQL, Redis and etcd run
in real time on their own clocks; in-memory and SQLite on the manual clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta

import pytest

import leaselock
from helpers import back_to_back, unique_key
from leaselock import Event, Locks, current_lock
from leaselock.testing import wait_all_tasks_blocked
from store_benches import JOB_STORES, Bench

pytestmark = pytest.mark.parametrize("bench", JOB_STORES, indirect=True)

TICK_MS = 300


@asynccontextmanager
async def shop(bench: Bench, *labels: str) -> AsyncIterator[list[Locks]]:
    """A started Locks per label, each with a store object of its own, as replicas have."""
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(
                Locks(
                    store=bench.new_store(),
                    clock=bench.instance_clock(),
                    ttl=timedelta(milliseconds=bench.ttl_ms),
                    instance=label,
                )
            )
            for label in labels
        ]


async def settle(bench: Bench) -> None:
    if bench.manual is not None:
        await wait_all_tasks_blocked()


async def test_runs_are_recorded_in_the_store_and_read_back_from_any_instance(bench: Bench):
    key = unique_key("warehouse:count")
    outcomes = iter(["ok", "error"])

    @leaselock.on_one_instance(key=key)
    @leaselock.without_overlapping()
    async def count() -> int:
        lock = current_lock()
        assert lock is not None
        if next(outcomes) == "error":
            raise RuntimeError("aisle 7 unreadable")
        return lock.fencing_token

    async with shop(bench, "shop-3001", "shop-3002") as (first, second):
        first.register(count)
        token = await count()
        await bench.pass_time(50)
        with pytest.raises(RuntimeError, match="aisle 7"):
            await count()
        status = await second.job_status(key)
        listed = {s.job: s for s in await second.jobs()}

    assert status.last_run is not None
    assert status.last_success is not None
    assert (status.last_run.outcome, status.last_run.error) == (
        "error",
        "RuntimeError: aisle 7 unreadable",
    )
    assert (status.last_success.instance, status.last_success.fencing_token) == (
        "shop-3001",
        token,
    )
    assert status.last_run.started_at >= status.last_success.ended_at
    assert status.owner == "shop-3001"
    assert listed[key] == status


async def test_a_hung_run_makes_the_job_overdue_on_the_other_instance(bench: Bench):
    key = unique_key("stock:reconcile")
    hold_open = asyncio.Event()
    started = asyncio.Event()

    class Reconciliation:
        @leaselock.without_overlapping(key=key, expect_every="2s")
        async def reconcile(self) -> None:
            started.set()
            await hold_open.wait()

    hung, other = Reconciliation(), Reconciliation()
    overdue: list[Event] = []
    async with shop(bench, "shop-3001", "shop-3002") as (first, second):
        first.register(hung)
        second.register(other)
        second.events.subscribe(overdue.append, "job-overdue", "job-recovered")
        hanging = asyncio.create_task(hung.reconcile())
        await asyncio.wait_for(started.wait(), 10)

        async def tick_until_overdue() -> bool:
            assert await other.reconcile() is None
            return bool(overdue)

        for _ in range(40):
            if await tick_until_overdue():
                break
            await bench.pass_time(TICK_MS)
        assert [e.type for e in overdue] == ["job-overdue"]
        status = await second.job_status(key)
        assert (status.overdue, status.running_on) == (True, "shop-3001")
        hold_open.set()
        await hanging
        await bench.eventually(lambda: len(overdue) == 2, within_ms=5000)
    assert [e.type for e in overdue] == ["job-overdue", "job-recovered"]


async def test_an_owner_whose_scheduler_stops_lets_go_and_another_instance_takes_over(
    bench: Bench,
):
    key = unique_key("feed:poll")

    class Feed:
        def __init__(self) -> None:
            self.runs = 0

        @leaselock.on_one_instance(key=key, owner_idle="1s")
        async def poll(self) -> None:
            self.runs += 1

    stalled, healthy = Feed(), Feed()
    async with shop(bench, "shop-3001", "shop-3002") as (first, second):
        first.register(stalled)
        second.register(healthy)
        await stalled.poll()
        await healthy.poll()
        for _ in range(40):
            await bench.pass_time(TICK_MS)
            await settle(bench)
            await healthy.poll()
            if healthy.runs:
                break
        assert (stalled.runs, healthy.runs) == (1, 1)
        assert (await second.job_status(key)).owner == "shop-3002"


async def test_an_owner_whose_ticks_come_back_to_back_runs_every_one_and_records_none_lost(
    bench: Bench,
):
    key = unique_key("feed:poll")
    returned = asyncio.Event()
    runs: list[int] = []

    @leaselock.on_one_instance(key=key)
    async def poll() -> int:
        runs.append(len(runs) + 1)
        returned.set()
        return runs[-1]

    wrong: list[Event] = []
    async with shop(bench, "shop-3001") as (locks,):
        locks.register(poll)
        locks.events.subscribe(wrong.append, "tick-skipped", "run-abandoned")
        results = await back_to_back(poll, returned, 200)
        status = await locks.job_status(key)
    assert (len(runs), results.count(None), wrong) == (200, 0, [])
    assert status.last_run is not None
    assert status.last_run.outcome == "ok"


async def test_a_run_past_its_cap_gives_its_lock_up_and_the_next_tick_runs(bench: Bench):
    key = unique_key("feed:import")
    hold_open = asyncio.Event()

    @leaselock.without_overlapping(key=key, max_run="1s")
    async def import_feed() -> str:
        lock = current_lock()
        assert lock is not None
        if not hold_open.is_set():
            hold_open.set()
            await asyncio.Event().wait()
        return "imported"

    lost: list[Event] = []
    async with shop(bench, "shop-3001") as (locks,):
        locks.register(import_feed)
        locks.events.subscribe(lost.append, "lock-lost")
        capped = asyncio.create_task(import_feed())
        await asyncio.wait_for(hold_open.wait(), 10)
        await bench.eventually(lambda: bool(lost), within_ms=5000)
        # the capped run's lock is released in the background, as the run goes on
        results = []
        for _ in range(20):
            results.append(await import_feed())
            if results[-1] == "imported":
                break
            await bench.pass_time(50)
        assert results[-1] == "imported"
        capped.cancel()
        await asyncio.gather(capped, return_exceptions=True)
        status = await locks.job_status(key)
    assert [getattr(e, "detected_by", None) for e in lost] == ["max_run"]
    assert status.last_run is not None
    # the capped run ended last, lost; it started first, so the newer run stays the last one
    assert status.last_run.outcome == "ok"
    assert status.last_success == status.last_run


async def test_a_broken_lock_is_taken_at_once_with_a_greater_token_and_its_holder_learns(
    bench: Bench,
):
    key = unique_key("invoices:export")
    async with shop(bench, "stuck", "operator") as (stuck, operator):
        held = await stuck.acquire(key)
        assert held is not None
        listed = await operator.inspect(key)
        broken = await operator.break_lock(key)
        successor = await operator.acquire(key)
        assert successor is not None
        await bench.eventually(lambda: not held.held, within_ms=bench.ttl_ms)
        reason = held.signal.reason
    assert [(i.key, i.instance, i.live) for i in listed] == [(key, "stuck", True)]
    assert broken is not None
    assert broken.instance == "stuck"
    assert successor.fencing_token > held.fencing_token
    assert reason is not None
    assert reason.detected_by == "renewal"
