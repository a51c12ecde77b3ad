"""Skips a person sees: the first of a streak at INFO naming where the job runs, then a summary
a minute at most; every skip stays an event."""

from __future__ import annotations

import asyncio
import logging

import pytest

import leaselock
from leaselock import Event, Locks
from leaselock.stores import InMemoryLockStore
from leaselock.testing import ManualClock, wait_all_tasks_blocked


class Report:
    def __init__(self) -> None:
        self.runs = 0

    @leaselock.on_one_instance(key="reports:daily")
    async def build(self) -> str:
        self.runs += 1
        return "built"


def skip_lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == level and record.getMessage().startswith("Skipped reports:daily")
    ]


async def test_a_streak_of_skips_logs_its_first_at_info_then_one_summary_a_minute(
    store: InMemoryLockStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
):
    owner, other = Report(), Report()
    skips: list[Event] = []
    async with (
        Locks(store=store, clock=clock, instance="shop-3001") as first,
        Locks(store=store, clock=clock, instance="shop-3002") as second,
    ):
        first.register(owner)
        second.register(other)
        second.events.subscribe(skips.append, "tick-skipped")
        with caplog.at_level(logging.DEBUG, logger="leaselock"):
            for _ in range(20):  # a tick every 5 s for 100 s
                assert await owner.build() == "built"
                assert await other.build() is None
                await clock.advance("5s")
    assert len(skips) == 20, "every skip stays an event"
    loud = skip_lines(caplog, logging.INFO)
    assert loud[0] == "Skipped reports:daily: it runs on another instance (shop-3001)"
    assert len(loud) == 2, loud
    assert loud[1].startswith(
        "Skipped reports:daily: it runs on another instance (shop-3001); 13 ticks skipped since"
    )
    assert len(skip_lines(caplog, logging.DEBUG)) == 18


class Export:
    def __init__(self) -> None:
        self.hold_open = asyncio.Event()

    @leaselock.without_overlapping(key="exports:nightly")
    async def export(self) -> str:
        await self.hold_open.wait()
        return "exported"


async def test_a_run_ends_the_streak_so_the_next_skip_is_loud_again(
    locks: Locks, caplog: pytest.LogCaptureFixture
):
    job = locks.register(Export())

    async def skipped_while_a_run_is_open() -> None:
        job.hold_open.clear()
        running = asyncio.create_task(job.export())
        await wait_all_tasks_blocked()
        assert await job.export() is None
        assert await job.export() is None
        job.hold_open.set()
        assert await running == "exported"

    with caplog.at_level(logging.DEBUG, logger="leaselock"):
        await skipped_while_a_run_is_open()
        await skipped_while_a_run_is_open()
    loud = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    quiet = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.DEBUG and r.getMessage().startswith("Skipped")
    ]
    assert [
        line.startswith("Skipped exports:nightly: a run is still in progress") for line in loud
    ] == [True, True]
    assert len(quiet) == 2
