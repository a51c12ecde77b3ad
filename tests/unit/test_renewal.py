"""Renewal: one timer per Locks, batches, and both ways a loss is detected."""

import logging
from collections.abc import Sequence

import pytest

from leaselock import LockLost, Locks
from leaselock._engine import CheckedStore, LeaseState, LockEngine
from leaselock._engine import RenewalScheduler as Scheduler
from leaselock._events import Events, Publisher
from leaselock.stores import AcquireResult, InMemoryLockStore, Renewal
from leaselock.testing import FaultyStore, ManualClock


def faulty(clock: ManualClock) -> FaultyStore:
    """The in-memory store behind a FaultyStore: faults on demand, every call recorded."""
    return FaultyStore(InMemoryLockStore(clock=clock), clock=clock)


def renewals(store: FaultyStore) -> list[int]:
    """When each renewal was sent, on the clock."""
    return [call.sent_ms for call in store.calls if call.method == "renew"]


class BatchingStore:
    """The in-memory store with the batch capability, recording each batch and each renewal."""

    def __init__(self, clock: ManualClock) -> None:
        self.inner = InMemoryLockStore(clock=clock)
        self.batches: list[int] = []
        self.single_renewals = 0

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        return await self.inner.acquire(key, owner, ttl_ms)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        self.single_renewals += 1
        return await self.inner.renew(key, owner, ttl_ms)

    async def release(self, key: str, owner: str) -> bool:
        return await self.inner.release(key, owner)

    async def renew_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        self.batches.append(len(renewals))
        return [await self.inner.renew(*renewal) for renewal in renewals]


def pending_timers(clock: ManualClock) -> int:
    return sum(not timer.cancelled for timer in clock._timers)


def renewal_timers(clock: ManualClock) -> int:
    """The pending timers of renewal schedulers (the other is the watch on store calls)."""
    return sum(
        not timer.cancelled and isinstance(getattr(timer.callback, "__self__", None), Scheduler)
        for timer in clock._timers
    )


