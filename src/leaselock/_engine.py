"""LockEngine: acquire with wait, release, and loss, for one Locks.

The engine never learns which store it talks to: it calls a :class:`CheckedStore`, reads time
from the injected clock, and leaves renewals to the :class:`RenewalScheduler`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from typing import Any, final

from ._checked_store import CheckedStore
from ._clock import Clock, TimerCallback, TimerHandle
from ._errors import DetectedBy, LockLostError, LockStoreError
from ._events import Events, LockLost
from ._lease import Lease, LeaseState
from ._lock import Lock, release_logged
from ._release_board import RELEASE_BOARD
from ._renewal import RenewalScheduler, renew_interval_ms
from ._signal import LockSignal
from .stores._protocol import Acquired, SupportsReleaseNotifications

__all__ = ["LockEngine", "backoff_ms", "new_owner"]

_log = logging.getLogger("leaselock")

BACKOFF_FIRST_MS = 50
# how long close() waits for the store; a store that does not answer leaves locks to expire
CLOSE_WAIT_MS = 5000
BACKOFF_CAP_MS = 1000
_jitter = random.Random()  # noqa: S311 -- jitter spreads retries; it guards no secret


def new_owner() -> str:
    """Return a fresh owner id: 128 random bits, as 32 hex digits."""
    return secrets.token_hex(16)


def backoff_ms(attempt: int) -> int:
    """Return the pause before retry number ``attempt`` (0-based): 50 ms doubling to 1 s, jittered.

    The jitter keeps the second half of each step random, so waiters that started together
    spread out instead of hitting the store in lockstep.
    """
    step_ms = min(BACKOFF_FIRST_MS << min(attempt, 10), BACKOFF_CAP_MS)
    return step_ms // 2 + _jitter.randint(0, step_ms // 2)


@final
class LockEngine:
    """Acquires, releases and loses the leases of one Locks."""

    __slots__ = (
        "_acquires_done",
        "_acquiring",
        "_background",
        "_clock",
        "_closed",
        "_events",
        "_exit_stack",
        "_held",
        "_renewal",
        "_waiters",
        "store",
    )

    def __init__(self, store: CheckedStore, clock: Clock, events: Events) -> None:
        """Create an engine over ``store`` with time from ``clock``."""
        self.store = store
        self._clock = clock
        self._events = events
        self._renewal = RenewalScheduler(store, clock, self.lose)
        self._held: set[Lease] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._waiters: set[_Waiter] = set()
        self._exit_stack = AsyncExitStack()
        self._closed = False
        self._acquiring = 0
        self._acquires_done = asyncio.Event()

    @property
    def held(self) -> frozenset[Lease]:
        """Return the leases held now."""
        return frozenset(self._held)

    async def start(self) -> None:
        """Listen for releases elsewhere, where the store can tell."""
        if isinstance(self.store.store, SupportsReleaseNotifications):
            await self._exit_stack.enter_async_context(
                self.store.store.watch_releases(self._released_elsewhere)
            )

    async def acquire(
        self, key: str, ttl_ms: int, wait_ms: int, signal: LockSignal | None
    ) -> Lease | None:
        """Take ``key`` for ``ttl_ms``, retrying for up to ``wait_ms``.

        Returns:
            The held lease, or ``None`` if the key stayed held for the whole wait.

        Raises:
            LockStoreError: the store failed on the last attempt.
            LockLostError: ``signal`` aborted while waiting (its reason).
        """
        if signal is not None:
            signal.raise_if_aborted()
        owner = new_owner()
        sent_at_ms = self._clock.now_ms()
        first_error: LockStoreError | None = None
        try:
            token = await self.acquire_once(key, owner, ttl_ms)
        except LockStoreError as error:
            if wait_ms == 0:
                raise
            first_error, token = error, None
        if token is not None:
            return self._adopt(key, owner, ttl_ms, token, sent_at_ms)
        if wait_ms == 0 or self._closed:
            return None
        waiter = _Waiter(
            self, key, owner, ttl_ms, give_up_at_ms=sent_at_ms + wait_ms, last_error=first_error
        )
        self._waiters.add(waiter)
        try:
            outcome = await waiter.wait(signal)
        finally:
            self._waiters.discard(waiter)
        if outcome is None:
            return None
        token, sent_at_ms = outcome
        return self._adopt(key, owner, ttl_ms, token, sent_at_ms)

    async def acquire_once(self, key: str, owner: str, ttl_ms: int) -> int | None:
        """Return a token if the store gave ``key`` to ``owner``, else ``None``."""
        self._acquiring += 1
        try:
            result = await self.store.acquire(key, owner, ttl_ms)
        except BaseException:
            # the store may have written before the failure or cancellation reached us
            self.release_in_background(key, owner)
            raise
        finally:
            self._acquiring -= 1
            if not self._acquiring:
                self._acquires_done.set()
        return result.fencing_token if isinstance(result, Acquired) else None

    def _adopt(
        self, key: str, owner: str, ttl_ms: int, token: int, sent_at_ms: int
    ) -> Lease | None:
        if self._closed:
            # won while closing: nobody renews it any more, so hand it back rather than hold it
            self.release_in_background(key, owner)
            return None
        lease = Lease(
            key=key,
            owner=owner,
            ttl_ms=ttl_ms,
            fencing_token=token,
            deadline_ms=sent_at_ms + ttl_ms,
            next_renew_ms=sent_at_ms + renew_interval_ms(ttl_ms),
            clock=self._clock,
        )
        self._held.add(lease)
        self._renewal.track(lease)
        return lease

    async def release(self, lease: Lease) -> bool:
        """Hand ``lease`` back to the store.

        Returns:
            ``True`` if the store released it; ``False`` if it was already released or lost, or
            the store no longer held it for this owner (it had expired).

        Raises:
            LockStoreError: the store failed; the lease is no longer renewed and expires.
        """
        if lease.state is not LeaseState.HELD:
            return False
        lease.state = LeaseState.RELEASED
        self._held.discard(lease)
        try:
            released = await self.store.release(lease.key, lease.owner)
        except asyncio.CancelledError:
            self.release_in_background(lease.key, lease.owner)
            raise
        RELEASE_BOARD.notify(self.store.store, lease.key)
        if not released:
            _log.warning(
                'Released "%s" (fencing token %d), but the store no longer held it for this '
                "owner: it had expired. Raise the ttl if the work outlives it",
                lease.key,
                lease.fencing_token,
            )
        return released

    def lose(self, lease: Lease, detected_by: DetectedBy) -> None:
        """Mark ``lease`` lost, abort its signal and report it; once per lease."""
        if lease.state is not LeaseState.HELD:
            return
        lease.state = LeaseState.LOST
        self._held.discard(lease)
        lease.signal._abort(detected_by)  # noqa: SLF001 -- the engine owns the signal
        self._events._emit(  # noqa: SLF001 -- the engine reports through its Locks' hub
            LockLost(
                key=lease.key,
                fencing_token=lease.fencing_token,
                owner=lease.owner,
                detected_by=detected_by,
            )
        )
        if detected_by != "renewal":
            # the store may still hold it for us (an unheard renewal, a shutdown): hand it back
            self.release_in_background(lease.key, lease.owner)

    def give_up(self, lease: Lease, detected_by: DetectedBy) -> None:
        """Lose ``lease`` on purpose and hand it back, whatever ``detected_by`` says."""
        was_held = lease.state is LeaseState.HELD
        self.lose(lease, detected_by)
        if was_held and detected_by == "renewal":
            self.release_in_background(lease.key, lease.owner)

    async def hand_back(self, lease: Lease, keep_ms: int) -> None:
        """Stop holding ``lease``; at the store it ends ``keep_ms`` from now (at once if <= 0).

        Keeping works by one last renewal with the remaining time, so nobody waits for it. A
        store failure is logged: the lease then expires after its ttl.
        """
        if lease.state is not LeaseState.HELD:
            return
        if keep_ms <= 0 or lease.renewing:
            # a full-ttl renewal in flight could land after a short one: release instead
            await release_logged(Lock(self, lease))
            return
        lease.state = LeaseState.RELEASED
        self._held.discard(lease)
        try:
            await self.store.renew(lease.key, lease.owner, keep_ms)
        except LockStoreError as error:
            _log.warning('Could not hand back "%s"; it expires on its own: %s', lease.key, error)

    def release_in_background(self, key: str, owner: str) -> None:
        """Release ``key`` for ``owner`` without waiting; failures are only logged."""
        self.spawn(self._release_quietly(key, owner))

    async def _release_quietly(self, key: str, owner: str) -> None:
        try:
            if await self.store.release(key, owner):
                RELEASE_BOARD.notify(self.store.store, key)
        except LockStoreError as error:
            _log.info('Could not hand back "%s"; it expires on its own: %s', key, error)

    async def close(self) -> None:
        """End waits (``None``), lose held leases (``"shutdown"``), stop renewing, finish work.

        Acquires still at the store are awaited first, so what they win is handed back, not
        held; waiting for the store is bounded by :data:`CLOSE_WAIT_MS` on the clock, after
        which what is left expires after its ttl.
        """
        self._closed = True
        for waiter in list(self._waiters):
            waiter.give_up()
        if self._acquiring:
            self._acquires_done.clear()
            await self._within_close_wait({asyncio.ensure_future(self._acquires_done.wait())})
        for lease in list(self._held):
            self.lose(lease, "shutdown")
        self._renewal.close()
        await self._within_close_wait({asyncio.ensure_future(self._exit_stack.aclose())})
        if self._background:
            await self._within_close_wait(set(self._background))

    async def _within_close_wait(self, work: set[asyncio.Future[Any]]) -> None:
        over = asyncio.get_running_loop().create_future()

        async def time_is_up() -> None:
            if not over.done():
                over.set_result(None)

        timer = self._clock.call_at(self._clock.now_ms() + CLOSE_WAIT_MS, time_is_up)
        try:
            pending = {future for future in work if not future.done()}
            while pending and not over.done():
                _, pending = await asyncio.wait(
                    pending | {over}, return_when=asyncio.FIRST_COMPLETED
                )
                pending.discard(over)
        finally:
            timer.cancel()
        if pending:
            _log.warning(
                "The lock store did not answer within %d ms at shutdown; what it holds for "
                "this process expires after its ttl",
                CLOSE_WAIT_MS,
            )
        for future in pending:
            future.cancel()

    def _released_elsewhere(self, key: str) -> None:
        RELEASE_BOARD.notify(self.store.store, key)

    def spawn(self, work: Coroutine[None, None, None]) -> None:
        """Run ``work`` in a task the engine keeps until it ends, and awaits at close."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def call_at(self, when_ms: int, callback: TimerCallback) -> TimerHandle:
        """Schedule ``callback`` on the engine's clock."""
        return self._clock.call_at(when_ms, callback)

    def now_ms(self) -> int:
        """Return the engine's clock time."""
        return self._clock.now_ms()


