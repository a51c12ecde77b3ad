"""A cancellation a driver swallows is delivered where the store call returns.

redis-py 8.1's asyncio client now and then answers a cancelled call as if nothing had happened;
FaultyStore.swallow_cancellation does the same on the manual clock.
"""

import asyncio
import contextlib

import pytest

from leaselock import Locks, LockStoreError
from leaselock._cancellation import delivered
from leaselock._engine import ATTEMPT_FLOOR_MS
from leaselock.stores import Acquired, InMemoryLockStore, NotAcquired
from leaselock.testing import FaultyStore, ManualClock, wait_all_tasks_blocked


async def _swallowing(answer: object, reached: asyncio.Event) -> object:
    reached.set()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.Event().wait()
    if isinstance(answer, Exception):
        raise answer
    return answer


@pytest.mark.parametrize("answer", ["answer", ConnectionError("reset after the cancel")])
async def test_a_call_that_swallows_a_cancellation_raises_it_after_all(answer):
    reached = asyncio.Event()
    call = asyncio.create_task(delivered(_swallowing(answer, reached)))
    await reached.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert call.cancelled()


async def test_an_uncancelled_call_answers_or_fails_as_it_would():
    async def answer() -> int:
        return 7

    async def fail() -> None:
        raise ConnectionError("down")

    assert await delivered(answer()) == 7
    with pytest.raises(ConnectionError, match="down"):
        await delivered(fail())


async def test_a_cancellation_the_call_raises_itself_passes_through():
    reached = asyncio.Event()

    async def honest() -> None:
        reached.set()
        await asyncio.Event().wait()

    call = asyncio.create_task(delivered(honest()))
    await reached.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


@pytest.fixture
def faulty(clock: ManualClock) -> FaultyStore:
    return FaultyStore(InMemoryLockStore(clock=clock), clock=clock)


async def test_a_cancelled_acquire_is_cancelled_and_its_win_handed_back(faulty, clock):
    faulty.swallow_cancellation("acquire", times=1)
    async with Locks(store=faulty, clock=clock) as locks:
        acquiring = asyncio.create_task(locks.acquire("k"))
        await wait_all_tasks_blocked()
        acquiring.cancel()
        with pytest.raises(asyncio.CancelledError):
            await acquiring
        (attempt,) = (call for call in faulty.calls if call.method == "acquire")
        assert isinstance(attempt.outcome, Acquired), "the fault let the acquire reach the store"
        await clock.advance(0)
        releases = [call for call in faulty.calls if call.method == "release"]
        assert [(call.owner, call.outcome) for call in releases] == [(attempt.owner, True)]
        assert isinstance(await faulty.inner.acquire("k", "next", 1000), Acquired)


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
        await clock.advance(0)
        intruder = await faulty.inner.acquire("k", "intruder", 1000)
        assert isinstance(intruder, Acquired), "the late win was not handed back"


async def test_a_release_whose_cancellation_is_swallowed_is_cancelled_and_sent_again(faulty, clock):
    async with Locks(store=faulty, clock=clock) as locks:
        lock = await locks.acquire("k")
        assert lock is not None
        faulty.swallow_cancellation("release", times=1)
        releasing = asyncio.create_task(lock.release())
        await wait_all_tasks_blocked()
        releasing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await releasing
        await clock.advance(0)
        outcomes = [call.outcome for call in faulty.calls if call.method == "release"]
        assert outcomes == [True, False], "the release was not sent again in the background"
        assert isinstance(await faulty.inner.acquire("k", "next", 1000), Acquired)
        assert isinstance(await faulty.inner.acquire("k", "third", 1000), NotAcquired)
