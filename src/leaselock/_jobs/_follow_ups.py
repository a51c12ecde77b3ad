"""FollowUps: a second look, after the holder's ttl, at a tick this instance skipped.

With ``catch_up="latest"`` a tick skipped because another instance owns the job is looked at
again once that owner's lease must have expired if it died: when the store shows the owner
never started that tick, and the tick is still within ``catch_up_window``, the job runs once
now (``trigger="catch-up"``). With ``recover=True`` a tick skipped while a run was in progress
(or owned elsewhere) is looked at again after the run lock's ttl: when that run is still open
in the store, its instance died, and the job runs again at once (``trigger="recover"``), its
``current_run().abandoned`` the dead run. Healthy ticks cost nothing more: a second look is two
reads, only for jobs that opt in, only after a skip, at most one pending per job.

A store may keep a dead holder's lock a little past its ttl (etcd: leases of whole seconds,
swept up to half a second after they end). A catch-up or recover run that the still-live lock
refuses looks again every :data:`RETRY_EVERY_MS`, for up to :data:`LATE_EXPIRY_MS` after the
first look, so the run is not lost; a live holder's long run costs those few looks a skipped
tick.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Final, final

from .._clock import Clock, TimerHandle
from .._engine import OperatorStore
from .._errors import LocksConfigurationError, LockStoreError
from .._event_types import RunTrigger, SkipReason
from ._control import SAME_TICK
from ._records import WallTime
from ._spec import JobSpec

__all__ = ["FOLLOW_UP_MARGIN_MS", "LATE_EXPIRY_MS", "RETRY_EVERY_MS", "FollowUps", "RunAgain"]

_log = logging.getLogger("leaselock.jobs")

FOLLOW_UP_MARGIN_MS: Final = 250
"""How long past the holder's ttl the second look waits: on most stores its lease expired then."""

LATE_EXPIRY_MS: Final = 2000
"""How long past the first look a refused follow-up keeps looking: longer than any shipped store
keeps a lock past its ttl (etcd's whole-second leases and its sweep, 1.7 s at most)."""

RETRY_EVERY_MS: Final = 500
"""How often a follow-up that the dead holder's still-live lock refused looks again."""

_FOLLOW_UP_TRIGGERS: Final = frozenset({"catch-up", "recover"})
_LOCK_STILL_LIVE: Final = frozenset({"another-instance", "in-progress"})

RunAgain = Callable[[RunTrigger, int], None]
"""Runs a job again for a trigger, as the tick that fired at the given time on the clock."""


@final
class FollowUps:
    """The pending second looks of one Locks' jobs."""

    __slots__ = (
        "_clock",
        "_default_ttl_ms",
        "_last_tick_ms",
        "_operator",
        "_pending",
        "_retrying",
        "_wall",
    )

    def __init__(
        self, operator: OperatorStore, clock: Clock, wall: WallTime, *, default_ttl_ms: int
    ) -> None:
        """Read the store through ``operator``; time on ``clock`` and ``wall``."""
        self._operator = operator
        self._clock = clock
        self._wall = wall
        self._default_ttl_ms = default_ttl_ms
        self._pending: dict[str, TimerHandle] = {}
        self._last_tick_ms: dict[str, int] = {}
        # per job whose look ran it again: the skipped tick, and until when a refused run of
        # it looks again
        self._retrying: dict[str, tuple[int, int]] = {}

    def ticked(self, spec: JobSpec, now_ms: int) -> None:
        """A scheduled tick of ``spec`` came here: a second look at an earlier one is moot."""
        self._last_tick_ms[spec.key] = now_ms

    def after_skip(
        self, spec: JobSpec, trigger: RunTrigger, reason: SkipReason, run_again: RunAgain
    ) -> None:
        """Look again at the tick just skipped for ``reason``, if ``spec`` asks to.

        A ``trigger`` of ``"catch-up"`` or ``"recover"`` is this instance's own follow-up: it
        looks again shortly while the lock it needs is still live, as that lock's holder is
        dead and its lease about to end.
        """
        if trigger in _FOLLOW_UP_TRIGGERS:
            self._retry(spec, reason, run_again)
            return
        if reason == "another-instance" and (spec.catch_up or spec.recover):
            ttl_ms = spec.one_instance_ttl_ms or self._default_ttl_ms
        elif reason == "in-progress" and spec.recover:
            ttl_ms = spec.no_overlap_ttl_ms or self._default_ttl_ms
        else:
            return
        skipped_ms = self._last_tick_ms.get(spec.key, self._clock.now_ms())
        self._retrying.pop(spec.key, None)
        self._look_at(skipped_ms + ttl_ms + FOLLOW_UP_MARGIN_MS, spec, skipped_ms, run_again)

    def close(self) -> None:
        """Drop every pending second look."""
        for pending in self._pending.values():
            pending.cancel()
        self._pending.clear()
        self._retrying.clear()

    def _retry(self, spec: JobSpec, reason: SkipReason, run_again: RunAgain) -> None:
        retrying = self._retrying.pop(spec.key, None)
        if retrying is None or reason not in _LOCK_STILL_LIVE:
            return
        skipped_ms, until_ms = retrying
        now_ms = self._clock.now_ms()
        if now_ms < until_ms and spec.key not in self._pending:
            self._retrying[spec.key] = retrying
            self._look_at(now_ms + RETRY_EVERY_MS, spec, skipped_ms, run_again)

    def _look_at(self, at_ms: int, spec: JobSpec, skipped_ms: int, run_again: RunAgain) -> None:
        pending = self._pending.pop(spec.key, None)
        if pending is not None:
            pending.cancel()
        self._pending[spec.key] = self._clock.call_at(
            at_ms, self._look(spec, skipped_ms, run_again)
        )

    def _look(
        self, spec: JobSpec, skipped_ms: int, run_again: RunAgain
    ) -> Callable[[], Awaitable[None]]:
        async def look() -> None:
            self._pending.pop(spec.key, None)
            if self._last_tick_ms.get(spec.key, skipped_ms) > skipped_ms:
                self._retrying.pop(spec.key, None)
                return
            try:
                trigger = await self._decide(spec, skipped_ms)
            except (LockStoreError, LocksConfigurationError) as failure:
                _log.warning(
                    "Could not look again at a skipped tick of %s: %s",
                    spec.key,
                    failure,
                    extra={"job": spec.key, "reason": "follow-up-failed"},
                )
                return
            if trigger is None:
                self._retrying.pop(spec.key, None)
                return
            first_look = (skipped_ms, self._clock.now_ms() + LATE_EXPIRY_MS)
            self._retrying[spec.key] = (skipped_ms, self._retrying.get(spec.key, first_look)[1])
            run_again(trigger, skipped_ms)

        return look

    async def _decide(self, spec: JobSpec, skipped_ms: int) -> RunTrigger | None:
        """``"recover"``, ``"catch-up"`` or nothing, from what the store says of the job."""
        skipped_at = self._wall.at(skipped_ms)
        states = await self._operator.job_states([spec.key])
        opened = states[0].open_run if states else None
        if spec.recover and opened is not None and opened.started_at <= skipped_at:
            return "recover"
        if not spec.catch_up:
            return None
        window_ms = spec.catch_up_window_ms or spec.expect_every_ms or 0
        if self._wall.now() - skipped_at > timedelta(milliseconds=window_ms):
            return None
        records = await self._operator.job_records([spec.key])
        last = records[0].last_run if records else None
        started = [run.started_at for run in (opened, last) if run is not None]
        if started and max(started) >= skipped_at - SAME_TICK:
            return None
        return "catch-up"
