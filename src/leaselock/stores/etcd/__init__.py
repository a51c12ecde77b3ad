"""EtcdLockStore: locks as etcd v3 keys under shared leases, tokens from etcd's revisions."""

from ._store import EtcdLockStore as EtcdLockStore

__all__ = ["EtcdLockStore"]
