"""Declared schedules: which tick a moment is, across daylight saving, and one run per tick.

Wall time follows the manual clock from a chosen instant (``wall_time_from``), so a test stands
at 02:30 in Warsaw on the night the clocks go back, fires the job as a scheduler would, and
reads which tick each run was for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import leaselock
from helpers import LocksOnlyStore
from leaselock import Event, Locks, LocksConfigurationError, current_run
from leaselock._clock import wall_time_from
from leaselock._jobs._clock_offset import offset_bound_ms
from leaselock._jobs._schedule import (
    EverySchedule,
    cron_schedule,
    latest_slot,
    nearest_slot,
    next_slot,
)
from leaselock._jobs._spec import job_spec_of
from leaselock.stores import InMemoryLockStore
from leaselock.testing import ManualClock

WARSAW = "Europe/Warsaw"
# 02:00 summer time, the night the clocks go back at 03:00 to 02:00 winter time
FALL_BACK_NIGHT = datetime(2026, 10, 25, 0, 0, tzinfo=UTC)
# 01:00 winter time, the night the clocks go forward at 02:00 to 03:00 summer time
SPRING_NIGHT = datetime(2026, 3, 29, 0, 0, tzinfo=UTC)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@contextmanager
def wall_clock_from(clock: ManualClock, start: datetime) -> Iterator[None]:
    with wall_time_from(lambda: start + timedelta(milliseconds=clock.now_ms())):
        yield


def test_every_names_the_slot_nearest_to_a_moment_up_to_half_an_interval_away() -> None:
    every = EverySchedule(10_000)
    tick = utc("2026-12-06T10:00:00")
    for offset_s in (-4.9, -3, 0, 0.05, 3, 4.9):
        assert nearest_slot(every, tick + timedelta(seconds=offset_s)) == tick
    assert nearest_slot(every, tick + timedelta(seconds=5.1)) == utc("2026-12-06T10:00:10")
    assert latest_slot(every, tick + timedelta(seconds=9.9)) == tick
    assert next_slot(every, tick) == utc("2026-12-06T10:00:10")


def test_a_repeated_local_time_is_one_tick_by_default_and_two_when_asked() -> None:
    once = cron_schedule("30 2 * * *", WARSAW, "once")
    twice = cron_schedule("30 2 * * *", WARSAW, "twice")
    summer, winter = utc("2026-10-25T00:30"), utc("2026-10-25T01:30")
    assert nearest_slot(once, summer) == summer
    assert nearest_slot(once, winter) == summer
    assert nearest_slot(twice, summer) == summer
    assert nearest_slot(twice, winter) == winter
    assert next_slot(twice, summer) == winter
    assert next_slot(once, summer) == utc("2026-10-26T01:30")


def test_a_skipped_local_time_is_one_tick_at_the_moment_it_would_have_been() -> None:
    schedule = cron_schedule("30 2 * * *", WARSAW, "once")
    # 02:30 never comes that night: it is 03:30 summer time, 01:30 UTC
    gap = utc("2026-03-29T01:30")
    assert nearest_slot(schedule, utc("2026-03-29T01:00")) == gap
    assert nearest_slot(schedule, gap) == gap
    assert next_slot(schedule, utc("2026-03-28T01:30")) == gap
    assert next_slot(schedule, gap) == utc("2026-03-30T00:30")


def test_the_offset_bound_is_a_quarter_of_the_densest_declared_schedule() -> None:
    @leaselock.on_one_instance(key="feed:poll", every="2s")
    async def poll() -> None: ...

    @leaselock.on_one_instance(key="report:daily", cron="0 6 * * *", timezone=WARSAW)
    async def report() -> None: ...

    @leaselock.on_one_instance(key="stock:count")
    async def count() -> None: ...

    specs = [job_spec_of(job) for job in (poll, report, count)]
    assert all(spec is not None for spec in specs)
    assert offset_bound_ms([spec for spec in specs[1:] if spec is not None]) == 1000
    assert offset_bound_ms([spec for spec in specs if spec is not None]) == 500


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"every": "5m", "cron": "*/5 * * * *"}, r"declare the schedule once"),
        ({"every": "0s"}, r"every="),
        ({"every": "5m", "timezone": WARSAW}, r"timezone without cron"),
        ({"cron": "61 * * * *"}, r"pass a cron expression"),
        ({"cron": "0 0 30 2 *"}, r"30 February never comes"),
        ({"cron": "0 2 * * *", "timezone": "Europe/Atlantis"}, r"IANA time zone"),
        ({"cron": "0 2 * * *", "fall_back": "both"}, r'"once".*"twice"'),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_fix(options: dict[str, Any], says: str) -> None:
    with pytest.raises(LocksConfigurationError, match=says):
        leaselock.on_one_instance(key="feed:poll", **options)


def test_two_decorators_may_not_declare_two_schedules() -> None:
    with pytest.raises(LocksConfigurationError, match="two schedules"):

        @leaselock.on_one_instance(key="feed:poll", every="5m")
        @leaselock.without_overlapping(every="10m")
        async def poll() -> None: ...


async def test_a_store_without_job_control_cannot_keep_a_declared_schedule(clock: ManualClock):
    @leaselock.on_one_instance(key="feed:poll", every="5m")
    async def poll() -> None: ...

    locks = Locks(store=LocksOnlyStore(InMemoryLockStore(clock=clock)), clock=clock)
    locks.register(poll)
    with pytest.raises(LocksConfigurationError, match=r"declared schedule.*job control"):
        async with locks:
            pass


class Report:
    """Notes the tick of each run, and every tick skipped with its reason."""

    def __init__(self) -> None:
        self.ticks: list[tuple[str, datetime | None]] = []
        self.skips: list[str] = []

    async def run(self) -> None:
        run = current_run()
        assert run is not None
        self.ticks.append((run.trigger, run.tick))

    def skipped(self, event: Event) -> None:
        self.skips.append(getattr(event, "reason", ""))


async def fire_at(
    clock: ManualClock, start: datetime, moments: list[datetime], **schedule: Any
) -> Report:
    """Fire a daily 02:30 Warsaw report at each of ``moments``, as a scheduler would."""
    report = Report()
    job = leaselock.on_one_instance(key="report:nightly", **schedule)(report.run)
    with wall_clock_from(clock, start):
        async with Locks(store=InMemoryLockStore(clock=clock), clock=clock) as locks:
            locks.register(job)
            locks.events.subscribe(report.skipped, "tick-skipped")
            for moment in moments:
                await clock.advance(moment - start - timedelta(milliseconds=clock.now_ms()))
                await job()
    return report


async def test_a_scheduler_firing_02_30_twice_as_the_clocks_go_back_runs_it_once(
    clock: ManualClock,
):
    fired = [utc("2026-10-25T00:30"), utc("2026-10-25T01:30")]
    report = await fire_at(clock, FALL_BACK_NIGHT, fired, cron="30 2 * * *", timezone=WARSAW)
    assert report.ticks == [("schedule", fired[0])]
    assert report.skips == ["tick-already-run"]


async def test_fall_back_twice_runs_both_02_30s(clock: ManualClock):
    fired = [utc("2026-10-25T00:30"), utc("2026-10-25T01:30")]
    report = await fire_at(
        clock, FALL_BACK_NIGHT, fired, cron="30 2 * * *", timezone=WARSAW, fall_back="twice"
    )
    assert report.ticks == [("schedule", fired[0]), ("schedule", fired[1])]
    assert report.skips == []


async def test_the_02_30_the_spring_clocks_skip_runs_once_whenever_the_scheduler_fires_it(
    clock: ManualClock,
):
    # one scheduler fires the missing time at 03:00 summer time, another at 03:30
    fired = [utc("2026-03-29T01:00"), utc("2026-03-29T01:30")]
    report = await fire_at(clock, SPRING_NIGHT, fired, cron="30 2 * * *", timezone=WARSAW)
    assert report.ticks == [("schedule", utc("2026-03-29T01:30"))]
    assert report.skips == ["tick-already-run"]


async def test_a_buffered_run_is_for_the_tick_after_the_one_it_waited_for(clock: ManualClock):
    hold_open, started = asyncio.Event(), asyncio.Event()
    ticks: list[tuple[str, datetime | None]] = []
    ended = asyncio.Event()

    async def export() -> None:
        run = current_run()
        assert run is not None
        ticks.append((run.trigger, run.tick))
        if len(ticks) == 1:
            started.set()
            await hold_open.wait()
        else:
            ended.set()

    job = leaselock.without_overlapping(key="invoices:export", overlap="buffer_one", every="10s")(
        export
    )
    start = utc("2026-12-06T10:00:00")
    with wall_clock_from(clock, start):
        async with Locks(store=InMemoryLockStore(clock=clock), clock=clock) as locks:
            locks.register(job)
            first = asyncio.create_task(job())
            await started.wait()
            await clock.advance("10s")
            assert await job() is None
            await clock.advance("3s")
            hold_open.set()
            await first
            await asyncio.wait_for(ended.wait(), 10)
            await locks.run_now("invoices:export")
    assert ticks == [
        ("schedule", start),
        ("buffered", utc("2026-12-06T10:00:10")),
        ("manual", None),
    ]