async def test_a_held_lock_is_renewed_every_third_of_its_ttl_and_stays_held(clock):
    store = faulty(clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        lock = await locks.acquire("k")
        assert lock is not None
        await clock.advance("95s")
        assert renewals(store) == [10_000 * n for n in range(1, 10)]
        assert lock.held
        assert store.inner._rows["k"].expires_at_ms == 90_000 + 30_000


async def test_one_timer_drives_the_renewals_of_every_held_lock(clock):
    store = faulty(clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        for n in range(100):
            assert await locks.acquire(f"k{n}") is not None
        assert renewal_timers(clock) == 1
        assert pending_timers(clock) <= 2, "and at most one watch on the store calls"
        await clock.advance("10s")
        assert len(renewals(store)) == 100
        assert renewal_timers(clock) == 1
        assert pending_timers(clock) <= 2


async def test_a_lease_released_before_its_first_renewal_is_never_renewed_nor_timed(clock):
    store = faulty(clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        for _ in range(1000):
            lock = await locks.acquire("k")
            assert lock is not None
            await lock.release()
        # the timer armed for the first lease's renewal fires once, finds nothing, and stays off
        assert renewal_timers(clock) == 1
        await clock.advance("10s")
        assert renewal_timers(clock) == 0
        await clock.advance("1m")
        assert renewals(store) == []


async def test_leases_released_out_of_order_leave_the_held_ones_renewed_on_time(clock):
    store = BatchingStore(clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        taken = [await locks.acquire(f"k{n}") for n in range(2000)]
        # every other one released in the order taken: none is the last one in when released
        for lock in taken[::2]:
            assert lock is not None
            assert await lock.release()
        await clock.advance("10s")
        assert store.batches == [1000]
        assert store.single_renewals == 0
        assert all(lock is not None and lock.held for lock in taken[1::2])
        assert all(lock is not None and not lock.held for lock in taken[::2])
        await clock.advance("10s")
        assert store.batches == [1000, 1000]


async def test_a_lease_taken_as_its_locks_closes_is_never_filed_for_renewal(clock):
    store = faulty(clock)
    locks = Locks(store=store, ttl="30s", clock=clock)
    await locks.start()
    assert await locks.acquire("k") is not None
    await locks.aclose()
    assert renewal_timers(clock) == 0
    await clock.advance("1m")
    assert renewals(store) == []


async def test_due_renewals_go_to_the_store_in_one_batch_where_it_can(clock):
    store = BatchingStore(clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        for n in range(40):
            await locks.acquire(f"k{n}")
        await clock.advance("10s")
        assert store.batches == [40]
        assert store.single_renewals == 0


async def test_leases_taken_at_a_thousand_moments_fall_into_step_and_share_one_batch(clock):
    store = BatchingStore(clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        held = []
        for n in range(1000):
            lock = await locks.acquire(f"k{n}")
            assert lock is not None
            held.append(lock)
            await clock.advance("10ms")  # taken over 10 s: a whole renewal interval
        await clock.advance("60s")
        # one batch per lease per interval without the early window: about 7,000 in 70 s
        assert len(store.batches) <= 2 * 7
        assert store.batches[-4:] == [1000] * 4
        assert store.single_renewals == 0
        assert all(lock.held for lock in held)


async def test_a_lease_renewed_early_to_share_a_batch_keeps_five_sixths_of_its_ttl_ahead(clock):
    store = BatchingStore(clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        first = await locks.acquire("first")
        await clock.advance("4s")
        second = await locks.acquire("second")
        assert first is not None
        assert second is not None
        await clock.advance("6s")  # first is due; second is 4 s early, within its 5 s window
        assert store.batches == [2]
        assert store.inner._rows["second"].expires_at_ms == 10_000 + 30_000


async def test_a_lease_due_with_others_but_outside_its_own_early_window_waits_for_its_time(clock):
    store = BatchingStore(clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        await clock.advance("1s")
        assert await locks.acquire("due-first") is not None  # renewal due at 11 s
        await clock.advance("3s")
        assert await locks.acquire("long") is not None  # due at 14 s; early window 5 s
        await clock.advance("6s")
        assert await locks.acquire("short", ttl="12s") is not None  # due at 14 s; window 2 s
        await clock.advance("1s")
        assert store.batches == [2]  # at 11 s: "long" came along, "short" is 3 s early
        assert store.inner._rows["short"].expires_at_ms == 10_000 + 12_000
        await clock.advance("3s")
        assert store.batches == [2]
        assert store.single_renewals == 1  # a batch of one is a plain renew
        assert store.inner._rows["short"].expires_at_ms == 14_000 + 12_000


async def test_released_leases_leave_no_renewal_timer_behind(clock):
    store = BatchingStore(clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        held = [await locks.acquire(f"k{n}") for n in range(500)]
        await clock.advance("10s")
        assert store.batches == [500]
        for lock in held:
            assert lock is not None
            assert await lock.release()
        await clock.advance("10s")
        assert store.batches == [500]
        assert pending_timers(clock) == 0


async def test_a_refused_renewal_loses_the_lock_aborts_its_signal_and_warns(
    clock, caplog: pytest.LogCaptureFixture
):
    store = faulty(clock)
    lost_events: list[LockLost] = []
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        locks.events.subscribe(lost_events.append, "lock-lost")
        lock = await locks.acquire("invoices:nightly-export")
        assert lock is not None
        del store.inner._rows["invoices:nightly-export"]
        with caplog.at_level(logging.WARNING, logger="leaselock"):
            await clock.advance("10s")
        assert not lock.held
        reason = lock.signal.reason
        assert reason is not None
        assert reason.detected_by == "renewal"
        assert reason.fencing_token == lock.fencing_token
        assert [(e.key, e.detected_by) for e in lost_events] == [
            ("invoices:nightly-export", "renewal")
        ]
    assert (
        f'Lost lock "invoices:nightly-export" (fencing token {lock.fencing_token}), '
        "detected by renewal"
    ) in caplog.text


async def test_an_unreachable_store_is_retried_until_the_deadline_then_the_lock_is_lost(
    clock, caplog: pytest.LogCaptureFixture
):
    store = faulty(clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        lock = await locks.acquire("k")
        assert lock is not None
        store.fail("renew")
        with caplog.at_level(logging.WARNING, logger="leaselock"):
            await clock.advance("29999ms")
            assert lock.held
            await clock.advance("1ms")
        assert not lock.held
        reason = lock.signal.reason
        assert reason is not None
        assert reason.detected_by == "deadline"
        assert renewals(store) == [10_000, 15_000, 20_000, 25_000]
    assert caplog.text.count('Renewal of "k" failed, retrying until its deadline') == 4
    assert "detected by deadline" in caplog.text


async def test_a_store_that_comes_back_before_the_deadline_keeps_the_lock(clock):
    store = faulty(clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        lock = await locks.acquire("k")
        assert lock is not None
        outage = store.fail("renew")
        await clock.advance("16s")
        outage.remove()
        await clock.advance("4s")
        assert lock.held
        await clock.advance("60s")
        assert lock.held
        assert lock._lease.deadline_ms == 80_000 + 30_000


async def test_a_renewal_unanswered_at_the_deadline_is_abandoned_and_the_key_handed_back(clock):
    store = faulty(clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        lock = await locks.acquire("k")
        assert lock is not None
        store.delay("renew", "25s")  # renewed at the store at 10 s; the answer comes at 35 s
        await clock.advance("30s")
        assert not lock.held
        reason = lock.signal.reason
        assert reason is not None
        assert reason.detected_by == "deadline"
        assert [call.outcome for call in store.calls if call.method == "renew"] == ["cancelled"]
        assert "k" not in store.inner._rows, "renewed to 40 s at the store, but handed back"


async def test_a_batch_left_unanswered_loses_each_lease_at_its_own_deadline(clock):
    store = faulty(clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        first = await locks.acquire("first")  # deadline 30 s, renewal due at 10 s
        await clock.advance("4s")
        second = await locks.acquire("second")  # deadline 34 s; early enough to join at 10 s
        assert first is not None
        assert second is not None
        store.delay("renew", "40s")
        await clock.advance("6s")
        assert renewals(store) == [10_000, 10_000], "one batch, sent at 10 s"
        await clock.advance("20s")
        assert not first.held
        assert second.held, "its deadline is 4 s later"
        await clock.advance("4s")
        assert not second.held
        for lock in (first, second):
            reason = lock.signal.reason
            assert reason is not None
            assert reason.detected_by == "deadline"


async def test_only_one_renewal_of_a_lock_is_in_flight_at_a_time(clock):
    store = faulty(clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        lock = await locks.acquire("k")
        assert lock is not None
        store.delay("renew", "12s", times=1)
        await clock.advance("21s")
        assert renewals(store) == [10_000], "no second renewal at 20 s while one is in flight"
        assert lock.held
        await clock.advance("1s")
        assert renewals(store) == [10_000, 22_000], "the next renewal waited for that answer"
        assert lock._lease.deadline_ms == 22_000 + 30_000


async def test_the_deadline_counts_from_the_send_time_of_the_confirmed_renewal(clock):
    store = faulty(clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        lock = await locks.acquire("k")
        assert lock is not None
        store.delay("renew", "2s", times=1)
        await clock.advance("12s")
        assert lock._lease.deadline_ms == 40_000
        assert store.inner._rows["k"].expires_at_ms == 40_000


async def test_a_paused_holder_believes_it_holds_until_it_resumes_and_is_refused(store, clock):
    paused = ManualClock()
    async with (
        Locks(store=store, ttl="30s", clock=paused) as sleeper,
        Locks(store=store, ttl="30s", clock=clock) as other,
    ):
        stale = await sleeper.acquire("k")
        assert stale is not None
        await clock.advance("31s")
        fresh = await other.acquire("k")
        assert fresh is not None
        assert fresh.fencing_token > stale.fencing_token
        assert stale.held, "a paused process cannot know; only the fencing token covers this"
        await paused.advance("10s")
        assert not stale.held
        reason = stale.signal.reason
        assert reason is not None
        assert reason.detected_by == "renewal"
        assert fresh.held


class FrozenLoopClock:
    """Time moves but no timer runs: a process resuming from a pause, before its loop catches up."""

    def __init__(self) -> None:
        self.now = 0

    def now_ms(self) -> int:
        return self.now

    def call_at(self, when_ms: int, callback: object) -> "FrozenLoopClock":
        return self

    def cancel(self) -> None:
        return None


async def test_the_signal_reads_the_deadline_before_any_timer_has_run():
    frozen = FrozenLoopClock()
    async with Locks(store=InMemoryLockStore(clock=frozen), ttl="30s", clock=frozen) as locks:
        lock = await locks.acquire("k")
        assert lock is not None
        frozen.now = 29_999
        assert lock.held
        assert not lock.signal.aborted
        frozen.now = 30_000
        assert not lock.held
        assert lock.signal.aborted
        with pytest.raises(Exception, match="no renewal was confirmed") as lost:
            lock.signal.raise_if_aborted()
        assert lost.value.detected_by == "deadline"  # type: ignore[attr-defined]


async def test_a_renewal_slower_than_a_third_of_the_ttl_is_warned_about_and_the_lock_kept(
    clock, caplog: pytest.LogCaptureFixture
):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        lock = await locks.acquire("k")
        assert lock is not None
        store.delay("renew", "11s", times=1)
        with caplog.at_level(logging.WARNING, logger="leaselock"):
            await clock.advance("25s")
        assert lock.held
    # said when it had waited a third of the ttl, not again when the answer came at 11 s
    assert (
        'Renewing "k" has waited for the store\'s answer for 10000 ms, more than a third of its '
        "ttl (30000 ms)"
    ) in caplog.text
    assert caplog.text.count("more than a third of its ttl") == 1


async def test_a_renewal_still_unanswered_after_a_third_of_the_ttl_is_warned_about_before_the_loss(
    clock, caplog: pytest.LogCaptureFixture
):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        lock = await locks.acquire("k")
        assert lock is not None
        stuck = store.hang("renew")
        with caplog.at_level(logging.WARNING, logger="leaselock"):
            # the renewal is sent at 10 s; a third of a ttl later it is still unanswered
            await clock.advance("20s")
            assert lock.held
            assert (
                'Renewing "k" has waited for the store\'s answer for 10000 ms, more than a third '
                "of its ttl (30000 ms)"
            ) in caplog.text
            await clock.advance("20s")
        assert not lock.held
        stuck.release()
    assert caplog.text.count("more than a third of its ttl") == 1, "said once, not again at the end"


async def test_renewals_within_a_third_of_the_ttl_are_not_warned_about(
    clock, caplog: pytest.LogCaptureFixture
):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
    async with Locks(store=store, ttl="30s", clock=clock) as locks:
        assert await locks.acquire("k") is not None
        store.delay("renew", "9s")
        with caplog.at_level(logging.WARNING, logger="leaselock"):
            await clock.advance("1m")
        store.heal()
    assert "more than a third" not in caplog.text


async def test_what_is_told_of_each_confirmed_renewal_call_cannot_stop_the_renewals(
    clock, caplog: pytest.LogCaptureFixture
):
    told: list[int] = []

    def broken_recorder() -> None:
        told.append(clock.now_ms())
        raise OSError("disk full")

    store = faulty(clock)
    engine = LockEngine(
        CheckedStore(store),
        clock,
        Publisher(Events()),
        instance="shop-3001",
        on_renewed=broken_recorder,
    )
    await engine.start()
    lease = await engine.acquire("k", 30_000, 0, None)
    assert lease is not None
    await engine.acquire("j", 30_000, 0, None)
    await clock.advance("35s")
    assert renewals(store) == [10_000, 10_000, 20_000, 20_000, 30_000, 30_000]
    assert told == [10_000, 20_000, 30_000], "once per call, not once per lease"
    assert lease.state is LeaseState.HELD
    assert "Recording a confirmed renewal failed" in caplog.text
    await engine.close()
