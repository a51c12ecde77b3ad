"""The store contract suite: named cases any test runner can run against any store.

Run it without a test framework::

    import asyncio
    from leaselock.stores import InMemoryLockStore
    from leaselock.testing import ManualClock, lock_store_contract

    clock = ManualClock()
    for case in lock_store_contract(lambda: InMemoryLockStore(clock=clock),
                                    concurrent=True, advance_time=clock.advance):
        asyncio.run(case.run())   # raises AssertionError naming the broken rule

This module imports no test framework. A case whose capability is missing raises
:class:`unittest.SkipTest` with the reason, which pytest and unittest both report as a skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import unicodedata
import unittest
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Final

from .._clock import utc_now
from .._durations import Duration, parse_ttl
from .._errors import LocksConfigurationError
from .._keys import MAX_KEY_LENGTH
from ..stores._common._capabilities import (
    LockInfo,
    RunOutcome,
    RunRecord,
    SupportsInspection,
    SupportsRunRecords,
    epoch_ms,
)
from ..stores._common._job_control import (
    JobPause,
    JobState,
    OpenRun,
    RunStart,
    SupportsJobControl,
    TickRun,
    WhenBusy,
)
from ..stores._common._protocol import (
    MAX_FENCING_TOKEN,
    Acquired,
    LockStore,
    NotAcquired,
    ReleaseFollower,
    Renewal,
    SupportsBatchRenew,
    SupportsLifecycle,
    SupportsReleaseNotifications,
    SupportsReleasesInTurn,
)
from ..stores._common._store_clock import SupportsStoreClock
from ._contract_check import (
    BATCH_RENEW,
    CAPABILITIES,
    CONCURRENT,
    DEFAULT_CALLERS,
    DEFAULT_TTL,
    INSPECTION,
    JOB_CONTROL,
    LONG_TTL_MS,
    MIN_TTL_MS,
    NOTIFICATION_TIMEOUT_S,
    RELEASE_NOTIFICATIONS,
    RELEASES_IN_TURN,
    RUN_RECORDS,
    STORE_CLOCK,
    AdvanceTime,
    Check,
    ContractCase,
    MakeStore,
    Spec,
    case_registry,
)
from ._contract_handoff import HANDOFF_SPECS

__all__ = ["ContractCase", "MakeStore", "lock_store_contract"]

THIRTY_DAYS_MS: Final = 30 * 24 * 60 * 60 * 1000
_DAY_MS: Final = 24 * 60 * 60 * 1000
# what a server's clock may step back between two readings (a time daemon's slew), no more
_CLOCK_STEP_MS: Final = 1000
ROUNDS: Final = 10
MANY_KEYS: Final = 8
# run records keep milliseconds: the suite's times have no finer part
_RUN_STARTED: Final = datetime(2026, 12, 1, 12, 3, 10, 250_000, tzinfo=UTC)

_SPECS, _case = case_registry()


# --- one owner, no time --------------------------------------------------------------------


@_case("a free key is taken once, even when its holder asks again")
async def free_key_taken_once(c: Check) -> None:
    key, holder = c.key(), c.owner()
    await c.take(key, holder)
    c.refused(await c.store.acquire(key, c.owner(), LONG_TTL_MS), "a second owner's acquire")
    c.refused(await c.store.acquire(key, holder, LONG_TTL_MS), "the holder's second acquire")


@_case("a refused acquire names the live lock's owner, when it names one")
async def refused_acquire_names_holder(c: Check) -> None:
    key, holder = c.key(), c.owner()
    await c.take(key, holder)
    refused = await c.store.acquire(key, c.owner(), LONG_TTL_MS)
    c.refused(refused, "a second owner's acquire")
    assert isinstance(refused, NotAcquired)  # noqa: S101 -- checked just above
    c.expect(
        refused.holder in {None, holder},
        f"NotAcquired(holder={refused.holder!r}), but {holder!r} holds the key",
    )


@_case("release frees the key for its owner only, and the next token is greater")
async def release_frees_for_owner_only(c: Check) -> None:
    key, holder = c.key(), c.owner()
    first = await c.take(key, holder)
    c.answer(await c.store.release(key, c.owner()), expected=False, doing="another owner's release")
    await c.held_by_someone(key, "acquire after another owner's refused release")
    c.answer(await c.store.release(key, holder), expected=True, doing="the holder's release")
    second = await c.take(key, c.owner())
    c.expect(second > first, f"token after release {second} is not greater than {first}")


@_case("a released lock cannot be released again")
async def release_twice_refused(c: Check) -> None:
    key, holder = c.key(), c.owner()
    await c.take(key, holder)
    c.answer(await c.store.release(key, holder), expected=True, doing="the first release")
    c.answer(await c.store.release(key, holder), expected=False, doing="the second release")


@_case("renew of a missing lock is refused and does not create it")
async def renew_missing_refused(c: Check) -> None:
    key, ghost = c.key(), c.owner()
    c.answer(await c.store.renew(key, ghost, LONG_TTL_MS), expected=False, doing="renew")
    await c.take(key, c.owner())


@_case("release of a missing lock is refused and does not create it")
async def release_missing_refused(c: Check) -> None:
    key = c.key()
    c.answer(await c.store.release(key, c.owner()), expected=False, doing="release")
    await c.take(key, c.owner())


@_case("renew succeeds for the owner only")
async def renew_extends_for_owner_only(c: Check) -> None:
    key, holder = c.key(), c.owner()
    await c.take(key, holder)
    c.answer(await c.store.renew(key, c.owner(), LONG_TTL_MS), expected=False, doing="other renew")
    c.answer(await c.store.renew(key, holder, LONG_TTL_MS), expected=True, doing="holder's renew")
    await c.held_by_someone(key, "acquire after renewals")
    c.answer(await c.store.release(key, holder), expected=True, doing="the holder's release")


@_case("renew after release is refused and does not revive the lock")
async def renew_after_release_refused(c: Check) -> None:
    key, holder = c.key(), c.owner()
    await c.take(key, holder)
    c.answer(await c.store.release(key, holder), expected=True, doing="release")
    c.answer(await c.store.renew(key, holder, LONG_TTL_MS), expected=False, doing="renew after it")
    await c.take(key, c.owner())


@_case("tokens of a key grow with every acquisition")
async def tokens_grow_across_releases(c: Check) -> None:
    key = c.key()
    tokens: list[int] = []
    for _ in range(5):
        owner = c.owner()
        tokens.append(await c.take(key, owner))
        await c.store.acquire(c.key("elsewhere"), c.owner(), LONG_TTL_MS)
        c.answer(await c.store.release(key, owner), expected=True, doing="release")
    c.expect(tokens == sorted(set(tokens)), f"tokens {tokens} do not strictly grow")


def _distinct_keys(base: str) -> list[str]:
    e_acute_nfc = unicodedata.normalize("NFC", "caf\u00e9")
    e_acute_nfd = unicodedata.normalize("NFD", "caf\u00e9")
    long_a = base + "a" * (MAX_KEY_LENGTH - len(base))
    long_b = long_a[:-1] + "b"
    return [
        base + "Key",
        base + "key",
        base + "KEY",
        base + "key ",
        base + " key",
        base + "key\t",
        base + e_acute_nfc,
        base + e_acute_nfd,
        base + "\u00df",
        base + "ss",
        base + "*",
        base + "?",
        base + "[a]",
        base + "{k}",
        base + "%",
        base + "_",
        base + "'; drop table x; --",
        base + "\u732b\U0001f408",
        long_a,
        long_b,
    ]


@_case("keys are kept apart exactly: case, whitespace, NFC vs NFD, patterns, 500 characters")
async def keys_kept_apart(c: Check) -> None:
    keys = _distinct_keys(c.key())
    c.expect(len(set(keys)) == len(keys), "the suite's own keys collide")
    owners = {key: c.owner() for key in keys}
    for key in keys:
        await c.take(key, owners[key])
    for key in keys:
        await c.held_by_someone(key, f"acquire of {key!r} while held")
    for key, other in zip(keys, keys[1:] + keys[:1], strict=True):
        c.answer(
            await c.store.release(key, owners[other]),
            expected=False,
            doing=f"release of {key!r} by the owner of {other!r}",
        )
    for key in keys:
        c.answer(
            await c.store.release(key, owners[key]),
            expected=True,
            doing=f"release of {key!r} by its owner",
        )


@_case("a ttl of 30 days (past 2**31 ms) is held and renewed")
async def thirty_day_ttl(c: Check) -> None:
    key, holder = c.key(), c.owner()
    await c.take(key, holder, THIRTY_DAYS_MS)
    await c.held_by_someone(key, "acquire of a 30-day lock")
    c.answer(await c.store.renew(key, holder, THIRTY_DAYS_MS), expected=True, doing="renew")
    await c.held_by_someone(key, "acquire after the 30-day renewal")
    c.answer(await c.store.release(key, holder), expected=True, doing="release")


# --- time ----------------------------------------------------------------------------------


@_case("expiry is measured in milliseconds from the call: held at ttl/2, free at ttl*7/6")
async def expiry_in_milliseconds(c: Check) -> None:
    key = c.key()
    taken_at = c.mark()
    await c.take(key, c.owner(), c.ttl_ms)
    await c.advance(c.ttl_ms // 2, since=taken_at)
    await c.held_by_someone(key, f"acquire {c.ttl_ms // 2} ms into a {c.ttl_ms} ms lock")
    await c.advance(c.ttl_ms // 2 + c.ttl_ms // 6)
    await c.take(key, c.owner())


@_case("renew of an expired lock is refused and does not revive it")
async def renew_refused_after_expiry(c: Check) -> None:
    key, holder = c.key(), c.owner()
    await c.take(key, holder, c.ttl_ms)
    await c.advance(c.ttl_ms + c.ttl_ms // 6)
    c.answer(await c.store.renew(key, holder, LONG_TTL_MS), expected=False, doing="late renew")
    await c.take(key, c.owner())


@_case("release of an expired lock is refused")
async def release_refused_after_expiry(c: Check) -> None:
    key, holder = c.key(), c.owner()
    await c.take(key, holder, c.ttl_ms)
    await c.advance(c.ttl_ms + c.ttl_ms // 6)
    c.answer(await c.store.release(key, holder), expected=False, doing="late release")
    await c.take(key, c.owner())


@_case("renew moves the expiry to ttl from the renewal")
async def renew_moves_expiry(c: Check) -> None:
    key, holder = c.key(), c.owner()
    taken_at = c.mark()
    await c.take(key, holder, c.ttl_ms)
    await c.advance(c.ttl_ms * 2 // 3, since=taken_at)
    renewed_at = c.mark()
    c.answer(await c.store.renew(key, holder, c.ttl_ms), expected=True, doing="renew")
    await c.advance(c.ttl_ms * 2 // 3, since=renewed_at)
    await c.held_by_someone(key, "acquire after the first expiry but before the renewed one")
    await c.advance(c.ttl_ms // 2)
    await c.take(key, c.owner())


@_case(
    "a takeover after expiry gets a greater token; the old owner can neither renew nor release",
)
async def takeover_after_expiry(c: Check) -> None:
    key, first_owner, second_owner = c.key(), c.owner(), c.owner()
    first = await c.take(key, first_owner, c.ttl_ms)
    await c.advance(c.ttl_ms + c.ttl_ms // 6)
    second = await c.take(key, second_owner)
    c.expect(second > first, f"takeover token {second} is not greater than {first}")
    c.answer(await c.store.renew(key, first_owner, LONG_TTL_MS), expected=False, doing="old renew")
    c.answer(await c.store.release(key, first_owner), expected=False, doing="old release")
    c.answer(await c.store.release(key, second_owner), expected=True, doing="new release")


@_case(
    "an expired lock does not exist: its own owner takes it again, with a greater token",
)
async def expired_lock_taken_by_same_owner(c: Check) -> None:
    key, holder = c.key(), c.owner()
    first = await c.take(key, holder, c.ttl_ms)
    await c.advance(c.ttl_ms + c.ttl_ms // 6)
    second = await c.take(key, holder)
    c.expect(second > first, f"token {second} is not greater than {first}")


@_case("tokens grow however the key was freed: release, expiry, takeover")
async def tokens_grow_however_freed(c: Check) -> None:
    key = c.key()
    owner = c.owner()
    tokens = [await c.take(key, owner)]
    await c.store.release(key, owner)
    tokens.append(await c.take(key, c.owner(), c.ttl_ms))
    await c.advance(c.ttl_ms + c.ttl_ms // 6)
    owner = c.owner()
    tokens.append(await c.take(key, owner, c.ttl_ms))
    await c.store.release(key, owner)
    tokens.append(await c.take(key, c.owner(), c.ttl_ms))
    await c.advance(c.ttl_ms + c.ttl_ms // 6)
    tokens.append(await c.take(key, c.owner()))
    c.expect(tokens == sorted(set(tokens)), f"tokens {tokens} do not strictly grow")


# --- concurrency ---------------------------------------------------------------------------


@_case("of concurrent acquires of a free key exactly one wins", CONCURRENT)
async def one_winner_for_free_key(c: Check) -> None:
    for round_number in range(ROUNDS):
        winners = await c.race(c.key(str(round_number)))
        c.expect(len(winners) == 1, f"{len(winners)} of {c.callers} callers won a free key")


@_case("of concurrent acquires of an expired key exactly one wins", CONCURRENT)
async def one_winner_for_expired_key(c: Check) -> None:
    keys = [c.key(str(n)) for n in range(ROUNDS)]
    for key in keys:
        await c.take(key, c.owner(), c.ttl_ms)
    await c.advance(c.ttl_ms + c.ttl_ms // 6)
    for key in keys:
        winners = await c.race(key)
        c.expect(len(winners) == 1, f"{len(winners)} of {c.callers} callers won an expired key")


@_case("a renewal of an expired lock racing acquires does not revive it", CONCURRENT)
async def expired_renew_racing_acquires(c: Check) -> None:
    keys = [c.key(str(n)) for n in range(ROUNDS)]
    holders = {key: c.owner() for key in keys}
    for key in keys:
        await c.take(key, holders[key], c.ttl_ms)
    await c.advance(c.ttl_ms + c.ttl_ms // 6)
    for key in keys:
        renewed, winners = await asyncio.gather(
            c.store.renew(key, holders[key], LONG_TTL_MS), c.race(key)
        )
        c.answer(renewed, expected=False, doing="the expired holder's renew")
        c.expect(len(winners) == 1, f"{len(winners)} callers won while the old holder renewed")


@_case("with many keys contended at once, each has exactly one winner", CONCURRENT)
async def one_winner_per_key(c: Check) -> None:
    keys = [c.key(str(n)) for n in range(MANY_KEYS)]
    per_key = await asyncio.gather(*(c.race(key) for key in keys))
    counts = [len(winners) for winners in per_key]
    c.expect(counts == [1] * MANY_KEYS, f"winners per key: {counts}")


@_case(
    "an acquire racing a release wins at most once, and after it with a greater token", CONCURRENT
)
async def acquire_racing_release(c: Check) -> None:
    for round_number in range(ROUNDS):
        key, holder = c.key(str(round_number)), c.owner()
        first = await c.take(key, holder)
        released, winners = await asyncio.gather(c.store.release(key, holder), c.race(key))
        c.answer(released, expected=True, doing="the holder's release")
        c.expect(len(winners) <= 1, f"{len(winners)} callers won one released key")
        if not winners:
            winners = [await c.take(key, c.owner())]
        c.expect(winners[0] > first, f"token {winners[0]} is not greater than {first}")


@_case("rounds of races hand out strictly growing tokens", CONCURRENT)
async def rounds_grow_tokens(c: Check) -> None:
    key = c.key()
    tokens: list[int] = []
    for _ in range(ROUNDS):
        owners = [c.owner() for _ in range(c.callers)]
        results = await asyncio.gather(*(c.store.acquire(key, o, LONG_TTL_MS) for o in owners))
        won = [(o, r) for o, r in zip(owners, results, strict=True) if isinstance(r, Acquired)]
        c.expect(len(won) == 1, f"{len(won)} callers won one round")
        winner, result = won[0]
        tokens.append(c.token(result, "the round's winning acquire"))
        c.answer(await c.store.release(key, winner), expected=True, doing="the winner's release")
    c.expect(tokens == sorted(set(tokens)), f"tokens {tokens} do not strictly grow")


# --- optional capabilities -----------------------------------------------------------------


@_case("renew_many answers each renewal as renew would, in order", BATCH_RENEW)
async def renew_many_matches_renew(c: Check) -> None:
    assert isinstance(c.store, SupportsBatchRenew)  # noqa: S101 -- required capability
    held, missing, foreign = c.key("held"), c.key("missing"), c.key("foreign")
    me = c.owner()
    await c.take(held, me)
    await c.take(foreign, c.owner())
    answers = list(
        await c.store.renew_many(
            [
                Renewal(held, me, LONG_TTL_MS),
                Renewal(missing, me, LONG_TTL_MS),
                Renewal(foreign, me, LONG_TTL_MS),
            ]
        )
    )
    c.expect(answers == [True, False, False], f"renew_many answered {answers}")


@_case(
    "a release reaches the followers of its key, and only them, named by its key",
    RELEASE_NOTIFICATIONS,
)
async def releases_reach_their_followers_only(c: Check) -> None:
    assert isinstance(c.store, SupportsReleaseNotifications)  # noqa: S101 -- required capability
    followed, other = c.key("followed"), c.key("other")
    heard_here: asyncio.Queue[str] = asyncio.Queue()
    heard_there: asyncio.Queue[str] = asyncio.Queue()
    async with (
        c.store.follow_releases(heard_here.put_nowait) as here,
        c.store.follow_releases(heard_there.put_nowait) as there,
        here.following(followed),
        there.following(other),
    ):
        for key in (followed, other):
            holder = c.owner()
            await c.take(key, holder)
            c.answer(await c.store.release(key, holder), expected=True, doing=f"release {key!r}")
        # one server, releases announced in order: a stray first one would come before this
        c.expect(
            await _next_heard(c, heard_there, other) == other,
            f"a follower of {other!r} heard the release of {followed!r}",
        )
        c.expect(await _next_heard(c, heard_here, followed) == followed, "wrong key announced")
        strays = [heard_here.get_nowait() for _ in range(heard_here.qsize())]
        c.expect(not strays, f"a follower of {followed!r} also heard {strays}")


@_case("concurrent followers of many keys each hear their own key's release", RELEASE_NOTIFICATIONS)
async def concurrent_followers_hear_their_keys(c: Check) -> None:
    assert isinstance(c.store, SupportsReleaseNotifications)  # noqa: S101 -- required capability
    keys = [c.key(str(n)) for n in range(c.callers)]
    holders = {key: c.owner() for key in keys}
    heard: dict[str, asyncio.Event] = {key: asyncio.Event() for key in keys}
    followed = asyncio.Barrier(len(keys) + 1)

    def on_release(key: str) -> None:
        if key in heard:
            heard[key].set()

    async def follow(follower: ReleaseFollower, key: str) -> None:
        # two followers per key: the second shares the first's subscription
        async with follower.following(key), follower.following(key):
            await followed.wait()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(heard[key].wait(), NOTIFICATION_TIMEOUT_S)

    async with c.store.follow_releases(on_release) as follower, asyncio.TaskGroup() as tasks:
        for key in keys:
            await c.take(key, holders[key])
            tasks.create_task(follow(follower, key))
        await followed.wait()
        released = await asyncio.gather(*(c.store.release(key, holders[key]) for key in keys))
        c.expect(all(released), f"releases answered {released}")
    unheard = [key for key in keys if not heard[key].is_set()]
    c.expect(not unheard, f"{len(unheard)} of {len(keys)} followed releases went unheard")


@_case(
    "a release wakes the follower in turn that came first, and the next once the first left",
    RELEASES_IN_TURN,
)
async def releases_wake_followers_in_turn(c: Check) -> None:
    assert isinstance(c.store, SupportsReleasesInTurn)  # noqa: S101 -- required capability
    key, second_only = c.key("shared"), c.key("second's")
    heard_first: asyncio.Queue[str] = asyncio.Queue()
    heard_second: asyncio.Queue[str] = asyncio.Queue()

    async def take_and_release(released: str) -> None:
        holder = c.owner()
        await c.take(released, holder)
        c.answer(await c.store.release(released, holder), expected=True, doing="release")

    async with (
        c.store.follow_releases_in_turn(heard_first.put_nowait) as first,
        c.store.follow_releases_in_turn(heard_second.put_nowait) as second,
        contextlib.AsyncExitStack() as first_follows,
        second.following(second_only),
    ):
        await first_follows.enter_async_context(first.following(key))
        async with second.following(key):
            await take_and_release(key)
            c.expect(await _next_heard(c, heard_first, key) == key, "the first heard no turn")
            # one server, announced in order: a turn leaked to the second would come first
            await take_and_release(second_only)
            c.expect(
                await _next_heard(c, heard_second, second_only) == second_only,
                "the second follower heard the first one's turn",
            )
            await first_follows.aclose()
            await take_and_release(key)
            c.expect(
                await _next_heard(c, heard_second, key) == key,
                "the second follower heard no turn once the first stopped following",
            )
    strays = [heard_first.get_nowait() for _ in range(heard_first.qsize())]
    c.expect(not strays, f"the first follower also heard {strays} after it left")


@_case(
    "concurrent releases of many keys give each key's first follower in turn its turn, once",
    RELEASES_IN_TURN,
    CONCURRENT,
)
async def concurrent_turns_reach_one_follower_each(c: Check) -> None:
    assert isinstance(c.store, SupportsReleasesInTurn)  # noqa: S101 -- required capability
    keys = [c.key(str(n)) for n in range(c.callers)]
    heard: dict[str, list[str]] = {"first": [], "second": []}
    heard_all = {name: asyncio.Event() for name in heard}

    def hearing(name: str) -> Callable[[str], None]:
        def on_release(key: str) -> None:
            heard[name].append(key)
            if len(heard[name]) >= len(keys):
                heard_all[name].set()

        return on_release

    async def release_all() -> None:
        holders = {key: c.owner() for key in keys}
        for key in keys:
            await c.take(key, holders[key])
        released = await asyncio.gather(*(c.store.release(key, holders[key]) for key in keys))
        c.expect(all(released), f"releases answered {released}")

    async def all_heard(name: str) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(heard_all[name].wait(), NOTIFICATION_TIMEOUT_S)

    async with (
        c.store.follow_releases_in_turn(hearing("first")) as first,
        c.store.follow_releases_in_turn(hearing("second")) as second,
        contextlib.AsyncExitStack() as first_follows,
        contextlib.AsyncExitStack() as second_follows,
    ):
        for key in keys:
            await first_follows.enter_async_context(first.following(key))
        for key in keys:
            await second_follows.enter_async_context(second.following(key))
        await release_all()
        await all_heard("first")
        await first_follows.aclose()
        await release_all()
        await all_heard("second")
    c.expect(
        sorted(heard["first"]) == sorted(keys),
        f"the first follower heard {len(heard['first'])} turns of {len(keys)} keys",
    )
    c.expect(
        sorted(heard["second"]) == sorted(keys),
        f"the second follower heard {len(heard['second'])} turns, once each of {len(keys)} "
        "keys expected: a turn of the first leaked, or one went unheard",
    )


async def _next_heard(c: Check, heard: asyncio.Queue[str], expected: str) -> str:
    try:
        return await asyncio.wait_for(heard.get(), NOTIFICATION_TIMEOUT_S)
    except TimeoutError:
        raise c.fail(
            f"no release of {expected!r} heard within {NOTIFICATION_TIMEOUT_S} s"
        ) from None


def _run(c: Check, job: str, outcome: RunOutcome, *, at: int, token: int | None) -> RunRecord:
    started = _RUN_STARTED + timedelta(minutes=at)
    return RunRecord(
        job=job,
        instance=f"shop-\u732b-{at}",
        fencing_token=token,
        started_at=started,
        ended_at=started + timedelta(seconds=1, milliseconds=at),
        outcome=outcome,
        error=f"ValueError: run {at} of {c.name} failed \u2014 'quoted'"
        if outcome == "error"
        else None,
    )


@_case(
    "a run is kept as its job's last run, and as its last success only if it went well", RUN_RECORDS
)
async def run_records_keep_last_and_last_success(c: Check) -> None:
    assert isinstance(c.store, SupportsRunRecords)  # noqa: S101 -- required capability
    job, other = c.key("job"), c.key("other job")
    c.expect(await c.store.job_records([job]) == [], "a job that never ran has a record")
    ok = _run(c, job, "ok", at=1, token=MAX_FENCING_TOKEN)
    await c.store.record_run(ok)
    failed = _run(c, job, "error", at=2, token=None)
    await c.store.record_run(failed)
    cancelled = _run(c, other, "cancelled", at=3, token=5)
    await c.store.record_run(cancelled)
    records = await c.store.job_records([job, other, c.key("never")])
    c.expect(
        [(r.job, r.last_run, r.last_success) for r in records]
        == [(job, failed, ok), (other, cancelled, None)],
        f"after ok and error runs of {job!r} and a cancelled run of {other!r}: {records}",
    )
    everything = {record.job: record for record in await c.store.job_records()}
    c.expect(
        everything.get(job) == records[0] and everything.get(other) == records[1],
        "job_records() without jobs does not list both jobs as job_records(jobs) does",
    )
    again = _run(c, job, "ok", at=4, token=9)
    await c.store.record_run(again)
    (record,) = await c.store.job_records([job])
    c.expect(
        record.last_run == again and record.last_success == again,
        f"a later successful run is not both the last run and the last success: {record}",
    )


@_case("a run that started before the one kept, recorded after it, does not hide it", RUN_RECORDS)
async def late_run_records_keep_the_newer_run(c: Check) -> None:
    assert isinstance(c.store, SupportsRunRecords)  # noqa: S101 -- required capability
    job = c.key()
    newer = _run(c, job, "ok", at=5, token=7)
    await c.store.record_run(newer)
    await c.store.record_run(_run(c, job, "ok", at=4, token=6))
    await c.store.record_run(_run(c, job, "lost", at=3, token=5))
    (record,) = await c.store.job_records([job])
    c.expect(
        record.last_run == newer and record.last_success == newer,
        f"runs that started earlier, recorded after a newer one, replaced it: {record}",
    )


@_case("concurrent runs of one job leave one whole run as its last", RUN_RECORDS, CONCURRENT)
async def run_records_whole_under_concurrency(c: Check) -> None:
    assert isinstance(c.store, SupportsRunRecords)  # noqa: S101 -- required capability
    job = c.key()
    runs = [_run(c, job, "ok", at=n, token=n + 1) for n in range(c.callers)]
    await asyncio.gather(*(c.store.record_run(run) for run in runs))
    (record,) = await c.store.job_records([job])
    c.expect(record.last_run in runs, f"the last run is no run that was recorded: {record}")
    c.expect(record.last_success in runs, f"the last success is no recorded run: {record}")


@_case("read_lock and list_locks show a live lock's owner and time left", INSPECTION)
async def inspection_shows_live_locks(c: Check) -> None:
    assert isinstance(c.store, SupportsInspection)  # noqa: S101 -- required capability
    first, second, holder = c.key("a"), c.key("b"), c.owner()
    token = await c.take(first, holder)
    await c.take(second, c.owner())
    info = await c.store.read_lock(first)
    c.expect(
        isinstance(info, LockInfo)
        and info.key == first
        and info.owner == holder
        and info.fencing_token in {None, token}
        and info.expires_in_ms is not None
        and 0 < info.expires_in_ms <= LONG_TTL_MS,
        f"read_lock of a lock {holder!r} took for {LONG_TTL_MS} ms with token {token}: {info}",
    )
    listed = await c.store.list_locks(prefix=c.key())
    c.expect(
        [(i.key, i.live) for i in listed] == [(first, True), (second, True)],
        f"list_locks of the case's prefix: {listed}",
    )
    limited = await c.store.list_locks(prefix=c.key(), limit=1)
    c.expect([i.key for i in limited] == [first], f"list_locks(limit=1): {limited}")
    c.answer(await c.store.release(first, holder), expected=True, doing="the holder's release")
    after = await c.store.read_lock(first)
    c.expect(after is None or not after.live, f"read_lock after the release: {after}")


@_case(
    "store_time_ms reads the server's wall clock in milliseconds since the epoch (not seconds "
    "or microseconds), and a second reading is not earlier than the first",
    STORE_CLOCK,
)
async def store_clock_reads_epoch_milliseconds(c: Check) -> None:
    assert isinstance(c.store, SupportsStoreClock)  # noqa: S101 -- required capability
    before = utc_now()
    read = await c.store.store_time_ms()
    after = utc_now()
    c.expect(type(read) is int, f"store_time_ms() answered {read!r}, not an int")
    # a server a day or more from this host is set wrong, or the unit is
    c.expect(
        epoch_ms(before) - _DAY_MS <= read <= epoch_ms(after) + _DAY_MS,
        f"store_time_ms() answered {read}, more than a day from this host's clock "
        f"({epoch_ms(before)}): a reading in seconds or microseconds, not milliseconds?",
    )
    again = await c.store.store_time_ms()
    c.expect(again >= read - _CLOCK_STEP_MS, f"the clock went from {read} to {again} ms")


@_case("break_lock frees a live lock: the next acquire wins with a greater token", INSPECTION)
async def break_lock_frees_the_key(c: Check) -> None:
    assert isinstance(c.store, SupportsInspection)  # noqa: S101 -- required capability
    key, holder, successor = c.key(), c.owner(), c.owner()
    first = await c.take(key, holder)
    broken = await c.store.break_lock(key)
    c.expect(
        broken is not None and broken.owner == holder,
        f"break_lock of a key {holder!r} held returned {broken}",
    )
    second = await c.take(key, successor)
    c.expect(second > first, f"token after the break {second} is not greater than {first}")
    c.answer(await c.store.renew(key, holder, LONG_TTL_MS), expected=False, doing="broken renew")
    c.answer(await c.store.release(key, holder), expected=False, doing="broken release")
    c.answer(await c.store.release(key, successor), expected=True, doing="successor's release")
    c.expect(await c.store.break_lock(key) is None, "break_lock of a free key broke something")


@_case(
    "a break racing the holder's renewal and acquires leaves one holder at most",
    INSPECTION,
    CONCURRENT,
)
async def break_racing_renewals_and_acquires(c: Check) -> None:
    assert isinstance(c.store, SupportsInspection)  # noqa: S101 -- required capability
    for round_number in range(ROUNDS):
        key, holder = c.key(str(round_number)), c.owner()
        first = await c.take(key, holder)
        broken, _, winners = await asyncio.gather(
            c.store.break_lock(key), c.store.renew(key, holder, LONG_TTL_MS), c.race(key)
        )
        c.expect(
            broken is not None and broken.owner == holder,
            f"break_lock of a key {holder!r} held returned {broken}",
        )
        c.expect(len(winners) <= 1, f"{len(winners)} callers won one broken key")
        if not winners:
            winners = [await c.take(key, c.owner())]
        c.expect(winners[0] > first, f"token {winners[0]} is not greater than {first}")
        c.answer(
            await c.store.renew(key, holder, LONG_TTL_MS),
            expected=False,
            doing="the broken holder's renew once another holds the key",
        )


async def _state(c: Check, job: str) -> JobState:
    assert isinstance(c.store, SupportsJobControl)  # noqa: S101 -- required capability
    states = await c.store.job_states([job])
    c.expect(all(state.job == job for state in states), f"job_states([{job!r}]) gave {states}")
    return states[0] if states else JobState(job, None, 0, None)


def _start(
    c: Check,
    job: str,
    *,
    at: int,
    take: str | None,
    token: int | None = None,
    ignore_pause: bool = False,
    when_busy: WhenBusy = "skip",
) -> RunStart:
    owner = c.owner()
    run = OpenRun(f"shop-\u732b-{at}", token, _RUN_STARTED + timedelta(minutes=at))
    return RunStart(job, run, take, owner, LONG_TTL_MS, ignore_pause, when_busy)


@_case(
    "a run's start takes its lock and opens the run; its end closes it and counts failures",
    JOB_CONTROL,
    RUN_RECORDS,
)
async def start_and_end_of_runs(c: Check) -> None:
    assert isinstance(c.store, SupportsJobControl)  # noqa: S101 -- required capability
    job, key = c.key("job"), c.key("run lock")
    first = await c.store.start_run(_start(c, job, at=1, take=key))
    token = c.token(first.taken, "start_run with a free run lock")
    c.expect(
        first.started and first.open_run is None and first.last_run is None and not first.failures,
        f"the first start of a job answered {first}",
    )
    await c.held_by_someone(key, "acquire of a run lock start_run took")
    busy = await c.store.start_run(_start(c, job, at=2, take=key))
    c.refused(busy.taken, "a second start_run while the run lock is held")
    c.expect(
        not busy.started and busy.open_run is not None and busy.open_run.fencing_token == token,
        f"a start refused by the held run lock answered {busy}",
    )
    state = await _state(c, job)
    c.expect(
        state.open_run is not None and state.open_run.fencing_token == token,
        f"job_states while the run is open: {state}",
    )
    failures = 0
    outcomes: tuple[RunOutcome, ...] = ("error", "error", "lost", "ok", "error")
    for at, outcome in enumerate(outcomes, start=3):
        start = _start(c, job, at=at, take=None, token=token)
        started = await c.store.start_run(start)
        c.expect(started.started and started.taken is None, f"a start without a lock: {started}")
        c.expect(started.failures == failures, f"failures before run {at}: {started.failures}")
        run = replace(
            _run(c, job, outcome, at=at, token=token), started_at=start.open_run.started_at
        )
        await c.store.end_run(run)
        failures = {"ok": 0, "error": failures + 1}.get(outcome, failures)
        state = await _state(c, job)
        c.expect(
            state.open_run is None and state.failures == failures,
            f"after a run that ended {outcome!r}, the state is {state}, not closed with "
            f"{failures} failures",
        )
    manual = replace(_run(c, job, "lost", at=9, token=4), trigger="manual", detected_by="abandoned")
    await c.store.end_run(manual)
    answer = await c.store.start_run(_start(c, job, at=10, take=None, token=5))
    last = answer.last_run
    c.expect(
        last is not None and last.trigger == "manual" and last.detected_by == "abandoned",
        f"a manual run's record, ended lost (abandoned), came back as {last}",
    )
    other = await c.store.start_run(_start(c, job, at=11, take=None, token=6))
    c.expect(
        other.open_run is not None and other.open_run.fencing_token == 5,  # noqa: PLR2004
        f"a start over a run that never ended did not answer that run: {other.open_run}",
    )
    await c.store.note_missed(job, _RUN_STARTED)
    state = await _state(c, job)
    c.expect(state.missed_at == _RUN_STARTED, f"note_missed was not kept: {state}")


@_case("a pause of a job or a prefix stops its starts, until resumed or its end", JOB_CONTROL)
async def pauses_stop_starts(c: Check) -> None:
    assert isinstance(c.store, SupportsJobControl)  # noqa: S101 -- required capability
    job, key = c.key("reports.daily"), c.key("run lock")
    prefix = c.key("reports.*")
    pause = JobPause(prefix, "migrating \u2014 'quoted'", "ops-\u732b", _RUN_STARTED, None)
    await c.store.pause_jobs(pause)
    stopped = await c.store.start_run(_start(c, job, at=1, take=key))
    c.expect(
        stopped.pause == pause and stopped.taken is None and not stopped.started,
        f"a start under a prefix pause answered {stopped}",
    )
    await c.take(key, c.owner(), 1000)
    unrelated = await c.store.start_run(_start(c, c.key("other"), at=1, take=None, token=1))
    c.expect(unrelated.started, f"a job outside the paused prefix was stopped: {unrelated}")
    manual = await c.store.start_run(_start(c, job, at=2, take=None, token=3, ignore_pause=True))
    c.expect(manual.started, f"a start that ignores pauses was stopped: {manual}")
    kept = await c.store.job_pauses()
    c.expect(pause in kept, f"job_pauses() does not list the pause: {kept}")
    c.expect(await c.store.resume_jobs(prefix) == pause, "resume_jobs did not return the pause")
    c.expect(await c.store.resume_jobs(prefix) is None, "a second resume found a pause")
    again = await c.store.start_run(_start(c, job, at=3, take=None, token=4))
    c.expect(again.started, f"a start after the resume answered {again}")
    ended = JobPause(job, "", "ops", _RUN_STARTED, _RUN_STARTED + timedelta(minutes=4))
    await c.store.pause_jobs(ended)
    during = await c.store.start_run(_start(c, job, at=3, take=None, token=5))
    after = await c.store.start_run(_start(c, job, at=5, take=None, token=6))
    c.expect(
        during.pause == ended and after.started,
        f"a pause until minute 4 answered {during.pause} at minute 3 and {after} at minute 5",
    )


@_case("of concurrent starts of one job, exactly one takes its run lock", JOB_CONTROL, CONCURRENT)
async def one_start_wins(c: Check) -> None:
    assert isinstance(c.store, SupportsJobControl)  # noqa: S101 -- required capability
    job, key = c.key("job"), c.key("run lock")
    answers = await asyncio.gather(
        *(c.store.start_run(_start(c, job, at=n, take=key)) for n in range(c.callers))
    )
    won = [c.token(a.taken, "a racing start_run") for a in answers if a.started]
    c.expect(len(won) == 1, f"{len(won)} of {c.callers} racing starts took the run lock")
    state = await _state(c, job)
    c.expect(
        state.open_run is not None and state.open_run.fencing_token == won[0],
        f"the open run is not the winner's (token {won[0]}): {state}",
    )


def _tick(minute: int) -> datetime:
    """The scheduled time of tick ``minute`` (a whole minute, as a schedule places it)."""
    return _RUN_STARTED.replace(second=0, microsecond=0) + timedelta(minutes=minute)


@_case(
    "a start for a tick at or before the job's last started tick is refused, naming who ran "
    "it, and takes nothing",
    JOB_CONTROL,
)
async def started_ticks_refuse_their_repeats(c: Check) -> None:
    assert isinstance(c.store, SupportsJobControl)  # noqa: S101 -- required capability
    job, key = c.key("job"), c.key("run lock")
    first = replace(_start(c, job, at=1, take=None, token=7), tick=_tick(1))
    answer = await c.store.start_run(first)
    c.expect(answer.started and answer.tick_ran is None, f"the first start of a tick: {answer}")
    ran = TickRun(_tick(1), first.open_run.instance, 7)
    state = await _state(c, job)
    c.expect(state.last_tick == ran, f"job_states after a tick started: {state.last_tick}")
    for minute, take in ((1, None), (1, key), (0, key)):
        again = replace(_start(c, job, at=2, take=take, token=8), tick=_tick(minute))
        refused = await c.store.start_run(again)
        c.expect(
            not refused.started and refused.tick_ran == ran and refused.taken is None,
            f"a start of tick {minute} (taking {take!r}) after tick 1 started answered {refused}",
        )
    await c.take(key, c.owner())
    state = await _state(c, job)
    c.expect(
        state.open_run is not None and state.open_run.fencing_token == 7,  # noqa: PLR2004
        f"a refused start changed the open run: {state.open_run}",
    )
    unscheduled = await c.store.start_run(_start(c, job, at=3, take=None, token=9))
    c.expect(unscheduled.started, f"a start with no tick after tick 1: {unscheduled}")
    later = replace(_start(c, job, at=4, take=c.key("later"), token=None), tick=_tick(2))
    taken = await c.store.start_run(later)
    token = c.token(taken.taken, "the start of tick 2 taking a free run lock")
    state = await _state(c, job)
    c.expect(
        state.last_tick == TickRun(_tick(2), later.open_run.instance, token),
        f"tick 2 started with token {token}, but the store keeps {state.last_tick}",
    )


@_case("of concurrent starts of one tick, exactly one goes on", JOB_CONTROL, CONCURRENT)
async def one_start_of_a_tick_wins(c: Check) -> None:
    assert isinstance(c.store, SupportsJobControl)  # noqa: S101 -- required capability
    job = c.key("job")
    for minute, take in ((1, None), (2, c.key("run lock"))):
        starts = [
            replace(_start(c, job, at=n, take=take, token=n), tick=_tick(minute))
            for n in range(c.callers)
        ]
        answers = await asyncio.gather(*(c.store.start_run(start) for start in starts))
        won = [start for start, answer in zip(starts, answers, strict=True) if answer.started]
        c.expect(
            len(won) == 1,
            f"{len(won)} of {c.callers} racing starts of tick {minute} (taking {take!r}) went on",
        )
        state = await _state(c, job)
        c.expect(
            state.last_tick is not None
            and state.last_tick.at == _tick(minute)
            and state.last_tick.instance == won[0].open_run.instance,
            f"tick {minute} went on for {won[0].open_run.instance}, the store keeps "
            f"{state.last_tick}",
        )
        if take is not None:
            for start, answer in zip(starts, answers, strict=True):
                if not answer.started:
                    c.answer(
                        await c.store.release(take, start.owner),
                        expected=False,
                        doing="the release of the run lock by a start refused for its tick",
                    )


@_case(
    "a start on a busy run lock notes one trigger (buffer) for the holder's end, or takes the "
    "lock with a greater token (replace)",
    JOB_CONTROL,
    RUN_RECORDS,
    CONCURRENT,
)
async def busy_starts_buffer_or_replace(c: Check) -> None:
    assert isinstance(c.store, SupportsJobControl)  # noqa: S101 -- required capability
    job, key = c.key("job"), c.key("run lock")
    first = _start(c, job, at=1, take=key)
    token = c.token((await c.store.start_run(first)).taken, "the first start")
    busy = await asyncio.gather(
        *(
            c.store.start_run(_start(c, job, at=2, take=key, when_busy="buffer"))
            for _ in range(c.callers)
        )
    )
    for answer in busy:
        c.refused(answer.taken, "a buffered start on a held run lock")
    ended = _run(c, job, "ok", at=1, token=token)
    ended = replace(ended, started_at=first.open_run.started_at, instance=first.open_run.instance)
    c.answer(await c.store.end_run(ended), expected=True, doing="the holder's end after triggers")
    c.answer(await c.store.end_run(ended), expected=False, doing="the same end again")
    c.answer(await c.store.release(key, first.owner), expected=True, doing="the holder's release")

    holder = _start(c, job, at=3, take=key)
    held = c.token((await c.store.start_run(holder)).taken, "a start after the release")
    replacing = [_start(c, job, at=4, take=key, when_busy="replace") for _ in range(c.callers)]
    answers = await asyncio.gather(*(c.store.start_run(start) for start in replacing))
    tokens = [c.token(answer.taken, "a replacing start") for answer in answers]
    c.expect(
        len(set(tokens)) == len(tokens) and min(tokens) > held,
        f"replacing starts took tokens {sorted(tokens)} after {held}: not all distinct and greater",
    )
    c.answer(
        await c.store.renew(key, holder.owner, LONG_TTL_MS),
        expected=False,
        doing="the replaced holder's renewal",
    )
    last = replacing[tokens.index(max(tokens))]
    c.answer(
        await c.store.renew(key, last.owner, LONG_TTL_MS),
        expected=True,
        doing="the renewal of the start with the greatest token",
    )
    state = await _state(c, job)
    c.expect(
        state.open_run is not None and state.open_run.fencing_token == max(tokens),
        f"the open run is not the last replacing start's: {state}",
    )


# --- building the cases --------------------------------------------------------------------


def lock_store_contract(
    make_store: MakeStore,
    *,
    concurrent: bool | Mapping[str, int] = False,
    advance_time: AdvanceTime | None = None,
    ttl: Duration = DEFAULT_TTL,
) -> tuple[ContractCase, ...]:
    """Return the store contract's cases for the store ``make_store`` builds.

    Every case runs on any store: the expiry cases move the store's clock with ``advance_time``
    when it can be moved, else they wait for real, on a lease of ``ttl``.

    Args:
        make_store: called (and awaited if it returns an awaitable) inside each case's ``run``,
            on the loop that runs it; a store with ``open``/``aclose`` is opened and closed.
            Concurrent callers share the one store it returns.
        concurrent: ``True`` races 16 callers per key; ``{"callers": 32}`` races more.
        advance_time: ``await advance_time(by)`` moves the store's clock forward by ``by``, a
            :class:`~datetime.timedelta` (a ``ManualClock``'s ``advance`` takes it as it is).
            ``None``: the expiry cases wait in real time.
        ttl: the lease length of the expiry cases; they check it at ``ttl/2`` and ``ttl*7/6``,
            so in real time keep it above ten of your store's round trips (the default 600 ms
            suits a round trip under 60 ms; pass "2s" for a slow or distant store).

    Returns:
        The cases, in a stable order; names are public API.

    Raises:
        LocksConfigurationError: ``concurrent`` or ``ttl`` is not usable.

    .. versionadded:: 0.1
    .. versionchanged:: 0.2 ``ttl``; without ``advance_time`` the expiry cases run in real time.
    """
    callers = _callers(concurrent)
    ttl_ms = parse_ttl(ttl)
    if ttl_ms < MIN_TTL_MS:
        raise LocksConfigurationError(
            f"ttl={ttl!r}; the expiry cases check a lease at ttl/6 margins: pass 60 ms or more"
        )
    return tuple(
        ContractCase(
            name=spec.name,
            rule=spec.rule,
            requires=spec.requires,
            run=_runner(spec, make_store, callers, advance_time, ttl_ms),
        )
        for spec in (*_SPECS, *HANDOFF_SPECS)
    )


def _callers(concurrent: bool | Mapping[str, int]) -> int:
    if isinstance(concurrent, bool):
        return DEFAULT_CALLERS if concurrent else 0
    if isinstance(concurrent, Mapping):
        unknown = set(concurrent) - {"callers"}
        callers = concurrent.get("callers", DEFAULT_CALLERS)
        if unknown or type(callers) is not int or callers < 2:  # noqa: PLR2004 -- a race needs two
            raise LocksConfigurationError(
                f'concurrent={concurrent!r}; pass True, or {{"callers": N}} with N >= 2'
            )
        return callers
    raise LocksConfigurationError(
        f'concurrent={concurrent!r}; pass True, False, or {{"callers": N}}'
    )


def _runner(
    spec: Spec,
    make_store: MakeStore,
    callers: int,
    advance: AdvanceTime | None,
    ttl_ms: int,
) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        if CONCURRENT in spec.requires and callers == 0:
            raise unittest.SkipTest(f"{spec.name}: races callers; pass concurrent=True")
        async with _opened(make_store) as store:
            for capability, (protocol, methods) in CAPABILITIES.items():
                if capability in spec.requires and not isinstance(store, protocol):
                    raise unittest.SkipTest(f"{spec.name}: the store has no {methods}")
            check = Check(
                spec.name, spec.rule, store, callers=callers, advance=advance, ttl_ms=ttl_ms
            )
            await spec.body(check)

    run.__qualname__ = run.__name__ = spec.name
    return run


@asynccontextmanager
async def _opened(make_store: MakeStore) -> AsyncIterator[LockStore]:
    made = make_store()
    store = await made if inspect.isawaitable(made) else made
    if isinstance(store, SupportsLifecycle):
        await store.open()
    try:
        yield store
    finally:
        if isinstance(store, SupportsLifecycle):
            await store.aclose()
