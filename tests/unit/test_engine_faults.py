"""Mutual exclusion when the store fails: retries, late answers, hangs, and paused holders.

Every fault is injected with FaultyStore on the manual clock; `clock.jump` is a paused process.
"""

import asyncio
import logging
from datetime import timedelta

import pytest

from helpers import LocksOnlyStore
from leaselock import Event, Lock, Locks, LockStoreError
from leaselock._engine import ATTEMPT_FLOOR_MS, RELEASE_BOUND_MS
from leaselock.stores import Acquired, AcquireResult, InMemoryLockStore, NotAcquired
from leaselock.testing import FaultyStore, ManualClock, wait_all_tasks_blocked


@pytest.fixture
def faulty(clock: ManualClock) -> FaultyStore:
    return FaultyStore(InMemoryLockStore(clock=clock), clock=clock)


@pytest.fixture
def polled(clock: ManualClock) -> FaultyStore:
    """A store without waiting lines: a wait retries its acquire (faults in a line's calls:
    ``test_queued_wait.py``)."""
    return FaultyStore(LocksOnlyStore(InMemoryLockStore(clock=clock)), clock=clock)


async def test_a_failed_attempts_cleanup_never_frees_what_a_retry_won(polled, clock):
    polled.fail("acquire", times=1)
    polled.delay("release", "500ms", on="request")
    async with Locks(store=polled, clock=clock) as locks:
        waiting = asyncio.create_task(locks.acquire("k", wait="5s"))
        await clock.advance("100ms")
        lock = await waiting
        assert isinstance(lock, Lock)
        await clock.advance("1s")
        assert lock.held
        intruder = await polled.inner.acquire("k", "intruder", 60_000)
        assert isinstance(intruder, NotAcquired), "the first attempt's late release freed the key"
        polled.heal()


async def test_an_attempt_whose_answer_was_lost_is_handed_back_and_the_wait_goes_on(polled, clock):
    polled.lose_answer("acquire", times=1)
    async with Locks(store=polled, clock=clock) as locks:
        waiting = asyncio.create_task(locks.acquire("k", wait="5s"))
        await clock.advance("1s")
        lock = await waiting
        assert isinstance(lock, Lock)
        first, second = (call for call in polled.calls if call.method == "acquire")
        assert first.owner != second.owner, "a retry reuses the failed attempt's owner id"
        releases = [call for call in polled.calls if call.method == "release"]
        assert [(call.owner, call.outcome) for call in releases] == [(first.owner, True)]
        assert lock.owner == second.owner


class LeaseMates(LocksOnlyStore):
    """Answers every acquire as a store whose new lock joins a lease renewed ``age_ms`` before."""

    def __init__(self, inner: FaultyStore, age_ms: int) -> None:
        super().__init__(inner)
        self.age_ms = age_ms

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        answer = await self.inner.acquire(key, owner, ttl_ms)
        if isinstance(answer, Acquired):
            return Acquired(answer.fencing_token, self.age_ms)
        return answer


# a lock under a lease its store renewed 600 ms before the acquire lives 600 ms less
@pytest.mark.parametrize(("lease_age_ms", "answered_after"), [(0, "3s"), (600, "2400ms")])
async def test_an_acquire_answered_after_its_ttl_is_not_acquired_and_is_handed_back(
    faulty, clock, lease_age_ms: int, answered_after: str
):
    stuck = faulty.hang("acquire", times=1)
    store = LeaseMates(faulty, age_ms=lease_age_ms)
    async with Locks(store=store, ttl="3s", clock=clock) as locks:
        attempt = asyncio.create_task(locks.acquire("k"))
        await wait_all_tasks_blocked()
        clock.jump(answered_after)
        stuck.release()
        assert await attempt is None
        await clock.advance(0)
        assert [call.method for call in faulty.calls] == ["acquire", "release"]
        assert isinstance(await faulty.inner.acquire("k", "next", 1000), Acquired)


