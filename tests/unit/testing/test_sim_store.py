import asyncio

import pytest

from leaselock.stores import Acquired, InMemoryLockStore, NotAcquired
from leaselock.testing import FaultyStore, InjectedFaultError, ManualClock, wait_all_tasks_blocked
from leaselock.testing._sim_store import InstanceStore


def shared() -> tuple[ManualClock, FaultyStore]:
    clock = ManualClock()
    return clock, FaultyStore(InMemoryLockStore(clock=clock), clock=clock)


async def test_a_frozen_instance_gets_its_answer_when_it_thaws_though_the_store_applied_it():
    clock, store = shared()
    instance = InstanceStore(store)
    store.delay("acquire", "1s", times=1)
    call = asyncio.ensure_future(instance.acquire("k", "owner-1", 30_000))
    await wait_all_tasks_blocked()
    instance.freeze()
    await clock.advance("5s")
    assert not call.done()
    # the store applied it: another owner finds the key held
    assert isinstance(await store.acquire("k", "owner-2", 30_000), NotAcquired)
    instance.thaw()
    assert await call == Acquired(1)


async def test_an_error_answer_waits_for_the_thaw_too():
    clock, store = shared()
    instance = InstanceStore(store)
    store.lose_answer("renew", times=1)
    store.delay("renew", "1s", times=1)
    instance.freeze()
    call = asyncio.ensure_future(instance.renew("k", "owner-1", 30_000))
    await clock.advance("5s")
    assert not call.done()
    instance.thaw()
    with pytest.raises(InjectedFaultError):
        await call


async def test_answers_pass_at_once_while_it_runs():
    _, store = shared()
    instance = InstanceStore(store)
    assert await instance.acquire("k", "owner-1", 30_000) == Acquired(1)
    assert await instance.release("k", "owner-1")
