"""Skips a person sees: the first of a streak at INFO, then one summary line a minute at most.

Every skip stays an event; only the log line's level changes, so a job that runs elsewhere for a
week does not fill the log, and one that stopped running anywhere is not silent either.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Final, final

from .._clock import Clock, utc_now
from .._event_types import SkipReason, TickSkipped
from .._events import Publisher
from .._keys import holder_name
from .._telemetry import Telemetry
from ._spec import JobSpec

__all__ = ["SUMMARY_EVERY_MS", "Skips"]

SUMMARY_EVERY_MS: Final = 60_000
# in-progress skips in a row after which a run with no max_run may be hanging: said once
HANGING_AFTER_SKIPS: Final = 3

_log = logging.getLogger("leaselock.jobs")


@final
@dataclass(slots=True)
class _Streak:
    reason: SkipReason
    count: int
    since: datetime
    logged_at_ms: int


@final
class Skips:
    """The skip streaks of one Locks' jobs, and the events they make."""

    __slots__ = ("_clock", "_events", "_streaks", "_telemetry")

    def __init__(self, clock: Clock, events: Publisher, telemetry: Telemetry | None) -> None:
        """Report skips through ``events`` (and ``telemetry``), timing summaries on ``clock``."""
        self._clock = clock
        self._events = events
        self._telemetry = telemetry
        self._streaks: dict[str, _Streak] = {}

    def ran(self, spec: JobSpec) -> None:
        """End the job's streak: it runs here now."""
        self._streaks.pop(spec.key, None)

    def skip(
        self,
        spec: JobSpec,
        reason: SkipReason,
        *,
        holder: str | None,
        fencing_token: int | None,
        owner: str | None,
        note: str | None = None,
    ) -> None:
        """Report a skipped tick of ``spec``; ``holder`` is the owner id that kept it out."""
        if self._telemetry is not None:
            self._telemetry.job_skipped(spec.key, reason)
        now_ms = self._clock.now_ms()
        streak = self._streaks.get(spec.key)
        if streak is None or streak.reason != reason:
            streak = _Streak(reason, 1, utc_now(), now_ms)
            self._streaks[spec.key] = streak
            loud = True
        else:
            streak.count += 1
            loud = now_ms - streak.logged_at_ms >= SUMMARY_EVERY_MS
            if loud:
                streak.logged_at_ms = now_ms
        self._events.emit(
            TickSkipped(
                key=spec.lease_key if reason == "another-instance" else spec.key,
                fencing_token=fencing_token,
                owner=owner,
                job=spec.key,
                reason=reason,
                min_hold_ms=spec.min_hold_ms if reason == "in-progress" else None,
                holder=holder if reason in ("paused", "tick-already-run") else holder_name(holder),
                note=note,
                streak=streak.count,
                streak_since=streak.since,
                loud=loud,
            )
        )
        if reason == "in-progress" and streak.count == HANGING_AFTER_SKIPS and not spec.max_run_ms:
            _log.warning(
                "%s: %d ticks in a row found a run still in progress%s; a run may hang. Cap "
                'runs with without_overlapping(max_run="...") to give its lock up',
                spec.key,
                streak.count,
                f" (on {holder_name(holder)})" if holder else "",
                extra={"job": spec.key, "reason": reason},
            )
