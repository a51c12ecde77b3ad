"""The store contract's cases for waiting lines: a release hands the key to the first in line.

Each case needs :class:`~leaselock.stores.SupportsHandoff`; a store without it skips them. One
drives the store through :class:`~leaselock.Locks`, as an application waits: its waits come and
go in the store's lines, so whatever the store's leave leaves behind, a release finds.
"""

from __future__ import annotations

import asyncio
import contextlib
import unittest
from collections.abc import AsyncIterator
from typing import Final, final

from .._locks import Locks
from ..stores._common._protocol import (
    Acquired,
    AcquireResult,
    Grant,
    NotAcquired,
    Queued,
    SupportsHandoff,
    WaitingLine,
)
from ._clock import ManualClock
from ._contract_check import (
    CONCURRENT,
    HANDOFF,
    LONG_TTL_MS,
    NOTIFICATION_TIMEOUT_S,
    Check,
    case_registry,
)
from ._line_watch import LineWatch

__all__ = ["HANDOFF_SPECS"]

HANDOFF_SPECS, _case = case_registry()
LINES: Final = 3
# how long each of the waiters that give up waits, on the clock of their Locks
GIVE_UP_AFTER: Final = "100ms"


@final
class _Line:
    """One ``wait_in_line`` of the store under test, and the grants it heard, in order."""

    def __init__(self, c: Check, line: WaitingLine, grants: asyncio.Queue[Grant]) -> None:
        self._c = c
        self.line = line
        self.grants = grants
        self._tickets = 0

    async def queue(self, key: str, owner: str, queue_ms: int = LONG_TTL_MS) -> Queued:
        """Wait in ``key``'s line (the key must be held); return the :class:`Queued` answer."""
        answer = await self.queue_answer(key, owner, queue_ms)
        if not isinstance(answer, Queued):
            raise self._c.fail(f"queue({key!r}) on a held key returned {answer!r}, not Queued")
        return answer

    async def queue_answer(
        self, key: str, owner: str, queue_ms: int = LONG_TTL_MS
    ) -> Acquired | Queued:
        self._tickets += 1
        return await self.line.queue(key, owner, LONG_TTL_MS, queue_ms, self._tickets)

    async def next_grant(self, expected: str) -> Grant:
        try:
            grant = await asyncio.wait_for(self.grants.get(), NOTIFICATION_TIMEOUT_S)
        except TimeoutError:
            raise self._c.fail(
                f"no grant to {expected!r} heard within {NOTIFICATION_TIMEOUT_S} s"
            ) from None
        self._c.expect(grant.owner == expected, f"the grant went to {grant.owner!r}: {grant}")
        self._c.token(Acquired(grant.fencing_token), "a grant")
        return grant

    def heard_nothing(self) -> None:
        strays = [self.grants.get_nowait() for _ in range(self.grants.qsize())]
        self._c.expect(not strays, f"unexpected grants: {strays}")


@contextlib.asynccontextmanager
async def _lines(c: Check, count: int = 1) -> AsyncIterator[list[_Line]]:
    assert isinstance(c.store, SupportsHandoff)  # noqa: S101 -- required capability
    async with contextlib.AsyncExitStack() as stack:
        lines: list[_Line] = []
        for _ in range(count):
            heard: asyncio.Queue[Grant] = asyncio.Queue()
            line = _line_of(
                c, await stack.enter_async_context(c.store.wait_in_line(heard.put_nowait))
            )
            lines.append(_Line(c, line, heard))
        yield lines


def _line_of(c: Check, line: WaitingLine | None) -> WaitingLine:
    if line is None:
        raise unittest.SkipTest(f"{c.name}: the store found no waiting lines to offer")
    return line


async def _free(c: Check, key: str) -> int:
    """Check that nobody holds ``key``: an outsider takes it (and keeps it); return the token."""
    return await c.take(key, c.owner())


async def _held_by(c: Check, key: str, owner: str) -> None:
    refused = await c.store.acquire(key, c.owner(), LONG_TTL_MS)
    c.refused(refused, f"an outsider's acquire while {owner!r} should hold it")
    assert isinstance(refused, NotAcquired)  # noqa: S101 -- checked just above
    c.expect(
        refused.holder in {None, owner}, f"the key is held by {refused.holder!r}, not {owner!r}"
    )


