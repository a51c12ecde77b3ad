"""Store-call bounds: one timer for every bound of a clock, each call still cut at its deadline."""

import asyncio

import pytest

from leaselock._engine._bounded import StoreCallBounds, StoreCallTimeoutError
from leaselock.testing import ManualClock, wait_all_tasks_blocked


def pending_timers(clock: ManualClock) -> int:
    return sum(not timer.cancelled for timer in clock._timers)


async def answered(bounds: StoreCallBounds, deadline_ms: int) -> str:
    """A call the store answers on the loop's next turn."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str] = loop.create_future()
    loop.call_soon(answer.set_result, "answered")
    with bounds.until(deadline_ms):
        return await answer


async def hung(bounds: StoreCallBounds, deadline_ms: int) -> None:
    with bounds.until(deadline_ms):
        await asyncio.Event().wait()


async def test_answered_calls_share_one_timer(clock):
    bounds = StoreCallBounds(clock)
    for n in range(1000):
        assert await answered(bounds, 2000 + n) == "answered"
    assert pending_timers(clock) == 1


async def test_a_hung_call_behind_answered_ones_is_cut_at_its_own_deadline(clock):
    bounds = StoreCallBounds(clock)
    for _ in range(300):
        await answered(bounds, 1000)
    call = asyncio.create_task(hung(bounds, 5000))
    await wait_all_tasks_blocked()
    for _ in range(600):  # enough answered calls for a sweep while the hung one waits
        await answered(bounds, 3000)
    await clock.advance("4999ms")
    assert not call.done()
    await clock.advance("1ms")
    with pytest.raises(StoreCallTimeoutError):
        await call


async def test_an_earlier_deadline_arms_the_timer_earlier(clock):
    bounds = StoreCallBounds(clock)
    late = asyncio.create_task(hung(bounds, 9000))
    early = asyncio.create_task(hung(bounds, 1000))
    await wait_all_tasks_blocked()
    await clock.advance("1s")
    with pytest.raises(StoreCallTimeoutError):
        await early
    assert not late.done()
    await clock.advance("8s")
    with pytest.raises(StoreCallTimeoutError):
        await late


async def test_a_cancellation_from_elsewhere_passes_through(clock):
    bounds = StoreCallBounds(clock)
    call = asyncio.create_task(hung(bounds, 1000))
    await wait_all_tasks_blocked()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await clock.advance("1s")
    assert clock.next_due_ms is None


async def test_close_stops_the_timer_unless_a_call_still_waits(clock):
    bounds = StoreCallBounds(clock)
    await answered(bounds, 1000)
    bounds.close()
    assert clock.next_due_ms is None
    call = asyncio.create_task(hung(bounds, 2000))
    await wait_all_tasks_blocked()
    bounds.close()
    assert clock.next_due_ms == 2000
    await clock.advance("2s")
    with pytest.raises(StoreCallTimeoutError):
        await call
