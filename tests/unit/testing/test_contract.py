"""The contract suite passes on the reference store, and fails on the right cases of broken ones."""

import asyncio
import unittest
from collections.abc import Sequence

import pytest

from helpers import TokensAsText, yield_once
from leaselock import LocksConfigurationError
from leaselock.stores import (
    Acquired,
    AcquireResult,
    InMemoryLockStore,
    JobRecord,
    LockInfo,
    NotAcquired,
    RunRecord,
)
from leaselock.testing import ManualClock, lock_store_contract


class ReadThenWriteStore:
    """Checks the key, awaits (a round trip), then writes: a takeover slips in between."""

    def __init__(self, clock: ManualClock) -> None:
        self._inner = InMemoryLockStore(clock=clock)
        self._clock = clock
        self._holders: dict[str, tuple[str, int]] = {}
        self._token = 0

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        holder = self._holders.get(key)
        free = holder is None or holder[1] <= self._clock.now_ms()
        await yield_once()
        if not free:
            return NotAcquired()
        self._token += 1
        self._holders[key] = (owner, self._clock.now_ms() + ttl_ms)
        return Acquired(self._token)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        holder = self._holders.get(key)
        if holder is None or holder[0] != owner or holder[1] <= self._clock.now_ms():
            return False
        self._holders[key] = (owner, self._clock.now_ms() + ttl_ms)
        return True

    async def release(self, key: str, owner: str) -> bool:
        holder = self._holders.get(key)
        if holder is None or holder[0] != owner or holder[1] <= self._clock.now_ms():
            return False
        del self._holders[key]
        return True


class TokensGoBackStore:
    """Correct locking, but every release resets the key's token counter (a restored backup)."""

    def __init__(self, clock: ManualClock) -> None:
        self._inner = InMemoryLockStore(clock=clock)
        self._issued: dict[str, int] = {}

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        result = await self._inner.acquire(key, owner, ttl_ms)
        if isinstance(result, NotAcquired):
            return result
        self._issued[key] = self._issued.get(key, 0) + 1
        return Acquired(100 - self._issued[key])

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        return await self._inner.renew(key, owner, ttl_ms)

    async def release(self, key: str, owner: str) -> bool:
        return await self._inner.release(key, owner)


