import asyncio
import logging

import pytest

from leaselock._clock import Clock, SystemClock
from leaselock.testing import ManualClock, wait_all_tasks_blocked


def test_both_clocks_satisfy_the_clock_protocol():
    assert isinstance(SystemClock(), Clock)
    assert isinstance(ManualClock(), Clock)


def test_system_time_is_whole_milliseconds_and_never_goes_back():
    clock = SystemClock()
    readings = [clock.now_ms() for _ in range(1000)]
    assert all(isinstance(reading, int) for reading in readings)
    assert readings == sorted(readings)


async def test_a_system_timer_due_now_runs_its_callback_in_a_task():
    clock = SystemClock()
    ran = asyncio.Event()

    async def callback() -> None:
        ran.set()

    clock.call_at(clock.now_ms(), callback)
    await asyncio.wait_for(ran.wait(), timeout=5)


async def test_a_cancelled_system_timer_does_not_run():
    clock = SystemClock()
    ran: list[int] = []

    async def callback() -> None:
        ran.append(1)

    clock.call_at(clock.now_ms(), callback).cancel()
    after = asyncio.Event()

    async def marker() -> None:
        after.set()

    clock.call_at(clock.now_ms(), marker)
    await asyncio.wait_for(after.wait(), timeout=5)
    assert ran == []


async def test_a_failing_system_timer_callback_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
):
    clock = SystemClock()
    done = asyncio.Event()

    async def failing() -> None:
        done.set()
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="leaselock"):
        clock.call_at(clock.now_ms(), failing)
        await asyncio.wait_for(done.wait(), timeout=5)
        await wait_all_tasks_blocked()
    assert "timer callback failed" in caplog.text
    assert "boom" in caplog.text
