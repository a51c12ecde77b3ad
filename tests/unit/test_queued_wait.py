"""Waiting in the store's line: a release hands the key over, first come first served, and every
way a wait ends leaves the line before the acquire returns or raises; faults in queue calls,
leaves and grants, on the manual clock."""

import asyncio

import pytest

from leaselock import Lock, LockLostError, Locks, LockStoreError
from leaselock._engine import CLOSE_WAIT_MS
from leaselock._engine._queued_wait import PLACE_GRACE_MS, PLACE_MS
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


# --- a wait that ends without the key has left the line before its caller hears of it ------


async def test_a_waiter_that_gave_up_has_left_the_line_when_its_acquire_returns(faulty, clock):
    async with Locks(store=faulty, clock=clock) as locks:
        held = await locks.acquire("k")
        assert held is not None

        async def give_up_release_take() -> Lock | None:
            assert await locks.acquire("k", wait="1s") is None
            # a sequential program: the release follows at once, in the same step
            assert await held.release()
            return await locks.acquire("k")

        program = asyncio.create_task(give_up_release_take())
        await clock.advance("1s")
        again = await program
        assert again is not None, "the release handed the key to the waiter that gave up"
        assert calls_of(faulty, "grant") == []
        assert again.fencing_token == held.fencing_token + 1, "a token was spent on nobody"


async def test_a_cancelled_waiter_has_left_the_line_when_its_cancellation_reaches_the_caller(
    faulty, clock
):
    async with Locks(store=faulty, clock=clock) as locks:
        held = await locks.acquire("k")
        assert held is not None
        waiting = await waiting_for(locks, "k")
        stuck = faulty.hang("leave")  # a leave takes a round trip

        async def cancel_release_take() -> Lock | None:
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert await held.release()
            return await locks.acquire("k")

        program = asyncio.create_task(cancel_release_take())
        try:
            await wait_all_tasks_blocked()
            assert not waiting.done(), "the cancellation came through before the leave's answer"
        finally:
            stuck.remove()
        again = await program
        assert again is not None, "the release handed the key to the cancelled waiter"
        assert calls_of(faulty, "grant") == []


async def test_a_waiter_whose_signal_aborted_has_left_the_line_when_the_error_reaches_it(
    faulty, clock
):
    async with Locks(store=faulty, clock=clock, ttl="3s") as locks:
        outer = await locks.acquire("outer")
        held = await locks.acquire("k")
        assert outer is not None
        assert held is not None
        stuck = faulty.hang("leave")

        async def wait_release_take() -> Lock | None:
            with pytest.raises(LockLostError):
                await locks.acquire("k", wait="1m", signal=outer.signal)
            assert await held.release()
            return await locks.acquire("k")

        program = asyncio.create_task(wait_release_take())
        await wait_all_tasks_blocked()
        await faulty.inner.release("outer", outer.owner)  # lost at its renewal, at 1 s
        try:
            await clock.advance("1s")
            assert stuck.hits == 1, "the signal aborted, and the wait is leaving"
            assert not program.done(), "the signal's error came through before the leave's answer"
        finally:
            stuck.remove()
        again = await program
        assert again is not None, "the release handed the key to the aborted waiter"
        assert calls_of(faulty, "grant") == []


async def test_a_grant_that_lands_while_the_waiter_leaves_is_released_by_the_leave(faulty, clock):
    async with Locks(store=faulty, clock=clock) as locks:
        held = await locks.acquire("k")
        assert held is not None
        impatient = await waiting_for(locks, "k", wait="1s")
        patient = await waiting_for(locks, "k")
        stuck = faulty.hang("leave")  # the leave is on its way to the store
        await clock.advance("1s")
        try:
            assert not impatient.done(), "it returned before its leave was answered"
            # the impatient waiter's place is first in line still: the key goes to it
            await held.release()
        finally:
            stuck.remove()
        assert await impatient is None
        assert [call.outcome for call in calls_of(faulty, "leave")] == [True]
        lock = await asyncio.wait_for(patient, timeout=5)
        assert lock is not None
        assert len(calls_of(faulty, "grant")) == 2, "the leave handed the key on"
        assert lock.fencing_token == held.fencing_token + 2
        await lock.release()


async def test_a_cancelled_waiter_whose_leave_hangs_raises_once_its_place_is_over(faulty, clock):
    async with Locks(store=faulty, clock=clock) as locks:
        held = await locks.acquire("k")
        assert held is not None
        waiting = await waiting_for(locks, "k")
        stuck = faulty.hang("leave")
        try:
            waiting.cancel()
            await wait_all_tasks_blocked()
            assert not waiting.done(), "the cancellation came through before the leave's answer"
            await clock.advance(f"{PLACE_MS}ms")
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert stuck.hits == 1
        finally:
            stuck.remove()
        # the leave was bounded by the place's end, after which the place is passed over
        assert await held.release()
        assert isinstance(await faulty.inner.acquire("k", "probe", 1000), Acquired)
        assert calls_of(faulty, "grant") == []


