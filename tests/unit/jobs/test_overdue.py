"""The dead-man's switch: expect_every fires in each way a job can go silent, and clears."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

import leaselock
from leaselock import Event, JobOverdue, Locks, LocksConfigurationError
from leaselock.stores import InMemoryLockStore
from leaselock.testing import FaultyStore, ManualClock, wait_all_tasks_blocked


def kinds(events: list[Event]) -> list[str]:
    return [event.type for event in events]


def watched(locks: Locks) -> list[Event]:
    seen: list[Event] = []
    locks.events.subscribe(seen.append, "job-overdue", "job-recovered")
    return seen


async def tick_every_minute(clock: ManualClock, minutes: int, *ticks: Callable[[], object]) -> None:
    """Fire each scheduler's tick, then let a minute pass; ``minutes`` times."""
    for _ in range(minutes):
        for tick in ticks:
            result = tick()
            if asyncio.iscoroutine(result):
                await result
        await clock.advance("1m")


class Reconciliation:
    def __init__(self) -> None:
        self.hold_open = asyncio.Event()
        self.hold_open.set()

    @leaselock.without_overlapping(key="stock:reconcile", expect_every="10m")
    async def reconcile(self) -> str:
        await self.hold_open.wait()
        return "reconciled"


async def test_a_run_that_hangs_makes_the_job_overdue_on_every_instance_until_one_succeeds(
    store: InMemoryLockStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
):
    hung, other = Reconciliation(), Reconciliation()
    async with (
        Locks(store=store, clock=clock, instance="shop-3001") as first,
        Locks(store=store, clock=clock, instance="shop-3002") as second,
    ):
        first.register(hung)
        second.register(other)
        on_first, on_second = watched(first), watched(second)
        assert await hung.reconcile() == "reconciled"
        hung.hold_open.clear()
        hanging = asyncio.create_task(hung.reconcile())
        await wait_all_tasks_blocked()
        with caplog.at_level(logging.WARNING, logger="leaselock"):
            await tick_every_minute(clock, 10, other.reconcile)
            assert kinds(on_second) == [], "10 minutes without a success is not yet overdue"
            await tick_every_minute(clock, 2, other.reconcile)
        assert kinds(on_first) == kinds(on_second) == ["job-overdue"]
        overdue = on_second[0]
        assert isinstance(overdue, JobOverdue)
        assert overdue.job == "stock:reconcile"
        assert overdue.expect_every_ms == 600_000
        status = await second.job_status("stock:reconcile")
        assert (status.overdue, status.running_on) == (True, "shop-3001")

        await tick_every_minute(clock, 8, other.reconcile)
        assert kinds(on_second) == ["job-overdue"], "said once per overdue period"
        await tick_every_minute(clock, 3, other.reconcile)
        assert kinds(on_second) == ["job-overdue", "job-overdue"], "and again the next period"

        hung.hold_open.set()
        assert await hanging == "reconciled"
        assert kinds(on_first) == ["job-overdue", "job-overdue", "job-recovered"]
        await tick_every_minute(clock, 1, other.reconcile)
        assert kinds(on_second) == ["job-overdue", "job-overdue", "job-recovered"]
        assert not (await second.job_status("stock:reconcile")).overdue
    assert "stock:reconcile is overdue: no run succeeded in the last 600000 ms" in caplog.text


class Feed:
    def __init__(self) -> None:
        self.runs = 0

    @leaselock.on_one_instance(key="feed:poll", expect_every="5m", owner_idle="1h")
    async def poll(self) -> str:
        self.runs += 1
        return "polled"


async def test_an_owner_whose_scheduler_stopped_makes_the_job_overdue_on_the_others(
    store: InMemoryLockStore, clock: ManualClock
):
    stalled, healthy = Feed(), Feed()
    async with (
        Locks(store=store, clock=clock, instance="shop-3001") as first,
        Locks(store=store, clock=clock, instance="shop-3002") as second,
    ):
        first.register(stalled)
        second.register(healthy)
        on_second = watched(second)
        await tick_every_minute(clock, 3, stalled.poll, healthy.poll)
        # the first instance's scheduler stops; its process, and its renewals, go on: the
        # last success was at 2 min, so the job is overdue after 7.5 min
        await tick_every_minute(clock, 4, healthy.poll)
        assert kinds(on_second) == []
        await tick_every_minute(clock, 1, healthy.poll)
        assert kinds(on_second) == ["job-overdue"]
        assert (stalled.runs, healthy.runs) == (3, 0)
        status = await second.job_status("feed:poll")
        assert (status.owner, status.overdue) == ("shop-3001", True)


