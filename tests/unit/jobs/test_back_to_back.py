"""An owner whose ticks come back to back runs each one; its idle time starts as a run ends."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import leaselock
from helpers import back_to_back
from leaselock import Event, LockHandedBack, Locks, RunAbandoned, TickSkipped
from leaselock.stores import InMemoryLockStore
from leaselock.testing import FaultyStore, ManualClock, wait_all_tasks_blocked

T = TypeVar("T")


class Feed:
    """A feed whose every run says when its body returned."""

    def __init__(self) -> None:
        self.runs = 0
        self.returned = asyncio.Event()

    @leaselock.on_one_instance(key="feed:poll")
    async def poll(self) -> int:
        self.runs += 1
        self.returned.set()
        return self.runs


async def as_time_passes(clock: ManualClock, work: Coroutine[Any, Any, T]) -> T:
    """Return what ``work`` returns, with time passing on ``clock`` a millisecond at a time."""
    running = asyncio.ensure_future(work)
    while not running.done():
        await clock.advance("1ms")
    return running.result()


async def test_an_owner_whose_ticks_come_back_to_back_runs_every_one_and_loses_none(
    clock: ManualClock,
):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
    feed = Feed()
    events: list[Event] = []

    async def scheduler() -> list[int | None]:
        results: list[int | None] = []
        for _ in range(8):
            # one run start in 25 is answered late (a commit waiting on the disk)
            store.delay("start_run", "30ms", times=1)
            results += await back_to_back(feed.poll, feed.returned, 25)
        return results

    async with Locks(store=store, clock=clock) as locks:
        locks.register(feed)
        locks.events.subscribe(events.append)
        store.delay(None, "2ms")  # every answer comes 2 ms after its call, as over a network
        results = await as_time_passes(clock, scheduler())
        store.heal()
        status = await locks.job_status("feed:poll")

    skipped = [event for event in events if isinstance(event, TickSkipped)]
    abandoned = [event for event in events if isinstance(event, RunAbandoned)]
    assert (feed.runs, results.count(None)) == (200, 0), "every tick ran, on the owner"
    assert (skipped, abandoned) == ([], [])
    assert status.last_run is not None
    assert status.last_run.outcome == "ok"
    handed_back = [event.reason for event in events if isinstance(event, LockHandedBack)]
    assert handed_back == ["shutdown"], "never idle between its own ticks"


async def test_an_owner_hands_its_lease_back_once_idle_after_its_last_run_ended_however_long(
    store: InMemoryLockStore, clock: ManualClock
):
    hold_open = asyncio.Event()

    @leaselock.on_one_instance(key="stock:count")
    async def count(*, month_end: bool = False) -> str:
        if month_end:
            await hold_open.wait()
        return "counted"

    async with Locks(store=store, clock=clock) as locks:
        locks.register(count)
        for _ in range(3):  # a tick a minute: the owner lets go after three idle minutes
            assert await count() == "counted"
            await clock.advance("1m")
        # the month-end count takes ten minutes; the scheduler stops after it
        month_end = asyncio.create_task(count(month_end=True))
        await wait_all_tasks_blocked()
        await clock.advance("10m")
        hold_open.set()
        assert await month_end == "counted"
        await clock.advance("2m59s")
        assert "stock:count:owner" in store._rows, "idle for less than three minutes"
        await clock.advance("1s")
        assert "stock:count:owner" not in store._rows


async def test_a_tick_that_comes_while_the_idle_owner_hands_its_lease_back_takes_it_afresh(
    clock: ManualClock,
):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
    skipped: list[Event] = []

    @leaselock.on_one_instance(key="jobs:rare", owner_idle="10m")
    async def rare() -> str:
        return "ran"

    async with Locks(store=store, clock=clock) as locks:
        locks.register(rare)
        locks.events.subscribe(skipped.append, "tick-skipped")
        assert await rare() == "ran"
        store.delay("release", "500ms", on="request", times=1)
        await clock.advance("10m")  # the owner lets go; its release reaches the store 500 ms later
        late = asyncio.create_task(rare())
        await clock.advance("500ms")
        assert await late == "ran"
    assert skipped == []


async def test_a_tick_that_comes_as_the_last_run_ends_runs_and_that_run_is_not_taken_for_lost(
    clock: ManualClock,
):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
    returned = asyncio.Event()
    runs: list[int] = []

    @leaselock.on_one_instance(key="stock:reconcile")
    @leaselock.without_overlapping()
    async def reconcile() -> int:
        runs.append(len(runs) + 1)
        returned.set()
        return runs[-1]

    abandoned: list[Event] = []
    async with Locks(store=store, clock=clock) as locks:
        locks.register(reconcile)
        locks.events.subscribe(abandoned.append, "run-abandoned")
        # the first run releases its run lock, then its end takes 10 ms to reach the store
        store.delay("end_run", "10ms", on="request", times=1)
        ending = asyncio.create_task(reconcile())
        await returned.wait()
        await wait_all_tasks_blocked()
        assert await reconcile() == 2, "the run lock is free: the next tick runs"
        await clock.advance("10ms")
        assert await ending == 1
        status = await locks.job_status("stock:reconcile")
    assert abandoned == []
    assert status.last_run is not None
    assert status.last_run.outcome == "ok"


async def test_an_owner_whose_ticks_come_back_to_back_lets_go_only_after_a_second_without_one(
    clock: ManualClock,
):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
    feed = Feed()
    handed_back: list[Event] = []
    async with Locks(store=store, clock=clock) as locks:
        locks.register(feed)
        locks.events.subscribe(handed_back.append, "lock-handed-back")
        store.delay(None, "2ms")  # ticks a few milliseconds apart: a store round trip or two
        await as_time_passes(clock, back_to_back(feed.poll, feed.returned, 25))
        store.heal()
        assert await feed.poll() == 26
        # the scheduler stalls (a busy loop, a pause): less than a second is not idle; an
        # owner that let go sooner would let an instance firing the same tick run it again
        await clock.advance("999ms")
        assert handed_back == []
        await clock.advance("1ms")
        assert [getattr(event, "reason", None) for event in handed_back] == ["idle"]
