"""RedisLockStore: locks as Redis keys with a PX expiry, tokens from one counter."""

from ._store import RedisLockStore as RedisLockStore

__all__ = ["RedisLockStore"]
