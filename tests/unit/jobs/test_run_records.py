"""Run records: every run's end kept in the store, read back by job_status() and jobs()."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

import leaselock
from helpers import LocksOnlyStore
from leaselock import JobStatus, Locks, LocksConfigurationError, current_lock
from leaselock.stores import InMemoryLockStore
from leaselock.testing import FaultyStore, ManualClock, wait_all_tasks_blocked


class Warehouse:
    """A count that fails when told to, and can be held open."""

    def __init__(self) -> None:
        self.fail_with: Exception | None = None
        self.hold_open: asyncio.Event | None = None
        self.tokens: list[int] = []

    @leaselock.on_one_instance(key="warehouse:count")
    @leaselock.without_overlapping(max_run="10m")
    async def count(self) -> str:
        lock = current_lock()
        assert lock is not None
        self.tokens.append(lock.fencing_token)
        if self.hold_open is not None:
            await self.hold_open.wait()
        if self.fail_with is not None:
            raise self.fail_with
        return "counted"


async def test_each_run_is_recorded_with_its_outcome_instance_token_and_duration(
    store: InMemoryLockStore, clock: ManualClock
):
    warehouse = Warehouse()
    async with Locks(store=store, clock=clock, instance="shop-3002") as locks:
        locks.register(warehouse)
        warehouse.hold_open = asyncio.Event()
        running = asyncio.create_task(warehouse.count())
        await wait_all_tasks_blocked()
        await clock.advance("2500ms")
        warehouse.hold_open.set()
        assert await running == "counted"
        first = await locks.job_status("warehouse:count")

        warehouse.hold_open, warehouse.fail_with = None, ValueError("aisle 7 unreadable")
        with pytest.raises(ValueError, match="aisle 7"):
            await warehouse.count()
        second = await locks.job_status("warehouse:count")

    assert first.last_run is not None
    assert first.last_run == first.last_success
    assert (first.last_run.outcome, first.last_run.instance) == ("ok", "shop-3002")
    assert first.last_run.fencing_token == warehouse.tokens[0]
    assert first.last_run.duration == timedelta(milliseconds=2500)
    assert second.last_run is not None
    assert second.last_run.outcome == "error"
    assert second.last_run.error == "ValueError: aisle 7 unreadable"
    assert second.last_run.fencing_token == warehouse.tokens[1] > warehouse.tokens[0]
    assert second.last_success == first.last_run, "the last success is kept"


async def test_a_cancelled_run_and_a_run_past_its_cap_are_recorded_as_such(
    locks: Locks, clock: ManualClock
):
    warehouse = Warehouse()
    locks.register(warehouse)
    warehouse.hold_open = asyncio.Event()
    cancelled = asyncio.create_task(warehouse.count())
    await wait_all_tasks_blocked()
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    after_cancel = await locks.job_status("warehouse:count")

    capped = asyncio.create_task(warehouse.count())
    await wait_all_tasks_blocked()
    await clock.advance("10m")
    warehouse.hold_open.set()
    assert await capped == "counted", "the run went on; its lock did not"
    after_cap = await locks.job_status("warehouse:count")

    assert after_cancel.last_run is not None
    assert after_cancel.last_run.outcome == "cancelled"
    assert after_cap.last_run is not None
    assert after_cap.last_run.outcome == "lost"
    assert after_cap.last_success is None


async def test_job_status_says_where_a_job_runs_now_and_where_it_is_owned(
    store: InMemoryLockStore, clock: ManualClock
):
    warehouse = Warehouse()
    warehouse.hold_open = asyncio.Event()
    async with (
        Locks(store=store, clock=clock, instance="shop-3001") as first,
        Locks(store=store, clock=clock, instance="shop-3002") as second,
    ):
        first.register(warehouse)
        before = await second.job_status("warehouse:count")
        running = asyncio.create_task(warehouse.count())
        await wait_all_tasks_blocked()
        during = await second.job_status("warehouse:count")
        warehouse.hold_open.set()
        await running
        after = await second.job_status("warehouse:count")

    assert before == JobStatus(
        job="warehouse:count",
        last_run=None,
        last_success=None,
        running_on=None,
        owner=None,
        expect_every=None,
        overdue=False,
    )
    assert (during.running, during.running_on, during.owner) == (True, "shop-3001", "shop-3001")
    assert (after.running, after.owner) == (False, "shop-3001")
    assert after.last_run is not None
    assert after.last_run.instance == "shop-3001"


async def test_jobs_lists_this_locks_jobs_and_every_job_the_store_has_records_of(
    store: InMemoryLockStore, clock: ManualClock
):
    @leaselock.without_overlapping(key="invoices:export")
    async def export_invoices() -> None:
        return None

    @leaselock.on_one_instance(key="reports:daily", expect_every="1d")
    async def daily_report() -> None:
        return None

    async with Locks(store=store, clock=clock, instance="elsewhere") as elsewhere:
        elsewhere.register(export_invoices)
        await export_invoices()
    async with Locks(store=store, clock=clock) as locks:
        locks.register(daily_report)
        listed = await locks.jobs()

    assert [status.job for status in listed] == ["invoices:export", "reports:daily"]
    exported, daily = listed
    assert exported.last_run is not None
    assert exported.last_run.instance == "elsewhere"
    assert (daily.last_run, daily.expect_every) == (None, timedelta(days=1))


async def test_a_skipped_tick_costs_one_store_round_trip_and_a_run_one_more_than_its_lock(
    clock: ManualClock,
):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)

    @leaselock.without_overlapping(key="feed:import")
    async def import_feed(hold_open: asyncio.Event) -> None:
        await hold_open.wait()

    async with Locks(store=store, clock=clock) as locks:
        locks.register(import_feed)
        hold_open = asyncio.Event()
        running = asyncio.create_task(import_feed(hold_open))
        await wait_all_tasks_blocked()
        before_skip = len(store.calls)
        assert await import_feed(hold_open) is None
        skipped_tick = [call.method for call in store.calls[before_skip:]]
        hold_open.set()
        await running
        run = [call.method for call in store.calls[:before_skip]] + [
            call.method for call in store.calls[before_skip + 1 :]
        ]

    # the run lock's acquire rides in the run's start: one round trip decides a tick
    assert skipped_tick == ["start_run"]
    assert run == ["start_run", "release", "end_run"]


async def test_a_store_that_cannot_record_never_fails_the_run_and_warns_once(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
    store.fail("end_run")

    @leaselock.without_overlapping(key="feed:import")
    async def import_feed() -> str:
        return "imported"

    async with Locks(store=store, clock=clock) as locks:
        locks.register(import_feed)
        with caplog.at_level(logging.DEBUG, logger="leaselock"):
            assert [await import_feed() for _ in range(3)] == ["imported"] * 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage().split(" (")[0] for r in warnings] == [
        "Could not record the end of a run of feed:import"
    ]
    assert [c.outcome for c in store.calls if c.method == "end_run"] == ["InjectedFaultError"] * 3


async def test_a_store_without_run_records_runs_jobs_and_refuses_job_status_naming_the_fix(
    clock: ManualClock,
):
    @leaselock.without_overlapping(key="feed:import")
    async def import_feed() -> str:
        return "imported"

    async with Locks(store=LocksOnlyStore(InMemoryLockStore(clock=clock)), clock=clock) as locks:
        locks.register(import_feed)
        assert await import_feed() == "imported"
        with pytest.raises(LocksConfigurationError, match="keeps no job run records"):
            await locks.job_status("feed:import")


async def test_job_status_before_start_and_with_a_bad_key_says_what_to_fix(
    store: InMemoryLockStore, clock: ManualClock
):
    locks = Locks(store=store, clock=clock)
    with pytest.raises(LocksConfigurationError, match="not started"):
        await locks.job_status("feed:import")
    async with locks:
        with pytest.raises(LocksConfigurationError, match="key"):
            await locks.job_status("")
