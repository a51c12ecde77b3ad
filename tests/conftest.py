"""Fixtures of the library's tests: a manual clock, an in-memory store, a started Locks.

The server fixtures (``postgres_url``, ``redis_url``) live in the repository's root conftest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from leaselock import Locks
from leaselock.stores import InMemoryLockStore
from leaselock.testing import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    """The store's and the Locks' shared clock."""
    return ManualClock()


@pytest.fixture
def store(clock: ManualClock) -> InMemoryLockStore:
    """An in-memory store on the shared clock."""
    return InMemoryLockStore(clock=clock)


@pytest.fixture
async def locks(store: InMemoryLockStore, clock: ManualClock) -> AsyncIterator[Locks]:
    """A started Locks on the in-memory store, ttl 30 s."""
    async with Locks(store=store, ttl="30s", clock=clock) as started:
        yield started
