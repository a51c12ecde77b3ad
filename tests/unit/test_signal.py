"""The loss signal: how code learns, and the opt-in cancellation of the critical section."""

import asyncio
import logging
import threading

import pytest

from leaselock import LockLostError, Locks
from leaselock.stores import InMemoryLockStore
from leaselock.testing import ManualClock, wait_all_tasks_blocked


async def lose(store: InMemoryLockStore, clock: ManualClock, key: str) -> None:
    """Take the key away at the store, then let the holder's next renewal be refused."""
    del store._rows[key]
    await clock.advance("10s")


async def test_a_live_signal_reports_nothing(locks: Locks):
    lock = await locks.acquire("k")
    assert lock is not None
    assert not lock.signal.aborted
    assert lock.signal.reason is None
    lock.signal.raise_if_aborted()


async def test_wait_returns_the_reason_when_the_lock_is_lost(locks, store, clock):
    lock = await locks.acquire("k")
    assert lock is not None
    waiting = asyncio.create_task(lock.signal.wait())
    await wait_all_tasks_blocked()
    assert not waiting.done()
    await lose(store, clock, "k")
    reason = await waiting
    assert isinstance(reason, LockLostError)
    assert (reason.key, reason.fencing_token, reason.detected_by) == (
        "k",
        lock.fencing_token,
        "renewal",
    )
    assert await lock.signal.wait() is reason


async def test_raise_if_aborted_raises_the_reason(locks, store, clock):
    lock = await locks.acquire("k")
    assert lock is not None
    await lose(store, clock, "k")
    with pytest.raises(LockLostError, match=r"Lost lock 'k'.*fence writes with the token"):
        lock.signal.raise_if_aborted()


async def test_callbacks_run_once_on_loss_and_at_once_when_added_after(locks, store, clock):
    lock = await locks.acquire("k")
    assert lock is not None
    before: list[str] = []
    removed: list[str] = []
    lock.signal.add_callback(lambda reason: before.append(reason.detected_by))
    remove = lock.signal.add_callback(lambda reason: removed.append("called"))
    remove()
    await lose(store, clock, "k")
    await clock.advance("10s")
    after: list[str] = []
    lock.signal.add_callback(lambda reason: after.append(reason.key))
    assert before == ["renewal"]
    assert removed == []
    assert after == ["k"]


async def test_a_signal_first_asked_for_after_the_loss_is_aborted_with_its_reason(
    locks, store, clock
):
    lock = await locks.acquire("k")
    assert lock is not None
    await lose(store, clock, "k")
    reason = lock.signal.reason
    assert reason is not None
    assert (reason.key, reason.detected_by) == ("k", "renewal")
    told: list[str] = []
    lock.signal.add_callback(lambda lost: told.append(lost.detected_by))
    assert told == ["renewal"]


async def test_a_failing_callback_is_logged_and_the_others_still_run(
    locks, store, clock, caplog: pytest.LogCaptureFixture
):
    lock = await locks.acquire("k")
    assert lock is not None
    ran: list[int] = []

    def broken(reason: LockLostError) -> None:
        raise RuntimeError("callback bug")

    lock.signal.add_callback(broken)
    lock.signal.add_callback(lambda reason: ran.append(1))
    with caplog.at_level(logging.ERROR, logger="leaselock"):
        await lose(store, clock, "k")
    assert ran == [1]
    assert "A LockSignal callback raised" in caplog.text


async def test_a_thread_can_block_on_the_signal(locks, store, clock):
    lock = await locks.acquire("k")
    assert lock is not None
    woke: list[bool] = []
    thread = threading.Thread(target=lambda: woke.append(lock.signal.wait_blocking(30)))
    thread.start()
    assert lock.signal.wait_blocking(0) is False
    await lose(store, clock, "k")
    await asyncio.to_thread(thread.join)
    assert woke == [True]


async def test_cancel_on_loss_cancels_the_block_and_raises_lock_lost(locks, store, clock):
    entered = asyncio.Event()
    reached_the_end: list[bool] = []

    async def critical_section() -> None:
        async with locks.hold("k", cancel_on_loss=True):
            entered.set()
            await asyncio.Event().wait()
            reached_the_end.append(True)

    running = asyncio.create_task(critical_section())
    await entered.wait()
    await lose(store, clock, "k")
    with pytest.raises(LockLostError) as lost:
        await running
    assert lost.value.detected_by == "renewal"
    assert isinstance(lost.value.__cause__, asyncio.CancelledError)
    assert reached_the_end == []
    assert running.cancelling() == 0


async def test_with_lock_cancel_on_loss_raises_lock_lost_from_the_function(locks, store, clock):
    started = asyncio.Event()

    async def count_stock() -> None:
        started.set()
        await asyncio.Event().wait()

    running = asyncio.create_task(locks.with_lock("k", count_stock, cancel_on_loss=True))
    await started.wait()
    await lose(store, clock, "k")
    with pytest.raises(LockLostError):
        await running


async def test_without_cancel_on_loss_the_block_runs_on_and_can_check_the_signal(
    locks, store, clock
):
    gate = asyncio.Event()

    async def critical_section() -> bool:
        async with locks.hold("k") as lock:
            await gate.wait()
            return lock.signal.aborted

    running = asyncio.create_task(critical_section())
    await wait_all_tasks_blocked()
    await lose(store, clock, "k")
    gate.set()
    assert await running is True


async def test_an_outside_cancellation_stays_a_cancellation_with_cancel_on_loss(locks):
    entered = asyncio.Event()

    async def critical_section() -> None:
        async with locks.hold("k", cancel_on_loss=True):
            entered.set()
            await asyncio.Event().wait()

    running = asyncio.create_task(critical_section())
    await entered.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert await locks.acquire("k") is not None


async def test_a_block_that_swallows_the_loss_cancellation_leaves_the_task_uncancelled(
    locks, store, clock
):
    entered = asyncio.Event()

    async def critical_section() -> str:
        async with locks.hold("k", cancel_on_loss=True):
            entered.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                return "cleaned up"
        return "unreachable"

    running = asyncio.create_task(critical_section())
    await entered.wait()
    await lose(store, clock, "k")
    assert await running == "cleaned up"
    assert running.cancelling() == 0