async def test_a_waiter_cancelled_again_while_it_leaves_stops_waiting_for_the_leave(faulty, clock):
    async with Locks(store=faulty, clock=clock) as locks:
        held = await locks.acquire("k")
        assert held is not None
        waiting = await waiting_for(locks, "k")
        stuck = faulty.hang("leave")
        try:
            waiting.cancel()
            await wait_all_tasks_blocked()
            assert not waiting.done(), "the cancellation came through before the leave's answer"
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert clock.now_ms() == 0
        finally:
            stuck.remove()  # the leave goes on in the background, and lands
        await wait_all_tasks_blocked()
        assert [call.outcome for call in calls_of(faulty, "leave")] == [False]
        assert await held.release()
        assert calls_of(faulty, "grant") == []


async def test_a_waiter_cancelled_with_a_queue_call_out_leaves_once_that_call_is_answered(
    faulty, clock
):
    async with Locks(store=faulty, clock=clock) as locks:
        held = await locks.acquire("k")
        assert held is not None
        waiting = await waiting_for(locks, "k")
        stuck = faulty.hang("queue")
        try:
            await clock.advance("1s")  # the call keeping its place is out, and hangs
            waiting.cancel()
            await wait_all_tasks_blocked()
            assert not waiting.done(), "the cancellation came through with a queue call out"
            assert calls_of(faulty, "leave") == []
        finally:
            stuck.remove()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        keeping, leaving = calls_of(faulty, "queue")[-1], calls_of(faulty, "leave")[0]
        # the leave went after the call's answer: the call cannot put the place back
        assert faulty.calls.index(leaving) > faulty.calls.index(keeping)
        assert leaving.outcome is False
        assert await held.release()
        assert calls_of(faulty, "grant") == []


async def test_a_waiter_paused_past_its_place_sends_no_leave(faulty, clock):
    async with Locks(store=faulty, clock=clock) as locks:
        held = await locks.acquire("k")
        assert held is not None
        waiting = await waiting_for(locks, "k", wait="1s")
        clock.jump(f"{PLACE_MS}ms")  # a pause: its place's time is up at the store meanwhile
        await clock.advance(0)
        assert await waiting is None
        assert calls_of(faulty, "leave") == [], "a leave for a place known to be over"
        assert await held.release()
        assert calls_of(faulty, "grant") == []


async def test_a_waiter_whose_leave_fails_returns_once_its_place_is_over(faulty, clock):
    async with Locks(store=faulty, clock=clock) as locks:
        held = await locks.acquire("k")
        assert held is not None
        faulty.fail("leave")
        impatient = await waiting_for(locks, "k", wait="100ms")
        await clock.advance("100ms")
        assert not impatient.done(), "it returned with its place still in line"
        # its one queue call, at 0, asked for its wait and the grace: the place ends then
        await clock.advance(f"{PLACE_GRACE_MS - 1}ms")
        assert not impatient.done()
        await clock.advance("1ms")
        assert await impatient is None
        assert await held.release()
        assert isinstance(await faulty.inner.acquire("k", "probe", 1000), Acquired)
        assert calls_of(faulty, "grant") == []


async def test_a_grant_to_a_waiter_whose_leave_failed_is_released_at_once(faulty, clock):
    async with Locks(store=faulty, clock=clock) as locks:
        held = await locks.acquire("k")
        assert held is not None
        faulty.fail("leave")
        impatient = await waiting_for(locks, "k", wait="100ms")
        await clock.advance("100ms")
        # released by another process while the place is still in line: the key goes to it
        await faulty.inner.release("k", held.owner)
        await wait_all_tasks_blocked()
        granted = calls_of(faulty, "grant")
        assert len(granted) == 1
        handed_back = calls_of(faulty, "release", owner=granted[0].owner)
        assert [call.outcome for call in handed_back] == [True], "the grant holds the key"
        assert isinstance(await faulty.inner.acquire("k", "probe", 1000), Acquired)
        await clock.advance(f"{PLACE_GRACE_MS}ms")
        assert await impatient is None


async def test_a_place_lives_no_longer_than_its_wait_and_the_grace(faulty, clock):
    dead = ManualClock()  # a process whose clock never moves asks nothing more, and never leaves
    async with (
        Locks(store=faulty, clock=clock) as holder,
        Locks(store=faulty, clock=dead) as died,
    ):
        held = await holder.acquire("k")
        assert held is not None
        waiting = await waiting_for(died, "k", wait="200ms")
        await clock.advance(f"{200 + PLACE_GRACE_MS}ms")
        assert await held.release()
        assert calls_of(faulty, "grant") == [], "the release handed the key to a dead place"
        assert isinstance(await faulty.inner.acquire("k", "probe", 1000), Acquired)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting


async def test_a_grant_at_the_end_of_a_short_wait_lives_until_its_first_renewal(faulty, clock):
    async with Locks(store=faulty, clock=clock, ttl="30s") as locks:
        held = await locks.acquire("k")
        assert held is not None
        waiting = await waiting_for(locks, "k", wait="500ms")
        await clock.advance("499ms")
        await held.release()
        lock = await asyncio.wait_for(waiting, timeout=5)
        assert lock is not None
        # its place, from 0, was its wait and the grace: renewed a third into that time
        await clock.advance("1s")
        renewals = calls_of(faulty, "renew", owner=lock.owner)
        assert [call.sent_ms for call in renewals] == [(500 + PLACE_GRACE_MS) // 3]
        await clock.advance("25s")
        assert lock.held
        await lock.release()


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