async def test_hold_never_runs_its_block_on_an_acquire_answered_too_late(faulty, clock):
    from leaselock import LockNotAcquiredError  # noqa: PLC0415

    stuck = faulty.hang("acquire", times=1)
    ran = False
    async with Locks(store=faulty, ttl="1s", clock=clock) as locks:

        async def enter() -> None:
            nonlocal ran
            async with locks.hold("k"):
                ran = True

        entering = asyncio.create_task(enter())
        await wait_all_tasks_blocked()
        clock.jump("2s")
        stuck.release()
        with pytest.raises(LockNotAcquiredError):
            await entering
    assert not ran


async def test_a_late_answer_while_waiting_is_handed_back_and_the_wait_goes_on(polled, clock):
    stuck = polled.hang("acquire", times=1)
    async with Locks(store=polled, ttl="1s", clock=clock) as locks:
        waiting = asyncio.create_task(locks.acquire("k", wait="10s"))
        await wait_all_tasks_blocked()
        clock.jump("1500ms")
        stuck.release()
        await clock.advance("1s")
        lock = await waiting
        assert isinstance(lock, Lock)
        assert lock.held
        assert lock.fencing_token == 2


async def test_a_hung_acquire_with_a_wait_returns_after_the_wait_and_one_bounded_attempt(
    polled, clock
):
    polled.hang("acquire")
    async with Locks(store=polled, ttl="30s", clock=clock) as locks:
        waiting = asyncio.create_task(locks.acquire("k", wait="1s"))
        await clock.advance(timedelta(milliseconds=1000 + ATTEMPT_FLOOR_MS))
        assert waiting.done(), "acquire(wait='1s') still waiting on a hung store"
        with pytest.raises(LockStoreError, match=r"did not answer acquire\('k'\) within"):
            await waiting
        polled.heal()
        await clock.advance("1s")
    assert all(call.outcome == "cancelled" for call in polled.calls if call.method == "acquire")
    assert isinstance(await polled.inner.acquire("k", "next", 1000), Acquired)


async def test_a_hung_acquire_that_tries_once_fails_within_the_attempt_floor(faulty, clock):
    faulty.hang("acquire")
    async with Locks(store=faulty, ttl="30s", clock=clock) as locks:
        attempt = asyncio.create_task(locks.acquire("k"))
        await clock.advance(timedelta(milliseconds=ATTEMPT_FLOOR_MS - 1))
        assert not attempt.done()
        await clock.advance("1ms")
        with pytest.raises(LockStoreError, match="within 1000 ms"):
            await attempt
        faulty.heal()


async def test_an_attempt_is_never_given_longer_than_its_ttl(faulty, clock):
    faulty.hang("acquire")
    async with Locks(store=faulty, ttl="300ms", clock=clock) as locks:
        attempt = asyncio.create_task(locks.acquire("k"))
        await clock.advance("300ms")
        with pytest.raises(LockStoreError, match="within 300 ms"):
            await attempt
        faulty.heal()


async def test_a_hung_release_gives_up_after_its_bound_and_the_lock_expires(
    faulty, clock, caplog: pytest.LogCaptureFixture
):
    async with Locks(store=faulty, ttl="30s", clock=clock) as locks:
        lock = await locks.acquire("k")
        assert lock is not None
        faulty.hang("release")
        releasing = asyncio.create_task(lock.release())
        await clock.advance(timedelta(milliseconds=RELEASE_BOUND_MS))
        with pytest.raises(LockStoreError, match=r"did not answer release\('k'\) within 2000 ms"):
            await releasing
        assert not lock.held
        faulty.heal()


async def test_leaving_a_hold_block_on_a_hung_store_takes_the_release_bound_and_logs(
    faulty, clock, caplog: pytest.LogCaptureFixture
):
    async with Locks(store=faulty, ttl="30s", clock=clock) as locks:

        async def work() -> str:
            async with locks.hold("k"):
                faulty.hang("release")
                return "done"

        with caplog.at_level(logging.WARNING, logger="leaselock"):
            running = asyncio.create_task(work())
            await clock.advance(timedelta(milliseconds=RELEASE_BOUND_MS))
            assert await running == "done"
        assert 'Could not release "k"; it expires on its own' in caplog.text
        faulty.heal()