class WholeSecondsStore:
    """Correct, except that it rounds every ttl up to whole seconds."""

    def __init__(self, clock: ManualClock) -> None:
        self._inner = InMemoryLockStore(clock=clock)

    @staticmethod
    def _rounded(ttl_ms: int) -> int:
        return -(-ttl_ms // 1000) * 1000

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        return await self._inner.acquire(key, owner, self._rounded(ttl_ms))

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        return await self._inner.renew(key, owner, self._rounded(ttl_ms))

    async def release(self, key: str, owner: str) -> bool:
        return await self._inner.release(key, owner)


class ForgetfulRunsStore:
    """Keeps only the last run: a failed run also wipes the job's last success."""

    def __init__(self, clock: ManualClock) -> None:
        self._inner = InMemoryLockStore(clock=clock)
        self._runs: dict[str, RunRecord] = {}

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        return await self._inner.acquire(key, owner, ttl_ms)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        return await self._inner.renew(key, owner, ttl_ms)

    async def release(self, key: str, owner: str) -> bool:
        return await self._inner.release(key, owner)

    async def record_run(self, run: RunRecord) -> None:
        self._runs[run.job] = run

    async def job_records(self, jobs: Sequence[str] | None = None) -> list[JobRecord]:
        wanted = sorted(self._runs if jobs is None else set(jobs) & self._runs.keys())
        return [
            JobRecord(
                job, self._runs[job], self._runs[job] if self._runs[job].outcome == "ok" else None
            )
            for job in wanted
        ]


class BreakForgetsTheOwnerStore:
    """break_lock answers as if it broke the lock, but the holder still holds it."""

    def __init__(self, clock: ManualClock) -> None:
        self._inner = InMemoryLockStore(clock=clock)

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        result = await self._inner.acquire(key, owner, ttl_ms)
        # names a holder that is not the live lock's owner
        return NotAcquired(holder="someone-else") if isinstance(result, NotAcquired) else result

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        return await self._inner.renew(key, owner, ttl_ms)

    async def release(self, key: str, owner: str) -> bool:
        return await self._inner.release(key, owner)

    async def read_lock(self, key: str) -> LockInfo | None:
        return await self._inner.read_lock(key)

    async def list_locks(self, prefix: str = "", limit: int = 1000) -> list[LockInfo]:
        return await self._inner.list_locks(prefix, limit)

    async def break_lock(self, key: str) -> LockInfo | None:
        return await self._inner.read_lock(key)


async def outcomes(make_store, clock: ManualClock) -> dict[str, str]:
    """Run every case; return name -> "passed" | "failed: <message>" | "skipped"."""
    results: dict[str, str] = {}
    for case in lock_store_contract(
        lambda: make_store(clock), concurrent={"callers": 32}, advance_time=clock.advance
    ):
        try:
            await case.run()
        except AssertionError as failure:
            results[case.name] = f"failed: {failure}"
        except unittest.SkipTest:
            results[case.name] = "skipped"
        else:
            results[case.name] = "passed"
    return results


def failed(results: dict[str, str]) -> set[str]:
    return {name for name, outcome in results.items() if outcome.startswith("failed")}


async def test_the_reference_store_passes_every_case_with_32_concurrent_callers():
    clock = ManualClock()
    results = await outcomes(lambda c: InMemoryLockStore(clock=c), clock)
    assert failed(results) == set()
    skipped = {name for name, outcome in results.items() if outcome == "skipped"}
    assert skipped == {
        "releases_reach_their_followers_only",
        "concurrent_followers_hear_their_keys",
        "releases_wake_followers_in_turn",
        "concurrent_turns_reach_one_follower_each",
        # one process: no clock of a server to read
        "store_clock_reads_epoch_milliseconds",
    }


async def test_a_read_then_write_acquire_fails_every_race_for_a_free_or_expired_key():
    results = await outcomes(ReadThenWriteStore, ManualClock())
    assert {
        "one_winner_for_free_key",
        "one_winner_for_expired_key",
        "expired_renew_racing_acquires",
        "one_winner_per_key",
        "rounds_grow_tokens",
    } <= failed(results)
    assert "callers won a free key" in results["one_winner_for_free_key"]
    assert "free_key_taken_once" not in failed(results)


async def test_a_store_whose_tokens_go_back_fails_the_token_order_cases():
    results = await outcomes(TokensGoBackStore, ManualClock())
    assert {
        "release_frees_for_owner_only",
        "tokens_grow_across_releases",
        "takeover_after_expiry",
        "tokens_grow_however_freed",
        "rounds_grow_tokens",
    } <= failed(results)
    assert "do not strictly grow" in results["tokens_grow_across_releases"]
    assert "one_winner_for_free_key" not in failed(results)


async def test_a_store_that_rounds_expiry_to_seconds_fails_the_millisecond_cases():
    results = await outcomes(WholeSecondsStore, ManualClock())
    assert {"expiry_in_milliseconds", "renew_moves_expiry"} <= failed(results)
    assert results["expiry_in_milliseconds"].startswith(
        "failed: expiry_in_milliseconds: expiry is measured in milliseconds"
    )
    assert "keys_kept_apart" not in failed(results)


async def test_a_store_that_forgets_the_last_success_fails_the_run_records_case():
    results = await outcomes(ForgetfulRunsStore, ManualClock())
    # it keeps whatever came last, so a late, older run hides a newer one too
    assert failed(results) == {
        "run_records_keep_last_and_last_success",
        "late_run_records_keep_the_newer_run",
    }
    assert "after ok and error runs" in results["run_records_keep_last_and_last_success"]
    assert results["inspection_shows_live_locks"] == "skipped"


async def test_a_break_that_frees_nothing_and_a_wrong_holder_fail_their_cases():
    results = await outcomes(BreakForgetsTheOwnerStore, ManualClock())
    assert failed(results) == {
        "break_lock_frees_the_key",
        "break_racing_renewals_and_acquires",
        "refused_acquire_names_holder",
    }
    assert "holds the key" in results["refused_acquire_names_holder"]
    assert results["run_records_keep_last_and_last_success"] == "skipped"


async def test_a_store_returning_tokens_as_text_fails_with_the_type_named():
    results = await outcomes(
        lambda clock: TokensAsText(InMemoryLockStore(clock=clock)), ManualClock()
    )
    assert "returned token '1' as str, not int" in results["free_key_taken_once"]


async def test_cases_needing_concurrency_skip_with_the_reason_when_not_given():
    cases = {c.name: c for c in lock_store_contract(lambda: InMemoryLockStore())}
    with pytest.raises(unittest.SkipTest, match="races callers; pass concurrent=True"):
        await cases["one_winner_for_free_key"].run()
    await cases["free_key_taken_once"].run()


@pytest.mark.parametrize(
    "name", ["expiry_in_milliseconds", "renew_moves_expiry", "takeover_after_expiry"]
)
async def test_without_advance_time_the_expiry_cases_wait_for_real_on_the_ttl_given(name: str):
    # the store's clock is the system's here: nothing can move it, so the suite waits for real
    cases = {c.name: c for c in lock_store_contract(lambda: InMemoryLockStore(), ttl="60ms")}
    await cases[name].run()


def test_a_ttl_too_short_to_check_is_refused():
    with pytest.raises(LocksConfigurationError, match="pass 60 ms or more"):
        lock_store_contract(lambda: InMemoryLockStore(), ttl="30ms")


def test_cases_have_stable_names_rules_and_requirements():
    cases = lock_store_contract(lambda: InMemoryLockStore(), concurrent=True)
    names = [case.name for case in cases]
    assert len(names) == len(set(names))
    assert all(name.isidentifier() and name == name.lower() for name in names)
    by_name = {case.name: case for case in cases}
    assert by_name["one_winner_for_free_key"].requires == frozenset({"concurrent"})
    assert by_name["renew_refused_after_expiry"].rule.startswith("renew of an expired lock")


def test_building_the_cases_does_not_make_a_store():
    made: list[int] = []

    def make_store() -> InMemoryLockStore:
        made.append(1)
        return InMemoryLockStore()

    lock_store_contract(make_store, concurrent=True)
    assert made == []


def test_a_bad_concurrent_option_is_refused():
    with pytest.raises(LocksConfigurationError, match='"callers": N'):
        lock_store_contract(lambda: InMemoryLockStore(), concurrent={"callers": 1})
    with pytest.raises(LocksConfigurationError, match='"callers": N'):
        lock_store_contract(lambda: InMemoryLockStore(), concurrent={"workers": 4})


async def test_an_async_make_store_is_awaited_and_a_lifecycle_store_is_opened_and_closed():
    events: list[str] = []

    class LifecycleStore:
        def __init__(self) -> None:
            self._inner = InMemoryLockStore()

        async def open(self) -> None:
            events.append("open")

        async def aclose(self) -> None:
            events.append("close")

        async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
            return await self._inner.acquire(key, owner, ttl_ms)

        async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
            return await self._inner.renew(key, owner, ttl_ms)

        async def release(self, key: str, owner: str) -> bool:
            return await self._inner.release(key, owner)

    async def make_store() -> LifecycleStore:
        events.append("made")
        return LifecycleStore()

    case = next(c for c in lock_store_contract(make_store) if c.name == "free_key_taken_once")
    await case.run()
    assert events == ["made", "open", "close"]


def test_the_suite_runs_in_a_plain_asyncio_run_loop_without_a_test_framework():
    clock = ManualClock()
    for case in lock_store_contract(
        lambda: InMemoryLockStore(clock=clock), concurrent=True, advance_time=clock.advance
    ):
        if "release_notifications" in case.requires:
            continue
        asyncio.run(case.run())
