"""RedisClusterLockStore: a Redis Cluster, each key's lock and token counter in one slot."""

from ._store import RedisClusterLockStore as RedisClusterLockStore

__all__ = ["RedisClusterLockStore"]
