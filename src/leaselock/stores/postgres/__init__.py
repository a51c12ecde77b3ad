"""PostgresLockStore: locks in one PostgreSQL table, fencing tokens from one sequence."""

from ._store import RENEW_CHUNK as RENEW_CHUNK
from ._store import PostgresLockStore as PostgresLockStore

__all__ = ["RENEW_CHUNK", "PostgresLockStore"]
