import asyncio

import pytest

from leaselock import LocksConfigurationError
from leaselock.testing import ManualClock, wait_all_tasks_blocked


async def test_advance_fires_due_timers_in_order_with_the_clock_at_each_due_time():
    clock = ManualClock()
    fired: list[tuple[str, int]] = []

    def record(name: str):
        async def callback() -> None:
            fired.append((name, clock.now_ms()))

        return callback

    clock.call_at(300, record("c"))
    clock.call_at(100, record("a"))
    clock.call_at(200, record("b"))
    clock.call_at(100, record("a2"))
    await clock.advance("250ms")
    assert fired == [("a", 100), ("a2", 100), ("b", 200)]
    assert clock.now_ms() == 250
    await clock.advance("50ms")
    assert fired[-1] == ("c", 300)


async def test_advance_awaits_each_callback_to_its_end():
    clock = ManualClock()
    steps: list[str] = []
    gate = asyncio.Event()

    async def slow_store_call() -> None:
        steps.append("sent")
        asyncio.get_running_loop().call_soon(gate.set)
        await gate.wait()
        steps.append("answered")

    clock.call_at(10, slow_store_call)
    await clock.advance("10ms")
    assert steps == ["sent", "answered"]


async def test_timers_scheduled_while_advancing_fire_in_the_same_advance():
    clock = ManualClock()
    seen: list[int] = []

    async def every_100() -> None:
        seen.append(clock.now_ms())
        clock.call_at(clock.now_ms() + 100, every_100)

    clock.call_at(100, every_100)
    await clock.advance("450ms")
    assert seen == [100, 200, 300, 400]
    assert clock.next_due_ms == 500


async def test_a_cancelled_timer_never_fires():
    clock = ManualClock()
    fired: list[int] = []

    async def callback() -> None:
        fired.append(1)

    clock.call_at(5, callback).cancel()
    await clock.advance("10ms")
    assert fired == []
    assert clock.next_due_ms is None


async def test_a_callback_may_advance_the_clock_to_model_a_slow_call():
    clock = ManualClock()
    seen: list[tuple[str, int]] = []

    async def meanwhile() -> None:
        seen.append(("meanwhile", clock.now_ms()))

    async def slow() -> None:
        await clock.advance("500ms")
        seen.append(("slow done", clock.now_ms()))

    clock.call_at(100, slow)
    clock.call_at(300, meanwhile)
    await clock.advance("200ms")
    assert seen == [("meanwhile", 300), ("slow done", 600)]
    assert clock.now_ms() == 600


async def test_advancing_from_two_tasks_at_once_is_refused():
    clock = ManualClock()
    release = asyncio.Event()

    async def blocking() -> None:
        await release.wait()

    clock.call_at(1, blocking)
    first = asyncio.create_task(clock.advance("5ms"))
    await wait_all_tasks_blocked()
    with pytest.raises(LocksConfigurationError, match="already running in another task"):
        await clock.advance("1ms")
    release.set()
    await first
    assert clock.now_ms() == 5


async def test_the_clock_starts_where_it_is_told_and_refuses_bad_durations():
    assert ManualClock("1h").now_ms() == 3_600_000
    with pytest.raises(LocksConfigurationError, match="duration"):
        await ManualClock().advance("soon")
