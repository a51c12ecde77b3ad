"""Waiting in the store's line: a release hands the key over, first come first served, and every
way a wait ends leaves the line; faults in queue calls, leaves and grants, on the manual clock."""

import asyncio

import pytest

from leaselock import Lock, LockLostError, Locks, LockStoreError
from leaselock._engine import CLOSE_WAIT_MS
from leaselock._engine._queued_wait import PLACE_MS
from leaselock.stores import Acquired, InMemoryLockStore, NotAcquired
from leaselock.testing import FaultyStore, ManualClock, StoreCall, wait_all_tasks_blocked


@pytest.fixture
def faulty(clock: ManualClock) -> FaultyStore:
    """The in-memory store, lines and all, behind a FaultyStore: every call recorded."""
    return FaultyStore(InMemoryLockStore(clock=clock), clock=clock)


def calls_of(store: FaultyStore, *methods: str, owner: str | None = None) -> list[StoreCall]:
    return [
        call
        for call in store.calls
        if call.method in methods and (owner is None or call.owner == owner)
    ]


async def waiting_for(locks: Locks, key: str, wait: str = "1m") -> asyncio.Task[Lock | None]:
    """A task waiting for ``key``, once its place in line is taken."""
    task = asyncio.create_task(locks.acquire(key, wait=wait))
    await wait_all_tasks_blocked()
    return task


async def test_a_release_hands_the_key_to_the_waiter_with_no_call_of_its_own(faulty, clock):
    async with (
        Locks(store=faulty, clock=clock) as holder,
        Locks(store=faulty, clock=clock) as other,
    ):
        held = await holder.acquire("k")
        assert held is not None
        waiting = await waiting_for(other, "k")
        queued = calls_of(faulty, "queue", "acquire")
        await held.release()
        lock = await asyncio.wait_for(waiting, timeout=5)
        assert lock is not None
        assert lock.fencing_token > held.fencing_token
        assert clock.now_ms() == 0
        # the waiter's one call was its place; the release itself made it the holder
        assert calls_of(faulty, "queue", "acquire") == queued
        assert [call.method for call in calls_of(faulty, "queue", owner=lock.owner)] == ["queue"]
        assert [call.outcome for call in calls_of(faulty, "grant")] != []


async def test_waiters_of_every_process_are_served_first_come_first_served(store, clock):
    fleet = [Locks(store=store, clock=clock) for _ in range(4)]
    for locks in fleet:
        await locks.start()
    try:
        holder = await fleet[0].acquire("k")
        assert holder is not None
        order: list[int] = []

        async def wait_then_hold(number: int) -> None:
            lock = await fleet[number % 4].acquire("k", wait="1m")
            assert lock is not None
            order.append(number)
            await wait_all_tasks_blocked()
            await lock.release()

        waiters = []
        for number in range(20):
            waiters.append(asyncio.create_task(wait_then_hold(number)))
            await wait_all_tasks_blocked()
        await holder.release()
        await asyncio.wait_for(asyncio.gather(*waiters), timeout=5)
        assert order == list(range(20))
        assert clock.now_ms() == 0
    finally:
        for locks in fleet:
            await locks.aclose()


