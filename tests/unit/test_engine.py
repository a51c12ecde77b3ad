"""Waiting for a lock: backoff on the clock, wake-ups on release, and clean cancellation."""

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable

import pytest

from helpers import LocksOnlyStore, SlowlyToldStore
from leaselock import Lock, LockLostError, Locks, LockStoreError, current_lock
from leaselock._engine import BACKOFF_CAP_MS, backoff_ms
from leaselock.stores import Acquired, InMemoryLockStore, NotAcquired
from leaselock.testing import FaultyStore, ManualClock, wait_all_tasks_blocked


def faulty(clock: ManualClock) -> FaultyStore:
    """The in-memory store without its waiting lines, behind a FaultyStore: waits retry.

    Faults on demand, every call recorded. Waits in a store's lines: ``test_queued_wait.py``.
    """
    return FaultyStore(LocksOnlyStore(InMemoryLockStore(clock=clock)), clock=clock)


def acquires(store: FaultyStore) -> list[int]:
    """When each acquire came, on the clock."""
    return [call.sent_ms for call in store.calls if call.method == "acquire"]


def test_backoff_doubles_from_50_ms_to_a_1_s_cap_with_jitter_in_the_upper_half():
    steps = [50, 100, 200, 400, 800, 1000, 1000, 1000]
    for attempt, step in enumerate(steps):
        pauses = {backoff_ms(attempt) for _ in range(200)}
        assert min(pauses) >= step // 2
        assert max(pauses) <= step
        assert len(pauses) > 1, "no jitter"
    assert backoff_ms(1000) <= BACKOFF_CAP_MS


async def test_a_waiter_retries_on_the_clock_and_takes_the_key_once_its_lease_expires(clock):
    store = faulty(clock)
    await store.inner.acquire("k", "crashed-holder", 1000)
    async with Locks(store=store, clock=clock) as locks:
        waiting = asyncio.create_task(locks.acquire("k", wait="5s"))
        await clock.advance("999ms")
        assert not waiting.done()
        await clock.advance("1000ms")
        lock = await waiting
        assert lock is not None
        assert lock.held
    times = acquires(store)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert times[0] == 0
    assert all(gap <= BACKOFF_CAP_MS for gap in gaps)
    assert gaps[:3] == sorted(gaps[:3])


class HearsNothing:
    """A follower that claims to hear releases by other processes (there are none here)."""

    def following(self, key: str) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()


class ToldStore(LocksOnlyStore):
    """The in-memory store without lines, as if it told of releases by other processes."""

    @contextlib.asynccontextmanager
    async def follow_releases(
        self, on_release: Callable[[str], None]
    ) -> AsyncIterator[HearsNothing]:
        yield HearsNothing()


