"""What an operator's pause says: a target, a note, who, until when; checked before it is kept."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from .._durations import parse_ttl
from .._errors import LocksConfigurationError
from .._keys import validate_key
from ..stores._common._job_control import JobPause

__all__ = ["MAX_NOTE_CHARS", "build_pause", "checked_target"]

MAX_NOTE_CHARS: Final = 500


def checked_target(target: object) -> str:
    """Return ``target`` if it is a job key or a prefix ending in ``*``.

    Raises:
        LocksConfigurationError: naming what a target is.
    """
    if not isinstance(target, str) or not target:
        raise LocksConfigurationError(
            f'key_or_prefix={target!r}; pass a job\'s key ("reports:daily"), or a prefix '
            'ending in "*" ("reports:*"; "*" alone: every job)'
        )
    prefix = target.removesuffix("*")
    if prefix:
        validate_key(prefix)
    return target


def build_pause(
    target: object,
    *,
    note: object,
    until: object,
    paused_by: object,
    now: datetime,
) -> JobPause:
    """Return the pause an operator asked for at ``now``.

    ``until`` is an aware datetime, a duration from now (``"2h"``, a ``timedelta``, seconds),
    or ``None`` (until resumed).

    Raises:
        LocksConfigurationError: a bad argument, naming the fix.
    """
    checked = checked_target(target)
    if not isinstance(note, str) or len(note) > MAX_NOTE_CHARS:
        raise LocksConfigurationError(
            f"note={note!r}; pass a str of at most {MAX_NOTE_CHARS} characters saying why"
        )
    if not isinstance(paused_by, str) or not paused_by.strip():
        raise LocksConfigurationError(
            f"by={paused_by!r}; pass who pauses (a name), or leave it out for this instance"
        )
    return JobPause(checked, note, paused_by, now, _until(until, now))


def _until(until: object, now: datetime) -> datetime | None:
    if until is None:
        return None
    if isinstance(until, datetime):
        if until.tzinfo is None:
            raise LocksConfigurationError(
                f"until={until!r} has no timezone; pass an aware datetime "
                '(datetime.now(UTC) + ...), or a duration such as until="2h"'
            )
        if until <= now:
            raise LocksConfigurationError(
                f"until={until.isoformat()} is not in the future; pass a later time, or None "
                "to pause until resumed"
            )
        return until
    return now + timedelta(milliseconds=parse_ttl(until, name="until"))
