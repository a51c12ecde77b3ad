import asyncio
import contextvars

from leaselock.testing import ManualClock, wait_all_tasks_blocked
from leaselock.testing._sim_clock import InstanceClock

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_an_instance_clock_reads_the_shared_clock_plus_its_offset():
    base = ManualClock(start="10s")
    assert InstanceClock(base, 250).now_ms() == 10_250


async def test_a_timer_fires_at_its_time_less_the_offset_in_the_context_it_was_set_from():
    base = ManualClock()
    clock = InstanceClock(base, 500)
    fired: list[tuple[int, str, bool]] = []

    async def callback() -> None:
        fired.append((base.now_ms(), WHO.get(), asyncio.current_task() is not None))

    WHO.set("instance-1")
    clock.call_at(2_000, callback)
    WHO.set("someone else")
    await base.advance("10s")
    assert fired == [(1_500, "instance-1", True)]


async def test_a_frozen_clock_holds_what_falls_due_and_runs_it_in_order_when_thawed():
    base = ManualClock()
    clock = InstanceClock(base, 0)
    fired: list[tuple[str, int]] = []

    def timer(name: str):
        async def callback() -> None:
            fired.append((name, clock.now_ms()))

        return callback

    clock.call_at(2_000, timer("second"))
    clock.call_at(1_000, timer("first"))
    clock.freeze()
    await base.advance("5s")
    assert fired == []
    clock.thaw()
    await wait_all_tasks_blocked()
    # a resumed process runs its overdue timers, reading the time it resumed at
    assert fired == [("first", 5_000), ("second", 5_000)]


async def test_a_timer_cancelled_while_held_never_runs():
    base = ManualClock()
    clock = InstanceClock(base, 0)
    fired: list[int] = []

    async def callback() -> None:
        fired.append(1)

    handle = clock.call_at(1_000, callback)
    clock.freeze()
    await base.advance("2s")
    handle.cancel()
    clock.thaw()
    await wait_all_tasks_blocked()
    assert fired == []
