"""The shipped contract suite, once per shipped store (what users run is what we run)."""

from leaselock.stores import InMemoryLockStore
from leaselock.testing import ManualClock
from leaselock.testing.pytest import LockStoreContractTests


class TestInMemoryContract(LockStoreContractTests):
    concurrent = {"callers": 32}  # noqa: RUF012 -- the base class declares it a ClassVar
    clock = ManualClock()

    def make_store(self) -> InMemoryLockStore:
        return InMemoryLockStore(clock=self.clock)

    async def advance_time(self, ms: int) -> None:
        await self.clock.advance(ms)
