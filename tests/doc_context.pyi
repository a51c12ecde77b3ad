# The reader's application, as the docs' fragments name it: the only names a fragment may use
# without defining or importing them on its page (tests/doc_blocks.py). doc_typecheck.py imports
# each fragment's free names from here, by type; test_docs.py binds the same names to real
# objects, and checks that it binds exactly these. Keep it small: a block that needs anything
# more makes it itself.

import logging
from typing import Protocol

import redis.asyncio

from leaselock import Locks, LockSignal
from leaselock.stores import AcquireResult
from leaselock.testing import ManualClock

locks: Locks  # started: async with locks (or not, where the block starts it itself)
clock: ManualClock  # the test's clock
url: str  # a store URL: the page's server (postgresql://..., redis://...)
secret: str  # the database password
client: redis.asyncio.Redis  # the application's Redis client
log: logging.Logger

async def export(*, fencing_token: int, signal: LockSignal | None = None) -> None: ...
def reconcile() -> None: ...  # a blocking job, for SyncLocks

class _Warehouse(Protocol):
    async def count(self, item: str) -> int: ...

warehouse: _Warehouse  # the shop's warehouse: asked for a count of an item

class MyLockStore:  # the reader's own store, made from a URL
    def __init__(self, url: str) -> None: ...
    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult: ...
    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool: ...
    async def release(self, key: str, owner: str) -> bool: ...
