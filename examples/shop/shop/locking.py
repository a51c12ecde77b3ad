"""Where the shop's locks live: the database it already has, or Redis.

- SQLite (the default): the same file as the orders; excludes the processes of ONE host.
- PostgreSQL: the same database, through the shop's own engine; the Alembic migration made the
  table and the sequence, so the store creates nothing.
- Redis, with ``REDIS_URL``: the locks alone move there; the orders stay in the database.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from leaselock.stores import LockStore, PostgresLockStore, RedisLockStore, SQLiteLockStore
from leaselock.testing import ManualClock

from .database import sqlite_file
from .settings import Settings


def make_lock_store(
    settings: Settings, engine: AsyncEngine, *, store_clock: ManualClock | None = None
) -> LockStore:
    """Return the lock store the settings ask for.

    Args:
        settings: ``REDIS_URL`` picks Redis; otherwise the store follows ``DATABASE_URL``.
        engine: the shop's engine, shared with the PostgreSQL store.
        store_clock: where a SQLite store reads expiry (tests: the "database's clock"); default
            the host's wall clock. PostgreSQL and Redis measure expiry on their own servers.
    """
    if settings.redis_url is not None:
        return RedisLockStore.from_url(settings.redis_url, prefix=settings.redis_lock_prefix)
    path = sqlite_file(settings.database_url)
    if path is None:
        return PostgresLockStore(engine, create_schema=False)
    return SQLiteLockStore(path, clock=store_clock)
