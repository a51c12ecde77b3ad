"""QueuedWait: one acquire call that waits in its key's line at the store, and is handed the key.

Where the store keeps waiting lines (:class:`~leaselock.stores.SupportsHandoff`), a wait is a
place in the key's line instead of retries: a release hands the key to the first place in the
same step, so the waiter holds it when the grant arrives, with no round trip of its own, and
waiters of every process are served first come, first served.

A wait that ends without the key is out of the line before its acquire returns or raises: its
leave answered, or else its place's time up at the store. A release that follows, in the same
program or anywhere, never hands the key to a waiter that gave up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Final, final

from .._clock import TimerHandle
from .._errors import LockLostError, LockStoreError
from ..stores._common._protocol import Acquired, Grant
from ._bounded import StoreCallBounds, StoreCallTimeoutError
from ._checked_store import CheckedLine
from ._signal import LockSignal
from ._waiter import Won, won

__all__ = ["PLACE_GRACE_MS", "PLACE_MS", "QueuedWait", "place_ms"]

_log = logging.getLogger("leaselock")

PLACE_MS: Final = 3000
"""How long a place in line lives without news from its waiter (it asks again every third).

A grant lives what is left of its place, so a waiter that died blocks the key no longer."""
PLACE_GRACE_MS: Final = 1000
"""How long past its wait's end a place may live: no queue call asks for more.

