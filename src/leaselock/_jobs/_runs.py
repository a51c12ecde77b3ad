"""JobRuns: the runs of decorated jobs on one Locks: leases kept, run locks taken, and handover.

A tick of a job becomes a run in :meth:`JobRuns.begin` (or a skip, reported as an event) and
ends in :meth:`JobRuns.end`. The sticky lease ``<key>:owner`` is taken at the first tick that
finds it free and kept, renewed, until the instance shuts down or loses it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import final

from .._clock import Clock
from .._engine import Lease, Lock, LockEngine, release_logged
from .._errors import LockStoreError
from .._event_types import LeaseAcquired, SkipReason, TickSkipped
from .._events import Publisher
from ._spec import JobSpec

__all__ = ["JobRun", "JobRuns"]

_log = logging.getLogger("leaselock.jobs")

# instances firing the same tick differ by less than this: a lease handed back sooner would let
# one of them run the tick a second time
SAME_TICK_MS = 1000


@final
@dataclass(eq=False, slots=True)
class JobRun:
    """One run of a job: the lock ``current_lock()`` returns, and what to undo at the end."""

    spec: JobSpec
    lock: Lock
    run_lease: Lease | None
    unlink: Callable[[], None] | None
    started_ms: int


@final
@dataclass(eq=False, slots=True)
class _OwnedLease:
    lease: Lease
    lock: Lock
    last_started_ms: int


@final
class JobRuns:
    """Begins and ends the runs of one Locks' jobs; hands their leases back at shutdown."""

    __slots__ = (
        "_active",
        "_clock",
        "_closing",
        "_default_ttl_ms",
        "_engine",
        "_events",
        "_guards",
        "_idle",
        "_leases",
    )

    def __init__(
        self, engine: LockEngine, clock: Clock, events: Publisher, default_ttl_ms: int
    ) -> None:
        """Create the runs of a Locks whose engine, clock and events are given."""
        self._engine = engine
        self._clock = clock
        self._events = events
        self._default_ttl_ms = default_ttl_ms
        self._leases: dict[str, _OwnedLease] = {}
        self._guards: dict[str, asyncio.Lock] = {}
        self._active: set[JobRun] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing = False

    async def begin(self, spec: JobSpec) -> JobRun | None:
        """Turn a tick into a run, or skip it (``None``) and say why.

        A store failure skips the tick: it never reaches the scheduler, and no lock is believed
        held.
        """
        if self._closing:
            self._skip(spec, "shutting-down")
            return None
        try:
            return await self._begin(spec)
        except LockStoreError as error:
            _log.warning("The lock store failed at a tick of %s: %s", spec.key, error)
            self._skip(spec, "store-unavailable")
            return None

    async def _begin(self, spec: JobSpec) -> JobRun | None:
        owned = await self._lease_for(spec) if spec.one_instance else None
        if spec.one_instance and owned is None:
            self._skip(spec, "another-instance")
            return None
        run_lease = None
        if spec.no_overlap:
            run_lease = await self._engine.acquire(
                spec.key, spec.no_overlap_ttl_ms or self._default_ttl_ms, 0, None
            )
            if run_lease is None:
                self._skip(spec, "in-progress")
                return None
        if owned is not None and not owned.lease.held:
            # the lease was lost while the run lock was taken: another instance may run now
            if run_lease is not None:
                await release_logged(self._engine.lock(run_lease))
            self._skip(spec, "another-instance")
            return None
        if run_lease is not None:
            lock = self._engine.lock(run_lease)
            unlink = None if owned is None else self._tie(owned.lease, run_lease)
        else:
            assert owned is not None  # noqa: S101 -- a job has at least one of the two decorators
            lock, unlink = owned.lock, None
        run = JobRun(spec, lock, run_lease, unlink, self._clock.now_ms())
        self._active.add(run)
        self._idle.clear()
        return run

    def _tie(self, lease: Lease, run_lease: Lease) -> Callable[[], None]:
        """Make the run's signal abort when the lease is lost: another instance may run now."""
        return lease.signal.add_callback(
            lambda reason: self._engine.give_up(run_lease, reason.detected_by)
        )

    async def _lease_for(self, spec: JobSpec) -> _OwnedLease | None:
        key = spec.key
        # two ticks of one job on this instance must not race each other for its lease
        guard = self._guards.setdefault(key, asyncio.Lock())
        async with guard:
            owned = self._leases.get(key)
            now_ms = self._clock.now_ms()
            if owned is not None and owned.lease.held:
                owned.last_started_ms = now_ms
                return owned
            lease = await self._engine.acquire(
                spec.lease_key, spec.one_instance_ttl_ms or self._default_ttl_ms, 0, None
            )
            if lease is None:
                return None
            owned = _OwnedLease(lease, self._engine.lock(lease), now_ms)
            self._leases[key] = owned
            self._events.emit(
                LeaseAcquired(
                    key=lease.key, fencing_token=lease.fencing_token, owner=lease.owner, job=key
                )
            )
            return owned

    async def end(self, run: JobRun) -> None:
        """End ``run``: release its run lock (a failure is logged); the lease is kept.

        With ``min_hold``, a run that ended sooner keeps its run lock at the store for the
        rest of it (one last renewal, no waiting), so duplicates of its tick skip.
        """
        try:
            if run.unlink is not None:
                run.unlink()
            if run.run_lease is not None:
                keep_ms = (run.spec.min_hold_ms or 0) - (self._clock.now_ms() - run.started_ms)
                await self._engine.hand_back(run.run_lease, keep_ms)
        finally:
            self._active.discard(run)
            if not self._active:
                self._idle.set()

    async def drain(self, grace_ms: int) -> None:
        """Skip new ticks and wait up to ``grace_ms`` for runs in progress to finish.

        Runs still going after the grace lose their locks (``detected_by="shutdown"``).
        """
        self._closing = True
        if not self._active:
            return
        grace_over = asyncio.get_running_loop().create_future()
        timer = self._clock.call_at(self._clock.now_ms() + grace_ms, _resolver(grace_over))
        idle = asyncio.ensure_future(self._idle.wait())
        try:
            await asyncio.wait({idle, grace_over}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            idle.cancel()
        for run in list(self._active):
            _log.warning(
                "%s was still running %d ms into shutdown; its locks are given up",
                run.spec.key,
                grace_ms,
            )
            for lease in (run.run_lease, self._owned_lease(run.spec)):
                if lease is not None:
                    self._engine.give_up(lease, "shutdown")

    def _owned_lease(self, spec: JobSpec) -> Lease | None:
        owned = self._leases.get(spec.key)
        return None if owned is None else owned.lease

    async def hand_back_leases(self) -> None:
        """Hand every lease back now, so the next tick anywhere takes over.

        A lease whose job started less than a second ago is kept for the rest of that second
        (shortened at the store, not waited for): instances firing the same tick then skip it.
        """
        now_ms = self._clock.now_ms()
        await asyncio.gather(
            *(
                self._engine.hand_back(owned.lease, owned.last_started_ms + SAME_TICK_MS - now_ms)
                for owned in self._leases.values()
            )
        )
        self._leases.clear()

    def _skip(self, spec: JobSpec, reason: SkipReason) -> None:
        owned = self._leases.get(spec.key)
        self._events.emit(
            TickSkipped(
                min_hold_ms=spec.min_hold_ms if reason == "in-progress" else None,
                key=spec.lease_key if spec.one_instance else spec.key,
                fencing_token=None if owned is None else owned.lease.fencing_token,
                owner=None if owned is None else owned.lease.owner,
                job=spec.key,
                reason=reason,
            )
        )


def _resolver(future: asyncio.Future[None]) -> Callable[[], Awaitable[None]]:
    async def resolve() -> None:
        if not future.done():
            future.set_result(None)

    return resolve