@_case("a release hands the key to the first in line, with a greater token", HANDOFF)
async def release_hands_the_key_to_the_first_in_line(c: Check) -> None:
    key, holder, first, second = c.key(), c.owner(), c.owner(), c.owner()
    async with _lines(c) as (line,):
        token = await c.take(key, holder)
        await line.queue(key, first)
        await line.queue(key, second)
        c.answer(await c.store.release(key, holder), expected=True, doing="the holder's release")
        grant = await line.next_grant(first)
        c.expect(grant.key == key, f"the grant names key {grant.key!r}")
        c.expect(grant.fencing_token > token, f"token {grant.fencing_token} after {token}")
        c.expect(grant.ticket == 1, f"the grant carries ticket {grant.ticket}, not the place's 1")
        await _held_by(c, key, first)
        c.answer(
            await c.store.renew(key, first, LONG_TTL_MS), expected=True, doing="the grantee's renew"
        )
        c.answer(await c.store.release(key, first), expected=True, doing="the grantee's release")
        then = await line.next_grant(second)
        c.expect(then.fencing_token > grant.fencing_token, "the second grant's token went back")
        c.answer(await c.store.release(key, second), expected=True, doing="the last release")
        line.heard_nothing()
        await _free(c, key)


@_case("grants follow the order in which waiters came, across lines", HANDOFF)
async def grants_follow_the_order_of_arrival(c: Check) -> None:
    key, holder = c.key(), c.owner()
    waiters = [c.owner() for _ in range(6)]
    async with _lines(c, LINES) as lines:
        await c.take(key, holder)
        for number, waiter in enumerate(waiters):
            await lines[number % LINES].queue(key, waiter)
        current = holder
        for number, waiter in enumerate(waiters):
            c.answer(await c.store.release(key, current), expected=True, doing="a release")
            await lines[number % LINES].next_grant(waiter)
            current = waiter
        c.answer(await c.store.release(key, current), expected=True, doing="the last release")
        for line in lines:
            line.heard_nothing()


@_case("a queue call takes a free key at once when nobody waits", HANDOFF)
async def queue_takes_a_free_key_at_once(c: Check) -> None:
    key, waiter = c.key(), c.owner()
    async with _lines(c) as (line,):
        token = c.token(await line.queue_answer(key, waiter), "queue() on a free key")
        await _held_by(c, key, waiter)
        c.answer(await c.store.release(key, waiter), expected=True, doing="its release")
        line.heard_nothing()
        c.expect(await _free(c, key) > token, "the next token went back")


@_case("a queue call answers a grant its line did not hear, and renews it", HANDOFF)
async def queue_answers_a_grant_it_did_not_hear(c: Check) -> None:
    assert isinstance(c.store, SupportsHandoff)  # noqa: S101 -- required capability
    key, holder, waiter = c.key(), c.owner(), c.owner()
    # a line that drops every grant: a lost message
    async with c.store.wait_in_line(lambda _grant: None) as offered:
        deaf = _line_of(c, offered)
        token = await c.take(key, holder)
        c.expect(
            isinstance(await deaf.queue(key, waiter, LONG_TTL_MS, LONG_TTL_MS, 1), Queued),
            "queue() on a held key did not answer Queued",
        )
        c.answer(await c.store.release(key, holder), expected=True, doing="the holder's release")
        granted = c.token(
            await deaf.queue(key, waiter, LONG_TTL_MS, LONG_TTL_MS, 2), "queue() after a grant"
        )
        c.expect(granted > token, f"the grant's token {granted} is not above {token}")
        again = c.token(
            await deaf.queue(key, waiter, LONG_TTL_MS, LONG_TTL_MS, 3), "queue() once more"
        )
        c.expect(again == granted, f"asking again gave token {again}, not the grant's {granted}")
        c.answer(await c.store.release(key, waiter), expected=True, doing="the grantee's release")


@_case("leaving the line after a grant releases the key to the next in line", HANDOFF)
async def leaving_after_a_grant_hands_the_key_on(c: Check) -> None:
    key, holder, first, second = c.key(), c.owner(), c.owner(), c.owner()
    async with _lines(c) as (line,):
        await c.take(key, holder)
        await line.queue(key, first)
        await line.queue(key, second)
        c.answer(await c.store.release(key, holder), expected=True, doing="the holder's release")
        grant = await line.next_grant(first)
        c.answer(await line.line.leave(key, first), expected=True, doing="the grantee's leave")
        then = await line.next_grant(second)
        c.expect(then.fencing_token > grant.fencing_token, "the next grant's token went back")
        c.answer(await line.line.leave(key, second), expected=True, doing="the last leave")
        await _free(c, key)