async def test_a_hung_renewal_is_abandoned_at_the_holders_deadline(faulty, clock):
    async with Locks(store=faulty, ttl="3s", clock=clock) as locks:
        lock = await locks.acquire("k")
        assert lock is not None
        faulty.hang("renew")
        await clock.advance("3s")
        reason = lock.signal.reason
        assert reason is not None
        assert reason.detected_by == "deadline"
        renewals = [call for call in faulty.calls if call.method == "renew"]
        assert [call.outcome for call in renewals] == ["cancelled"]
        faulty.heal()


async def test_a_release_after_a_pause_past_the_deadline_reports_the_loss_once(faulty, clock):
    lost: list[Event] = []
    async with Locks(store=faulty, ttl="3s", clock=clock) as locks:
        locks.events.subscribe(lost.append, "lock-lost")
        lock = await locks.acquire("k")
        assert lock is not None
        clock.jump("3s")
        assert await lock.release() is False
        reason = lock.signal.reason
        assert reason is not None
        assert reason.detected_by == "deadline"
        assert lock.signal.aborted
        assert "lost" in repr(lock)
        await clock.advance(0)
        assert lock.signal.aborted
        assert [(event.key, getattr(event, "detected_by", None)) for event in lost] == [
            ("k", "deadline")
        ]


async def test_a_lock_past_its_deadline_reads_as_lost_before_its_timer_runs(faulty, clock):
    async with Locks(store=faulty, ttl="3s", clock=clock) as locks:
        lock = await locks.acquire("k")
        assert lock is not None
        assert "held" in repr(lock)
        clock.jump("3s")
        assert not lock.held
        assert "lost" in repr(lock)
        await clock.advance(0)
        assert "lost" in repr(lock)


async def test_an_acquire_whose_bound_is_swallowed_times_out_as_a_hung_one(faulty, clock):
    stuck = faulty.swallow_cancellation("acquire", times=1)
    async with Locks(store=faulty, ttl="10s", clock=clock) as locks:
        acquiring = asyncio.create_task(locks.acquire("k"))
        await clock.advance(f"{ATTEMPT_FLOOR_MS - 1}ms")
        assert not acquiring.done()
        await clock.advance("1ms")
        with pytest.raises(LockStoreError, match="did not answer acquire"):
            await acquiring
        assert not stuck._held, "the bound's cancellation never reached the held call"
        (attempt,) = (call for call in faulty.calls if call.method == "acquire")
        assert isinstance(attempt.outcome, Acquired), "the swallowing call answered after all"
        await clock.advance(0)
        intruder = await faulty.inner.acquire("k", "intruder", 1000)
        assert isinstance(intruder, Acquired), "the late win was not handed back"


async def test_a_release_whose_bound_is_swallowed_reports_the_timeout(faulty, clock):
    async with Locks(store=faulty, clock=clock) as locks:
        lock = await locks.acquire("k")
        assert lock is not None
        faulty.swallow_cancellation("release", times=1)
        releasing = asyncio.create_task(lock.release())
        await clock.advance(f"{RELEASE_BOUND_MS}ms")
        with pytest.raises(LockStoreError, match="did not answer release"):
            await releasing
        assert not lock.held


async def test_a_lock_under_a_lease_renewed_before_counts_its_deadline_from_that_renewal(
    faulty, clock
):
    async with Locks(store=LeaseMates(faulty, age_ms=600), ttl="3s", clock=clock) as locks:
        lock = await locks.acquire("k")
        assert lock is not None
        faulty.hang("renew")
        # its first renewal is due a third of the 2.4 s it has left, not of the ttl
        await clock.advance("799ms")
        assert [call.method for call in faulty.calls] == ["acquire"]
        await clock.advance("1ms")
        assert [call.method for call in faulty.calls] == ["acquire", "renew"]
        await clock.advance("1599ms")
        assert lock.held
        await clock.advance("1ms")
        reason = lock.signal.reason
        assert reason is not None
        assert reason.detected_by == "deadline"
        faulty.heal()
