"""Locks for operators: inspect, read and break locks; the broken holder finds out in time."""

from __future__ import annotations

import asyncio
import logging

import pytest

from helpers import LocksOnlyStore
from leaselock import Event, Locks, LocksConfigurationError, LockStoreError
from leaselock.stores import InMemoryLockStore
from leaselock.testing import FaultyStore, ManualClock, wait_all_tasks_blocked


async def test_inspect_lists_live_locks_by_prefix_with_their_instance_and_time_left(
    store: InMemoryLockStore, clock: ManualClock
):
    async with Locks(store=store, clock=clock, ttl="30s", instance="shop-3002") as locks:
        first = await locks.acquire("orders:1")
        second = await locks.acquire("orders:2")
        await locks.acquire("products:1")
        assert first is not None
        assert second is not None
        await clock.advance("10s")
        await wait_all_tasks_blocked()
        listed = await locks.inspect("orders:")
        one = await locks.read_lock("orders:2")
    assert [(i.key, i.instance, i.fencing_token) for i in listed] == [
        ("orders:1", "shop-3002", first.fencing_token),
        ("orders:2", "shop-3002", second.fencing_token),
    ]
    # renewed at a third of the ttl: less than the full ttl left, more than two thirds
    assert all(i.expires_in_ms is not None and 20_000 <= i.expires_in_ms <= 30_000 for i in listed)
    assert one == listed[1]


async def test_a_broken_lock_goes_to_the_next_acquirer_and_its_holder_learns_at_renewal(
    store: InMemoryLockStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
):
    lost: list[Event] = []
    async with (
        Locks(store=store, clock=clock, ttl="30s", instance="stuck") as stuck,
        Locks(store=store, clock=clock, ttl="30s", instance="operator") as operator,
    ):
        stuck.events.subscribe(lost.append, "lock-lost")
        held = await stuck.acquire("invoices:export")
        assert held is not None
        with caplog.at_level(logging.WARNING, logger="leaselock"):
            broken = await operator.break_lock("invoices:export")
        assert broken is not None
        assert (broken.instance, broken.fencing_token) == ("stuck", held.fencing_token)
        successor = await operator.acquire("invoices:export")
        assert successor is not None
        assert successor.fencing_token > held.fencing_token
        assert held.held, "the holder does not know yet"
        await clock.advance("10s")
        await wait_all_tasks_blocked()
        assert not held.held
        reason = held.signal.reason
        assert reason is not None
        assert reason.detected_by == "renewal"
        assert await operator.break_lock("nothing:here") is None
    assert [getattr(event, "detected_by", None) for event in lost] == ["renewal"]
    assert 'Broke the lock on "invoices:export" held by stuck' in caplog.text


async def test_bad_operator_arguments_are_refused_naming_the_fix(locks: Locks):
    with pytest.raises(LocksConfigurationError, match="limit=0"):
        await locks.inspect("x", limit=0)
    with pytest.raises(LocksConfigurationError, match="prefix=3"):
        await locks.inspect(3)  # type: ignore[arg-type]
    with pytest.raises(LocksConfigurationError, match="key"):
        await locks.break_lock("")


async def test_a_store_that_cannot_be_inspected_is_refused_naming_what_it_lacks(
    clock: ManualClock,
):
    async with Locks(store=LocksOnlyStore(InMemoryLockStore(clock=clock)), clock=clock) as locks:
        with pytest.raises(LocksConfigurationError, match="cannot show or break its locks"):
            await locks.inspect()


async def test_a_store_that_hangs_fails_an_operator_call_in_five_seconds(clock: ManualClock):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
    async with Locks(store=store, clock=clock) as locks:
        store.hang("read_lock")
        reading = asyncio.create_task(locks.read_lock("orders:1"))
        await wait_all_tasks_blocked()
        await clock.advance("5s")
        with pytest.raises(LockStoreError, match=r"did not answer read_lock\(\) within 5000 ms"):
            await reading
