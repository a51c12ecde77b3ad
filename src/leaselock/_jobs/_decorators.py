"""Job decorators: ``on_one_instance`` and ``without_overlapping``, bound and shared forms.

A decorated function keeps its signature, name and ``async``-ness, so schedulers that inspect it
(APScheduler, Celery) see the function they expect. Stacked decorators share one :class:`JobSpec`
and so one key. At call time the wrapper finds the ``Locks`` that runs it: the one it is bound to,
the one its object was registered with, the ``Locks`` running the caller, or the one started in
this process.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, Protocol, TypeVar, Unpack, cast, overload

from .._durations import Duration, parse_ttl, parse_wait
from .._errors import LocksConfigurationError
from .._keys import refuse_function_as_key, validate_key
from ._options import (
    AnyJobOptions,
    OnOneInstanceOptions,
    WithoutOverlappingOptions,
    checked_options,
)
from ._runtime import JobRuntime, resolve_runtime
from ._schedule import EverySchedule, Schedule, cron_schedule
from ._spec import JOB_ATTRIBUTE, OVERLAPS, JobKind, JobOptions, JobSpec

__all__ = [
    "F",
    "JobDecorator",
    "job_decorator",
    "on_one_instance",
    "without_overlapping",
]

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")


class JobDecorator(Protocol):
    """A job decorator: the wrapped function keeps its parameters, and may return ``None``.

    ``None`` is what a skipped tick returns (another instance runs the job, or a run is still
    in progress), so the type says so.
    """

    @overload
    def __call__(
        self, function: Callable[P, Coroutine[Any, Any, R]]
    ) -> Callable[P, Coroutine[Any, Any, R | None]]: ...

    @overload
    def __call__(self, function: Callable[P, R]) -> Callable[P, R | None]: ...


def job_decorator(
    kind: JobKind,
    key: str | None,
    ttl: Duration | None,
    runtime: JobRuntime | None,
    *,
    sync: bool = False,
    **options: Unpack[AnyJobOptions],
) -> JobDecorator:
    """Return the decorator of ``kind`` (``runtime`` given: the bound form).

    ``options`` are the ones ``kind`` takes (``sync``: its ``SyncLocks`` form), documented in
    :mod:`._options`.

    Raises:
        LocksConfigurationError: a bad key, ttl or option.
    """
    refuse_function_as_key(key, f"@{'locks' if runtime is not None else 'leaselock'}.{kind}", "()")
    checked_options(kind, options, sync=sync)
    checked_key = None if key is None else validate_key(key)
    ttl_ms = None if ttl is None else parse_ttl(ttl)
    parsed = _parsed(options)

    def decorate(function: F) -> F:
        spec = getattr(function, JOB_ATTRIBUTE, None)
        if isinstance(spec, JobSpec):
            wrapper = function
        else:
            _check_decoratable(kind, function, has_key=checked_key is not None)
            spec = JobSpec(function)
            wrapper = cast("F", _wrap(spec))
        spec.add(kind, checked_key, ttl_ms, parsed)
        if runtime is not None:
            runtime.bind_job(spec)
        return wrapper

    return cast("JobDecorator", decorate)


def _parsed(options: AnyJobOptions) -> JobOptions:
    """Check each option and return them parsed; an option left out has its default."""
    cancel_on_loss = options.get("cancel_on_loss", False)
    if not isinstance(cancel_on_loss, bool):
        raise LocksConfigurationError(f"cancel_on_loss={cancel_on_loss!r}; pass True or False")
    catch_up = options.get("catch_up")
    if catch_up not in {None, "latest"}:
        raise LocksConfigurationError(
            f'catch_up={catch_up!r}; pass "latest" (run the most recent tick its dead owner '
            "missed, once) or None"
        )
    recover = options.get("recover", False)
    if not isinstance(recover, bool):
        raise LocksConfigurationError(f"recover={recover!r}; pass True or False")
    overlap = options.get("overlap", "skip")
    if overlap not in OVERLAPS:
        raise LocksConfigurationError(
            f'overlap={overlap!r}; pass "skip" (a tick during a run is skipped), "buffer_one" '
            '(one more run right after it) or "replace" (the running run is stopped)'
        )
    min_hold = options.get("min_hold")
    max_run = options.get("max_run")
    owner_idle = options.get("owner_idle")
    expect_every = options.get("expect_every")
    catch_up_window = options.get("catch_up_window")
    return JobOptions(
        min_hold_ms=None if min_hold is None else parse_wait(min_hold, name="min_hold"),
        max_run_ms=None if max_run is None else parse_ttl(max_run, name="max_run"),
        owner_idle_ms=None if owner_idle is None else parse_ttl(owner_idle, name="owner_idle"),
        cancel_on_loss=cancel_on_loss,
        expect_every_ms=(
            None if expect_every is None else parse_ttl(expect_every, name="expect_every")
        ),
        alert_after_failures=_failures(options.get("alert_after_failures"), "alert_after_failures"),
        pause_after_failures=_failures(options.get("pause_after_failures"), "pause_after_failures"),
        overlap=overlap,
        catch_up=catch_up == "latest",
        catch_up_window_ms=(
            None if catch_up_window is None else parse_ttl(catch_up_window, name="catch_up_window")
        ),
        recover=recover,
        schedule=_schedule(options),
    )


def _schedule(options: AnyJobOptions) -> Schedule | None:
    """The schedule ``every`` or ``cron`` declares (one of them at most), or ``None``."""
    every, cron = options.get("every"), options.get("cron")
    zoned = {name for name in ("timezone", "fall_back") if name in options}
    if every is not None and cron is not None:
        raise LocksConfigurationError(
            f"every={every!r} and cron={cron!r}: declare the schedule once, with one of them"
        )
    if cron is None and zoned:
        raise LocksConfigurationError(
            f"{' and '.join(sorted(zoned))} without cron=...: they place a cron expression on "
            "a local clock; pass cron=, or drop them (every= counts in UTC)"
        )
    if every is not None:
        return EverySchedule(parse_ttl(every, name="every"))
    if cron is not None:
        return cron_schedule(cron, options.get("timezone"), options.get("fall_back", "once"))
    return None


def _failures(count: object, name: str) -> int | None:
    if count is None:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise LocksConfigurationError(
            f"{name}={count!r}; pass a number of failed runs in a row, 1 or more (or None)"
        )
    return count


def _check_decoratable(kind: str, function: object, *, has_key: bool) -> None:
    if isinstance(function, type) or not callable(function):
        raise LocksConfigurationError(
            f"{kind} decorates a function or a method, not {function!r}; put it on the job's "
            "method (def reconcile_stock(self): ...)"
        )
    if not has_key and not hasattr(function, "__qualname__"):
        raise LocksConfigurationError(
            f"{kind} needs a named function to derive its key from; {function!r} has no "
            "__qualname__: pass key=..."
        )


def _wrap(spec: JobSpec) -> Callable[..., Any]:
    function = spec.function
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def run_async(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 -- the job's own
            return await resolve_runtime(spec, args).run_async(spec, function, args, kwargs)

        wrapper: Callable[..., Any] = run_async
    else:

        @functools.wraps(function)
        def run_sync(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 -- the job's own
            return resolve_runtime(spec, args).run_sync(spec, function, args, kwargs)

        wrapper = run_sync
    setattr(wrapper, JOB_ATTRIBUTE, spec)
    return wrapper


def on_one_instance(
    key: str | None = None, ttl: Duration | None = None, **options: Unpack[OnOneInstanceOptions]
) -> JobDecorator:
    """Mark a job that runs on ONE instance; bound by ``locks.register`` or the current Locks.

    The first instance whose tick finds the lease ``<key>:owner`` free takes it and keeps it
    renewed while ticks keep coming; it runs that tick and every later one. Other instances'
    ticks return ``None`` without running. See :meth:`leaselock.Locks.on_one_instance`.

    Args:
        key: the job's key; defaults to the function's ``__qualname__``. Set it on any job
            that must never run twice: a rename changes the default.
        ttl: the lease length (default: the ``Locks`` ttl).
        **options: see :class:`~leaselock.OnOneInstanceOptions`.

    Raises:
        LocksConfigurationError: a bad argument.

    .. versionadded:: 0.1
    .. versionchanged:: 0.2 the options of :class:`~leaselock.OnOneInstanceOptions`.
    """
    return job_decorator("on_one_instance", key, ttl, None, **options)


def without_overlapping(
    key: str | None = None,
    ttl: Duration | None = None,
    **options: Unpack[WithoutOverlappingOptions],
) -> JobDecorator:
    """Mark a job that never overlaps itself; bound by ``locks.register`` or the current Locks.

    Each run holds the lock ``<key>`` for the whole run; a tick that finds it held is skipped.
    See :meth:`leaselock.Locks.without_overlapping`.

    Args:
        key: the job's key (default: the function's ``__qualname__``).
        ttl: the run lock's lease length (default: the ``Locks`` ttl).
        **options: see :class:`~leaselock.WithoutOverlappingOptions`.

    Raises:
        LocksConfigurationError: a bad argument.

    .. versionadded:: 0.1
    .. versionchanged:: 0.2 the options of :class:`~leaselock.WithoutOverlappingOptions`.
    """
    return job_decorator("without_overlapping", key, ttl, None, **options)