_Outcome = tuple[int, int] | None  # (fencing token, send time of the winning attempt) or given up


@final
class _Waiter:
    """One acquire call that waits: retries on the clock, and wakes at once on a release.

    Retries run as clock callbacks (so a test clock awaits each store call); the caller only
    awaits the outcome. A success that arrives after the caller left is handed back at once.
    """

    __slots__ = (
        "_again",
        "_attempts",
        "_engine",
        "_give_up_at_ms",
        "_in_flight",
        "_key",
        "_last_error",
        "_outcome",
        "_owner",
        "_timer",
        "_ttl_ms",
    )

    def __init__(
        self,
        engine: LockEngine,
        key: str,
        owner: str,
        ttl_ms: int,
        *,
        give_up_at_ms: int,
        last_error: LockStoreError | None,
    ) -> None:
        self._engine = engine
        self._key = key
        self._owner = owner
        self._ttl_ms = ttl_ms
        self._give_up_at_ms = give_up_at_ms
        self._outcome: asyncio.Future[_Outcome] = asyncio.get_running_loop().create_future()
        self._attempts = 0
        self._in_flight = False
        self._again = False
        self._timer: TimerHandle | None = None
        self._last_error = last_error

    async def wait(self, signal: LockSignal | None) -> _Outcome:
        store = self._engine.store.store
        RELEASE_BOARD.add(store, self._key, self, self._wake)
        remove_callback = signal.add_callback(self._abort) if signal is not None else None
        self._arm()
        try:
            outcome = await self._outcome
        except BaseException:
            self._hand_back_unclaimed()
            raise
        finally:
            RELEASE_BOARD.remove(store, self._key, self)
            if remove_callback is not None:
                remove_callback()
            if self._timer is not None:
                self._timer.cancel()
        if outcome is None and self._last_error is not None:
            raise self._last_error
        return outcome

    def _hand_back_unclaimed(self) -> None:
        """Settle the outcome for a caller that leaves early; hand back a win it will not take."""
        if not self._outcome.done():
            # an attempt still in flight sees this and hands back what it wins
            self._outcome.cancel()
        elif (
            not self._outcome.cancelled()
            and self._outcome.exception() is None
            and self._outcome.result() is not None
        ):
            self._engine.release_in_background(self._key, self._owner)

    def give_up(self) -> None:
        """End the wait now with ``None``; an attempt in flight hands back what it wins."""
        if self._timer is not None:
            self._timer.cancel()
        if not self._outcome.done():
            self._outcome.set_result(None)

    def _abort(self, reason: LockLostError) -> None:
        if not self._outcome.done():
            self._outcome.set_exception(reason)

    def _wake(self) -> None:
        if self._outcome.done():
            return
        self._engine.spawn(self._attempt())

    def _arm(self) -> None:
        when_ms = min(self._engine.now_ms() + backoff_ms(self._attempts), self._give_up_at_ms)
        self._attempts += 1
        self._timer = self._engine.call_at(when_ms, self._attempt)

    async def _attempt(self) -> None:
        if self._outcome.done():
            return
        if self._in_flight:
            # a release may have landed after the store read the key: look again afterwards
            self._again = True
            return
        self._in_flight = True
        try:
            won = await self._attempt_while_woken()
        finally:
            self._in_flight = False
        if won is not None:
            if self._outcome.done():
                self._engine.release_in_background(self._key, self._owner)
            else:
                self._outcome.set_result(won)
        elif not self._outcome.done():
            if self._engine.now_ms() >= self._give_up_at_ms:
                self._outcome.set_result(None)
            else:
                if self._timer is not None:
                    self._timer.cancel()
                self._arm()

    async def _attempt_while_woken(self) -> tuple[int, int] | None:
        """Try once, and again at once for each wake-up that came meanwhile."""
        while True:
            self._again = False
            sent_at_ms = self._engine.now_ms()
            try:
                token = await self._engine.acquire_once(self._key, self._owner, self._ttl_ms)
            except LockStoreError as error:
                self._last_error = error
                token = None
            else:
                self._last_error = None
            if token is not None:
                return token, sent_at_ms
            if not self._again or self._outcome.done():
                return None
