import ast
import asyncio
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

import leaselock
from leaselock._clock import Clock, SystemClock, utc_now, wall_time_from
from leaselock._event_types import LockLost
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


def test_wall_time_is_the_systems_outside_any_override():
    before = datetime.now(UTC)
    assert before <= utc_now() <= datetime.now(UTC)


async def test_an_overridden_wall_time_reaches_events_and_the_tasks_started_inside():
    frozen = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    seen: list[datetime] = []

    async def in_a_task() -> None:
        seen.append(utc_now())

    with wall_time_from(lambda: frozen):
        task = asyncio.get_running_loop().create_task(in_a_task())
        event = LockLost(key="k", fencing_token=1, owner="o", detected_by="renewal")
    await task
    assert seen == [frozen]
    assert event.at == frozen
    assert utc_now() != frozen


def wall_clock_reads(source: str) -> list[int]:
    """The lines of ``source`` that call ``datetime.now``, ``time.time`` or ``time.time_ns``."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and (node.func.value.id, node.func.attr)
        in {("datetime", "now"), ("time", "time"), ("time", "time_ns")}
    ]


def test_the_core_reads_wall_time_only_through_the_clock_module():
    # a simulation gives the code it runs a wall clock of its own through utc_now(); a direct
    # read elsewhere would reach the system's. Stores keep their own clocks; the CLI and the
    # history recorder are tools for real processes
    package = Path(leaselock.__file__).parent
    exempt = {"_clock.py", "testing/history.py"}
    direct = [
        f"{path.relative_to(package).as_posix()}:{line}"
        for path in sorted(package.rglob("*.py"))
        if path.relative_to(package).as_posix() not in exempt
        and path.relative_to(package).parts[0] not in {"stores", "_cli"}
        for line in wall_clock_reads(path.read_text())
    ]
    assert direct == []
