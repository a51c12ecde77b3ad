"""Campaign: one instance's part in one election: campaigning, leading, stepping down.

From start, every instance campaigns every ``ttl / 3``, and at once when the key is released
(a leader stepping down: here at once, elsewhere where the store tells); the leader's lease is
renewed by the engine like any lock. A term of leadership runs in a task of its own: the
acquired hook (or the duty function) gets the lease, and the lost hook runs when the lease is
lost or the instance steps down (shutdown, the acquired hook raised, or the duty returned).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import ExitStack
from typing import Any, final

from .._clock import Clock, TimerHandle
from .._engine import CURRENT_LOCK, Lease, Lock, LockEngine, release_logged, renew_interval_ms
from .._errors import LockLostError, LockStoreError
from .._event_types import LeadershipAcquired, LeadershipLost
from .._events import Publisher
from .._threads import run_sync_in_worker
from ._spec import ElectionSpec

__all__ = ["ACQUIRED_HOOK", "LOST_HOOK", "Campaign"]

ACQUIRED_HOOK = "on_leadership_acquired"
LOST_HOOK = "on_leadership_lost"

_log = logging.getLogger("leaselock.election")


@final
class Campaign:
    """One instance's part in one election: campaigning, leading, stepping down."""

    __slots__ = (
        "_again",
        "_between_terms",
        "_clock",
        "_engine",
        "_events",
        "_hearing",
        "_in_campaign",
        "_lock",
        "_participant",
        "_served",
        "_spawn",
        "_spec",
        "_stopped",
        "_term",
        "_timer",
        "_ttl_ms",
        "_yielding",
    )

    def __init__(
        self,
        spec: ElectionSpec,
        participant: object,
        engine: LockEngine,
        clock: Clock,
        events: Publisher,
        *,
        default_ttl_ms: int,
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
    ) -> None:
        """Prepare to campaign for ``spec`` with ``participant`` (an instance or the duty)."""
        self._spec = spec
        self._participant = participant
        self._engine = engine
        self._clock = clock
        self._events = events
        self._ttl_ms = spec.ttl_ms or default_ttl_ms
        self._spawn = spawn
        self._lock: Lock | None = None
        self._term: asyncio.Task[None] | None = None
        # the lock of the last term whose acquired hook was called
        self._served: Lock | None = None
        self._timer: TimerHandle | None = None
        self._stopped = False
        # set from the end of a term until its lost hook has run: no new term starts before
        self._between_terms = False
        # one campaign at a time; a release heard during one asks for another right after it
        self._in_campaign = False
        self._again = False
        self._hearing = ExitStack()
        # after stepping down, leave the key to the others until the next timed campaign
        self._yielding = False

    @property
    def leading(self) -> bool:
        """Whether this instance leads now."""
        return self._lock is not None and self._lock.held

    async def start(self) -> None:
        """Campaign once now, then every ``ttl / 3`` and at each release of the key."""
        self._hearing.enter_context(self._engine.hearing_releases(self._spec.key, self._released))
        await self._campaign()

    def _released(self) -> None:
        if self._campaigning() and self._lock is None and not self._yielding:
            self._spawn(self._campaign())

    async def _timed_campaign(self) -> None:
        self._yielding = False
        await self._campaign()

    async def _campaign(self) -> None:
        if self._stopped:
            return
        if self._in_campaign:
            self._again = True
            return
        self._in_campaign = True
        try:
            if not self._yielding:
                await self._try_to_lead()
        finally:
            self._in_campaign = False
        if self._campaigning():
            if self._timer is not None:
                self._timer.cancel()
            now_ms = self._clock.now_ms()
            # a release heard meanwhile may have freed the key the campaign found held; a look
            # again is no timed campaign, so a step-down meanwhile still leaves the key alone
            if self._again and not self._yielding:
                self._timer = self._clock.call_at(now_ms, self._campaign)
            else:
                interval_ms = renew_interval_ms(self._ttl_ms)
                self._timer = self._clock.call_at(now_ms + interval_ms, self._timed_campaign)
            self._again = False

    async def _try_to_lead(self) -> None:
        if self._lock is not None or self._between_terms:
            return
        try:
            lease = await self._engine.acquire(self._spec.key, self._ttl_ms, 0, None)
        except LockStoreError as error:
            _log.warning("Campaign for %r failed; next try soon: %s", self._spec.key, error)
            return
        if lease is not None:
            if self._campaigning():
                self._lead(lease)
            else:
                await release_logged(self._engine.lock(lease))

    def _campaigning(self) -> bool:
        # a method, not the attribute: stop() may run while a campaign awaits the store
        return not self._stopped

    def _lead(self, lease: Lease) -> None:
        lock = self._engine.lock(lease)
        self._lock = lock
        self._events.emit(
            LeadershipAcquired(key=lock.key, fencing_token=lock.fencing_token, owner=lock.owner)
        )
        lease.signal.add_callback(lambda reason: self._on_loss(lock, reason))
        self._term = self._spawn(self._serve(lock))

    async def _serve(self, lock: Lock) -> None:
        CURRENT_LOCK.set(lock)
        if not lock.held:
            # lost before the term began (a pause): its loss ends the term, with no hook called
            return
        self._served = lock
        try:
            if self._spec.runs_a_duty:
                await _call(self._spec.target, lock)
                _log.info("The duty of %r returned; stepping down", self._spec.key)
            else:
                await _call(getattr(self._participant, ACQUIRED_HOOK), lock)
                return
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 -- a failed term steps down; the error is logged in full
            _log.exception("Leadership of %r failed; stepping down", self._spec.key)
        if self._lock is lock:
            await self._step_down(lock, from_term=True)

    def _on_loss(self, lock: Lock, reason: LockLostError) -> None:
        if self._lock is not lock or reason.detected_by == "shutdown":
            return
        self._lock = None
        self._between_terms = True
        self._events.emit(
            LeadershipLost(
                key=lock.key, fencing_token=lock.fencing_token, owner=lock.owner, reason="lost"
            )
        )
        self._spawn(self._after_term(lock, self._term))

    async def _after_term(self, lock: Lock, term: asyncio.Task[None] | None) -> None:
        try:
            await _stop(term)
            await self._call_lost_hook(lock)
        finally:
            self._between_terms = False

    async def _step_down(self, lock: Lock, *, from_term: bool = False) -> None:
        self._lock = None
        self._between_terms = True
        self._yielding = True
        try:
            if not from_term:
                await _stop(self._term)
            # the lease is handed back only after the lost hook: no new leader while this one
            # is still disconnecting
            await self._call_lost_hook(lock)
            await release_logged(lock)
        finally:
            self._between_terms = False
        self._events.emit(
            LeadershipLost(
                key=lock.key, fencing_token=lock.fencing_token, owner=lock.owner, reason="released"
            )
        )

    async def _call_lost_hook(self, lock: Lock) -> None:
        if self._spec.runs_a_duty or self._served is not lock:
            # hooks come in pairs: no lost hook for a term whose acquired hook never ran
            return
        try:
            await _call(getattr(self._participant, LOST_HOOK), lock)
        except Exception:  # noqa: BLE001 -- the hook's failure must not stop the shutdown
            _log.exception("The %s hook of %r raised", LOST_HOOK, self._spec.key)

    async def stop(self) -> None:
        """Stop campaigning; step down if leading (the lost hook runs)."""
        self._stopped = True
        self._hearing.close()
        if self._timer is not None:
            self._timer.cancel()
        lock = self._lock
        if lock is not None:
            await self._step_down(lock)


async def _call(function: Callable[..., Any], lock: Lock) -> None:
    """Await an async hook; run a sync one in a worker thread so renewals go on."""
    if inspect.iscoroutinefunction(function):
        await function(lock)
        return
    result = await run_sync_in_worker(lambda: function(lock))
    if inspect.isawaitable(result):
        await _awaited(result)


async def _awaited(result: Awaitable[object]) -> None:
    await result


async def _stop(task: asyncio.Task[None] | None) -> None:
    if task is None or task.done() or task is asyncio.current_task():
        return
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
