"""What the decorators ask for: a job's or an election's key, lease length and target."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, final

from .._errors import LocksConfigurationError
from .._keys import lease_key
from ._schedule import Schedule

__all__ = [
    "DEFAULT_ALERT_AFTER_FAILURES",
    "ELECTION_ATTRIBUTE",
    "JOB_ATTRIBUTE",
    "OVERLAPS",
    "ElectionSpec",
    "JobKind",
    "JobOptions",
    "JobSpec",
    "Overlap",
    "election_spec_of",
    "job_spec_of",
]

JobKind = Literal["on_one_instance", "without_overlapping"]
Overlap = Literal["skip", "buffer_one", "replace"]
OVERLAPS: tuple[Overlap, ...] = ("skip", "buffer_one", "replace")

JOB_ATTRIBUTE = "__leaselock_job__"
DEFAULT_ALERT_AFTER_FAILURES = 3
ELECTION_ATTRIBUTE = "__leaselock_election__"


@final
@dataclass(frozen=True, slots=True)
class JobOptions:
    """The options one decorator adds to a job, parsed (internal)."""

    min_hold_ms: int | None = None
    max_run_ms: int | None = None
    owner_idle_ms: int | None = None
    cancel_on_loss: bool = False
    expect_every_ms: int | None = None
    alert_after_failures: int | None = None
    pause_after_failures: int | None = None
    overlap: Overlap = "skip"
    catch_up: bool = False
    catch_up_window_ms: int | None = None
    recover: bool = False
    schedule: Schedule | None = None


@final
@dataclass(eq=False)
class JobSpec:
    """What the decorators on one function ask for (internal)."""

    function: Callable[..., Any]
    explicit_key: str | None = None
    one_instance: bool = False
    one_instance_ttl_ms: int | None = None
    no_overlap: bool = False
    no_overlap_ttl_ms: int | None = None
    min_hold_ms: int | None = None
    max_run_ms: int | None = None
    owner_idle_ms: int | None = None
    cancel_on_loss: bool = False
    expect_every_ms: int | None = None
    alert_after_failures: int = DEFAULT_ALERT_AFTER_FAILURES
    pause_after_failures: int | None = None
    overlap: Overlap = "skip"
    catch_up: bool = False
    catch_up_window_ms: int | None = None
    recover: bool = False
    schedule: Schedule | None = None

    @property
    def key(self) -> str:
        """The job key: the explicit one, else the function's ``__qualname__``."""
        return self.explicit_key or self.function.__qualname__

    @property
    def lease_key(self) -> str:
        """The key of the sticky lease that says which instance runs the job."""
        return lease_key(self.key)

    def describe(self) -> str:
        """Name the function for error messages."""
        name = getattr(self.function, "__qualname__", None) or repr(self.function)
        return f"{getattr(self.function, '__module__', '?')}.{name}"

    def add(
        self,
        kind: JobKind,
        key: str | None,
        ttl_ms: int | None,
        options: JobOptions | None = None,
    ) -> None:
        """Merge one decorator into the spec.

        Raises:
            LocksConfigurationError: the same decorator twice, or two different keys.
        """
        chosen = options or JobOptions()
        if kind == "on_one_instance":
            if self.one_instance:
                raise _twice(kind, self)
            self.one_instance, self.one_instance_ttl_ms = True, ttl_ms
            self.owner_idle_ms = chosen.owner_idle_ms
            self.catch_up, self.catch_up_window_ms = chosen.catch_up, chosen.catch_up_window_ms
        else:
            if self.no_overlap:
                raise _twice(kind, self)
            self.no_overlap, self.no_overlap_ttl_ms = True, ttl_ms
            self.min_hold_ms, self.max_run_ms = chosen.min_hold_ms, chosen.max_run_ms
            self.overlap = chosen.overlap
        self._add_shared(chosen)
        if key is not None:
            if self.explicit_key is not None and self.explicit_key != key:
                raise LocksConfigurationError(
                    f"{self.describe()} has two keys, {self.explicit_key!r} and {key!r}; the "
                    "decorators on one function share one key: give it once"
                )
            self.explicit_key = key

    def _add_shared(self, chosen: JobOptions) -> None:
        """Merge the options either decorator may give; one given by both must agree."""
        self.cancel_on_loss = self.cancel_on_loss or chosen.cancel_on_loss
        self.recover = self.recover or chosen.recover
        if chosen.alert_after_failures is not None:
            self.alert_after_failures = chosen.alert_after_failures
        if chosen.pause_after_failures is not None:
            self.pause_after_failures = chosen.pause_after_failures
        if chosen.schedule is not None:
            if self.schedule not in {None, chosen.schedule}:
                raise LocksConfigurationError(
                    f"{self.describe()} declares two schedules ({self.schedule.describe()} and "
                    f"{chosen.schedule.describe()}); declare it on one decorator"
                )
            self.schedule = chosen.schedule
        if chosen.expect_every_ms is not None:
            if self.expect_every_ms not in {None, chosen.expect_every_ms}:
                raise LocksConfigurationError(
                    f"{self.describe()} has two expect_every values; give it once"
                )
            self.expect_every_ms = chosen.expect_every_ms


def _twice(kind: str, spec: JobSpec) -> LocksConfigurationError:
    return LocksConfigurationError(
        f"{spec.describe()} is decorated with {kind} twice; once is enough"
    )


@final
@dataclass(eq=False, frozen=True)
class ElectionSpec:
    """One election: its key, its lease length, and what it runs (internal)."""

    key: str
    ttl_ms: int | None
    target: Callable[..., Any]

    @property
    def runs_a_duty(self) -> bool:
        """Whether the target is an async ``duty(lock)`` function rather than a class."""
        return not isinstance(self.target, type)

    def describe(self) -> str:
        """Name the election for messages."""
        return f"{self.key!r} ({self.target.__module__}.{self.target.__qualname__})"


def job_spec_of(candidate: object) -> JobSpec | None:
    """Return the job spec of a decorated function (or bound method), or ``None``."""
    spec = getattr(candidate, JOB_ATTRIBUTE, None)
    return spec if isinstance(spec, JobSpec) else None


def election_spec_of(candidate: object) -> ElectionSpec | None:
    """Return the election spec of a decorated class, instance or function, or ``None``."""
    spec = getattr(candidate, ELECTION_ATTRIBUTE, None)
    return spec if isinstance(spec, ElectionSpec) else None
