"""The lock engine: leases, waiting, renewals, deadlines and loss, for one ``Locks``.

It imports only the ground floor (errors, durations, keys, clock, events, redaction, threads)
and the store protocol, and never learns which store it talks to.
"""

from ._bounded import StoreCallTimeoutError
from ._checked_store import AcquireCall, CheckedStore, check_store_shape
from ._context import CURRENT_LOCK, current_lock
from ._engine import (
    ATTEMPT_FLOOR_MS,
    CLOSE_WAIT_MS,
    RELEASE_BOUND_MS,
    LockEngine,
    new_owner,
)
from ._lease import Lease, LeaseState
from ._lock import Lock, refuse_sync_with, release_logged
from ._operator_store import OPERATOR_BOUND_MS, OperatorStore
from ._renewal import RenewalScheduler, renew_interval_ms, retry_interval_ms
from ._signal import LockSignal
from ._waiter import BACKOFF_CAP_MS, BACKOFF_FIRST_MS, NotWon, Waiter, Won, backoff_ms
from ._wakeups import WAKEUPS

__all__ = [
    "ATTEMPT_FLOOR_MS",
    "BACKOFF_CAP_MS",
    "BACKOFF_FIRST_MS",
    "CLOSE_WAIT_MS",
    "CURRENT_LOCK",
    "OPERATOR_BOUND_MS",
    "RELEASE_BOUND_MS",
    "WAKEUPS",
    "AcquireCall",
    "CheckedStore",
    "Lease",
    "LeaseState",
    "Lock",
    "LockEngine",
    "LockSignal",
    "NotWon",
    "OperatorStore",
    "RenewalScheduler",
    "StoreCallTimeoutError",
    "Waiter",
    "Won",
    "backoff_ms",
    "check_store_shape",
    "current_lock",
    "new_owner",
    "refuse_sync_with",
    "release_logged",
    "renew_interval_ms",
    "retry_interval_ms",
]