async def test_an_owner_that_lets_go_hands_the_job_over_and_the_overdue_alert_clears(
    store: InMemoryLockStore, clock: ManualClock
):
    class IdleFeed:
        def __init__(self) -> None:
            self.runs = 0

        @leaselock.on_one_instance(key="feed:poll", expect_every="5m", owner_idle="6m")
        async def poll(self) -> str:
            self.runs += 1
            return "polled"

    stalled, healthy = IdleFeed(), IdleFeed()
    async with (
        Locks(store=store, clock=clock, instance="shop-3001") as first,
        Locks(store=store, clock=clock, instance="shop-3002") as second,
    ):
        first.register(stalled)
        second.register(healthy)
        on_second = watched(second)
        await tick_every_minute(clock, 1, stalled.poll, healthy.poll)
        # overdue after 5.5 min; the owner lets go after 6 idle minutes
        await tick_every_minute(clock, 5, healthy.poll)
        assert kinds(on_second) == ["job-overdue"]
        assert healthy.runs == 0
        await tick_every_minute(clock, 1, healthy.poll)
        assert healthy.runs == 1, "the next tick after the owner let go took over"
        assert kinds(on_second) == ["job-overdue", "job-recovered"]
        status = await second.job_status("feed:poll")
        assert (status.owner, status.overdue) == ("shop-3002", False)


async def test_a_job_that_fails_every_run_is_overdue(locks: Locks, clock: ManualClock):
    @leaselock.without_overlapping(key="invoices:export", expect_every="2m")
    async def export_invoices() -> None:
        raise ConnectionError("the accounting API is down")

    locks.register(export_invoices)
    seen = watched(locks)
    for _ in range(3):
        with pytest.raises(ConnectionError):
            await export_invoices()
        await clock.advance("1m")
    assert kinds(seen) == ["job-overdue"]
    status = await locks.job_status("invoices:export")
    assert status.last_run is not None
    assert status.last_run.error == "ConnectionError: the accounting API is down"


async def test_a_job_that_never_ticks_here_is_watched_from_the_start_when_registered(
    locks: Locks, clock: ManualClock
):
    @leaselock.on_one_instance(key="reports:nightly", expect_every="1h")
    async def nightly() -> None:
        return None

    locks.register(nightly)
    seen = watched(locks)
    await clock.advance("1h")
    assert kinds(seen) == []
    await clock.advance("7m")
    assert kinds(seen) == ["job-overdue"]
    overdue = seen[0]
    assert isinstance(overdue, JobOverdue)
    assert overdue.last_success_at is None


async def test_an_unreadable_store_is_logged_once_and_checked_again(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)

    @leaselock.on_one_instance(key="reports:nightly", expect_every="4s")
    async def nightly() -> None:
        return None

    async with Locks(store=store, clock=clock) as locks:
        locks.register(nightly)
        seen = watched(locks)
        outage = store.fail("job_records")
        with caplog.at_level(logging.WARNING, logger="leaselock"):
            await clock.advance("10s")
        outage.remove()
        await clock.advance("1s")
        assert kinds(seen) == ["job-overdue"]
    assert caplog.text.count("Could not read the run records of reports:nightly") == 1


@pytest.mark.parametrize("expect_every", ["soon", 0, -5, "1ms"])
def test_a_bad_expect_every_is_refused_naming_it(expect_every: object):
    with pytest.raises(LocksConfigurationError, match="expect_every"):
        leaselock.on_one_instance(key="jobs:x", expect_every=expect_every)  # type: ignore[arg-type]


def test_two_different_expect_every_on_one_job_are_refused():
    with pytest.raises(LocksConfigurationError, match="two expect_every values"):

        @leaselock.on_one_instance(key="jobs:x", expect_every="1m")
        @leaselock.without_overlapping(expect_every="2m")
        async def job() -> None:
            return None