@_case("leaving the line before a grant leaves nothing behind", HANDOFF)
async def leaving_before_a_grant_leaves_nothing_behind(c: Check) -> None:
    key, holder, waiter = c.key(), c.owner(), c.owner()
    async with _lines(c) as (line,):
        await c.take(key, holder)
        await line.queue(key, waiter)
        c.answer(await line.line.leave(key, waiter), expected=False, doing="a waiter's leave")
        c.answer(await c.store.release(key, holder), expected=True, doing="the holder's release")
        await _free(c, key)
        line.heard_nothing()


@_case("a grant lives only for what was left of the place's time", HANDOFF)
async def a_grant_lives_for_what_is_left_of_its_place(c: Check) -> None:
    key, holder, waiter = c.key(), c.owner(), c.owner()
    async with _lines(c) as (line,):
        await c.take(key, holder)
        queued_at = c.mark()
        await line.queue(key, waiter, queue_ms=c.ttl_ms)
        await c.advance(c.ttl_ms // 2, since=queued_at)
        c.answer(await c.store.release(key, holder), expected=True, doing="the holder's release")
        await line.next_grant(waiter)
        await _held_by(c, key, waiter)
        await c.advance(c.ttl_ms * 2 // 3)
        # the waiter died after its place was given: the key is free once the place's time is up
        await _free(c, key)


@_case("a place whose time is up is passed over", HANDOFF)
async def a_place_whose_time_is_up_is_passed_over(c: Check) -> None:
    key, holder, gone, alive = c.key(), c.owner(), c.owner(), c.owner()
    async with _lines(c, 2) as (dead_line, live_line):
        await c.take(key, holder)
        queued_at = c.mark()
        await dead_line.queue(key, gone, queue_ms=c.ttl_ms)
        await live_line.queue(key, alive)
        await c.advance(c.ttl_ms * 7 // 6, since=queued_at)
        c.answer(await c.store.release(key, holder), expected=True, doing="the holder's release")
        await live_line.next_grant(alive)
        dead_line.heard_nothing()


@_case("a key freed by expiry goes to the first in line at the next queue call", HANDOFF)
async def a_key_freed_by_expiry_goes_to_the_first_in_line(c: Check) -> None:
    key, holder, first, second = c.key(), c.owner(), c.owner(), c.owner()
    async with _lines(c, 2) as (first_line, second_line):
        taken_at = c.mark()
        token = await c.take(key, holder, ttl_ms=c.ttl_ms)
        await first_line.queue(key, first)
        await second_line.queue(key, second)
        await c.advance(c.ttl_ms * 7 // 6, since=taken_at)
        # the second asks while the key is free: the first in line gets it, the second waits on
        await second_line.queue(key, second)
        grant = await first_line.next_grant(first)
        c.expect(grant.fencing_token > token, "the grant's token went back")
        await _held_by(c, key, first)
        # and the first, asking for itself, hears that it holds the key
        again = c.token(await first_line.queue_answer(key, first), "the grantee's queue()")
        c.expect(again == grant.fencing_token, "the grantee's queue() named another lock")
        c.answer(await c.store.release(key, first), expected=True, doing="the grantee's release")
        await second_line.next_grant(second)


@_case(
    "waiters queued concurrently are each handed the key once, one at a time",
    HANDOFF,
    CONCURRENT,
)
async def concurrent_waiters_are_handed_the_key_one_at_a_time(c: Check) -> None:
    key, holder = c.key(), c.owner()
    waiters = [c.owner() for _ in range(c.callers)]
    async with _lines(c, LINES) as lines:
        last_token = await c.take(key, holder)
        await asyncio.gather(
            *(lines[n % LINES].queue(key, waiter) for n, waiter in enumerate(waiters))
        )
        granted: list[str] = []
        current = holder
        for _ in waiters:
            c.answer(await c.store.release(key, current), expected=True, doing="a release")
            grant = await _any_grant(c, lines)
            c.expect(grant.owner in waiters, f"a grant to {grant.owner!r}, who never queued")
            c.expect(grant.owner not in granted, f"{grant.owner!r} was granted the key twice")
            c.expect(grant.fencing_token > last_token, "a grant's token went back")
            await _held_by(c, key, grant.owner)
            granted.append(grant.owner)
            current, last_token = grant.owner, grant.fencing_token
        c.answer(await c.store.release(key, current), expected=True, doing="the last release")
        await _free(c, key)


async def _any_grant(c: Check, lines: list[_Line]) -> Grant:
    gets = [asyncio.ensure_future(line.grants.get()) for line in lines]
    try:
        done, _ = await asyncio.wait(
            gets, timeout=NOTIFICATION_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for get in gets:
            get.cancel()
    if not done:
        raise c.fail(f"no grant heard within {NOTIFICATION_TIMEOUT_S} s of a release")
    heard = [get.result() for get in gets if get.done() and not get.cancelled()]
    c.expect(len(heard) == 1, f"one release was heard as {len(heard)} grants: {heard}")
    return heard[0]


@_case("queue calls racing a release leave exactly one holder", HANDOFF, CONCURRENT)
async def queue_racing_release_leaves_one_holder(c: Check) -> None:
    async with _lines(c, LINES) as lines:
        for round_number in range(4):
            key, holder = c.key(str(round_number)), c.owner()
            waiters = [c.owner() for _ in range(c.callers)]
            await c.take(key, holder)
            await asyncio.gather(
                c.store.release(key, holder),
                *(lines[n % LINES].queue_answer(key, w) for n, w in enumerate(waiters)),
            )
            renewed = await asyncio.gather(
                *(c.store.renew(key, waiter, LONG_TTL_MS) for waiter in waiters)
            )
            c.expect(
                renewed.count(True) == 1,
                f"round {round_number}: {renewed.count(True)} waiters hold the key at once",
            )
            # each leave of the holder hands the key on to one still in line, until none is
            await asyncio.gather(
                *(lines[n % LINES].line.leave(key, w) for n, w in enumerate(waiters))
            )
            await _free(c, key)


@_case(
    "a waiter that gave up has left the line when its acquire returns: a release right after "
    "hands the key to nobody",
    HANDOFF,
    CONCURRENT,
)
async def waiters_that_gave_up_are_out_of_line_when_acquire_returns(c: Check) -> None:
    key, holder = c.key(), c.owner()
    await c.take(key, holder)
    # the waits' time is the case's: they give up together, when it says
    clock = ManualClock()
    watch = LineWatch(c.store, places=c.callers)
    left = c.callers
    taken: list[AcquireResult] = []

    async def give_up(locks: Locks) -> None:
        nonlocal left
        gave_up = await locks.acquire(key, wait=GIVE_UP_AFTER)
        c.expect(gave_up is None, f"a wait for a held key returned {gave_up!r}")
        left -= 1
        if left == 0:
            # the last to return releases at once, as a sequential program does: every waiter
            # has returned, so none may be handed the key, nor spend a token
            c.answer(await c.store.release(key, holder), expected=True, doing="the release")
            taken.append(await c.store.acquire(key, c.owner(), LONG_TTL_MS))

    async with contextlib.AsyncExitStack() as stack:
        fleet = [
            await stack.enter_async_context(Locks(store=watch, clock=clock)) for _ in range(LINES)
        ]
        waits = [asyncio.create_task(give_up(fleet[n % LINES])) for n in range(c.callers)]
        try:
            await asyncio.wait_for(watch.queued.wait(), NOTIFICATION_TIMEOUT_S)
        except TimeoutError:
            raise c.fail(
                f"not every waiter had its place within {NOTIFICATION_TIMEOUT_S} s"
            ) from None
        await clock.advance(GIVE_UP_AFTER)
        # every leave waited until all had given up: however slow a leave, it is out before
        # its acquire returns, or the release finds its place
        watch.leaves_go.set()
        await asyncio.wait_for(asyncio.gather(*waits), NOTIFICATION_TIMEOUT_S)
    # the Locks are closed: every call they made was answered
    c.expect(
        isinstance(taken[0], Acquired),
        f"a fresh owner's acquire right after the release returned {taken[0]!r}: the release "
        "handed the key to a waiter that gave up",
    )
    c.expect(
        not watch.grants, f"the release granted the key to waiters that gave up: {watch.grants}"
    )
    c.expect(not watch.freed, f"waiters that gave up freed the key granted them: {watch.freed}")
