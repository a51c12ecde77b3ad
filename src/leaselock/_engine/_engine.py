"""LockEngine: acquire with wait, release, and loss, for one Locks.

The engine never learns which store it talks to: it calls a :class:`CheckedStore`, reads time
from the injected clock, and leaves renewals to the :class:`RenewalScheduler`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import random
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AsyncExitStack, contextmanager
from typing import Any, final

from .._clock import Clock
from .._errors import DetectedBy, LockStoreError
from .._event_types import (
    LockAcquired,
    LockHandedBack,
    LockLost,
    LockReleased,
    RenewalFailing,
)
from .._events import Publisher
from .._telemetry import Telemetry
from ..stores._common._protocol import (
    Acquired,
    FollowingNothing,
    Grant,
    ReleaseFollower,
    SupportsHandoff,
    SupportsReleaseNotifications,
    SupportsReleasesInTurn,
)
from ._bounded import StoreCallBounds, StoreCallTimeoutError
from ._checked_store import AcquireCall, CheckedLine, CheckedStore
from ._lease import HELD, LOST, RELEASED, Lease
from ._lock import Lock
from ._operator_store import OperatorStore
from ._queued_wait import QueuedWait
from ._renewal import RenewalScheduler, renew_interval_ms
from ._signal import LockSignal
from ._waiter import NotWon, Waiter, Won, won
from ._wakeups import WAKEUPS, Hearing

__all__ = [
    "ATTEMPT_FLOOR_MS",
    "CLOSE_WAIT_MS",
    "RELEASE_BOUND_MS",
    "LockEngine",
    "new_owner",
]

_log = logging.getLogger("leaselock")

# how long close() waits for the store; a store that does not answer leaves locks to expire
CLOSE_WAIT_MS = 5000
# the least an acquire attempt is given, whatever is left of the wait (unless the ttl is shorter)
ATTEMPT_FLOOR_MS = 1000
# how long a release or a hand-back may take; after it the lease is left to expire
RELEASE_BOUND_MS = 2000


# owner ids need to be unique, not secret (every reader of the store sees them): a generator
# seeded by the OS draws one in a third of the time of a getrandom() system call. Its own, not
# the random module's, which an application may seed alike in every process; reseeded in a
# forked child, which would otherwise draw its parent's ids again
_OWNER_BITS = random.Random()  # noqa: S311 -- uniqueness, not secrecy (see above)
os.register_at_fork(after_in_child=_OWNER_BITS.seed)


def new_owner(instance: str) -> str:
    """Return a fresh owner id: 128 random bits as 32 hex digits, ``@``, the instance's label.

    The bits come from a generator seeded by the operating system at import, and again in
    every forked child. Stores keep the owner id as it is, so whoever reads a lock
    (``leaselock locks``, a skip line) can name the instance that holds it.
    """
    return f"{_OWNER_BITS.getrandbits(128):032x}@{instance}"


@final
class LockEngine:
    """Acquires, releases and loses the leases of one Locks."""

    __slots__ = (
        "_acquires_done",
        "_acquiring",
        "_background",
        "_bounds",
        "_clock",
        "_closed",
        "_events",
        "_exit_stack",
        "_follower",
        "_held",
        "_instance",
        "_line",
        "_queued",
        "_renewal",
        "_waiters",
        "operator",
        "store",
        "telemetry",
    )

    def __init__(
        self,
        store: CheckedStore,
        clock: Clock,
        events: Publisher,
        *,
        instance: str,
        telemetry: Telemetry | None = None,
        on_renewed: Callable[[], object] | None = None,
    ) -> None:
        """Create an engine over ``store`` with time from ``clock``, reporting to ``events``.

        ``instance`` labels every owner id this engine makes (``hostname:pid`` by default);
        ``telemetry``, where given, records its metrics; ``on_renewed``, where given, is called
        once per renewal call the store confirmed (not an event: one a lease would cost every
        renewal of every lease).
        """
        self.store = store
        self.telemetry = telemetry
        self._clock = clock
        self._bounds = StoreCallBounds(clock)
        self.operator = OperatorStore(store.inner, self._bounds)
        self._events = events
        self._instance = instance
        self._renewal = RenewalScheduler(
            store,
            self._bounds,
            self.lose,
            self._renewal_failing,
            on_renewed=on_renewed,
            telemetry=telemetry,
        )
        # dicts as ordered sets: close() goes through them in the order they came, so a seeded
        # simulation replays the same shutdown (a set's order is its members' memory addresses)
        self._held: dict[Lease, None] = {}
        self._background: dict[asyncio.Task[None], None] = {}
        self._waiters: dict[Waiter | QueuedWait, None] = {}
        # the waits in the store's lines, by owner id: where each grant goes
        self._queued: dict[str, QueuedWait] = {}
        self._line: CheckedLine | None = None
        self._exit_stack = AsyncExitStack()
        self._follower: ReleaseFollower | None = None
        self._closed = False
        self._acquiring = 0
        self._acquires_done = asyncio.Event()

    @property
    def instance(self) -> str:
        """The instance label every owner id of this engine ends with."""
        return self._instance

    @property
    def held(self) -> frozenset[Lease]:
        """Return the leases held now."""
        return frozenset(self._held)

    async def start(self) -> None:
        """Get ready to wait in the store's lines, and to hear of releases elsewhere.

        Where the store keeps waiting lines, waits stand in them and releases hand the key
        over (:class:`QueuedWait`). Releases are heard where the store can tell (elections
        campaign on them, and waits where there are no lines): a store that wakes followers
        in turn is followed that way, so a release elsewhere wakes one waiting process, which
        wakes its longest waiter (:class:`Wakeups`).
        """
        if isinstance(self.store.inner, SupportsHandoff):
            line = await self._exit_stack.enter_async_context(
                self.store.inner.wait_in_line(self._granted)
            )
            if line is not None:
                self._line = CheckedLine(line, self.store.inner)
        if isinstance(self.store.inner, SupportsReleasesInTurn):
            self._follower = await self._exit_stack.enter_async_context(
                self.store.inner.follow_releases_in_turn(self._released_elsewhere)
            )
        elif isinstance(self.store.inner, SupportsReleaseNotifications):
            self._follower = await self._exit_stack.enter_async_context(
                self.store.inner.follow_releases(self._released_elsewhere)
            )

    async def acquire(
        self, key: str, ttl_ms: int, wait_ms: int, signal: LockSignal | None
    ) -> Lease | None:
        """Take ``key`` for ``ttl_ms``, retrying for up to ``wait_ms``.

        Every attempt has an owner id of its own, so the cleanup of an attempt that failed (its
        answer lost, or too late) can never free what a later attempt won. An attempt whose
        answer comes after its own deadline counts as not acquired, and is handed back.

        Returns:
            The held lease, or ``None`` if the key stayed held for the whole wait.

        Raises:
            LockStoreError: the store failed, or did not answer in time, on the last attempt.
            LockLostError: ``signal`` aborted while waiting (its reason).
        """
        if signal is not None:
            signal.raise_if_aborted()
        called_at_ms = self._clock.now_ms()
        give_up_at_ms = called_at_ms + wait_ms
        # the common case in this one coroutine: each frame between the caller and the store
        # is resumed again at every answer the store awaits
        lease: Lease | None
        if wait_ms > 0 and self._line is not None and not self._closed:
            lease = await self._wait_in_line(key, ttl_ms, give_up_at_ms, signal, self._line)
        else:
            first = await self.attempt(key, ttl_ms, give_up_at_ms)
            if isinstance(first, Won):
                lease = self._adopt(key, ttl_ms, first)
            elif wait_ms == 0 or self._closed:
                if first.error is not None and wait_ms == 0:
                    raise first.error
                lease = None
            else:
                lease = await self._wait(key, ttl_ms, give_up_at_ms, signal, first.error)
        if self.telemetry is not None:
            waited_s = (self._clock.now_ms() - called_at_ms) / 1000
            self.telemetry.acquire_answered(waited_s, acquired=lease is not None)
        return lease

    async def _wait(
        self,
        key: str,
        ttl_ms: int,
        give_up_at_ms: int,
        signal: LockSignal | None,
        last_error: LockStoreError | None,
    ) -> Lease | None:
        waiter = Waiter(
            key,
            attempt=functools.partial(self.attempt, key, ttl_ms, give_up_at_ms),
            hand_back=functools.partial(self.release_in_background, key),
            spawn=self.spawn,
            clock=self._clock,
            give_up_at_ms=give_up_at_ms,
            last_error=last_error,
            hear_releases=self.hearing_releases,
        )
        self._waiters[waiter] = None
        try:
            won = await waiter.wait(signal)
        finally:
            self._waiters.pop(waiter, None)
        return None if won is None else self._adopt(key, ttl_ms, won)

    async def _wait_in_line(
        self,
        key: str,
        ttl_ms: int,
        give_up_at_ms: int,
        signal: LockSignal | None,
        line: CheckedLine,
    ) -> Lease | None:
        owner = new_owner(self._instance)
        wait = QueuedWait(
            key,
            owner,
            ttl_ms,
            line=line,
            bounds=self._bounds,
            give_up_at_ms=give_up_at_ms,
            spawn=self.spawn,
            release=functools.partial(self._release_quietly, key, owner),
        )
        self._waiters[wait] = None
        self._queued[owner] = wait
        try:
            won = await wait.wait(signal)
        finally:
            self._waiters.pop(wait, None)
            del self._queued[owner]
        return None if won is None else self._adopt(key, ttl_ms, won)

    def _granted(self, grant: Grant) -> None:
        checked = None if self._line is None else self._line.checked_grant(grant)
        if checked is None:
            return
        wait = self._queued.get(checked.owner)
        if wait is not None and wait.key == checked.key:
            wait.granted(checked)

    async def try_once(
        self, key: str, ttl_ms: int, *, acquire: AcquireCall | None = None
    ) -> Lease | NotWon:
        """Try once to take ``key``: the held lease, or who holds it (``NotWon.holder``).

        ``acquire`` replaces the store's ``acquire`` for this attempt (a job's run start, which
        acquires and writes more in the same round trip); its answer is checked and bounded
        the same way.

        Raises:
            LockStoreError: the store failed, or did not answer in time.
        """
        attempt = await self.attempt(key, ttl_ms, self._clock.now_ms(), acquire=acquire)
        if isinstance(attempt, NotWon):
            if attempt.error is not None:
                raise attempt.error
            return attempt
        lease = self._adopt(key, ttl_ms, attempt)
        return NotWon(None) if lease is None else lease

    async def attempt(
        self,
        key: str,
        ttl_ms: int,
        give_up_at_ms: int,
        *,
        acquire: AcquireCall | None = None,
    ) -> Won | NotWon:
        """Try once to take ``key``, as a fresh owner, within the attempt's bound.

        The bound is what is left of the ttl (an answer after it would be a lease already over)
        and of the wait, but never less than :data:`ATTEMPT_FLOOR_MS` (a last try gets a fair
        chance) unless the ttl is shorter.
        """
        owner = new_owner(self._instance)
        sent_at_ms = self._clock.now_ms()
        bound_ms = min(ttl_ms, max(give_up_at_ms - sent_at_ms, ATTEMPT_FLOOR_MS))
        self._acquiring += 1
        try:
            with self._bounds.until(sent_at_ms + bound_ms):
                if acquire is None:
                    result = await self.store.acquire(key, owner, ttl_ms)
                else:
                    result = await self.store.checked_acquire(
                        "start_run", acquire(key, owner, ttl_ms)
                    )
        except StoreCallTimeoutError:
            # the store may have written before we stopped listening: hand that owner back
            self.release_in_background(key, owner)
            return NotWon(
                LockStoreError(
                    f"{self.store.inner!r} did not answer acquire({key!r}) within {bound_ms} ms; "
                    "check that the store's server is reachable and not overloaded"
                )
            )
        except LockStoreError as error:
            self.release_in_background(key, owner)
            return NotWon(error)
        except BaseException:
            self.release_in_background(key, owner)
            raise
        finally:
            self._acquiring -= 1
            if not self._acquiring and self._closed:
                # only close() waits for it, and it sets _closed before it looks
                self._acquires_done.set()
        if not isinstance(result, Acquired):
            return NotWon(None, result.holder)
        attempt = won(result, owner, sent_at_ms, ttl_ms)
        answered_at_ms = self._clock.now_ms()
        lives_ms = ttl_ms if attempt.lives_ms is None else attempt.lives_ms
        if answered_at_ms >= sent_at_ms + lives_ms:
            # the store may already have expired it and given the key to someone else
            _log.info(
                'The store answered acquire("%s") %d ms after it was sent, past the %d ms '
                "the lock lives: not acquired, handed back",
                key,
                answered_at_ms - sent_at_ms,
                lives_ms,
            )
            self.release_in_background(key, owner)
            return NotWon(None)
        return attempt

    def _adopt(self, key: str, ttl_ms: int, won: Won) -> Lease | None:
        if self._closed:
            # won while closing: nobody renews it any more, so hand it back rather than hold it
            self.release_in_background(key, won.owner)
            return None
        lives_ms = ttl_ms if won.lives_ms is None else won.lives_ms
        lease = Lease(
            key=key,
            owner=won.owner,
            ttl_ms=ttl_ms,
            fencing_token=won.fencing_token,
            deadline_ms=won.sent_at_ms + lives_ms,
            next_renew_ms=won.sent_at_ms + renew_interval_ms(lives_ms),
            clock=self._clock,
        )
        self._held[lease] = None
        if self.telemetry is not None:
            self.telemetry.held_changed(1)
        if self._events.heard(LockAcquired.level):
            self._events.emit(
                LockAcquired(
                    key=key, fencing_token=won.fencing_token, owner=won.owner, ttl_ms=ttl_ms
                )
            )
        self._renewal.track(lease)
        return lease

    async def release(self, lease: Lease) -> bool:
        """Hand ``lease`` back to the store.

        A lease whose deadline has passed is lost, not released, even if its timer has not run
        yet (the holder was paused): its signal aborts with ``"deadline"`` first.

        Returns:
            ``True`` if the store released it; ``False`` if it was already released or lost, or
            the store no longer held it for this owner (it had expired).

        Raises:
            LockStoreError: the store failed or did not answer within
                :data:`RELEASE_BOUND_MS`; the lease is no longer renewed and expires.
        """
        now_ms = self._clock.now_ms()
        if lease.state is HELD and now_ms >= lease.deadline_ms:
            self.lose(lease, "deadline")
        if lease.state is not HELD:
            return False
        lease.state = RELEASED
        self._stop_holding(lease)
        if self._events.heard(LockReleased.level):
            self._events.emit(
                LockReleased(key=lease.key, fencing_token=lease.fencing_token, owner=lease.owner)
            )
        # bounded here, not through _release_bounded: one frame less to resume at the answer
        try:
            with self._bounds.until(now_ms + RELEASE_BOUND_MS):
                released = await self.store.release(lease.key, lease.owner)
        except StoreCallTimeoutError:
            raise self._release_unanswered(lease.key) from None
        except asyncio.CancelledError:
            self.release_in_background(lease.key, lease.owner)
            raise
        if released:
            WAKEUPS.notify(self.store.inner, lease.key)
        if not released:
            _log.warning(
                'Released "%s" (fencing token %d), but the store no longer held it for this '
                "owner: it had expired. Raise the ttl if the work outlives it",
                lease.key,
                lease.fencing_token,
            )
        return released

    async def _release_bounded(self, key: str, owner: str, bound_at_ms: int) -> bool:
        """Release at the store by ``bound_at_ms``; wake waiters here on success.

        Raises:
            LockStoreError: the store failed, or did not answer in time.
        """
        try:
            with self._bounds.until(bound_at_ms):
                released = await self.store.release(key, owner)
        except StoreCallTimeoutError:
            raise self._release_unanswered(key) from None
        if released:
            WAKEUPS.notify(self.store.inner, key)
        return released

    def _release_unanswered(self, key: str) -> LockStoreError:
        return LockStoreError(
            f"{self.store.inner!r} did not answer release({key!r}) within "
            f"{RELEASE_BOUND_MS} ms; the lock expires on its own after its ttl"
        )

    def lose(self, lease: Lease, detected_by: DetectedBy) -> None:
        """Mark ``lease`` lost, abort its signal and report it; once per lease."""
        if lease.state is not HELD:
            return
        lease.state = LOST
        self._stop_holding(lease)
        lease.abort(detected_by)
        if detected_by == "shutdown":
            # giving locks up at a graceful shutdown is the plan, not a loss to alert on
            self._events.emit(
                LockHandedBack(
                    key=lease.key,
                    fencing_token=lease.fencing_token,
                    owner=lease.owner,
                    reason="shutdown",
                )
            )
        else:
            if self.telemetry is not None:
                self.telemetry.lost(detected_by)
            self._events.emit(
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

    def _stop_holding(self, lease: Lease) -> None:
        self._renewal.forget(lease)
        if lease in self._held:
            del self._held[lease]
            if self.telemetry is not None:
                self.telemetry.held_changed(-1)

    def _renewal_failing(self, lease: Lease, error: LockStoreError, ms_left: int) -> None:
        self._events.emit(
            RenewalFailing(
                key=lease.key,
                fencing_token=lease.fencing_token,
                owner=lease.owner,
                error=str(error),
                ms_left=ms_left,
            )
        )

    def give_up(self, lease: Lease, detected_by: DetectedBy) -> None:
        """Lose ``lease`` on purpose and hand it back, whatever ``detected_by`` says."""
        was_held = lease.state is HELD
        self.lose(lease, detected_by)
        if was_held and detected_by == "renewal":
            self.release_in_background(lease.key, lease.owner)

    async def hand_back(self, lease: Lease, keep_ms: int) -> None:
        """Stop holding ``lease``; at the store it ends ``keep_ms`` from now (at once if <= 0).

        Keeping works by one last renewal with the remaining time, so nobody waits for it. A
        store failure is logged: the lease then expires after its ttl.
        """
        if lease.deadline_passed():
            self.lose(lease, "deadline")
        if lease.state is not HELD:
            return
        if keep_ms <= 0 or lease.renewing:
            # a full-ttl renewal in flight could land after a short one: release instead
            try:
                await self.release(lease)
            except LockStoreError as error:
                _log.warning(
                    'Could not hand back "%s"; it expires on its own: %s', lease.key, error
                )
            return
        lease.state = RELEASED
        self._stop_holding(lease)
        self._events.emit(
            LockReleased(
                key=lease.key,
                fencing_token=lease.fencing_token,
                owner=lease.owner,
                kept_ms=keep_ms,
            )
        )
        try:
            with self._bounds.until(self._clock.now_ms() + RELEASE_BOUND_MS):
                await self.store.renew(lease.key, lease.owner, keep_ms)
        except (LockStoreError, StoreCallTimeoutError) as error:
            _log.warning(
                'Could not hand back "%s"; it expires on its own: %s',
                lease.key,
                error or f"no answer within {RELEASE_BOUND_MS} ms",
            )

    def release_in_background(self, key: str, owner: str) -> None:
        """Release ``key`` for ``owner`` without waiting; failures are only logged."""
        self.spawn(self._release_quietly(key, owner))

    async def _release_quietly(self, key: str, owner: str) -> None:
        try:
            await self._release_bounded(key, owner, self._clock.now_ms() + RELEASE_BOUND_MS)
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
            await self._within_close_wait([asyncio.ensure_future(self._acquires_done.wait())])
        for lease in list(self._held):
            self.lose(lease, "shutdown")
        self._renewal.close()
        await self._within_close_wait([asyncio.ensure_future(self._exit_stack.aclose())])
        if self._background:
            await self._within_close_wait(list(self._background))
        self._bounds.close()

    async def _within_close_wait(self, work: list[asyncio.Future[Any]]) -> None:
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
        # in the order given, not the set's: cancelling wakes each in turn
        for future in work:
            if future in pending:
                future.cancel()

    @contextmanager
    def hearing_releases(
        self, key: str, wake: Callable[[], None], still_waiting: Callable[[], bool] = lambda: True
    ) -> Iterator[Hearing]:
        """Call ``wake()`` on this loop at each release of ``key`` that is its turn, while inside.

        A release wakes one of this process's hearers of ``key``: the one inside the longest
        for which ``still_waiting()`` is true (see :class:`Wakeups`).

        A release through this process's locks on the store wakes at once; one by another
        process does where the store tells (:class:`SupportsReleaseNotifications`). Entering
        returns at once and the store subscribes in the background; once its following is in
        place, ``wake()`` is called once more (if ``still_waiting()``), since a release by
        another process between entering and then went unheard. A store that tells nothing
        wakes nobody: callers keep a retry of their own. The :class:`Hearing` yielded says
        when the store's following is in place.
        """
        token = object()
        WAKEUPS.add(self.store.inner, key, token, wake, still_waiting)
        left = asyncio.get_running_loop().create_future()
        hearing = Hearing()
        if self._follower is not None:

            def look_again() -> None:
                if not left.done() and still_waiting():
                    wake()

            self.spawn(_follow_until(self._follower, key, left, hearing, look_again))
        try:
            yield hearing
        finally:
            WAKEUPS.remove(self.store.inner, key, token)
            left.set_result(None)

    def _released_elsewhere(self, key: str) -> None:
        WAKEUPS.notify(self.store.inner, key)

    def spawn(self, work: Coroutine[None, None, None]) -> asyncio.Task[None]:
        """Run ``work`` in a task the engine keeps until it ends, and awaits at close."""
        task = asyncio.get_running_loop().create_task(work)
        self._background[task] = None
        task.add_done_callback(self._forget_background)
        return task

    def _forget_background(self, task: asyncio.Task[None]) -> None:
        self._background.pop(task, None)

    def lock(self, lease: Lease) -> Lock:
        """Return the public handle of ``lease``, which releases through this engine."""
        return Lock(lease, self.release)


async def _follow_until(
    follower: ReleaseFollower,
    key: str,
    left: asyncio.Future[None],
    hearing: Hearing,
    look_again: Callable[[], None],
) -> None:
    """Follow ``key``'s releases until ``left`` is done; once in place, say so and look again."""
    async with follower.following(key):
        # a store (or a wrapper of one) without notifications follows with FollowingNothing
        hearing.from_store = not isinstance(follower, FollowingNothing)
        if hearing.from_store:
            # a release by another process before the following was in place went unheard:
            # look once now, or a campaign that found the key held sleeps through its release
            look_again()
        await left