async def test_a_waiter_the_store_tells_of_releases_polls_at_the_capped_pause_only(clock):
    store = FaultyStore(ToldStore(InMemoryLockStore(clock=clock)), clock=clock)
    await store.inner.acquire("k", "holder", 60_000)
    async with Locks(store=store, clock=clock) as locks:
        waiting = asyncio.create_task(locks.acquire("k", wait="5s"))
        await clock.advance("5s")
        assert await waiting is None
    gaps = [b - a for a, b in itertools.pairwise(acquires(store))]
    # the first retry is armed before the following is in place: it is the quick one; after
    # it, without being told, 100, 200, 400 ms; told, only an expiry needs a look
    assert gaps[0] <= 50
    assert all(gap >= BACKOFF_CAP_MS // 2 for gap in gaps[1:-1])
    assert len(acquires(store)) <= 12


async def test_a_release_elsewhere_before_the_following_is_in_place_is_found_once_it_is(clock):
    store = SlowlyToldStore(clock)
    await store.acquire("k", "other-process", 60_000)
    async with Locks(store=store, clock=clock) as locks:
        waiting = asyncio.create_task(locks.acquire("k", wait="1m"))
        await wait_all_tasks_blocked()
        assert await store.release("k", "other-process")
        store.gate.set()
        lock = await asyncio.wait_for(waiting, timeout=5)
        assert lock is not None
        assert clock.now_ms() == 0, "found by the following's own look, not by a retry"


async def test_a_waiter_gives_up_after_its_wait_with_a_last_attempt_at_the_end(clock):
    store = faulty(clock)
    await store.inner.acquire("k", "holder", 60_000)
    async with Locks(store=store, clock=clock) as locks:
        waiting = asyncio.create_task(locks.acquire("k", wait="2s"))
        await clock.advance("2s")
        assert await waiting is None
    assert acquires(store)[-1] == 2000
    assert 5 <= len(acquires(store)) <= 12


async def test_a_release_in_this_process_wakes_a_waiter_at_once_without_time_passing(store, clock):
    async with (
        Locks(store=store, clock=clock) as first,
        Locks(store=store, clock=clock) as second,
    ):
        holder = await first.acquire("k")
        assert holder is not None
        waiting = asyncio.create_task(second.acquire("k", wait="1m"))
        await wait_all_tasks_blocked()
        assert not waiting.done()
        await holder.release()
        lock = await asyncio.wait_for(waiting, timeout=5)
        assert lock is not None
        assert lock.fencing_token > holder.fencing_token
        assert clock.now_ms() == 0


async def test_a_release_wakes_only_the_longest_waiting_waiter_so_waiters_take_turns(clock):
    store = faulty(clock)
    async with Locks(store=store, clock=clock) as locks:
        holder = await locks.acquire("k")
        assert holder is not None
        order: list[int] = []

        async def wait_then_hold(number: int) -> None:
            lock = await locks.acquire("k", wait="1m")
            assert lock is not None
            order.append(number)
            await wait_all_tasks_blocked()
            await lock.release()

        waiters = []
        for number in range(20):
            waiters.append(asyncio.create_task(wait_then_hold(number)))
            await wait_all_tasks_blocked()  # each asks, is refused, and waits, in turn
        before = len(acquires(store))
        await holder.release()
        await asyncio.wait_for(asyncio.gather(*waiters), timeout=5)
        assert order == list(range(20))
        # one attempt per release: the woken waiter's; waking all 20 would cost 190 more
        assert len(acquires(store)) - before == 20
        assert clock.now_ms() == 0


async def test_a_waiter_that_gave_up_passes_its_turn_to_the_next(clock):
    store = faulty(clock)
    async with Locks(store=store, clock=clock) as locks:
        holder = await locks.acquire("k")
        assert holder is not None
        leaving = asyncio.create_task(locks.acquire("k", wait="1m"))
        await wait_all_tasks_blocked()
        staying = asyncio.create_task(locks.acquire("k", wait="1m"))
        await wait_all_tasks_blocked()
        leaving.cancel()
        await wait_all_tasks_blocked()
        await holder.release()
        lock = await asyncio.wait_for(staying, timeout=5)
        assert lock is not None
        assert clock.now_ms() == 0


async def test_the_signal_of_an_outer_lock_stops_the_wait_with_its_reason(locks, store, clock):
    outer = await locks.acquire("outer")
    assert outer is not None
    await store.acquire("inner", "someone-else", 3_600_000)
    waiting = asyncio.create_task(locks.acquire("inner", wait="1h", signal=outer.signal))
    await store.release("outer", outer.owner)
    await clock.advance("10s")
    with pytest.raises(LockLostError) as lost:
        await waiting
    assert lost.value.key == "outer"
    assert lost.value.detected_by == "renewal"


async def test_an_aborted_signal_refuses_to_start_waiting(locks, store, clock):
    outer = await locks.acquire("outer", ttl="3s")
    assert outer is not None
    await store.release("outer", outer.owner)
    await clock.advance("1s")
    assert outer.signal.aborted
    with pytest.raises(LockLostError):
        await locks.acquire("inner", signal=outer.signal)
    assert "inner" not in store._rows


async def test_cancelling_a_waiter_leaves_nothing_acquired(locks, store, clock):
    await store.acquire("k", "holder", 1000)
    waiting = asyncio.create_task(locks.acquire("k", wait="1m"))
    await clock.advance("500ms")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await clock.advance("2s")
    assert not isinstance(await store.acquire("k", "probe", 1000), NotAcquired)


async def test_a_win_that_lands_after_the_waiter_was_cancelled_is_handed_back(clock):
    store = faulty(clock)
    await store.inner.acquire("k", "holder", 60_000)
    async with Locks(store=store, clock=clock) as locks:
        waiting = asyncio.create_task(locks.acquire("k", wait="1m"))
        await wait_all_tasks_blocked()
        stuck = store.hang("acquire")
        await clock.advance("100ms")
        assert stuck.hits == 1, "the retry was sent and hangs"
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await store.inner.release("k", "holder")
        stuck.release()
        await wait_all_tasks_blocked()
        assert isinstance(await store.inner.acquire("k", "probe", 1000), Acquired), "kept"


async def test_cancelling_while_the_first_attempts_answer_is_on_its_way_hands_back_the_win(
    clock,
):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
    store.delay("acquire", "1s")
    async with Locks(store=store, clock=clock) as locks:
        attempt = asyncio.create_task(locks.acquire("k"))
        await wait_all_tasks_blocked()
        assert "k" in store.inner._rows, "the store took the key; its answer is late"
        attempt.cancel()
        with pytest.raises(asyncio.CancelledError):
            await attempt
        await wait_all_tasks_blocked()
        assert store.inner._rows == {}


async def test_store_errors_while_waiting_are_retried_until_the_store_answers(clock):
    store = faulty(clock)
    outage = store.fail("acquire")
    async with Locks(store=store, clock=clock) as locks:
        waiting = asyncio.create_task(locks.acquire("k", wait="10s"))
        await clock.advance("1s")
        assert not waiting.done()
        outage.remove()
        await clock.advance("1s")
        assert isinstance(await waiting, Lock)


async def test_a_wait_that_ends_on_a_store_error_raises_it(clock):
    store = faulty(clock)
    store.fail("acquire")
    async with Locks(store=store, clock=clock) as locks:
        waiting = asyncio.create_task(locks.acquire("k", wait="3s"))
        await clock.advance("3s")
        with pytest.raises(LockStoreError, match=r"InjectedFaultError: .*store unreachable"):
            await waiting


async def test_fifty_tasks_with_lock_on_one_key_never_overlap_and_tokens_grow(locks):
    inside = 0
    tokens: list[int] = []

    async def critical_section() -> None:
        nonlocal inside
        inside += 1
        assert inside == 1, "two tasks inside one lock"
        lock = current_lock()
        assert lock is not None
        tokens.append(lock.fencing_token)
        await asyncio.to_thread(lambda: None)
        inside -= 1

    await asyncio.gather(
        *(locks.with_lock("shared", critical_section, wait="1h") for _ in range(50))
    )
    assert len(tokens) == 50
    assert tokens == sorted(set(tokens))
