"""The job layer: decorated jobs, leader elections, their runs and their shutdown.

It imports the engine and the ground floor, never the facade: :class:`JobRuntime` is what a
``Locks`` gives it to talk to.
"""

from ._clock_offset import CLOCK_OFFSET_BOUND_MS
from ._current import RunInfo, current_run
from ._decorators import F, JobDecorator, job_decorator, on_one_instance, without_overlapping
from ._election import election_decorator, leader_election
from ._options import (
    OnOneInstanceOptions,
    SyncOnOneInstanceOptions,
    SyncWithoutOverlappingOptions,
    WithoutOverlappingOptions,
)
from ._runtime import CURRENT_RUNTIME, JobRuntime, current_runtime, resolve_runtime
from ._spec import Overlap
from ._status import JobsReader, JobStatus

__all__ = [
    "CLOCK_OFFSET_BOUND_MS",
    "CURRENT_RUNTIME",
    "F",
    "JobDecorator",
    "JobRuntime",
    "JobStatus",
    "JobsReader",
    "OnOneInstanceOptions",
    "Overlap",
    "RunInfo",
    "SyncOnOneInstanceOptions",
    "SyncWithoutOverlappingOptions",
    "WithoutOverlappingOptions",
    "current_run",
    "current_runtime",
    "election_decorator",
    "job_decorator",
    "leader_election",
    "on_one_instance",
    "resolve_runtime",
    "without_overlapping",
]
