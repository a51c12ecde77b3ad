"""SQLiteLockStore: locks in a SQLite file, shared by every process of ONE host."""

from ._store import SQLiteLockStore as SQLiteLockStore

__all__ = ["SQLiteLockStore"]
