"""The ``leader_election`` decorator, bound and shared forms.

An election is the same lease as a lock, held for as long as the leader lives; campaigning and
leading are :class:`~leaselock._jobs._campaign.Campaign`'s.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from .._durations import Duration, parse_ttl
from .._errors import LocksConfigurationError
from .._keys import refuse_function_as_key, validate_key
from ._campaign import ACQUIRED_HOOK, LOST_HOOK
from ._runtime import JobRuntime
from ._spec import ELECTION_ATTRIBUTE, ElectionSpec

__all__ = ["election_decorator", "leader_election"]

E = TypeVar("E", bound=Callable[..., Any])


def election_decorator(
    key: str, ttl: Duration | None, runtime: JobRuntime | None
) -> Callable[[E], E]:
    """Return the ``leader_election`` decorator (``runtime`` given: the bound form)."""
    refuse_function_as_key(
        key,
        f"@{'locks' if runtime is not None else 'leaselock'}.leader_election",
        '("inventory:warehouse-feed")',
    )
    checked_key = validate_key(key)
    ttl_ms = None if ttl is None else parse_ttl(ttl)

    def decorate(target: E) -> E:
        _check_target(target)
        if ELECTION_ATTRIBUTE in vars(target):
            raise LocksConfigurationError(
                f"{target.__qualname__} is decorated with leader_election twice; once is enough"
            )
        spec = ElectionSpec(checked_key, ttl_ms, target)
        setattr(target, ELECTION_ATTRIBUTE, spec)
        if runtime is not None:
            runtime.bind_election(spec)
        return target

    return decorate


def _check_target(target: object) -> None:
    if isinstance(target, type):
        missing = [
            name for name in (ACQUIRED_HOOK, LOST_HOOK) if not callable(getattr(target, name, None))
        ]
        if missing:
            raise LocksConfigurationError(
                f"{target.__qualname__} has no {' or '.join(missing)}; a class under "
                f"leader_election defines {ACQUIRED_HOOK}(self, lock) and {LOST_HOOK}(self, lock)"
            )
        return
    if not inspect.iscoroutinefunction(target):
        raise LocksConfigurationError(
            f"leader_election decorates a class with {ACQUIRED_HOOK}/{LOST_HOOK}, or an async "
            f"duty(lock) function run while leading; {target!r} is neither"
        )


def leader_election(key: str, ttl: Duration | None = None) -> Callable[[E], E]:
    """Mark a class or a duty function as an election; bound by ``locks.register(...)``.

    Args:
        key: the election's key: one leader per key across every instance.
        ttl: the lease length (default: the ``Locks`` ttl); campaigns run every ``ttl / 3``.

    Raises:
        LocksConfigurationError: a bad key or ttl, or a target that is neither a class with the
            two hooks nor an async function.

    .. versionadded:: 0.1
    """
    return election_decorator(key, ttl, None)
