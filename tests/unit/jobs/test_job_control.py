"""Jobs under an operator's hand: pauses, run_now, failure streaks, abandoned runs, missed ticks."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import pytest

import leaselock
from helpers import LocksOnlyStore
from leaselock import (
    Event,
    JobFailing,
    JobMissed,
    LockNotAcquiredError,
    Locks,
    LocksConfigurationError,
    RunAbandoned,
    TickSkipped,
    current_lock,
    current_run,
)
from leaselock.stores import InMemoryLockStore, LockStore
from leaselock.testing import FaultyStore, ManualClock, wait_all_tasks_blocked


class Reports:
    """Two jobs under one prefix and one outside it, counting their runs."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, str]] = []
        self.fail = False

    @leaselock.without_overlapping(key="reports:daily")
    async def daily(self) -> int:
        run = current_run()
        assert run is not None
        self.runs.append(("daily", run.trigger))
        if self.fail:
            raise RuntimeError("the warehouse feed is empty")
        return run.fencing_token

    @leaselock.on_one_instance(key="reports:weekly")
    async def weekly(self) -> str:
        self.runs.append(("weekly", "schedule"))
        return "weekly"

    @leaselock.on_one_instance(key="billing:invoices")
    @leaselock.without_overlapping()
    async def invoices(self) -> str:
        self.runs.append(("invoices", "schedule"))
        return "invoices"


@asynccontextmanager
async def two_shops(
    clock: ManualClock, stores: tuple[LockStore, LockStore], jobs: tuple[object, object]
) -> AsyncIterator[tuple[Locks, Locks]]:
    """Instances shop-1 and shop-2 (ttl 30 s), each on its store, with its jobs registered."""
    async with (
        Locks(store=stores[0], clock=clock, instance="shop-1") as first,
        Locks(store=stores[1], clock=clock, instance="shop-2") as second,
    ):
        first.register(jobs[0])
        second.register(jobs[1])
        yield first, second


def skips_of(events: list[Event]) -> list[tuple[str, str, str | None, str | None]]:
    return [(e.job, e.reason, e.holder, e.note) for e in events if isinstance(e, TickSkipped)]


async def test_a_paused_prefix_skips_its_jobs_everywhere_at_one_round_trip_and_resumes_from_now(
    clock: ManualClock,
):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
    here, there = Reports(), Reports()
    events: list[Event] = []
    async with two_shops(clock, (store, store), (here, there)) as (first, second):
        second.events.subscribe(events.append, "tick-skipped")
        assert await there.weekly() == "weekly"
        pause = await first.pause("reports:*", note="stock-taking", by="ops@alice")
        assert (pause.target, pause.paused_by, pause.until) == ("reports:*", "ops@alice", None)

        calls = len(store.calls)
        assert await there.daily() is None
        assert [c.method for c in store.calls[calls:]] == ["start_run"]
        calls = len(store.calls)
        assert await there.weekly() is None
        assert [c.method for c in store.calls[calls:]] == ["start_run"]
        assert await here.invoices() == "invoices"

        statuses = {status.job: status for status in await second.jobs()}
        assert statuses["reports:daily"].paused == pause
        assert statuses["billing:invoices"].paused is None
        assert await second.pauses() == [pause]

        for _ in range(3):
            await clock.advance("1m")
            assert await there.daily() is None
        assert await second.resume("reports:*") == pause
        assert await second.resume("reports:*") is None
        assert isinstance(await there.daily(), int)

    assert skips_of(events)[:2] == [
        ("reports:daily", "paused", "ops@alice", "stock-taking"),
        ("reports:weekly", "paused", "ops@alice", "stock-taking"),
    ]
    # the four paused ticks were skipped, not queued: one run after the resume
    assert there.runs == [("weekly", "schedule"), ("daily", "schedule")]


async def test_a_pause_until_a_time_ends_by_itself(store: InMemoryLockStore, clock: ManualClock):
    reports = Reports()
    async with Locks(store=store, clock=clock) as locks:
        locks.register(reports)
        await locks.pause("reports:daily", until="1h")
        assert await reports.daily() is None
        await clock.advance("59m")
        assert await reports.daily() is None
        await clock.advance("2m")
        assert isinstance(await reports.daily(), int)


