"""leaselock: distributed lease locks with fencing tokens.

Run a scheduled job on one instance, never overlapping itself, with a handover when its instance
dies; and take the lock underneath by hand, with a signal that aborts when the lease is lost and a
fencing token that grows with every acquisition.
"""

from ._clock import Clock as Clock
from ._clock import SystemClock as SystemClock
from ._clock import TimerHandle as TimerHandle
from ._durations import Duration as Duration
from ._engine import Lock as Lock
from ._engine import LockSignal as LockSignal
from ._engine import current_lock as current_lock
from ._errors import DetectedBy as DetectedBy
from ._errors import LockError as LockError
from ._errors import LockLostError as LockLostError
from ._errors import LockNotAcquiredError as LockNotAcquiredError
from ._errors import LocksConfigurationError as LocksConfigurationError
from ._errors import LockStoreError as LockStoreError
from ._errors import StaleFencingTokenError as StaleFencingTokenError
from ._event_log import EventLog as EventLog
from ._event_types import ClockOffsetLarge as ClockOffsetLarge
from ._event_types import Event as Event
from ._event_types import EventType as EventType
from ._event_types import JobFailing as JobFailing
from ._event_types import JobMissed as JobMissed
from ._event_types import JobOverdue as JobOverdue
from ._event_types import JobRecovered as JobRecovered
from ._event_types import LeadershipAcquired as LeadershipAcquired
from ._event_types import LeadershipLost as LeadershipLost
from ._event_types import LeaseAcquired as LeaseAcquired
from ._event_types import LockAcquired as LockAcquired
from ._event_types import LockHandedBack as LockHandedBack
from ._event_types import LockLost as LockLost
from ._event_types import LockReleased as LockReleased
from ._event_types import OperatorActed as OperatorActed
from ._event_types import OperatorAction as OperatorAction
from ._event_types import RenewalFailing as RenewalFailing
from ._event_types import RunAbandoned as RunAbandoned
from ._event_types import RunEnded as RunEnded
from ._event_types import RunStarted as RunStarted
from ._event_types import RunTrigger as RunTrigger
from ._event_types import TickSkipped as TickSkipped
from ._events import Events as Events
from ._events import EventStream as EventStream
from ._fencing import FencingGuard as FencingGuard
from ._jobs import JobDecorator as JobDecorator
from ._jobs import JobStatus as JobStatus
from ._jobs import OnOneInstanceOptions as OnOneInstanceOptions
from ._jobs import RunInfo as RunInfo
from ._jobs import SyncOnOneInstanceOptions as SyncOnOneInstanceOptions
from ._jobs import SyncWithoutOverlappingOptions as SyncWithoutOverlappingOptions
from ._jobs import WithoutOverlappingOptions as WithoutOverlappingOptions
from ._jobs import current_run as current_run
from ._jobs import leader_election as leader_election
from ._jobs import on_one_instance as on_one_instance
from ._jobs import without_overlapping as without_overlapping
from ._locks import Locks as Locks
from .integrations.sqlalchemy import fenced_update as fenced_update
from .stores._common._capabilities import LockInfo as LockInfo
from .stores._common._capabilities import RunRecord as RunRecord
from .stores._common._job_control import JobPause as JobPause
from .stores._common._job_control import TickRun as TickRun
from .sync import SyncLock as SyncLock
from .sync import SyncLocks as SyncLocks

__all__ = [
    "Clock",
    "ClockOffsetLarge",
    "DetectedBy",
    "Duration",
    "Event",
    "EventLog",
    "EventStream",
    "EventType",
    "Events",
    "FencingGuard",
    "JobDecorator",
    "JobFailing",
    "JobMissed",
    "JobOverdue",
    "JobPause",
    "JobRecovered",
    "JobStatus",
    "LeadershipAcquired",
    "LeadershipLost",
    "LeaseAcquired",
    "Lock",
    "LockAcquired",
    "LockError",
    "LockHandedBack",
    "LockInfo",
    "LockLost",
    "LockLostError",
    "LockNotAcquiredError",
    "LockReleased",
    "LockSignal",
    "LockStoreError",
    "Locks",
    "LocksConfigurationError",
    "OnOneInstanceOptions",
    "OperatorActed",
    "OperatorAction",
    "RenewalFailing",
    "RunAbandoned",
    "RunEnded",
    "RunInfo",
    "RunRecord",
    "RunStarted",
    "RunTrigger",
    "StaleFencingTokenError",
    "SyncLock",
    "SyncLocks",
    "SyncOnOneInstanceOptions",
    "SyncWithoutOverlappingOptions",
    "SystemClock",
    "TickRun",
    "TickSkipped",
    "TimerHandle",
    "WithoutOverlappingOptions",
    "current_lock",
    "current_run",
    "fenced_update",
    "leader_election",
    "on_one_instance",
    "without_overlapping",
]
