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
import weakref
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, Protocol, TypeVar, cast, final, overload

from ._context import CURRENT_LOCK, current_locks
from ._durations import Duration, parse_ttl
from ._errors import LocksConfigurationError
from ._keys import lease_key, refuse_function_as_key, validate_key

if TYPE_CHECKING:
    from ._locks import Locks

__all__ = [
    "BINDINGS",
    "JOB_ATTRIBUTE",
    "JobDecorator",
    "JobSpec",
    "job_decorator",
    "on_one_instance",
    "without_overlapping",
]

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")
JobKind = Literal["on_one_instance", "without_overlapping"]


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


JOB_ATTRIBUTE = "__leaselock_job__"


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
    locks: Locks | None = None

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

    def add(self, kind: JobKind, key: str | None, ttl_ms: int | None, locks: Locks | None) -> None:
        """Merge one decorator into the spec.

        Raises:
            LocksConfigurationError: the same decorator twice, two different keys, or two
                different bound ``Locks``.
        """
        if kind == "on_one_instance":
            if self.one_instance:
                raise _twice(kind, self)
            self.one_instance, self.one_instance_ttl_ms = True, ttl_ms
        else:
            if self.no_overlap:
                raise _twice(kind, self)
            self.no_overlap, self.no_overlap_ttl_ms = True, ttl_ms
        if key is not None:
            if self.explicit_key is not None and self.explicit_key != key:
                raise LocksConfigurationError(
                    f"{self.describe()} has two keys, {self.explicit_key!r} and {key!r}; the "
                    "decorators on one function share one key: give it once"
                )
            self.explicit_key = key
        if locks is not None:
            if self.locks is not None and self.locks is not locks:
                raise LocksConfigurationError(
                    f"{self.describe()} is bound to two different Locks; bind it to one"
                )
            self.locks = locks


def _twice(kind: str, spec: JobSpec) -> LocksConfigurationError:
    return LocksConfigurationError(
        f"{spec.describe()} is decorated with {kind} twice; once is enough"
    )


def job_decorator(
    kind: JobKind, key: str | None, ttl: Duration | None, locks: Locks | None
) -> JobDecorator:
    """Return the decorator of ``kind`` (``locks`` given: the bound form)."""
    refuse_function_as_key(key, f"@{'locks' if locks is not None else 'leaselock'}.{kind}", "()")
    checked_key = None if key is None else validate_key(key)
    ttl_ms = None if ttl is None else parse_ttl(ttl)

    def decorate(function: F) -> F:
        spec = getattr(function, JOB_ATTRIBUTE, None)
        if isinstance(spec, JobSpec):
            wrapper = function
        else:
            _check_decoratable(kind, function, has_key=checked_key is not None)
            spec = JobSpec(function)
            wrapper = cast("F", _wrap(spec))
        spec.add(kind, checked_key, ttl_ms, locks)
        if locks is not None:
            locks._registry.add_job(spec)  # noqa: SLF001 -- the bound form registers itself
        return wrapper

    return cast("JobDecorator", decorate)


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
            locks = resolve_locks(spec, args)
            run = await locks._begin_run(spec)  # noqa: SLF001
            if run is None:
                return None
            token = CURRENT_LOCK.set(run.lock)
            try:
                return await function(*args, **kwargs)
            finally:
                CURRENT_LOCK.reset(token)
                await locks._on_own_loop(locks._runs_end(run))  # noqa: SLF001

        wrapper: Callable[..., Any] = run_async
    else:

        @functools.wraps(function)
        def run_sync(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 -- the job's own
            locks = resolve_locks(spec, args)
            run = locks._blocking(locks._runs_begin(spec))  # noqa: SLF001
            if run is None:
                return None
            token = CURRENT_LOCK.set(run.lock)
            try:
                return function(*args, **kwargs)
            finally:
                CURRENT_LOCK.reset(token)
                locks._blocking(locks._runs_end(run))  # noqa: SLF001

        wrapper = run_sync
    setattr(wrapper, JOB_ATTRIBUTE, spec)
    return wrapper


@final
class _Bindings:
    """Which ``Locks`` an object or function was registered with; weak where it can be."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Callable[[], object], Locks]] = {}

    def bind(self, target: object, locks: Locks) -> None:
        key = id(target)
        try:
            ref: Callable[[], object] = weakref.ref(target, lambda _: self._by_id.pop(key, None))
        except TypeError:
            # objects without weak references are kept: a registration is for the program's life
            ref = functools.partial(_same, target)
        self._by_id[key] = (ref, locks)

    def unbind(self, locks: Locks) -> None:
        for key, (_, bound) in list(self._by_id.items()):
            if bound is locks:
                self._by_id.pop(key, None)

    def get(self, target: object) -> Locks | None:
        entry = self._by_id.get(id(target))
        if entry is None or entry[0]() is not target:
            return None
        return entry[1]


def _same(target: object) -> object:
    return target


BINDINGS = _Bindings()
"""Registrations of this process (``locks.register(obj)``)."""


def resolve_locks(spec: JobSpec, args: tuple[Any, ...]) -> Locks:
    """Return the ``Locks`` that runs this call of the job.

    Raises:
        LocksConfigurationError: no ``Locks`` can be found; the message names both fixes.
    """
    if spec.locks is not None:
        return spec.locks
    if args and (bound := BINDINGS.get(args[0])) is not None:
        return bound
    if (bound := BINDINGS.get(spec)) is not None:
        return bound
    running = current_locks()
    if running is not None:
        return running
    raise LocksConfigurationError(
        f"{spec.describe()} is a leaselock job, but no Locks runs it. Register it with the Locks "
        "of this application (locks.register(job_object) or locks.register(function)), or call "
        "it where a Locks is started (inside `async with locks:`)"
    )


def on_one_instance(key: str | None = None, ttl: Duration | None = None) -> JobDecorator:
    """Mark a job that runs on ONE instance; bound by ``locks.register`` or the current Locks.

    The first instance whose tick finds the lease ``<key>:owner`` free takes it and keeps it
    renewed while it lives; it runs that tick and every later one. Other instances' ticks
    return ``None`` without running. See :meth:`leaselock.Locks.on_one_instance`.

    Args:
        key: the job's key; defaults to the function's ``__qualname__``. Set it on any job
            that must never run twice: a rename changes the default.
        ttl: the lease length (default: the ``Locks`` ttl).

    Raises:
        LocksConfigurationError: a bad key or ttl.

    .. versionadded:: 0.1
    """
    return job_decorator("on_one_instance", key, ttl, None)


def without_overlapping(key: str | None = None, ttl: Duration | None = None) -> JobDecorator:
    """Mark a job that never overlaps itself; bound by ``locks.register`` or the current Locks.

    Each run holds the lock ``<key>`` for the whole run; a tick that finds it held is skipped.
    See :meth:`leaselock.Locks.without_overlapping`.

    .. versionadded:: 0.1
    """
    return job_decorator("without_overlapping", key, ttl, None)


def job_spec_of(candidate: object) -> JobSpec | None:
    """Return the job spec of a decorated function (or bound method), or ``None``."""
    spec = getattr(candidate, JOB_ATTRIBUTE, None)
    return spec if isinstance(spec, JobSpec) else None