async def test_bad_pauses_are_refused_naming_the_fix(store: InMemoryLockStore):
    async with Locks(store=store) as locks:
        for target, kwargs, says in [
            ("", {}, "prefix"),
            (42, {}, "job's key"),
            ("reports:*", {"note": 7}, "note=7"),
            ("reports:*", {"until": datetime(2020, 1, 1, tzinfo=UTC)}, "not in the future"),
            ("reports:*", {"until": datetime(2099, 1, 1)}, "no timezone"),  # noqa: DTZ001
            ("reports:*", {"until": "soon"}, "until"),
            ("reports:*", {"by": " "}, "who pauses"),
        ]:
            with pytest.raises(LocksConfigurationError, match=says):
                await locks.pause(target, **kwargs)  # type: ignore[arg-type]
        assert await locks.pauses() == []


async def test_run_now_runs_a_paused_job_here_recorded_manual_and_counts_as_a_success(
    store: InMemoryLockStore, clock: ManualClock
):
    reports = Reports()
    async with Locks(store=store, clock=clock, instance="shop-1") as locks:
        locks.register(reports)
        await locks.pause("reports:*", note="quiet period")
        token = await locks.run_now("reports:daily")
        status = await locks.job_status("reports:daily")

    assert reports.runs == [("daily", "manual")]
    assert status.last_success is not None
    assert (status.last_success.trigger, status.last_success.fencing_token) == ("manual", token)
    assert status.paused is not None


async def test_run_now_refuses_while_a_run_holds_the_lock_and_names_unknown_jobs(
    store: InMemoryLockStore, clock: ManualClock
):
    hold_open = asyncio.Event()

    @leaselock.without_overlapping(key="feed:import")
    async def import_feed() -> str:
        await hold_open.wait()
        return "imported"

    async with Locks(store=store, clock=clock) as locks:
        locks.register(import_feed)
        running = asyncio.create_task(import_feed())
        await wait_all_tasks_blocked()
        with pytest.raises(LockNotAcquiredError, match="a run of the job holds it now"):
            await locks.run_now("feed:import")
        with pytest.raises(LocksConfigurationError, match=r"No job 'feed:export'.*'feed:import'"):
            await locks.run_now("feed:export")
        hold_open.set()
        assert await running == "imported"
        assert await locks.run_now("feed:import") == "imported"


async def test_a_failure_streak_alerts_once_and_pauses_the_job_after_its_limit(
    store: InMemoryLockStore, clock: ManualClock
):
    failed: list[Event] = []

    class Feed:
        def __init__(self) -> None:
            self.fail = True

        @leaselock.without_overlapping(
            key="feed:import", alert_after_failures=2, pause_after_failures=4
        )
        async def run(self) -> str:
            if self.fail:
                raise ValueError("supplier feed is HTML")
            return "imported"

    feed = Feed()
    async with Locks(store=store, clock=clock, instance="shop-1") as locks:
        locks.register(feed)
        locks.events.subscribe(failed.append, "job-failing")
        for _ in range(3):
            with pytest.raises(ValueError, match="HTML"):
                await feed.run()
        assert [e.failures for e in failed if isinstance(e, JobFailing)] == [2]
        feed.fail = False
        assert await feed.run() == "imported"
        feed.fail = True
        for _ in range(4):
            with pytest.raises(ValueError, match="HTML"):
                await feed.run()
        await wait_all_tasks_blocked()
        assert await feed.run() is None
        status = await locks.job_status("feed:import")

    assert [(e.failures, e.paused) for e in failed if isinstance(e, JobFailing)] == [
        (2, False),
        (2, False),
        (4, True),
    ]
    assert status.failures == 4
    assert status.paused is not None
    assert status.paused.paused_by == "shop-1"
    assert "4 failed runs in a row" in status.paused.note


async def test_the_next_run_knows_the_previous_one(store: InMemoryLockStore, clock: ManualClock):
    seen: list[tuple[str | None, int | None]] = []

    @leaselock.without_overlapping(key="orders:sync")
    async def sync_orders() -> int:
        run = current_run()
        assert run is not None
        previous = run.previous
        seen.append((None if previous is None else previous.outcome, run.previous_token))
        return run.fencing_token

    async with Locks(store=store, clock=clock) as locks:
        locks.register(sync_orders)
        first = await sync_orders()
        await clock.advance("1m")
        await sync_orders()
    assert current_run() is None
    assert seen == [(None, None), ("ok", first)]