async def test_a_waiter_keeps_its_place_every_third_of_its_life(faulty, clock):
    await faulty.inner.acquire("k", "other-process", 60_000)
    async with Locks(store=faulty, clock=clock, ttl="30s") as locks:
        waiting = await waiting_for(locks, "k", wait="10s")
        await clock.advance("10s")
        assert await waiting is None
    queued = calls_of(faulty, "queue")
    assert [call.sent_ms for call in queued] == list(range(0, 10_000, PLACE_MS // 3))
    assert [call.method for call in faulty.calls][-1] == "leave"


async def test_a_granted_lease_lives_its_place_until_its_first_renewal_then_its_ttl(faulty, clock):
    async with Locks(store=faulty, clock=clock, ttl="30s") as locks:
        held = await locks.acquire("k")
        assert held is not None
        waiting = await waiting_for(locks, "k")
        await clock.advance("2500ms")  # the waiter kept its place at 2 s
        await held.release()
        lock = await asyncio.wait_for(waiting, timeout=5)
        assert lock is not None
        # its place was kept at 2 s, for 3 s: the lease is renewed a third into that time
        assert lock.held
        await clock.advance("500ms")
        renewals = calls_of(faulty, "renew", owner=lock.owner)
        assert [call.sent_ms for call in renewals] == [3000]
        await clock.advance("25s")
        assert lock.held, "renewed to its own ttl since"
        await lock.release()


async def test_a_waiter_that_gives_up_leaves_the_line_and_the_key_goes_to_the_next(faulty, clock):
    async with Locks(store=faulty, clock=clock) as locks:
        held = await locks.acquire("k")
        assert held is not None
        impatient = await waiting_for(locks, "k", wait="1s")
        patient = await waiting_for(locks, "k")
        await clock.advance("1s")
        assert await impatient is None
        await wait_all_tasks_blocked()
        leaves = calls_of(faulty, "leave")
        assert len(leaves) == 1
        assert leaves[0].outcome is False
        await held.release()
        lock = await asyncio.wait_for(patient, timeout=5)
        assert lock is not None
        await lock.release()


async def test_a_cancelled_waiter_leaves_the_line(faulty, clock):
    async with Locks(store=faulty, clock=clock) as locks:
        held = await locks.acquire("k")
        assert held is not None
        waiting = await waiting_for(locks, "k")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await wait_all_tasks_blocked()
        assert [call.outcome for call in calls_of(faulty, "leave")] == [False]
        await held.release()
        assert isinstance(await faulty.inner.acquire("k", "probe", 1000), Acquired)
        assert calls_of(faulty, "grant") == []


async def test_a_waiter_cancelled_during_its_first_queue_call_leaves_the_line(faulty, clock):
    await faulty.inner.acquire("k", "other-process", 60_000)
    async with Locks(store=faulty, clock=clock) as locks:
        stuck = faulty.hang("queue")
        waiting = asyncio.create_task(locks.acquire("k", wait="1m"))
        await wait_all_tasks_blocked()
        assert stuck.hits == 1, "the first queue call is out"
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        faulty.heal()
        await wait_all_tasks_blocked()
        assert [call.outcome for call in calls_of(faulty, "queue")] == ["cancelled"]
        assert len(calls_of(faulty, "leave")) == 1
        await faulty.inner.release("k", "other-process")
        assert isinstance(await faulty.inner.acquire("k", "probe", 1000), Acquired)
        assert calls_of(faulty, "grant") == []


async def test_a_grant_to_a_waiter_cancelled_meanwhile_goes_on_to_the_next(faulty, clock):
    async with Locks(store=faulty, clock=clock) as locks:
        held = await locks.acquire("k")
        assert held is not None
        first = await waiting_for(locks, "k")
        second = await waiting_for(locks, "k")
        late = faulty.delay("grant", "100ms", times=1)
        await held.release()
        # the key is the first waiter's at the store, and the grant is on its way
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await clock.advance("100ms")
        lock = await asyncio.wait_for(second, timeout=5)
        assert lock is not None
        assert late.hits == 1
        assert [call.outcome for call in calls_of(faulty, "leave")] == [True]
        await lock.release()


async def test_a_lost_grant_is_found_by_the_waiters_next_queue_call(faulty, clock):
    async with Locks(store=faulty, clock=clock, ttl="30s") as locks:
        held = await locks.acquire("k")
        assert held is not None
        waiting = await waiting_for(locks, "k")
        faulty.fail("grant", times=1)
        await held.release()
        await wait_all_tasks_blocked()
        assert not waiting.done()
        await clock.advance("1s")
        lock = await asyncio.wait_for(waiting, timeout=5)
        assert lock is not None
        assert calls_of(faulty, "queue", owner=lock.owner)[-1].outcome == Acquired(
            lock.fencing_token
        )
        await clock.advance("25s")
        assert lock.held
        await lock.release()


async def test_a_grant_heard_after_its_place_ran_out_is_not_taken(faulty, clock):
    async with Locks(store=faulty, clock=clock, ttl="30s") as locks:
        held = await locks.acquire("k")
        assert held is not None
        waiting = await waiting_for(locks, "k")
        # a stalled waiter: its calls hang, and the grant reaches it after the place's time
        stuck = faulty.hang("queue")
        faulty.delay("grant", "4s", times=1)
        await held.release()
        await clock.advance("4s")
        assert not waiting.done(), "a grant whose place ran out was taken"
        outsider = await faulty.inner.acquire("k", "outsider", 60_000)
        assert isinstance(outsider, Acquired), "the grant outlived its place at the store"
        stuck.remove()
        await faulty.inner.release("k", "outsider")
        lock = await asyncio.wait_for(waiting, timeout=5)
        assert lock is not None
        assert lock.fencing_token > outsider.fencing_token
        await lock.release()


async def test_queue_calls_that_fail_are_asked_again_and_the_wait_ends_with_the_error(
    faulty, clock
):
    await faulty.inner.acquire("k", "other-process", 60_000)
    outage = faulty.fail("queue")
    async with Locks(store=faulty, clock=clock) as locks:
        waiting = await waiting_for(locks, "k", wait="5s")
        await clock.advance("5s")
        with pytest.raises(LockStoreError, match="queue failed"):
            await waiting
        assert [call.sent_ms for call in calls_of(faulty, "queue")] == list(range(0, 5000, 1000))
        outage.remove()
        await faulty.inner.release("k", "other-process")
        assert await locks.acquire("k", wait="1s") is not None


async def test_a_queue_answer_lost_after_the_store_gave_the_key_is_found_next_time(faulty, clock):
    faulty.lose_answer("queue", times=1)
    async with Locks(store=faulty, clock=clock) as locks:
        waiting = await waiting_for(locks, "k")
        assert not waiting.done()
        await clock.advance("1s")
        lock = await asyncio.wait_for(waiting, timeout=5)
        assert lock is not None
        first, second = calls_of(faulty, "queue", owner=lock.owner)
        assert first.outcome == "InjectedFaultError"
        assert second.outcome == Acquired(lock.fencing_token), "the same lock, found again"


async def test_a_hung_queue_call_is_the_waits_last_attempt_and_the_leave_follows_it(faulty, clock):
    await faulty.inner.acquire("k", "other-process", 60_000)
    async with Locks(store=faulty, clock=clock) as locks:
        waiting = await waiting_for(locks, "k", wait="1500ms")
        stuck = faulty.hang("queue")
        await clock.advance("1500ms")
        assert not waiting.done(), "the call in flight at the end is the wait's last attempt"
        await clock.advance("500ms")
        with pytest.raises(LockStoreError, match="did not answer acquire"):
            await waiting
        await wait_all_tasks_blocked()
        hung = calls_of(faulty, "queue")[-1]
        assert (hung.sent_ms, hung.outcome, stuck.hits) == (1000, "cancelled", 1)
        # the call was bounded at 1 s; the leave went after it, so nothing lands after it
        assert [call.sent_ms for call in calls_of(faulty, "leave")] == [2000]


async def test_a_waiter_that_died_in_line_blocks_the_key_no_longer_than_its_place(faulty, clock):
    dead = ManualClock()  # a process whose clock never moves asks nothing more
    async with (
        Locks(store=faulty, clock=clock) as holder,
        Locks(store=faulty, clock=dead) as died,
    ):
        held = await holder.acquire("k")
        assert held is not None
        waiting = await waiting_for(died, "k")
        faulty.fail("grant")  # nor does it hear anything
        await clock.advance("2s")
        await held.release()
        assert isinstance(await faulty.inner.acquire("k", "probe", 1000), NotAcquired)
        await clock.advance(f"{PLACE_MS - 2000}ms")
        assert isinstance(await faulty.inner.acquire("k", "probe", 1000), Acquired)
        waiting.cancel()
        faulty.heal()


async def test_closing_ends_the_waits_in_line_and_leaves(faulty, clock):
    await faulty.inner.acquire("k", "other-process", 60_000)
    locks = Locks(store=faulty, clock=clock)
    await locks.start()
    waiting = await waiting_for(locks, "k")
    closing = asyncio.create_task(locks.aclose())
    assert await asyncio.wait_for(waiting, timeout=5) is None
    await clock.advance(f"{CLOSE_WAIT_MS}ms")
    await closing
    assert [call.method for call in faulty.calls][-1] == "leave"


async def test_an_aborted_signal_ends_the_wait_and_leaves(locks, store, clock):
    outer = await locks.acquire("outer", ttl="3s")
    assert outer is not None
    await store.acquire("k", "other-process", 60_000)
    waiting = asyncio.create_task(locks.acquire("k", wait="1m", signal=outer.signal))
    await wait_all_tasks_blocked()
    await store.release("outer", outer.owner)  # the outer lock is lost at its next renewal
    await clock.advance("1s")
    with pytest.raises(LockLostError):
        await waiting
    await store.release("k", "other-process")
    assert isinstance(await store.acquire("k", "probe", 1000), Acquired), "its place was kept"


@pytest.mark.parametrize("tasks", [2, 64])
async def test_many_tasks_with_lock_on_one_key_never_overlap_and_tokens_grow(
    locks: Locks, tasks: int
):
    inside: list[int] = []
    tokens: list[int] = []

    async def section(number: int) -> None:
        lock = await locks.acquire("k", wait="1m")
        assert lock is not None
        inside.append(number)
        assert len(inside) == 1, f"two holders at once: {inside}"
        tokens.append(lock.fencing_token)
        await wait_all_tasks_blocked()
        inside.remove(number)
        await lock.release()

    await asyncio.wait_for(asyncio.gather(*(section(n) for n in range(tasks))), timeout=10)
    assert tokens == sorted(tokens)
    assert len(set(tokens)) == tasks
