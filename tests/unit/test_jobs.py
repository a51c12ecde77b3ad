"""Jobs on one instance and without overlapping: the design's story on the manual clock."""

import asyncio
import functools
import inspect
import logging
import threading

import pytest

import leaselock
from helpers import Instances
from leaselock import Event, LockLostError, Locks, LocksConfigurationError, SyncLocks, current_lock
from leaselock.stores import InMemoryLockStore
from leaselock.testing import FaultyStore, ManualClock, wait_all_tasks_blocked

SKIP_ELSEWHERE = "Skipped inventory:stock-reconciliation: it runs on another instance"
SKIP_IN_PROGRESS = "Skipped inventory:stock-reconciliation: a run is still in progress"


class StockReconciliationJob:
    """The design's job: one instance, one run at a time; a run can be held open."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.tokens: list[int] = []
        self.hold_open: asyncio.Event | None = None
        self.signals: list[leaselock.LockSignal] = []

    @leaselock.on_one_instance(key="inventory:stock-reconciliation")
    @leaselock.without_overlapping()
    async def reconcile_stock(self) -> str:
        """Ask the warehouse for a count and write it."""
        lock = current_lock()
        assert lock is not None
        self.tokens.append(lock.fencing_token)
        self.signals.append(lock.signal)
        if self.hold_open is not None:
            await self.hold_open.wait()
        return self.name


def instances(
    store: InMemoryLockStore, clocks: list[ManualClock]
) -> Instances[StockReconciliationJob]:
    """Instances of the shop on one in-memory store, ttl 30 s."""
    return Instances(
        lambda clock: Locks(store=store, clock=clock, ttl="30s"), clocks, StockReconciliationJob
    )


async def test_without_leaselock_every_instance_runs_every_tick():
    runs: list[str] = []

    async def plain_reconcile_stock(instance: str) -> None:
        runs.append(instance)

    await asyncio.gather(*(plain_reconcile_stock(f"instance-{n}") for n in range(3)))
    assert runs == ["instance-0", "instance-1", "instance-2"]


async def test_on_one_instance_runs_once_per_tick_always_on_the_same_instance(
    store, clock, caplog: pytest.LogCaptureFixture
):
    with caplog.at_level(logging.DEBUG, logger="leaselock"):
        async with instances(store, [clock] * 3) as app:
            first = await app.tick()
            await clock.advance("5m")
            second = await app.tick()
    assert first == ["instance-0", None, None]
    assert second == ["instance-0", None, None]
    assert [len(job.tokens) for job in app.jobs] == [2, 0, 0]
    assert caplog.text.count(SKIP_ELSEWHERE) == 4
    runs_here = [
        r.getMessage() for r in caplog.records if "runs on this instance" in r.getMessage()
    ]
    assert runs_here == [
        (
            "inventory:stock-reconciliation runs on this instance (lease "
            f'"inventory:stock-reconciliation:owner", fencing token {store_token(runs_here)})'
        )
    ]


def store_token(lines: list[str]) -> str:
    return lines[0].rsplit(" ", 1)[-1].rstrip(")")


async def test_each_run_gets_a_new_fencing_token_from_its_run_lock(store, clock):
    async with instances(store, [clock]) as app:
        for _ in range(3):
            await app.tick()
            await clock.advance("5m")
    tokens = app.jobs[0].tokens
    assert tokens == sorted(set(tokens))
    assert len(tokens) == 3


async def test_skips_are_events_too(store, clock):
    async with instances(store, [clock] * 2) as app:
        skipped: list[Event] = []
        app.locks[1].events.subscribe(skipped.append, "tick-skipped")
        await app.tick()
    assert [(e.type, e.key, e.reason) for e in skipped] == [  # type: ignore[union-attr]
        ("tick-skipped", "inventory:stock-reconciliation:owner", "another-instance")
    ]


async def test_a_crashed_owner_hands_over_after_ttl_with_a_greater_token(store, clock):
    crashed = ManualClock()
    async with instances(store, [crashed, clock, clock]) as app:
        assert await app.tick() == ["instance-0", None, None]
        await clock.advance("29s")
        assert await app.tick() == ["instance-0", None, None]
        await clock.advance("2s")
        assert (await app.tick())[1:] == ["instance-1", None]
        assert app.jobs[1].tokens[0] > app.jobs[0].tokens[-1]
        lost: list[Event] = []
        app.locks[0].events.subscribe(lost.append, "lock-lost")
        await crashed.advance("10s")
        assert [e.key for e in lost] == ["inventory:stock-reconciliation:owner"]
        assert await app.jobs[0].reconcile_stock() is None


async def test_after_a_clean_shutdown_the_next_tick_elsewhere_runs_at_once(store, clock):
    async with instances(store, [clock] * 2) as app:
        await app.tick()
        await clock.advance("5m")
        await app.tick()
        await clock.advance("2s")
        await app.locks[0].aclose()
        assert await app.jobs[1].reconcile_stock() == "instance-1"


async def test_a_lease_whose_job_started_within_the_last_second_is_kept_for_that_second(
    store, clock
):
    async with instances(store, [clock] * 2) as app:
        await app.jobs[0].reconcile_stock()
        await clock.advance("200ms")
        await app.locks[0].aclose()
        await clock.advance("300ms")
        assert await app.jobs[1].reconcile_stock() is None
        await clock.advance("500ms")
        assert await app.jobs[1].reconcile_stock() == "instance-1"


async def test_a_run_held_open_through_three_ticks_skips_them_all_then_the_next_runs(
    store, clock, caplog: pytest.LogCaptureFixture
):
    async with instances(store, [clock] * 2) as app:
        owner = app.jobs[0]
        owner.hold_open = asyncio.Event()
        long_run = asyncio.create_task(owner.reconcile_stock())
        await wait_all_tasks_blocked()
        with caplog.at_level(logging.DEBUG, logger="leaselock"):
            for _ in range(3):
                await clock.advance("5m")
                assert await app.tick() == [None, None]
        owner.hold_open.set()
        assert await long_run == "instance-0"
        owner.hold_open = None
        await clock.advance("5m")
        assert await app.tick() == ["instance-0", None]
    assert caplog.text.count(SKIP_IN_PROGRESS) == 3
    assert caplog.text.count(SKIP_ELSEWHERE) == 3
    assert len(owner.tokens) == 2


async def test_without_overlapping_alone_lets_any_instance_run_one_at_a_time(store, clock):
    runs: list[str] = []
    gate = asyncio.Event()

    class Export:
        def __init__(self, name: str) -> None:
            self.name = name

        @leaselock.without_overlapping(key="invoices:nightly-export")
        async def export(self) -> str:
            runs.append(self.name)
            await gate.wait()
            return self.name

    async with Locks(store=store, clock=clock) as a, Locks(store=store, clock=clock) as b:
        first, second = a.register(Export("a")), b.register(Export("b"))
        running = asyncio.create_task(first.export())
        await wait_all_tasks_blocked()
        assert await second.export() is None
        gate.set()
        await running
        assert await second.export() == "b"
    assert runs == ["a", "b"]


async def test_losing_the_lease_aborts_the_runs_signal_and_its_fenced_write_is_refused(
    store, clock
):
    warehouse = {"salmon-kibble-2kg": (12, 0)}

    def fenced_write(count: int, token: int) -> bool:
        if token < warehouse["salmon-kibble-2kg"][1]:
            return False
        warehouse["salmon-kibble-2kg"] = (count, token)
        return True

    paused = ManualClock()
    async with instances(store, [paused, clock]) as app:
        stale, fresh = app.jobs
        stale.hold_open = asyncio.Event()
        stale_run = asyncio.create_task(stale.reconcile_stock())
        await wait_all_tasks_blocked()
        stale_token = stale.tokens[0]
        await clock.advance("31s")
        assert await fresh.reconcile_stock() == "instance-1"
        assert fenced_write(9, fresh.tokens[0])
        await paused.advance("10s")
        reason = stale.signals[0].reason
        assert isinstance(reason, LockLostError)
        assert reason.detected_by == "renewal"
        assert not fenced_write(12, stale_token)
        stale.hold_open.set()
        await stale_run
    assert warehouse["salmon-kibble-2kg"] == (9, fresh.tokens[0])


async def test_the_decorators_keep_the_signature_name_and_asyncness():
    async def reconcile(store_id: int, *, full: bool = False) -> int:
        """Count one store."""
        return store_id

    def export(batch: str) -> str:
        return batch

    wrapped = leaselock.on_one_instance()(leaselock.without_overlapping()(reconcile))
    assert inspect.signature(wrapped) == inspect.signature(reconcile)
    assert wrapped.__name__ == "reconcile"
    assert wrapped.__doc__ == "Count one store."
    assert inspect.iscoroutinefunction(wrapped)
    sync_wrapped = leaselock.without_overlapping()(export)
    assert not inspect.iscoroutinefunction(sync_wrapped)
    assert inspect.signature(sync_wrapped) == inspect.signature(export)
    assert sync_wrapped.__wrapped__ is export  # type: ignore[attr-defined]


async def test_either_decorator_order_shares_one_key(store, clock):
    class Job:
        @leaselock.without_overlapping()
        @leaselock.on_one_instance(key="reports:daily")
        async def run(self) -> int:
            lock = current_lock()
            assert lock is not None
            assert lock.key == "reports:daily"
            return 1

    async with Locks(store=store, clock=clock) as locks:
        assert await locks.register(Job()).run() == 1
        assert "reports:daily:owner" in store._rows


async def test_the_default_key_is_the_qualname(store, clock):
    async with Locks(store=store, clock=clock) as locks:
        job = locks.register(StockReconciliationJob("x"))
        assert job.reconcile_stock.__qualname__ == "StockReconciliationJob.reconcile_stock"

        class Reports:
            @leaselock.on_one_instance()
            async def daily(self) -> None:
                return None

        await locks.register(Reports()).daily()
    assert any(key.endswith("Reports.daily:owner") for key in store._rows)


async def test_a_sync_job_runs_in_the_calling_thread_with_its_lock(store, clock):
    seen: list[tuple[int, int]] = []

    class Count:
        @leaselock.on_one_instance(key="count")
        def count(self) -> str:
            lock = current_lock()
            assert lock is not None
            seen.append((threading.get_ident(), lock.fencing_token))
            return "counted"

    async with Locks(store=store, clock=clock) as locks:
        job = locks.register(Count())
        worker_result = await asyncio.to_thread(job.count)
        assert worker_result == "counted"
        assert seen[0][0] != threading.get_ident()
        with pytest.raises(LocksConfigurationError, match="on a thread that runs an event loop"):
            job.count()


async def test_a_bound_decorator_runs_on_its_own_locks(store, clock):
    locks = Locks(store=store, clock=clock)

    @locks.on_one_instance(key="bound:job")
    async def bound_job() -> str:
        return "ran"

    async with locks:
        assert await bound_job() == "ran"


async def test_a_shared_job_called_inside_a_started_locks_uses_it(store, clock):
    @leaselock.on_one_instance(key="shared:job")
    async def shared_job() -> str:
        return "ran"

    async with Locks(store=store, clock=clock):
        assert await shared_job() == "ran"


async def test_a_job_with_no_locks_running_names_both_fixes():
    @leaselock.on_one_instance(key="orphan")
    async def orphan() -> None:
        return None

    with pytest.raises(LocksConfigurationError, match=r"no Locks runs it.*register.*async with"):
        await orphan()


async def test_a_store_failure_skips_the_tick_and_never_reaches_the_scheduler(
    clock, caplog: pytest.LogCaptureFixture
):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
    store.fail()
    async with Locks(store=store, clock=clock) as locks:
        job = locks.register(StockReconciliationJob("x"))
        with caplog.at_level(logging.WARNING, logger="leaselock"):
            assert await job.reconcile_stock() is None
    assert job.tokens == []
    assert "Skipped inventory:stock-reconciliation: the lock store is unavailable" in caplog.text
    assert "store unreachable (injected outage)" in caplog.text


async def test_shutdown_waits_for_a_run_in_progress_then_hands_the_lease_back(store, clock):
    locks = Locks(store=store, clock=clock, shutdown_grace="1m")
    job = locks.register(StockReconciliationJob("x"))
    job.hold_open = asyncio.Event()
    await locks.start()
    run = asyncio.create_task(job.reconcile_stock())
    await wait_all_tasks_blocked()
    closing = asyncio.create_task(locks.aclose())
    await clock.advance("2s")
    assert not closing.done()
    job.hold_open.set()
    assert await run == "x"
    await closing
    assert "inventory:stock-reconciliation:owner" not in store._rows
    assert "inventory:stock-reconciliation" not in store._rows


async def test_a_run_that_outlives_the_shutdown_grace_loses_its_locks(store, clock):
    locks = Locks(store=store, clock=clock, shutdown_grace="5s")
    job = locks.register(StockReconciliationJob("x"))
    job.hold_open = asyncio.Event()
    await locks.start()
    run = asyncio.create_task(job.reconcile_stock())
    await wait_all_tasks_blocked()
    closing = asyncio.create_task(locks.aclose())
    await clock.advance("5s")
    await closing
    reason = job.signals[0].reason
    assert reason is not None
    assert reason.detected_by == "shutdown"
    job.hold_open.set()
    await run


async def test_ticks_during_shutdown_are_skipped(store, clock):
    locks = Locks(store=store, clock=clock)
    job = locks.register(StockReconciliationJob("x"))
    job.hold_open = asyncio.Event()
    await locks.start()
    run = asyncio.create_task(job.reconcile_stock())
    await wait_all_tasks_blocked()
    closing = asyncio.create_task(locks.aclose())
    await wait_all_tasks_blocked()
    assert await job.reconcile_stock() is None
    job.hold_open.set()
    await run
    await closing


# --- configuration errors --------------------------------------------------------------------


def two_jobs_with_one_key() -> tuple[object, object]:
    class A:
        @leaselock.on_one_instance(key="same")
        async def run(self) -> None: ...

    class B:
        @leaselock.without_overlapping(key="same")
        async def run(self) -> None: ...

    return A(), B()


async def test_two_jobs_with_one_key_fail_at_start_naming_both(store, clock):
    locks = Locks(store=store, clock=clock)
    for job in two_jobs_with_one_key():
        locks.register(job)
    with pytest.raises(LocksConfigurationError, match=r"A\.run and the job .*B\.run both use"):
        await locks.start()


async def test_a_job_key_equal_to_another_jobs_lease_fails_at_start(store, clock):
    class Report:
        @leaselock.on_one_instance(key="report")
        async def run(self) -> None: ...

    class Shadow:
        @leaselock.without_overlapping(key="report:owner")
        async def run(self) -> None: ...

    locks = Locks(store=store, clock=clock)
    locks.register(Report())
    locks.register(Shadow())
    with pytest.raises(LocksConfigurationError, match=r"'report:owner'.*rename the job"):
        await locks.start()


async def test_an_election_key_equal_to_a_job_key_fails_at_start(store, clock):
    class Job:
        @leaselock.on_one_instance(key="feed")
        async def run(self) -> None: ...

    @leaselock.leader_election("feed")
    async def feed_duty(lock: leaselock.Lock) -> None: ...

    locks = Locks(store=store, clock=clock)
    locks.register(Job())
    locks.register(feed_duty)
    with pytest.raises(LocksConfigurationError, match=r"the election 'feed'.*both use the key"):
        await locks.start()


async def test_a_conflict_registered_after_start_is_refused_at_once(store, clock):
    first, second = two_jobs_with_one_key()
    async with Locks(store=store, clock=clock) as locks:
        locks.register(first)
        with pytest.raises(LocksConfigurationError, match="both use the key 'same'"):
            locks.register(second)


def test_bad_decorator_uses_are_refused_with_the_fix():
    with pytest.raises(LocksConfigurationError, match="key is empty"):
        leaselock.on_one_instance(key="")
    with pytest.raises(LocksConfigurationError, match="ttl=0 is zero"):
        leaselock.without_overlapping(ttl=0)
    with pytest.raises(LocksConfigurationError, match="not <class"):
        leaselock.on_one_instance()(StockReconciliationJob)
    with pytest.raises(LocksConfigurationError, match="has no __qualname__: pass key="):
        leaselock.on_one_instance()(functools.partial(print))
    assert leaselock.on_one_instance(key="print")(functools.partial(print)) is not None

    async def job() -> None: ...

    with pytest.raises(LocksConfigurationError, match="on_one_instance twice; once is enough"):
        leaselock.on_one_instance()(leaselock.on_one_instance()(job))


def test_a_decorator_used_without_parentheses_says_to_add_them():
    async def reconcile_stock() -> None: ...

    with pytest.raises(
        LocksConfigurationError,
        match=r"@leaselock.on_one_instance was used without parentheses.*"
        r"write @leaselock.on_one_instance\(\)",
    ):
        leaselock.on_one_instance(reconcile_stock)  # type: ignore[arg-type]
    with pytest.raises(LocksConfigurationError, match=r"write @locks.without_overlapping\(\)"):
        Locks().without_overlapping(reconcile_stock)  # type: ignore[arg-type]
    with pytest.raises(
        LocksConfigurationError,
        match=r'write @leaselock.leader_election\("inventory:warehouse-feed"\)',
    ):
        leaselock.leader_election(StockReconciliationJob)  # type: ignore[arg-type]


async def test_a_job_ttl_too_short_for_real_time_fails_at_start():
    @leaselock.without_overlapping(key="quick", ttl="20ms")
    async def quick() -> None: ...

    locks = Locks(allow_in_memory_storage=True)
    locks.register(quick)
    with pytest.raises(LocksConfigurationError, match=r"the ttl of .*quick.* shorter than 100 ms"):
        await locks.start()


def test_two_keys_on_one_function_are_refused():
    async def job() -> None: ...

    with pytest.raises(LocksConfigurationError, match=r"two keys, 'b' and 'a'"):
        leaselock.on_one_instance(key="a")(leaselock.without_overlapping(key="b")(job))


def test_registering_an_object_without_jobs_is_refused(store):
    with pytest.raises(LocksConfigurationError, match="carries no leaselock job or election"):
        Locks(store=store).register(object())


async def test_a_store_failing_at_shutdown_is_logged_never_raised(
    clock, caplog: pytest.LogCaptureFixture
):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
    locks = Locks(store=store, clock=clock)
    job = locks.register(StockReconciliationJob("x"))
    await locks.start()
    await job.reconcile_stock()
    held = await locks.acquire("report:monthly")
    assert held is not None
    await clock.advance("2s")
    store.fail()
    with caplog.at_level(logging.INFO, logger="leaselock"):
        await locks.aclose()
    assert not held.held
    assert "store unreachable (injected outage)" in caplog.text


async def test_a_tick_whose_lease_was_lost_while_its_run_lock_was_taken_does_not_run(clock):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
    job = StockReconciliationJob("paused")
    skipped: list[Event] = []
    async with Locks(store=store, clock=clock, ttl="3s") as locks:
        locks.register(job)
        locks.events.subscribe(skipped.append, "tick-skipped")
        assert await job.reconcile_stock() == "paused"
        clock.jump("2500ms")
        stuck = store.hang("start_run", key="inventory:stock-reconciliation", times=1)
        tick = asyncio.create_task(job.reconcile_stock())
        await wait_all_tasks_blocked()
        clock.jump("600ms")
        stuck.release()
        assert await tick is None
        assert len(job.tokens) == 1, "the run started on a lease that was already lost"
        assert [event.reason for event in skipped] == ["another-instance"]  # type: ignore[attr-defined]
        await clock.advance(0)
        assert "inventory:stock-reconciliation" not in store.inner._rows


class Reconciliation:
    """A job whose run lock is kept 30 s after it starts, as a Celery beat per replica needs."""

    def __init__(self) -> None:
        self.runs = 0

    @leaselock.without_overlapping(key="inventory:counted", min_hold="30s")
    async def count(self) -> str:
        self.runs += 1
        return "counted"


async def test_min_hold_keeps_the_run_lock_after_a_short_run_so_a_duplicate_tick_skips(
    store, clock, caplog: pytest.LogCaptureFixture
):
    jobs = [Reconciliation(), Reconciliation()]
    async with Locks(store=store, clock=clock) as first, Locks(store=store, clock=clock) as second:
        first.register(jobs[0])
        second.register(jobs[1])
        assert await jobs[0].count() == "counted"
        await clock.advance("2s")
        with caplog.at_level(logging.DEBUG, logger="leaselock"):
            assert await jobs[1].count() is None, "the same tick, from another scheduler"
            assert await jobs[0].count() is None
        await clock.advance("28s")
        assert await jobs[1].count() == "counted", "min_hold is over: the next tick runs"
    assert [job.runs for job in jobs] == [1, 1]
    assert "Skipped inventory:counted: a run is still in progress (" in caplog.text
    assert "or one started less than min_hold (30000 ms) ago" in caplog.text


async def test_a_run_longer_than_min_hold_releases_its_lock_when_it_ends(store, clock):
    @leaselock.without_overlapping(key="slow", min_hold="1s")
    async def slow() -> None:
        await clock.advance("2s")

    async with Locks(store=store, clock=clock) as locks:
        locks.register(slow)
        await slow()
        assert "slow" not in store._rows, "released at once: the run outlived min_hold"


def test_min_hold_is_checked_as_a_duration():
    with pytest.raises(LocksConfigurationError, match="min_hold=-1 is negative"):
        leaselock.without_overlapping(min_hold=-1)


@pytest.mark.parametrize(
    ("decorate", "message"),
    [
        (
            lambda: leaselock.on_one_instance(key="k", owner_idel="5m"),
            (
                r"on_one_instance\(\) takes no option 'owner_idel'; it takes key, ttl and "
                r"alert_after_failures, cancel_on_loss, catch_up"
            ),
        ),
        (
            lambda: Locks().without_overlapping(key="k", overlaps="skip"),
            r"without_overlapping\(\) takes no option 'overlaps'",
        ),
        (
            lambda: SyncLocks().without_overlapping(key="k", cancel_on_loss=True),
            (
                r"SyncLocks.without_overlapping\(\) takes no option 'cancel_on_loss'; a thread "
                r"cannot be cancelled"
            ),
        ),
        (
            lambda: SyncLocks().on_one_instance(key="k", catch_up="all"),
            r"catch_up='all'; pass \"latest\"",
        ),
    ],
)
def test_an_option_a_decorator_does_not_take_is_refused_naming_those_it_does(decorate, message):
    with pytest.raises(LocksConfigurationError, match=message):
        decorate()
