"""Each instance measures its clock against the store's, and says when jobs cannot allow for it."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

import pytest

import leaselock
from leaselock import ClockOffsetLarge, Event, Locks
from leaselock._cli._operate import _said_offset
from leaselock._clock import utc_now, wall_time_from
from leaselock.stores import InMemoryLockStore, SupportsStoreClock
from leaselock.stores._common._capabilities import epoch_ms
from leaselock.testing import ManualClock, wait_all_tasks_blocked

JOB = "stock:reconcile"


class ClockedStore:
    """The in-memory store, with a server clock ``skew_ms`` from this host's, or failing."""

    def __init__(self, inner: InMemoryLockStore, skew_ms: int) -> None:
        self._inner = inner
        self.skew_ms = skew_ms
        self.failing = False
        self.asked = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    async def store_time_ms(self) -> int:
        self.asked += 1
        if self.failing:
            raise ConnectionError("the server went away")
        # this host's wall time as leaselock reads it, which a test may set (wall_time_from)
        return epoch_ms(utc_now()) + self.skew_ms


@leaselock.on_one_instance(key=JOB)
async def reconcile() -> str:
    return "reconciled"


def offsets(locks: Locks) -> list[Event]:
    seen: list[Event] = []
    locks.events.subscribe(seen.append, "clock-offset-large")
    return seen


def near(offset: timedelta | None, skew_ms: int) -> bool:
    # the store answers within the test's loop: the measurement is off by its round trip only
    return offset is not None and abs(offset - timedelta(milliseconds=skew_ms)) < timedelta(
        milliseconds=100
    )


async def test_an_instance_3_s_behind_the_store_is_warned_once_and_again_after_it_came_back(
    store: InMemoryLockStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    clocked = ClockedStore(store, skew_ms=3000)
    assert isinstance(clocked, SupportsStoreClock)
    async with Locks(store=clocked, clock=clock, instance="shop-3001") as locks:
        seen = offsets(locks)
        with caplog.at_level(logging.INFO, logger="leaselock"):
            assert await reconcile() == "reconciled"
            await wait_all_tasks_blocked()
            [large] = seen
            assert isinstance(large, ClockOffsetLarge)
            assert abs(large.offset_ms - 3000) < 100
            assert large.bound_ms == 1000
            assert large.instance == "shop-3001"
            assert "s behind the lock store's" in large.message()
            assert near((await locks.job_status(JOB)).clock_offset, 3000)

            await clock.advance("1m")
            assert clocked.asked == 2
            assert len(seen) == 1, "an offset still large is reported once"

            clocked.skew_ms = 200
            await clock.advance("1m")
            assert near((await locks.job_status(JOB)).clock_offset, 200)
            assert "back within 1 s of the lock store's" in caplog.text

            clocked.skew_ms = -5000
            await clock.advance("1m")
        assert [event.type for event in seen] == ["clock-offset-large"] * 2
        assert isinstance(seen[1], ClockOffsetLarge)
        assert "s ahead of the lock store's" in seen[1].message()


async def test_an_offset_within_a_second_is_shown_and_raises_nothing(
    store: InMemoryLockStore, clock: ManualClock
) -> None:
    clocked = ClockedStore(store, skew_ms=-300)
    async with Locks(store=clocked, clock=clock) as locks:
        seen = offsets(locks)
        await reconcile()
        await wait_all_tasks_blocked()
        assert near((await locks.job_status(JOB)).clock_offset, -300)
    assert seen == []


async def test_no_tick_no_question_until_an_operator_asks_for_the_jobs(
    store: InMemoryLockStore, clock: ManualClock
) -> None:
    clocked = ClockedStore(store, skew_ms=1500)
    async with Locks(store=clocked, clock=clock) as locks:
        locks.register(reconcile)
        await clock.advance("5m")
        assert clocked.asked == 0, "a Locks whose jobs did not tick asks the store nothing"
        [status] = await locks.jobs()
        assert clocked.asked == 1
        assert near(status.clock_offset, 1500)


async def test_a_store_that_cannot_tell_its_time_keeps_the_last_offset_and_runs_on(
    store: InMemoryLockStore, clock: ManualClock
) -> None:
    clocked = ClockedStore(store, skew_ms=2000)
    async with Locks(store=clocked, clock=clock) as locks:
        await reconcile()
        await wait_all_tasks_blocked()
        clocked.failing = True
        await clock.advance("1m")
        assert clocked.asked == 2
        assert await reconcile() == "reconciled"
        assert near((await locks.job_status(JOB)).clock_offset, 2000)


async def test_a_store_with_no_clock_of_its_own_shows_no_offset(locks: Locks) -> None:
    locks.register(reconcile)
    await reconcile()
    assert (await locks.job_status(JOB)).clock_offset is None


def test_the_jobs_command_says_how_far_this_hosts_clock_is_and_whether_jobs_allow_for_it() -> None:
    assert _said_offset(timedelta(milliseconds=2500)) == (
        "This host's clock is 2.500 s behind the store's, more than the 1 s that jobs on one "
        "instance allow for: keep the hosts' clocks in time (NTP, chrony)"
    )
    assert _said_offset(timedelta(milliseconds=-40)) == (
        "This host's clock is 0.040 s ahead of the store's, within the 1 s that jobs on one "
        "instance allow for"
    )


async def test_a_declared_schedule_places_its_first_tick_with_the_measured_offset(
    store: InMemoryLockStore, clock: ManualClock
) -> None:
    # 10:00:04 here is 10:00:07 on the store's clock: the tick is the store's 10:00:10
    clocked = ClockedStore(store, skew_ms=3000)
    here = datetime(2026, 12, 6, 10, 0, 4, tzinfo=UTC)
    ticks: list[datetime | None] = []

    @leaselock.on_one_instance(key="feed:poll", every="10s")
    async def poll() -> None:
        run = leaselock.current_run()
        assert run is not None
        ticks.append(run.tick)

    with wall_time_from(lambda: here + timedelta(milliseconds=clock.now_ms())):
        async with Locks(store=clocked, clock=clock) as locks:
            locks.register(poll)
            await poll()
    assert clocked.asked == 1
    assert ticks == [datetime(2026, 12, 6, 10, 0, 10, tzinfo=UTC)]


async def test_a_declared_schedule_of_2_s_allows_half_a_second_of_offset(
    store: InMemoryLockStore, clock: ManualClock
) -> None:
    clocked = ClockedStore(store, skew_ms=700)

    @leaselock.on_one_instance(key="feed:poll", every="2s")
    async def poll() -> None: ...

    async with Locks(store=clocked, clock=clock) as locks:
        seen = offsets(locks)
        locks.register(poll)
        await poll()
        await wait_all_tasks_blocked()
    [large] = seen
    assert isinstance(large, ClockOffsetLarge)
    assert large.bound_ms == 500


async def test_first_ticks_of_two_jobs_at_once_start_one_measurement(
    store: InMemoryLockStore, clock: ManualClock
) -> None:
    clocked = ClockedStore(store, skew_ms=0)

    @leaselock.on_one_instance(key="feed:poll")
    async def poll() -> None: ...

    async with Locks(store=clocked, clock=clock) as locks:
        locks.register(poll)
        await asyncio.gather(reconcile(), poll())
        await wait_all_tasks_blocked()
        assert clocked.asked == 1
        await clock.advance("1m")
        assert clocked.asked == 2
