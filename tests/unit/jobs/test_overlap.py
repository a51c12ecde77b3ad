"""Overlap policies: a tick during a run is skipped, buffered for one more run, or replaces it."""

from __future__ import annotations

import asyncio

import pytest

import leaselock
from helpers import LocksOnlyStore
from leaselock import Event, LockLostError, Locks, LocksConfigurationError, current_run
from leaselock.stores import InMemoryLockStore
from leaselock.testing import FaultyStore, ManualClock, wait_all_tasks_blocked


class Export:
    """A job whose first run is held open; every run notes its trigger and token."""

    def __init__(self, *, holds: bool = True) -> None:
        self.holds = holds
        self.hold_open = asyncio.Event()
        self.started = asyncio.Event()
        self.runs: list[tuple[str, int]] = []
        self.written: dict[str, int] = {}

    async def run(self) -> int:
        run = current_run()
        assert run is not None
        self.runs.append((run.trigger, run.fencing_token))
        if self.holds and len(self.runs) == 1:
            self.started.set()
            await self.hold_open.wait()
        self.write(run.fencing_token)
        return run.fencing_token

    def write(self, token: int) -> None:
        """A fenced write: refused below the greatest token written."""
        if token < self.written.get("batch", 0):
            raise PermissionError(f"token {token} is older than {self.written['batch']}")
        self.written["batch"] = token


async def test_ticks_during_a_run_make_one_more_run_right_after_it_at_one_round_trip_each(
    clock: ManualClock,
):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
    export = Export()
    job = leaselock.without_overlapping(key="invoices:export", overlap="buffer_one")(export.run)
    ended: list[Event] = []
    async with Locks(store=store, clock=clock) as locks:
        locks.register(job)
        locks.events.subscribe(ended.append, "run-ended")
        first = asyncio.create_task(job())
        await export.started.wait()
        for _ in range(3):
            calls = len(store.calls)
            assert await job() is None
            assert [c.method for c in store.calls[calls:]] == ["start_run"]
        export.hold_open.set()
        await first
        await wait_all_tasks_blocked()
        status = await locks.job_status("invoices:export")

    assert [trigger for trigger, _ in export.runs] == ["schedule", "buffered"]
    assert [e.trigger for e in ended] == ["schedule", "buffered"]  # type: ignore[attr-defined]
    assert status.last_run is not None
    assert status.last_run.trigger == "buffered"


async def test_a_tick_on_another_instance_is_buffered_for_the_running_one(
    store: InMemoryLockStore, clock: ManualClock
):
    here, there = Export(), Export()
    async with (
        Locks(store=store, clock=clock, instance="shop-1") as first,
        Locks(store=store, clock=clock, instance="shop-2") as second,
    ):
        running = leaselock.without_overlapping(key="feed:import", overlap="buffer_one")(here.run)
        elsewhere = leaselock.without_overlapping(key="feed:import", overlap="buffer_one")(
            there.run
        )
        first.register(running)
        second.register(elsewhere)
        task = asyncio.create_task(running())
        await here.started.wait()
        assert await elsewhere() is None
        here.hold_open.set()
        await task
        await wait_all_tasks_blocked()

    assert [trigger for trigger, _ in here.runs] == ["schedule", "buffered"]
    assert there.runs == []


async def test_a_replacing_tick_aborts_and_cancels_the_running_run_whose_late_write_is_refused(
    store: InMemoryLockStore, clock: ManualClock
):
    export = Export()
    lost: list[Event] = []
    job = leaselock.without_overlapping(key="invoices:export", overlap="replace")(export.run)
    async with Locks(store=store, clock=clock) as locks:
        locks.register(job)
        locks.events.subscribe(lost.append, "lock-lost")
        first = asyncio.create_task(job())
        await export.started.wait()
        newer = await job()
        with pytest.raises(LockLostError) as replaced:
            await first
        status = await locks.job_status("invoices:export")

    (old_token, new_token) = [token for _, token in export.runs]
    assert newer == new_token > old_token
    assert replaced.value.detected_by == "replaced"
    assert [e.detected_by for e in lost] == ["replaced"]  # type: ignore[attr-defined]
    with pytest.raises(PermissionError, match="older"):
        export.write(old_token)
    assert status.last_run is not None
    assert (status.last_run.fencing_token, status.last_run.outcome) == (new_token, "ok")


async def test_a_run_replaced_from_another_instance_stops_at_its_next_renewal(
    store: InMemoryLockStore, clock: ManualClock
):
    here, there = Export(), Export(holds=False)
    async with (
        Locks(store=store, clock=clock, instance="shop-1", ttl="30s") as first,
        Locks(store=store, clock=clock, instance="shop-2", ttl="30s") as second,
    ):
        running = leaselock.without_overlapping(key="feed:import", overlap="replace")(here.run)
        replacing = leaselock.without_overlapping(key="feed:import", overlap="replace")(there.run)
        first.register(running)
        second.register(replacing)
        task = asyncio.create_task(running())
        await here.started.wait()
        newer = await replacing()
        await clock.advance("10s")
        with pytest.raises(LockLostError) as replaced:
            await task

    assert replaced.value.detected_by == "renewal"
    assert newer > here.runs[0][1]


async def test_an_overlap_policy_needs_a_store_that_keeps_job_control(clock: ManualClock):
    job = leaselock.without_overlapping(key="feed:import", overlap="buffer_one")(Export().run)
    locks = Locks(store=LocksOnlyStore(InMemoryLockStore(clock=clock)), clock=clock)
    locks.register(job)
    with pytest.raises(LocksConfigurationError, match=r'overlap="buffer_one".*job control'):
        await locks.start()
    with pytest.raises(LocksConfigurationError, match=r'"skip".*"buffer_one".*"replace"'):
        leaselock.without_overlapping(key="x", overlap="queue")  # type: ignore[arg-type]
