"""Jobs under an operator's hand on every shipped store: a pause every instance obeys, a manual
run, a failure streak that pauses, a dead instance's run found abandoned, and a missed tick.
PostgreSQL, Redis and etcd run in real time on their own clocks; in-memory and SQLite on the
manual clock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime, timedelta

import pytest

import leaselock
from helpers import unique_key
from leaselock import Event, JobMissed, Locks, RunAbandoned, TickSkipped, current_run
from leaselock.testing import FaultyStore
from store_benches import JOB_STORES, Bench

pytestmark = pytest.mark.parametrize("bench", JOB_STORES, indirect=True)


@asynccontextmanager
async def shop(
    bench: Bench, *labels: str, faulty: bool = False
) -> AsyncIterator[tuple[list[Locks], list[FaultyStore]]]:
    """A started Locks per label, each on a store object of its own behind a FaultyStore."""
    stores = [FaultyStore(bench.new_store(), clock=bench.instance_clock()) for _ in labels]
    async with AsyncExitStack() as stack:
        yield (
            [
                await stack.enter_async_context(
                    Locks(
                        store=store if faulty else store.inner,
                        clock=bench.instance_clock(),
                        ttl=timedelta(milliseconds=bench.ttl_ms),
                        instance=label,
                    )
                )
                for label, store in zip(labels, stores, strict=True)
            ],
            stores,
        )


async def test_a_pause_stops_every_instance_and_a_manual_run_still_runs(bench: Bench):
    prefix = unique_key("reports") + ":"
    key = prefix + "daily"
    runs: list[tuple[str, str]] = []

    class Reports:
        def __init__(self, label: str) -> None:
            self.label = label

        @leaselock.on_one_instance(key=key)
        @leaselock.without_overlapping()
        async def daily(self) -> int:
            run = current_run()
            assert run is not None
            runs.append((self.label, run.trigger))
            return run.fencing_token

    skipped: list[Event] = []
    async with shop(bench, "shop-3001", "shop-3002", faulty=True) as ((first, second), stores):
        here, there = Reports("shop-3001"), Reports("shop-3002")
        first.register(here)
        second.register(there)
        second.events.subscribe(skipped.append, "tick-skipped")
        await here.daily()
        await first.pause(prefix + "*", note="stock-taking", by="ops")
        calls = len(stores[0].calls)
        assert await here.daily() is None
        assert [c.method for c in stores[0].calls[calls:]] == ["start_run"]
        assert await there.daily() is None
        token = await second.run_now(key)
        assert (await first.resume(prefix + "*")) is not None
        await bench.pass_time(10)
        assert isinstance(await here.daily(), int)
        status = await second.job_status(key)

    assert runs == [("shop-3001", "schedule"), ("shop-3002", "manual"), ("shop-3001", "schedule")]
    assert [(e.reason, e.holder) for e in skipped] == [("another-instance", "shop-3001")]  # type: ignore[attr-defined]
    assert status.last_run is not None
    assert status.last_run.fencing_token is not None
    assert status.last_run.fencing_token > token
    assert status.paused is None


async def test_a_failure_streak_pauses_the_job_for_every_instance(bench: Bench):
    key = unique_key("feed:import")
    failing: list[Event] = []

    class Feed:
        @leaselock.without_overlapping(key=key, alert_after_failures=2, pause_after_failures=2)
        async def run(self) -> None:
            raise RuntimeError("supplier feed is HTML")

    async with shop(bench, "shop-3001", "shop-3002") as ((first, second), _):
        feed, other = Feed(), Feed()
        first.register(feed)
        second.register(other)
        first.events.subscribe(failing.append, "job-failing")
        for _ in range(2):
            with pytest.raises(RuntimeError, match="HTML"):
                await feed.run()
            await bench.pass_time(10)
        assert await other.run() is None
        status = await second.job_status(key)

    assert [(e.failures, e.paused) for e in failing] == [(2, True)]  # type: ignore[attr-defined]
    assert status.paused is not None
    assert status.failures == 2


async def test_a_dead_instances_run_is_found_abandoned_by_the_next_run(bench: Bench):
    key = unique_key("stock:count")
    hold_open, started = asyncio.Event(), asyncio.Event()
    found: list[Event] = []

    class Count:
        def __init__(self, holds: bool) -> None:
            self.holds = holds

        @leaselock.without_overlapping(key=key)
        async def run(self) -> int:
            run = current_run()
            assert run is not None
            if self.holds:
                started.set()
                await hold_open.wait()
            return run.fencing_token

    async with shop(bench, "shop-3001", "shop-3002", faulty=True) as ((first, second), stores):
        dying, survivor = Count(holds=True), Count(holds=False)
        first.register(dying)
        second.register(survivor)
        second.events.subscribe(found.append, "run-abandoned")
        stuck = asyncio.create_task(dying.run())
        await asyncio.wait_for(started.wait(), 10)
        # shop-3001's network goes: nothing it sends reaches the store any more
        stores[0].hang()
        assert await survivor.run() is None
        await bench.pass_time(bench.expiry_ms + 200)
        token = await survivor.run()
        status = await second.job_status(key)
        stuck.cancel()
        stores[0].heal()

    assert [(e.job, e.instance) for e in found if isinstance(e, RunAbandoned)] == [
        (key, "shop-3001")
    ]
    assert isinstance(token, int)
    assert status.last_run is not None
    assert (status.last_run.fencing_token, status.last_run.outcome) == (token, "ok")


async def test_a_tick_its_dead_owner_never_started_is_reported_missed(bench: Bench):
    key = unique_key("feed:poll")
    found: list[Event] = []

    class Owner:
        @leaselock.on_one_instance(key=key)
        async def poll(self) -> str:
            return "polled"

    async with shop(bench, "shop-3001", "shop-3002", faulty=True) as ((first, second), stores):
        owner, survivor = Owner(), Owner()
        first.register(owner)
        second.register(survivor)
        second.events.subscribe(found.append, "job-missed")
        assert await owner.poll() == "polled"
        await bench.pass_time(1200)
        stores[0].hang()
        # the owner is gone before this tick: nobody runs it
        assert await survivor.poll() is None
        await bench.pass_time(bench.expiry_ms + 200)
        assert await survivor.poll() == "polled"
        status = await second.job_status(key)
        stores[0].heal()

    (missed,) = [e for e in found if isinstance(e, JobMissed)]
    assert (missed.job, missed.holder) == (key, "shop-3001")
    assert status.missed_at == missed.missed_at


async def test_ticks_during_a_run_buffer_one_more_run_and_a_replacing_tick_fences_the_old_one(
    bench: Bench,
):
    buffered_key, replaced_key = unique_key("invoices:export"), unique_key("stock:count")
    hold_open, started, second_run = asyncio.Event(), asyncio.Event(), asyncio.Event()
    runs: list[tuple[str, str, int]] = []

    class Jobs:
        def __init__(self, label: str) -> None:
            self.label = label

        async def work(self) -> int:
            run = current_run()
            assert run is not None
            runs.append((self.label, run.trigger, run.fencing_token))
            if len(runs) == 1:
                started.set()
                await hold_open.wait()
            else:
                second_run.set()
            return run.fencing_token

        @leaselock.without_overlapping(key=buffered_key, overlap="buffer_one")
        async def export(self) -> int:
            return await self.work()

        @leaselock.without_overlapping(key=replaced_key, overlap="replace")
        async def count(self) -> int:
            return await self.work()

    async with shop(bench, "shop-3001", "shop-3002") as ((first, second), _):
        here, there = Jobs("shop-3001"), Jobs("shop-3002")
        first.register(here)
        second.register(there)
        running = asyncio.create_task(here.export())
        await asyncio.wait_for(started.wait(), 10)
        assert await there.export() is None
        assert await there.export() is None
        hold_open.set()
        await running
        # the buffered run starts on its own, on the instance whose run ended
        await asyncio.wait_for(second_run.wait(), 10)
        buffered = list(runs)

        hold_open.clear()
        started.clear()
        runs.clear()
        replaced = asyncio.create_task(here.count())
        await asyncio.wait_for(started.wait(), 10)
        # records order runs by their start on each instance's wall clock, read to the
        # millisecond: a start within a millisecond or two of another's has no order to keep
        await bench.pass_time(5)
        newer = await there.count()
        await bench.pass_time(bench.ttl_ms)
        with pytest.raises(leaselock.LockLostError):
            await asyncio.wait_for(replaced, 10)
        status = await second.job_status(replaced_key)

    assert [(label, trigger) for label, trigger, _ in buffered] == [
        ("shop-3001", "schedule"),
        ("shop-3001", "buffered"),
    ]
    assert newer > runs[0][2]
    assert status.last_run is not None
    assert status.last_run.fencing_token == newer


async def test_catch_up_and_recover_run_what_a_dead_instance_left(bench: Bench):
    poll_key, count_key = unique_key("feed:poll"), unique_key("stock:count")
    hold_open, started, all_ran = asyncio.Event(), asyncio.Event(), asyncio.Event()
    ran: list[tuple[str, str]] = []
    window = timedelta(minutes=5)

    def note(label: str, trigger: str) -> None:
        ran.append((label, trigger))
        if len(ran) == 3:
            all_ran.set()

    class Jobs:
        def __init__(self, label: str, holds: bool) -> None:
            self.label, self.holds = label, holds

        @leaselock.on_one_instance(key=poll_key, catch_up="latest", catch_up_window=window)
        async def poll(self) -> None:
            run = current_run()
            assert run is not None
            note(self.label, run.trigger)

        @leaselock.without_overlapping(key=count_key, recover=True)
        async def count(self) -> None:
            run = current_run()
            assert run is not None
            if self.holds:
                started.set()
                await hold_open.wait()
            note(self.label, run.trigger)

    async with shop(bench, "shop-3001", "shop-3002", faulty=True) as ((first, second), stores):
        dying, survivor = Jobs("shop-3001", holds=True), Jobs("shop-3002", holds=False)
        first.register(dying)
        second.register(survivor)
        await dying.poll()
        stuck = asyncio.create_task(dying.count())
        await asyncio.wait_for(started.wait(), 10)
        await bench.pass_time(1200)
        # shop-3001's network goes: its lease and its run lock expire, nothing ends its run
        stores[0].hang()
        assert await survivor.poll() is None
        assert await survivor.count() is None
        await bench.pass_time(bench.expiry_ms + 400)
        # the second looks run the job on their own, on this instance's loop
        await asyncio.wait_for(all_ran.wait(), 10)
        stuck.cancel()
        stores[0].heal()

    assert sorted(ran[1:]) == [("shop-3002", "catch-up"), ("shop-3002", "recover")]


def far_from_a_slot_midpoint() -> str:
    """``every="1d"`` or ``"2d"``: whichever puts now hours from the midpoint between two slots.

    The instances here fire one tick moments apart; placed nearest to a slot, they name the same
    tick whatever the time of day the test runs (the two midpoints are 12 hours apart).
    """
    now_ms = time.time() * 1000
    day_ms = 86_400_000
    return "1d" if abs(now_ms % day_ms - day_ms / 2) > day_ms / 4 else "2d"


async def test_a_declared_schedule_runs_each_tick_once_across_instances_and_hand_backs(
    bench: Bench,
):
    count_key, poll_key = unique_key("stock:count"), unique_key("feed:poll")
    every = far_from_a_slot_midpoint()
    counted: list[tuple[str, str, datetime | None]] = []
    polled: list[str] = []

    class Jobs:
        def __init__(self, label: str) -> None:
            self.label = label

        @leaselock.on_one_instance(key=count_key, every=every)
        async def count(self) -> None:
            run = current_run()
            assert run is not None
            counted.append((self.label, run.trigger, run.tick))

        @leaselock.without_overlapping(key=poll_key, every=every)
        async def poll(self) -> None:
            polled.append(self.label)

    async with shop(bench, "shop-3001") as ((first,), _):
        owner = Jobs("shop-3001")
        first.register(owner)
        await owner.count()
        (tick,) = [ran_tick for _, _, ran_tick in counted]
        assert tick is not None
    # the hand-back keeps the lease for the rest of the tick's second; then it is free
    await bench.pass_time(bench.expiry_ms + 200)

    skipped: list[TickSkipped] = []
    async with shop(bench, "shop-3002", "shop-3003") as ((second, third), _):
        taker, other = Jobs("shop-3002"), Jobs("shop-3003")
        second.register(taker)
        third.register(other)
        second.events.subscribe(lambda event: skipped.append(event), "tick-skipped")
        assert await taker.count() is None
        assert await other.count() is None
        await third.run_now(count_key)
        assert await taker.count() is None
        status = await third.job_status(count_key)
        await asyncio.gather(taker.poll(), other.poll(), taker.poll())

    assert counted[1:] == [("shop-3003", "manual", None)]
    refused = [
        event for event in skipped if event.reason == "tick-already-run" and event.job == count_key
    ]
    assert len(refused) == 2
    assert refused[0].holder == "shop-3001"
    assert tick.isoformat(timespec="milliseconds") in (refused[0].note or "")
    assert status.last_tick is not None
    assert (status.last_tick.at, status.last_tick.instance) == (tick, "shop-3001")
    assert len(polled) == 1
