"""Waiter: one acquire call that waits, retrying on the clock and waking at once on a release."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import final

from .._clock import Clock, TimerHandle
from .._errors import LockLostError, LockStoreError
from ..stores._common._protocol import Acquired
from ._signal import LockSignal
from ._wakeups import Hearing

__all__ = [
    "BACKOFF_CAP_MS",
    "BACKOFF_FIRST_MS",
    "NotWon",
    "Waiter",
    "Won",
    "backoff_ms",
    "won",
]

BACKOFF_FIRST_MS = 50
BACKOFF_CAP_MS = 1000
# the first attempt number whose pause is the capped one
BACKOFF_CAP_STEP = (BACKOFF_CAP_MS // BACKOFF_FIRST_MS).bit_length()
_jitter = random.Random()  # noqa: S311 -- jitter spreads retries; it guards no secret


@final
@dataclass(slots=True)  # not frozen: a frozen one's __init__ took 1 us of every acquire, 4x this
class Won:
    """An attempt that took the key: its token, its owner id, and when it was sent.

    ``lives_ms``: how long from ``sent_at_ms`` the store keeps the lock before its first
    renewal, where that is not the ttl (a grant lives what was left of its waiter's place).
    """

    fencing_token: int
    owner: str
    sent_at_ms: int
    lives_ms: int | None = None


def won(answer: Acquired, owner: str, sent_at_ms: int, ttl_ms: int) -> Won:
    """The attempt sent at ``sent_at_ms`` that the store answered ``answer`` to."""
    if answer.lease_age_ms:
        return Won(answer.fencing_token, owner, sent_at_ms, ttl_ms - answer.lease_age_ms)
    return Won(answer.fencing_token, owner, sent_at_ms)


@final
@dataclass(frozen=True, slots=True)
class NotWon:
    """An attempt that took nothing: the key was held (by ``holder``), or the store failed."""

    error: LockStoreError | None
    holder: str | None = None


def backoff_ms(attempt: int) -> int:
    """Return the pause before retry number ``attempt`` (0-based): 50 ms doubling to 1 s, jittered.

    The jitter keeps the second half of each step random, so waiters that started together
    spread out instead of hitting the store in lockstep.
    """
    step_ms = min(BACKOFF_FIRST_MS << min(attempt, 10), BACKOFF_CAP_MS)
    return step_ms // 2 + _jitter.randint(0, step_ms // 2)


@final
class Waiter:
    """One acquire call that waits: retries on the clock, and wakes at once on a release.

    Retries run as clock callbacks (so a test clock awaits each store call); the caller only
    awaits the outcome. A success that arrives after the caller left is handed back at once.

    Args:
        key: the key to take.
        attempt: tries once, as a fresh owner, within the attempt's bound.
        hand_back: releases what an attempt won, in the background, by its owner id.
        spawn: runs a coroutine in a task its engine keeps.
        clock: retries and the give-up time read it.
        give_up_at_ms: when the wait ends.
        last_error: the failure of the attempt made before waiting, if any.
        hear_releases: calls its ``wake`` at each release of the key that is its turn, while
            inside and still waiting (the engine's :meth:`~LockEngine.hearing_releases`).
    """

    __slots__ = (
        "_again",
        "_attempt_once",
        "_attempts",
        "_clock",
        "_give_up_at_ms",
        "_hand_back",
        "_hear_releases",
        "_hearing",
        "_in_flight",
        "_key",
        "_last_error",
        "_outcome",
        "_spawn",
        "_timer",
    )

    def __init__(
        self,
        key: str,
        *,
        attempt: Callable[[], Awaitable[Won | NotWon]],
        hand_back: Callable[[str], None],
        spawn: Callable[[Coroutine[None, None, None]], object],
        clock: Clock,
        give_up_at_ms: int,
        last_error: LockStoreError | None,
        hear_releases: Callable[
            [str, Callable[[], None], Callable[[], bool]], AbstractContextManager[Hearing]
        ],
    ) -> None:
        """Prepare to wait for ``key``; :meth:`wait` starts."""
        self._key = key
        self._attempt_once = attempt
        self._hand_back = hand_back
        self._spawn = spawn
        self._clock = clock
        self._give_up_at_ms = give_up_at_ms
        self._outcome: asyncio.Future[Won | None] = asyncio.get_running_loop().create_future()
        self._attempts = 0
        self._in_flight = False
        self._again = False
        self._timer: TimerHandle | None = None
        self._last_error = last_error
        self._hear_releases = hear_releases
        self._hearing: Hearing | None = None

    async def wait(self, signal: LockSignal | None) -> Won | None:
        """Wait until an attempt wins (its :class:`Won`), or the wait ends (``None``).

        Raises:
            LockStoreError: the last attempt failed.
            LockLostError: ``signal`` aborted.
        """
        remove_callback = signal.add_callback(self._abort) if signal is not None else None
        try:
            with self._hear_releases(self._key, self._wake, self._still_waiting) as hearing:
                self._hearing = hearing
                self._arm()
                won = await self._outcome
        except BaseException:
            self._hand_back_unclaimed()
            raise
        finally:
            if remove_callback is not None:
                remove_callback()
            if self._timer is not None:
                self._timer.cancel()
        if won is None and self._last_error is not None:
            raise self._last_error
        return won

    def _hand_back_unclaimed(self) -> None:
        """Settle the outcome for a caller that leaves early; hand back a win it will not take."""
        if not self._outcome.done():
            # an attempt still in flight sees this and hands back what it wins
            self._outcome.cancel()
        elif not self._outcome.cancelled() and self._outcome.exception() is None:
            won = self._outcome.result()
            if won is not None:
                self._hand_back(won.owner)

    def give_up(self) -> None:
        """End the wait now with ``None``; an attempt in flight hands back what it wins."""
        if self._timer is not None:
            self._timer.cancel()
        if not self._outcome.done():
            self._outcome.set_result(None)

    def _abort(self, reason: LockLostError) -> None:
        if not self._outcome.done():
            self._outcome.set_exception(reason)

    def _still_waiting(self) -> bool:
        return not self._outcome.done()

    def _wake(self) -> None:
        if self._outcome.done():
            return
        self._spawn(self._attempt())

    def _arm(self) -> None:
        # once the store tells of releases elsewhere, a retry only covers a release it could not
        # tell (an expiry, a lost message): the capped pause, instead of 63 waiters polling
        # every 50 ms at the start of each wait
        told = self._hearing is not None and self._hearing.from_store
        pause_ms = backoff_ms(BACKOFF_CAP_STEP if told else self._attempts)
        when_ms = min(self._clock.now_ms() + pause_ms, self._give_up_at_ms)
        self._attempts += 1
        self._timer = self._clock.call_at(when_ms, self._attempt)

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
                self._hand_back(won.owner)
            else:
                self._outcome.set_result(won)
        elif not self._outcome.done():
            if self._clock.now_ms() >= self._give_up_at_ms:
                self._outcome.set_result(None)
            else:
                if self._timer is not None:
                    self._timer.cancel()
                self._arm()

    async def _attempt_while_woken(self) -> Won | None:
        """Try once, and again at once for each wake-up that came meanwhile."""
        while True:
            self._again = False
            attempt = await self._attempt_once()
            if isinstance(attempt, Won):
                self._last_error = None
                return attempt
            self._last_error = attempt.error
            if not self._again or self._outcome.done():
                return None