async def test_a_run_whose_instance_died_is_recorded_abandoned_by_the_next_run(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
):
    inner = InMemoryLockStore(clock=clock)
    dying = FaultyStore(inner, clock=clock)
    found: list[Event] = []
    hold_open = asyncio.Event()

    @leaselock.without_overlapping(key="stock:count", ttl="30s")
    async def count() -> int:
        lock = current_lock()
        assert lock is not None
        if lock.fencing_token == 1:
            await hold_open.wait()
        return lock.fencing_token

    async with Locks(store=dying, clock=clock, instance="shop-1") as first:
        first.register(count)
        stuck = asyncio.create_task(count())
        await wait_all_tasks_blocked()
        # shop-1's connection dies: nothing it says reaches the store any more
        dying.hang()
        await clock.advance("31s")
        async with Locks(store=inner, clock=clock, instance="shop-2") as second:
            second.register(count)
            second.events.subscribe(found.append, "run-abandoned")
            with caplog.at_level(logging.WARNING, logger="leaselock"):
                token = await count()
            await wait_all_tasks_blocked()
            status = await second.job_status("stock:count")
        stuck.cancel()
        dying.heal()

    (abandoned,) = [e for e in found if isinstance(e, RunAbandoned)]
    assert (abandoned.job, abandoned.fencing_token, abandoned.instance) == (
        "stock:count",
        1,
        "shop-1",
    )
    assert token == 2
    assert status.last_run is not None
    assert (status.last_run.fencing_token, status.last_run.outcome) == (2, "ok")
    assert "never ended: recorded as lost" in caplog.text
    records = await inner.job_records(["stock:count"])
    assert records[0].last_success is not None


async def test_a_tick_the_dead_owner_never_started_is_found_missed_by_the_next_owner(
    clock: ManualClock,
):
    inner = InMemoryLockStore(clock=clock)
    dying = FaultyStore(inner, clock=clock)
    missed: list[Event] = []
    reports_here, reports_there = Reports(), Reports()
    async with two_shops(clock, (dying, inner), (reports_here, reports_there)) as (_, second):
        second.events.subscribe(missed.append, "job-missed")
        assert await reports_here.weekly() == "weekly"
        await clock.advance("10s")
        dying.hang()
        # the 10 s tick: shop-1 owns the job but is gone, so nobody runs it
        assert await reports_there.weekly() is None
        await clock.advance("40s")
        assert await reports_there.weekly() == "weekly"
        await wait_all_tasks_blocked()
        status = await second.job_status("reports:weekly")
        dying.heal()

    (event,) = [e for e in missed if isinstance(e, JobMissed)]
    assert (event.job, event.holder, event.instance) == ("reports:weekly", "shop-1", "shop-2")
    assert status.missed_at == event.missed_at


async def test_a_healthy_handover_reports_no_missed_tick(
    store: InMemoryLockStore, clock: ManualClock
):
    missed: list[Event] = []
    here, there = Reports(), Reports()
    async with Locks(store=store, clock=clock, instance="shop-2", ttl="30s") as second:
        second.register(there)
        second.events.subscribe(missed.append, "job-missed", "run-abandoned")
        async with Locks(store=store, clock=clock, instance="shop-1", ttl="30s") as first:
            first.register(here)
            assert await here.weekly() == "weekly"
            assert await there.weekly() is None
        await clock.advance("1m")
        assert await there.weekly() == "weekly"
    assert missed == []


async def test_overdue_alerts_are_silenced_while_paused_and_count_again_from_the_resume(
    store: InMemoryLockStore, clock: ManualClock
):
    overdue: list[Event] = []

    @leaselock.without_overlapping(key="feed:import", expect_every="10m")
    async def import_feed() -> str:
        return "imported"

    async with Locks(store=store, clock=clock) as locks:
        locks.register(import_feed)
        locks.events.subscribe(overdue.append, "job-overdue")
        assert await import_feed() == "imported"
        await locks.pause("feed:*", note="supplier holiday")
        await clock.advance(timedelta(minutes=45))
        assert overdue == []
        await locks.resume("feed:*")
        await clock.advance(timedelta(minutes=5))
        assert overdue == []
        await clock.advance(timedelta(minutes=10))
        assert len(overdue) == 1


