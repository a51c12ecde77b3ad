"""Durations: the one place that knows units.

Public parameters take a :data:`Duration`; everything inside leaselock is whole milliseconds in a
name ending in ``_ms``. A bare number is SECONDS, as in ``time.sleep``, asyncio and redis-py.
"""

from __future__ import annotations

import functools
import math
import re
from datetime import timedelta
from fractions import Fraction
from typing import TypeAlias

from ._errors import LocksConfigurationError

__all__ = [
    "MAX_TTL_MS",
    "MIN_REAL_TTL_MS",
    "Duration",
    "check_ttl_floor",
    "parse_duration",
    "parse_ttl",
    "parse_wait",
]

Duration: TypeAlias = str | timedelta | int | float
"""A duration: ``"1500ms"``, ``"30s"``, ``"1.5s"``, ``"5m"``, ``"2h"``, ``"1d"``, ``"1m30s"``, a
:class:`~datetime.timedelta`, or a number of SECONDS (``30``, ``1.5``), as ``time.sleep`` takes."""

MAX_TTL_MS = 365 * 24 * 60 * 60 * 1000
"""The longest ttl leaselock accepts: one year, well inside what every shipped store can hold."""

MIN_REAL_TTL_MS = 100
"""The shortest ttl on the system clock: a store round trip and a renewal every ttl/3 must fit."""

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+")
_ACCEPTED = (
    'a string like "1500ms", "30s", "1.5s", "5m", "2h", "1d" or "1m30s", '
    "a datetime.timedelta, or a number of seconds (30, 1.5)"
)


def parse_duration(value: object, *, name: str = "duration", positive: bool = False) -> int:
    """Return ``value`` as whole milliseconds (zero allowed, never negative).

    Args:
        value: a :data:`Duration`; a bare number is seconds.
        name: the parameter's name, used in the error message.
        positive: the caller refuses zero too, so a negative value is told to be positive.

    Returns:
        The duration in milliseconds. A number of seconds is rounded to the nearest millisecond;
        a string or a timedelta with a fraction of a millisecond is refused.

    Raises:
        LocksConfigurationError: ``value`` is not one of the accepted forms, or is negative.
    """
    if isinstance(value, bool):
        raise LocksConfigurationError(
            f"{name}={value!r} is a bool, not a duration; pass {_ACCEPTED}"
        )
    if isinstance(value, int):
        ms = value * 1000
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise LocksConfigurationError(
                f"{name}={value!r} is not a finite number of seconds; pass {_ACCEPTED}"
            )
        ms = round(value * 1000)
    elif isinstance(value, timedelta):
        ms = _timedelta_ms(value, name)
    elif isinstance(value, str):
        ms = _string_ms(value, name)
    else:
        raise LocksConfigurationError(
            f"{name}={value!r} ({type(value).__name__}) is not a duration; pass {_ACCEPTED}"
        )
    if ms < 0 or (isinstance(value, float) and value < 0):
        wanted = 'a positive duration such as "30s"' if positive else "zero or more"
        raise LocksConfigurationError(f"{name}={value!r} is negative; pass {wanted}")
    return ms


def parse_ttl(value: object, *, name: str = "ttl") -> int:
    """Return a lease length in milliseconds: positive and at most :data:`MAX_TTL_MS`.

    Raises:
        LocksConfigurationError: not a duration, zero, negative or longer than a year.
    """
    ms = parse_duration(value, name=name, positive=True)
    if ms == 0:
        raise LocksConfigurationError(
            f'{name}={value!r} is zero: a lease must last; pass a positive duration such as "30s"'
        )
    if ms < 3:  # noqa: PLR2004 -- renewal runs every ttl/3 whole milliseconds
        raise LocksConfigurationError(
            f"{name}={value!r} is shorter than 3 ms, too short to renew every ttl/3; "
            'pass a few seconds, such as "30s"'
        )
    if ms > MAX_TTL_MS:
        raise LocksConfigurationError(
            f"{name}={value!r} is longer than one year ({MAX_TTL_MS} ms), more than a store can "
            "be trusted to hold; pass a shorter ttl: the lease is renewed while you hold it"
        )
    return ms


def check_ttl_floor(ttl_ms: int, floor_ms: int, *, name: str = "ttl") -> int:
    """Return ``ttl_ms`` if it is at least ``floor_ms``, the shortest ttl the clock can honour.

    Raises:
        LocksConfigurationError: the ttl is shorter; the message says why it cannot work.
    """
    if ttl_ms < floor_ms:
        raise LocksConfigurationError(
            f"{name}={ttl_ms} ms is shorter than {floor_ms} ms: a store round trip and a renewal "
            f"every ttl/3 cannot fit in it, so the lock would be lost as soon as it is taken; "
            f'pass at least "{floor_ms}ms" (a few seconds is usual, "30s" the default)'
        )
    return ttl_ms


def parse_wait(value: object, *, name: str = "wait") -> int:
    """Return how long to wait for a lock, in milliseconds (0: try once).

    Raises:
        LocksConfigurationError: not a duration, or negative.
    """
    return parse_duration(value, name=name)


def _timedelta_ms(value: timedelta, name: str) -> int:
    # whole microseconds are exact in a timedelta; refuse what would be silently rounded
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if micros % 1000:
        raise LocksConfigurationError(
            f"{name}={value!r} has a fraction of a millisecond; round it to whole milliseconds"
        )
    return micros // 1000


# a program passes the same few strings again and again (wait="2s" on every acquire)
@functools.lru_cache(maxsize=256)
def _string_ms(value: str, name: str) -> int:
    text = value.strip()
    if not _WHOLE.fullmatch(text):
        raise LocksConfigurationError(f"{name}={value!r} is not a duration; pass {_ACCEPTED}")
    # exact arithmetic: "0.1s" is 100 ms, not 100.00000000000001
    total = sum(Fraction(amount) * _UNIT_MS[unit] for amount, unit in _PART.findall(text))
    if total.denominator != 1:
        raise LocksConfigurationError(
            f"{name}={value!r} has a fraction of a millisecond; round it to whole milliseconds"
        )
    return int(total)
