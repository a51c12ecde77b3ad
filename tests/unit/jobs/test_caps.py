"""A cap on a run (max_run), a warning for runs that seem to hang, and an owner that lets go."""

from __future__ import annotations

import asyncio
import logging

import pytest

import leaselock
from leaselock import Event, LockLostError, Locks, current_lock
from leaselock.stores import InMemoryLockStore
from leaselock.testing import ManualClock, wait_all_tasks_blocked


class Reconciliation:
    """A run that hangs until told otherwise; capped at 15 minutes."""

    def __init__(self) -> None:
        self.hold_open = asyncio.Event()
        self.signals: list[leaselock.LockSignal] = []
        self.runs = 0

    @leaselock.without_overlapping(key="stock:reconcile", max_run="15m")
    async def reconcile(self) -> str:
        self.runs += 1
        lock = current_lock()
        assert lock is not None
        self.signals.append(lock.signal)
        await self.hold_open.wait()
        return "reconciled"


async def test_a_run_past_max_run_loses_its_lock_so_the_next_tick_runs(
    store: InMemoryLockStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
):
    lost: list[Event] = []
    async with Locks(store=store, clock=clock) as locks:
        locks.events.subscribe(lost.append, "lock-lost")
        job = locks.register(Reconciliation())
        hanging = asyncio.create_task(job.reconcile())
        await wait_all_tasks_blocked()
        with caplog.at_level(logging.WARNING, logger="leaselock"):
            await clock.advance("14m59s")
            assert not job.signals[0].aborted
            await clock.advance("1s")
        reason = job.signals[0].reason
        assert reason is not None
        assert reason.detected_by == "max_run"
        assert [getattr(event, "detected_by", None) for event in lost] == ["max_run"]
        assert "stock:reconcile" not in store._rows, "the run lock is released"
        job.hold_open.set()
        assert await hanging == "reconciled", "a sync or unasked run goes on; its signal says"
        assert await job.reconcile() == "reconciled", "the next tick runs"
    assert "stock:reconcile has run for 900000 ms, past its max_run" in caplog.text


async def test_with_cancel_on_loss_a_run_past_max_run_is_cancelled_and_raises_the_loss(
    locks: Locks, clock: ManualClock
):
    started = asyncio.Event()

    @leaselock.without_overlapping(key="feed:import", max_run="1m", cancel_on_loss=True)
    async def import_feed() -> None:
        started.set()
        await asyncio.Event().wait()

    locks.register(import_feed)
    running = asyncio.create_task(import_feed())
    await started.wait()
    await clock.advance("1m")
    with pytest.raises(LockLostError) as lost:
        await running
    assert lost.value.detected_by == "max_run"


async def test_without_max_run_three_ticks_in_a_row_that_find_a_run_in_progress_warn(
    locks: Locks, caplog: pytest.LogCaptureFixture
):
    hold_open = asyncio.Event()

    @leaselock.without_overlapping(key="counts:monthly")
    async def count() -> None:
        await hold_open.wait()

    locks.register(count)
    running = asyncio.create_task(count())
    await wait_all_tasks_blocked()
    with caplog.at_level(logging.WARNING, logger="leaselock"):
        for _ in range(4):
            assert await count() is None
    hold_open.set()
    await running
    assert caplog.text.count("counts:monthly: 3 ticks in a row found a run still in progress") == 1
    assert 'without_overlapping(max_run="...")' in caplog.text


class Feed:
    def __init__(self) -> None:
        self.runs = 0

    @leaselock.on_one_instance(key="feed:poll")
    async def poll(self) -> str:
        self.runs += 1
        return "polled"


async def test_an_owner_whose_ticks_stop_hands_its_lease_back_and_another_instance_takes_over(
    store: InMemoryLockStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
):
    stalled, healthy = Feed(), Feed()
    handed_back: list[Event] = []
    async with (
        Locks(store=store, clock=clock, instance="shop-3001") as first,
        Locks(store=store, clock=clock, instance="shop-3002") as second,
    ):
        first.register(stalled)
        second.register(healthy)
        first.events.subscribe(handed_back.append, "lock-handed-back")
        for _ in range(3):  # a tick every minute on both; the first owns the job
            assert await stalled.poll() == "polled"
            assert await healthy.poll() is None
            await clock.advance("1m")
        with caplog.at_level(logging.INFO, logger="leaselock"):
            # the first instance's scheduler stops; its process (and its renewals) go on
            for _ in range(2):
                assert await healthy.poll() is None
                await clock.advance("1m")
            await clock.advance("1m")
        assert [getattr(event, "reason", None) for event in handed_back] == ["idle"]
        assert await healthy.poll() == "polled", "the next tick anywhere takes over"
    assert 'Handed back "feed:poll:owner"' in caplog.text
    assert "no tick of feed:poll came for its owner_idle" in caplog.text


async def test_owner_idle_can_be_set(store: InMemoryLockStore, clock: ManualClock):
    @leaselock.on_one_instance(key="jobs:rare", owner_idle="10m")
    async def rare() -> str:
        return "ran"

    async with Locks(store=store, clock=clock) as locks:
        locks.register(rare)
        assert await rare() == "ran"
        await clock.advance("9m")
        assert "jobs:rare:owner" in store._rows
        await clock.advance("1m")
        assert "jobs:rare:owner" not in store._rows