async def test_a_store_without_job_control_runs_jobs_and_refuses_pauses_naming_the_fix(
    clock: ManualClock,
):
    reports = Reports()
    async with Locks(store=LocksOnlyStore(InMemoryLockStore(clock=clock)), clock=clock) as locks:
        locks.register(reports)
        assert isinstance(await reports.daily(), int)
        with pytest.raises(LocksConfigurationError, match="cannot pause jobs"):
            await locks.pause("reports:*")


async def test_catch_up_runs_the_latest_tick_a_dead_owner_missed_once_after_its_lease_expired(
    clock: ManualClock,
):
    inner = InMemoryLockStore(clock=clock)
    dying = FaultyStore(inner, clock=clock)
    seen: list[Event] = []

    class Feed:
        def __init__(self) -> None:
            self.runs: list[str] = []

        @leaselock.on_one_instance(key="feed:poll", catch_up="latest", catch_up_window="5m")
        async def poll(self) -> str:
            run = current_run()
            assert run is not None
            self.runs.append(run.trigger)
            return run.trigger

    owner, survivor = Feed(), Feed()
    async with two_shops(clock, (dying, inner), (owner, survivor)) as (_, second):
        second.events.subscribe(seen.append, "job-missed", "run-started")
        assert await owner.poll() == "schedule"
        await clock.advance("1m")
        dying.hang()
        # three ticks while the dead owner's lease lives on: one catch-up, for the latest
        for _ in range(3):
            assert await survivor.poll() is None
            await clock.advance("5s")
        await clock.advance("40s")
        await wait_all_tasks_blocked()
        dying.heal()

    assert survivor.runs == ["catch-up"]
    assert [e.type for e in seen] == ["job-missed", "run-started"]


async def test_catch_up_leaves_a_tick_the_living_owner_ran(
    store: InMemoryLockStore, clock: ManualClock
):
    class Feed:
        def __init__(self) -> None:
            self.runs = 0

        @leaselock.on_one_instance(key="feed:poll", catch_up="latest", expect_every="5m")
        async def poll(self) -> None:
            self.runs += 1

    owner, other = Feed(), Feed()
    async with two_shops(clock, (store, store), (owner, other)):
        await owner.poll()
        assert await other.poll() is None
        await clock.advance("40s")
        await wait_all_tasks_blocked()
        for _ in range(3):
            await owner.poll()
            assert await other.poll() is None
            await clock.advance("40s")
            await wait_all_tasks_blocked()

    assert (owner.runs, other.runs) == (4, 0)


async def test_recover_runs_a_dead_instances_run_again_at_once_with_its_token(
    clock: ManualClock,
):
    inner = InMemoryLockStore(clock=clock)
    dying = FaultyStore(inner, clock=clock)
    hold_open = asyncio.Event()
    recovered: list[tuple[str, int | None, int | None]] = []

    class Count:
        def __init__(self, holds: bool) -> None:
            self.holds = holds

        @leaselock.without_overlapping(key="stock:count", recover=True)
        async def run(self) -> None:
            run = current_run()
            assert run is not None
            if self.holds:
                await hold_open.wait()
            abandoned = run.abandoned
            recovered.append(
                (
                    run.trigger,
                    None if abandoned is None else abandoned.fencing_token,
                    run.previous_token,
                )
            )

    dead, alive = Count(holds=True), Count(holds=False)
    async with two_shops(clock, (dying, inner), (dead, alive)):
        stuck = asyncio.create_task(dead.run())
        await wait_all_tasks_blocked()
        dying.hang()
        assert await alive.run() is None
        await clock.advance("31s")
        await wait_all_tasks_blocked()
        stuck.cancel()
        dying.heal()

    assert recovered == [("recover", 1, 1)]