A grant lives what is left of its place: one heard at the wait's last moment still lives about
this long, and is renewed a third of the way in. A waiter whose leave fails waits about this
long past its wait (its last call's latency more) for its place's time to be up at the store."""
# the least a queue call is given, whatever is left of the wait (as an acquire attempt)
_CALL_FLOOR_MS: Final = 1000


def place_ms(ttl_ms: int) -> int:
    """Return how long a waiter's place lives: :data:`PLACE_MS`, or the ttl if shorter."""
    return min(ttl_ms, PLACE_MS)


@final
class QueuedWait:
    """One acquire call that waits in its key's line at the store.

    One owner id serves the whole wait: the place is that owner's. Queue calls go one at a
    time: the first is the attempt itself, then one every third of the place's life keeps the
    place (and hears a grant that was lost on the way); none asks for the place to live more
    than :data:`PLACE_GRACE_MS` past the wait's end. The key comes as a grant, or as a queue
    call's :class:`Acquired` answer.

    A wait that ends without the key (its time is up, its signal aborts, its caller is
    cancelled) departs before :meth:`wait` returns or raises. Once the call in flight is
    answered (so that no call lands after), it leaves the line, which also releases a grant
    that came too late; if the leave fails, it waits on the clock until the place's time is up
    at the store, releasing at once a grant heard meanwhile. Either way the departure ends by
    the place's end, and no release that follows hands the key to the wait. A win the caller
    did not take is released before it raises. A caller cancelled again meanwhile stops
    waiting for that; the departure goes on in the background.

    Args:
        key: the key to take.
        owner: the owner id of this wait.
        ttl_ms: the lease asked for.
        line: the store's line, checked.
        clock: calls, bounds and deadlines read it.
        give_up_at_ms: when the wait ends.
        spawn: runs a coroutine in a task its engine keeps.
        release: releases ``key`` for ``owner``, bounded, a failure only logged (a win or a
            grant nobody took).
    """

    __slots__ = (
        "_answered",
        "_bounds",
        "_clock",
        "_give_up_at_ms",
        "_in_flight",
        "_last_error",
        "_leave_failed",
        "_line",
        "_outcome",
        "_place_ends_by_ms",
        "_place_ms",
        "_release",
        "_sent",
        "_spawn",
        "_tickets",
        "_timer",
        "_ttl_ms",
        "key",
        "owner",
    )

    def __init__(
        self,
        key: str,
        owner: str,
        ttl_ms: int,
        *,
        line: CheckedLine,
        bounds: StoreCallBounds,
        give_up_at_ms: int,
        spawn: Callable[[Coroutine[None, None, None]], asyncio.Task[None]],
        release: Callable[[], Coroutine[None, None, None]],
    ) -> None:
        """Prepare to wait for ``key``; :meth:`wait` starts."""
        self.key = key
        self.owner = owner
        self._ttl_ms = ttl_ms
        self._place_ms = place_ms(ttl_ms)
        self._line = line
        self._bounds = bounds
        self._clock = bounds.clock
        self._give_up_at_ms = give_up_at_ms
        self._spawn = spawn
        self._release = release
        self._outcome: asyncio.Future[Won | None] = asyncio.get_running_loop().create_future()
        # ticket -> when its queue call was sent, and the place's time it asked for: a grant
        # lives from its ticket's send for that long
        self._sent: dict[int, tuple[int, int]] = {}
        self._tickets = 0
        self._in_flight = False
        # by when every place this wait's calls kept has ended at the store, on this clock
        self._place_ends_by_ms = 0
        # the departure's leave failed: a grant heard now is nobody's, and is released at once
        self._leave_failed = False
        # made by a leave that finds a queue call in flight, done when that call is answered
        self._answered: asyncio.Future[None] | None = None
        self._timer: TimerHandle | None = None
        self._last_error: LockStoreError | None = None

    async def wait(self, signal: LockSignal | None) -> Won | None:
        """Wait until the key is this wait's (its :class:`Won`), or the wait ends (``None``).

        A wait that ends without the key has departed from the line when this returns or
        raises (see the class).

        Raises:
            LockStoreError: the wait ended, and the last queue call had failed.
            LockLostError: ``signal`` aborted.
        """
        remove_callback = signal.add_callback(self._abort) if signal is not None else None
        # the wait ends on time, whatever call is in flight then
        ends = self._clock.call_at(self._give_up_at_ms, self._end_on_time)
        try:
            try:
                if signal is None:
                    # the first call in the caller's own task: a task less for every wait
                    await self._ask()
                else:
                    # a task of its own, so that the signal ends the wait while the call is out
                    self._spawn(self._ask())
                won = await self._outcome
            finally:
                ends.cancel()
                if remove_callback is not None:
                    remove_callback()
                if self._timer is not None:
                    self._timer.cancel()
        except BaseException:
            await self._end_unclaimed()
            raise
        if won is None:
            await self._settle(self._depart())
            if self._last_error is not None:
                raise self._last_error
        return won

    def give_up(self) -> None:
        """End the wait now with ``None`` (it leaves the line)."""
        if not self._outcome.done():
            self._outcome.set_result(None)

    def granted(self, grant: Grant) -> None:
        """Take ``grant`` if it is still good: its place's time, from its ticket, is not up.

        A grant the wait cannot use (it ended, the ticket is not its own, the place's time is
        up) is not taken: the wait's next queue call, or its leave, settles what the store
        holds. Once a leave has failed, nothing will: the grant is released at once.
        """
        if self._outcome.done():
            if self._leave_failed:
                self._spawn(self._release())
            return
        placed = self._sent.get(grant.ticket)
        if placed is None:
            return
        sent_at_ms, queue_ms = placed
        if self._clock.now_ms() >= sent_at_ms + queue_ms:
            _log.info('A grant of "%s" came after its place\'s time was up: not taken', self.key)
            return
        self._outcome.set_result(Won(grant.fencing_token, self.owner, sent_at_ms, queue_ms))

    def _abort(self, reason: LockLostError) -> None:
        if not self._outcome.done():
            self._outcome.set_exception(reason)

    async def _end_unclaimed(self) -> None:
        """Settle for a caller that leaves early: release a win it will not take, or depart."""
        if not self._outcome.done():
            self._outcome.cancel()
        elif (
            not self._outcome.cancelled()
            and self._outcome.exception() is None
            and self._outcome.result() is not None
        ):
            await self._settle(self._release())
            return
        await self._settle(self._depart())

    async def _settle(self, work: Coroutine[None, None, None]) -> None:
        """Run ``work`` in a task the engine keeps, and wait for it to end.

        A caller cancelled meanwhile stops waiting; ``work`` goes on in the background.
        """
        # asyncio.wait: a cancelled caller stops waiting, and never cancels the work
        await asyncio.wait([self._spawn(work)])

    async def _end_on_time(self) -> None:
        # a call in flight is the wait's last attempt: its answer (or failure) settles it
        if not self._in_flight:
            self.give_up()

    async def _ask(self) -> None:
        """Send one queue call (unless one is in flight), then arm the next."""
        if self._outcome.done() or self._in_flight:
            return
        self._tickets += 1
        ticket = self._tickets
        sent_at_ms = self._clock.now_ms()
        # never a place that outlives the wait by more than the grace: a waiter that cannot
        # leave (or died) is passed over soon after its wait's end, whatever its ttl
        queue_ms = min(self._place_ms, max(self._give_up_at_ms - sent_at_ms, 0) + PLACE_GRACE_MS)
        # a grant naming a ticket whose place's time is up is one granted() refuses anyway
        while self._sent and sum(next(iter(self._sent.values()))) <= sent_at_ms:
            del self._sent[next(iter(self._sent))]
        self._sent[ticket] = (sent_at_ms, queue_ms)
        self._in_flight = True
        try:
            answer = await self._queue(ticket, sent_at_ms, queue_ms)
        finally:
            self._in_flight = False
            # the call ran by now, if at all: the place it kept ends by queue_ms from now
            self._place_ends_by_ms = max(self._place_ends_by_ms, self._clock.now_ms() + queue_ms)
            if self._answered is not None and not self._answered.done():
                self._answered.set_result(None)
        if isinstance(answer, Acquired) and not self._outcome.done():
            self._outcome.set_result(won(answer, self.owner, sent_at_ms, self._ttl_ms))
        if self._clock.now_ms() >= self._give_up_at_ms:
            self.give_up()
        if not self._outcome.done():
            next_ms = max(sent_at_ms + self._place_ms // 3, self._clock.now_ms())
            self._timer = self._clock.call_at(next_ms, self._ask)

    async def _queue(self, ticket: int, sent_at_ms: int, queue_ms: int) -> Acquired | None:
        """Keep the place; return the key's :class:`Acquired` if this owner holds it in time."""
        # never past the place's time: min(place, max(left, floor)) <= min(place, left + grace)
        bound_ms = min(self._place_ms, max(self._give_up_at_ms - sent_at_ms, _CALL_FLOOR_MS))
        try:
            with self._bounds.until(sent_at_ms + bound_ms):
                answer = await self._line.queue(
                    self.key, self.owner, self._ttl_ms, queue_ms, ticket
                )
        except StoreCallTimeoutError:
            self._last_error = LockStoreError(
                f"the store did not answer acquire({self.key!r}) within {bound_ms} ms (a call "
                "keeping its place in line); check that the store's server is reachable and "
                "not overloaded"
            )
            return None
        except LockStoreError as error:
            self._last_error = error
            return None
        self._last_error = None
        if not isinstance(answer, Acquired):
            return None
        if self._clock.now_ms() >= sent_at_ms + self._ttl_ms - answer.lease_age_ms:
            # the lease it renewed may be over already: wait on; the leave releases it
            return None
        return answer

    async def _depart(self) -> None:
        """Leave the line once the call in flight is answered; end once the place is gone.

        The place is gone when the leave is answered, or when its time is up at the store: the
        leave is bounded by that, and a failed leave is followed by a wait until then.
        """
        if self._in_flight:
            self._answered = asyncio.get_running_loop().create_future()
            await self._answered
        if self._clock.now_ms() >= self._place_ends_by_ms:
            # no call went out, or the place's time is up already: nothing is left to leave
            return
        try:
            # past the place's end nothing of this wait lives at the store: the leave's bound
            with self._bounds.until(self._place_ends_by_ms):
                await self._line.leave(self.key, self.owner)
        except StoreCallTimeoutError:
            _log.info(
                'No answer to the leave of "%s" before its place ended: the store passes it over',
                self.key,
            )
        except LockStoreError as error:
            self._leave_failed = True
            _log.info(
                'Could not leave the line of "%s" (%s); the wait ends with its place, within '
                "%d ms, so that no release hands the key to it",
                self.key,
                error,
                self._place_ends_by_ms - self._clock.now_ms(),
            )
            await self._until(self._place_ends_by_ms)

    async def _until(self, when_ms: int) -> None:
        """Return once the clock reaches ``when_ms``."""
        reached = asyncio.get_running_loop().create_future()

        async def reach() -> None:
            if not reached.done():
                reached.set_result(None)

        timer = self._clock.call_at(when_ms, reach)
        try:
            await reached
        finally:
            timer.cancel()
