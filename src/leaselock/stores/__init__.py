"""Lock stores: where every instance's locks meet, behind one small contract.

The stores that need a database driver are imported on first use (``from leaselock.stores import
PostgresLockStore``), so ``import leaselock`` never loads a driver; a store whose driver is missing
says which extra to install.
"""

import importlib
from typing import TYPE_CHECKING

from ._common._capabilities import JobRecord as JobRecord
from ._common._capabilities import LockInfo as LockInfo
from ._common._capabilities import RunOutcome as RunOutcome
from ._common._capabilities import RunRecord as RunRecord
from ._common._capabilities import SupportsDiscard as SupportsDiscard
from ._common._capabilities import SupportsInspection as SupportsInspection
from ._common._capabilities import SupportsRunRecords as SupportsRunRecords
from ._common._job_control import JobPause as JobPause
from ._common._job_control import JobState as JobState
from ._common._job_control import OpenRun as OpenRun
from ._common._job_control import RunStart as RunStart
from ._common._job_control import RunStartAnswer as RunStartAnswer
from ._common._job_control import SupportsJobControl as SupportsJobControl
from ._common._job_control import TickRun as TickRun
from ._common._protocol import MAX_FENCING_TOKEN as MAX_FENCING_TOKEN
from ._common._protocol import Acquired as Acquired
from ._common._protocol import AcquireResult as AcquireResult
from ._common._protocol import Grant as Grant
from ._common._protocol import LockStore as LockStore
from ._common._protocol import NotAcquired as NotAcquired
from ._common._protocol import Queued as Queued
from ._common._protocol import ReleaseFollower as ReleaseFollower
from ._common._protocol import Renewal as Renewal
from ._common._protocol import SupportsBatchRenew as SupportsBatchRenew
from ._common._protocol import SupportsHandoff as SupportsHandoff
from ._common._protocol import SupportsLifecycle as SupportsLifecycle
from ._common._protocol import SupportsReleaseNotifications as SupportsReleaseNotifications
from ._common._protocol import SupportsReleasesInTurn as SupportsReleasesInTurn
from ._common._protocol import WaitingLine as WaitingLine
from ._common._store_clock import SupportsStoreClock as SupportsStoreClock
from ._common._urls import store_from_url as store_from_url
from .memory import InMemoryLockStore as InMemoryLockStore

if TYPE_CHECKING:
    from .etcd import EtcdLockStore as EtcdLockStore
    from .mysql import MySQLLockStore as MySQLLockStore
    from .postgres import PostgresLockStore as PostgresLockStore
    from .redis import RedisLockStore as RedisLockStore
    from .redis_cluster import RedisClusterLockStore as RedisClusterLockStore
    from .sqlite import SQLiteLockStore as SQLiteLockStore

__all__ = [
    "MAX_FENCING_TOKEN",
    "AcquireResult",
    "Acquired",
    "EtcdLockStore",
    "Grant",
    "InMemoryLockStore",
    "JobPause",
    "JobRecord",
    "JobState",
    "LockInfo",
    "LockStore",
    "MySQLLockStore",
    "NotAcquired",
    "OpenRun",
    "PostgresLockStore",
    "Queued",
    "RedisClusterLockStore",
    "RedisLockStore",
    "ReleaseFollower",
    "Renewal",
    "RunOutcome",
    "RunRecord",
    "RunStart",
    "RunStartAnswer",
    "SQLiteLockStore",
    "SupportsBatchRenew",
    "SupportsDiscard",
    "SupportsHandoff",
    "SupportsInspection",
    "SupportsJobControl",
    "SupportsLifecycle",
    "SupportsReleaseNotifications",
    "SupportsReleasesInTurn",
    "SupportsRunRecords",
    "SupportsStoreClock",
    "TickRun",
    "WaitingLine",
    "store_from_url",
]

_ON_FIRST_USE = {
    "EtcdLockStore": ".etcd",
    "MySQLLockStore": ".mysql",
    "PostgresLockStore": ".postgres",
    "RedisClusterLockStore": ".redis_cluster",
    "RedisLockStore": ".redis",
    "SQLiteLockStore": ".sqlite",
}


def __getattr__(name: str) -> object:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_ON_FIRST_USE))