async def test_catch_up_and_recover_still_run_when_the_store_keeps_the_dead_owners_locks_late(
    clock: ManualClock,
):
    # the store's clock stands still for a while: it keeps the dead instance's lease and run
    # lock past their ttl on the instances' clocks, as etcd's whole-second leases do
    store_clock = ManualClock()
    inner = InMemoryLockStore(clock=store_clock)
    dying = FaultyStore(inner, clock=clock)
    hold_open = asyncio.Event()
    ran: list[tuple[str, str]] = []

    class Jobs:
        def __init__(self, label: str, holds: bool) -> None:
            self.label, self.holds = label, holds

        @leaselock.on_one_instance(key="feed:poll", catch_up="latest", catch_up_window="5m")
        async def poll(self) -> None:
            run = current_run()
            assert run is not None
            ran.append((self.label, run.trigger))

        @leaselock.without_overlapping(key="stock:count", recover=True)
        async def count(self) -> None:
            run = current_run()
            assert run is not None
            if self.holds:
                await hold_open.wait()
            ran.append((self.label, run.trigger))

    dead, alive = Jobs("shop-1", holds=True), Jobs("shop-2", holds=False)
    async with two_shops(clock, (dying, inner), (dead, alive)):
        await dead.poll()
        stuck = asyncio.create_task(dead.count())
        await wait_all_tasks_blocked()
        # a later tick, which the dead owner of the poll's lease never starts
        await store_clock.advance("20s")
        await clock.advance("20s")
        dying.hang()
        assert await alive.poll() is None
        assert await alive.count() is None
        # the second looks come while the store still holds both locks: they are refused
        await store_clock.advance("29s")
        await clock.advance("31s")
        await wait_all_tasks_blocked()
        refused = list(ran)
        # the store lets them expire 1.5 s late; the refused runs look again meanwhile
        await store_clock.advance("1500ms")
        await clock.advance("1500ms")
        await wait_all_tasks_blocked()
        stuck.cancel()
        dying.heal()

    assert refused == [("shop-1", "schedule")]
    assert sorted(ran[1:]) == [("shop-2", "catch-up"), ("shop-2", "recover")]


async def test_a_live_holders_long_run_costs_a_recover_job_a_few_looks_a_skipped_tick(
    store: InMemoryLockStore, clock: ManualClock
):
    hold_open = asyncio.Event()
    survivor_store = FaultyStore(store, clock=clock)

    class Count:
        def __init__(self, holds: bool) -> None:
            self.holds, self.runs = holds, 0

        @leaselock.without_overlapping(key="stock:count", recover=True)
        async def run(self) -> None:
            self.runs += 1
            if self.holds:
                await hold_open.wait()

    working, waiting = Count(holds=True), Count(holds=False)
    async with two_shops(clock, (store, survivor_store), (working, waiting)):
        running = asyncio.create_task(working.run())
        await wait_all_tasks_blocked()
        assert await waiting.run() is None
        for _ in range(12):
            await clock.advance("10s")
            await wait_all_tasks_blocked()
        hold_open.set()
        await running

    looks = [c.method for c in survivor_store.calls].count("job_states")
    # the first look, then one each RETRY_EVERY_MS (500 ms) for LATE_EXPIRY_MS (2 s), not more
    assert 1 < looks <= 5
    assert waiting.runs == 0


async def test_catch_up_and_recover_are_checked_at_start(clock: ManualClock):
    @leaselock.on_one_instance(key="feed:poll", catch_up="latest")
    async def poll() -> None:
        return None

    locks = Locks(store=InMemoryLockStore(clock=clock), clock=clock)
    locks.register(poll)
    with pytest.raises(LocksConfigurationError, match="catch_up_window"):
        await locks.start()
    with pytest.raises(LocksConfigurationError, match='pass "latest"'):
        leaselock.on_one_instance(key="x", catch_up="all")  # type: ignore[arg-type]

    @leaselock.without_overlapping(key="stock:count", recover=True)
    async def count() -> None:
        return None

    bare = Locks(store=LocksOnlyStore(InMemoryLockStore(clock=clock)), clock=clock)
    bare.register(count)
    with pytest.raises(LocksConfigurationError, match=r"recover=True.*job control"):
        await bare.start()
