"""Lock stores: where every instance's locks meet, behind one small contract.

Each store imports its database driver inside its own module, so ``import leaselock.stores``
needs no driver; a store whose driver is missing says which extra to install.
"""

from ._protocol import MAX_FENCING_TOKEN as MAX_FENCING_TOKEN
from ._protocol import Acquired as Acquired
from ._protocol import AcquireResult as AcquireResult
from ._protocol import LockStore as LockStore
from ._protocol import NotAcquired as NotAcquired
from ._protocol import Renewal as Renewal
from ._protocol import SupportsBatchRenew as SupportsBatchRenew
from ._protocol import SupportsLifecycle as SupportsLifecycle
from ._protocol import SupportsReleaseNotifications as SupportsReleaseNotifications
from .memory import InMemoryLockStore as InMemoryLockStore

__all__ = [
    "MAX_FENCING_TOKEN",
    "AcquireResult",
    "Acquired",
    "InMemoryLockStore",
    "LockStore",
    "NotAcquired",
    "Renewal",
    "SupportsBatchRenew",
    "SupportsLifecycle",
    "SupportsReleaseNotifications",
]
