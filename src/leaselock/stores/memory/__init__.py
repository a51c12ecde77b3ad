"""InMemoryLockStore: the reference semantics of the store contract, for one process."""

from ._store import InMemoryLockStore as InMemoryLockStore

__all__ = ["InMemoryLockStore"]
