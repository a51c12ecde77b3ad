"""Locks: lifecycle, the three ways to take a lock, and argument checks."""

import asyncio
import logging
import os
import socket
import threading
from datetime import timedelta

import pytest

from helpers import yield_once
from leaselock import (
    Lock,
    LockNotAcquiredError,
    Locks,
    LocksConfigurationError,
    LockStoreError,
    current_lock,
)
from leaselock.stores import Acquired, AcquireResult, InMemoryLockStore, NotAcquired
from leaselock.testing import FaultyStore, ManualClock, wait_all_tasks_blocked


async def test_acquire_returns_a_held_lock_with_a_fresh_128_bit_owner_labelled_by_instance(
    locks: Locks,
):
    first = await locks.acquire("invoice:42")
    assert isinstance(first, Lock)
    assert first.key == "invoice:42"
    assert first.held
    random_part, at, label = first.owner.partition("@")
    assert len(random_part) == 32
    int(random_part, 16)
    assert (at, label) == ("@", f"{socket.gethostname()}:{os.getpid()}")
    assert await first.release() is True
    second = await locks.acquire("invoice:42")
    assert second is not None
    assert second.owner != first.owner
    assert second.fencing_token > first.fencing_token


async def test_the_instance_label_is_set_once_and_travels_in_every_owner_id(store, clock):
    async with Locks(store=store, clock=clock, instance="shop-3002") as locks:
        assert locks.instance == "shop-3002"
        lock = await locks.acquire("k")
        assert lock is not None
        assert lock.owner.endswith("@shop-3002")
        assert store._rows["k"].owner == lock.owner


@pytest.mark.parametrize(
    ("label", "message"),
    [
        ("", "pass a label of 1 to 100"),
        ("x" * 101, "1 to 100"),
        ("a\nb", "not printable"),
        (3, "3"),
    ],
)
def test_a_bad_instance_label_is_refused_with_an_example(label: object, message: str):
    with pytest.raises(LocksConfigurationError, match=message):
        Locks(instance=label)  # type: ignore[arg-type]


async def test_acquire_of_a_held_key_returns_none_without_waiting(locks: Locks):
    held = await locks.acquire("k")
    assert held is not None
    assert await locks.acquire("k") is None


async def test_release_returns_false_the_second_time(locks: Locks):
    lock = await locks.acquire("k")
    assert lock is not None
    assert await lock.release() is True
    assert await lock.release() is False
    assert not lock.held


async def test_async_with_on_a_lock_releases_it_even_when_the_block_raises(locks: Locks):
    lock = await locks.acquire("k")
    assert lock is not None
    with pytest.raises(RuntimeError, match="inside"):
        async with lock:
            raise RuntimeError("inside")
    assert not lock.held
    assert await locks.acquire("k") is not None


async def test_hold_gives_the_lock_and_current_lock_inside_only(locks: Locks):
    assert current_lock() is None
    async with locks.hold("k") as lock:
        assert current_lock() is lock
        assert lock.held
    assert current_lock() is None
    assert not lock.held


async def test_current_lock_crosses_awaits_and_tasks_created_inside(locks: Locks):
    async def seen_from_a_task() -> Lock | None:
        await yield_once()
        return current_lock()

    async with locks.hold("k") as lock:
        await wait_all_tasks_blocked()
        assert current_lock() is lock
        assert await asyncio.create_task(seen_from_a_task()) is lock


async def test_nested_holds_restore_the_outer_lock(locks: Locks):
    async with locks.hold("outer") as outer:
        async with locks.hold("inner") as inner:
            assert current_lock() is inner
        assert current_lock() is outer


async def test_hold_raises_lock_not_acquired_naming_the_key_and_the_fix(locks: Locks):
    await locks.acquire("k")
    with pytest.raises(LockNotAcquiredError, match=r"'k' is held by another owner.*wait=") as info:
        async with locks.hold("k"):
            pytest.fail("the block must not run")
    assert info.value.key == "k"
    assert info.value.waited_ms == 0


async def test_with_lock_runs_an_async_function_under_the_lock_and_returns_its_result(
    locks: Locks,
):
    async def export() -> dict[str, int]:
        lock = current_lock()
        assert lock is not None
        assert lock.key == "invoices:nightly-export"
        return {"exported": 3, "token": lock.fencing_token}

    result = await locks.with_lock("invoices:nightly-export", export)
    assert result["exported"] == 3
    assert await locks.acquire("invoices:nightly-export") is not None


async def test_with_lock_runs_a_sync_function_in_a_worker_thread_with_the_lock(locks: Locks):
    seen: list[tuple[str, bool]] = []

    def count() -> int:
        lock = current_lock()
        assert lock is not None
        seen.append((lock.key, threading.current_thread() is threading.main_thread()))
        return 7

    assert await locks.with_lock("count", count) == 7
    assert seen == [("count", False)]


async def test_with_lock_awaits_what_a_sync_callable_returns(locks: Locks):
    async def export(batch: str) -> str:
        return f"exported {batch}"

    assert await locks.with_lock("k", lambda: export("b1")) == "exported b1"


async def test_with_lock_releases_when_the_function_raises(locks: Locks):
    async def fail() -> None:
        raise ValueError("upload refused")

    with pytest.raises(ValueError, match="upload refused"):
        await locks.with_lock("k", fail)
    assert await locks.acquire("k") is not None


async def test_with_lock_does_not_run_the_function_when_the_key_is_held(locks: Locks):
    ran: list[int] = []

    async def work() -> None:
        ran.append(1)

    await locks.acquire("k")
    with pytest.raises(LockNotAcquiredError):
        await locks.with_lock("k", work)
    assert ran == []


class PassThrough:
    """The in-memory store as a plain class, for doubles that break its shape or its answers."""

    def __init__(self, clock: ManualClock) -> None:
        self.inner = InMemoryLockStore(clock=clock)

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        return await self.inner.acquire(key, owner, ttl_ms)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        return await self.inner.renew(key, owner, ttl_ms)

    async def release(self, key: str, owner: str) -> bool:
        return await self.inner.release(key, owner)


def faulty(clock: ManualClock) -> FaultyStore:
    """The in-memory store behind a FaultyStore: faults on demand, every call recorded."""
    return FaultyStore(InMemoryLockStore(clock=clock), clock=clock)


async def test_a_failed_release_is_logged_never_raised_over_the_result(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
):
    async def export() -> str:
        return "done"

    store = faulty(clock)
    store.fail("release")
    async with Locks(store=store, clock=clock) as locks:
        with caplog.at_level(logging.WARNING, logger="leaselock"):
            assert await locks.with_lock("k", export) == "done"
        store.heal()
    assert 'Could not release "k"; it expires on its own' in caplog.text
    assert "InjectedFaultError" in caplog.text


async def test_an_explicit_release_that_fails_raises_lock_store_error(clock: ManualClock):
    store = faulty(clock)
    async with Locks(store=store, clock=clock) as locks:
        lock = await locks.acquire("k")
        assert lock is not None
        store.fail("release")
        with pytest.raises(LockStoreError, match=r"release failed: InjectedFaultError"):
            await lock.release()
        assert not lock.held
        store.heal()


async def test_a_store_that_fails_on_acquire_raises_lock_store_error(clock: ManualClock):
    store = faulty(clock)
    store.fail("acquire")
    async with Locks(store=store, clock=clock) as locks:
        with pytest.raises(
            LockStoreError, match=r"acquire failed: InjectedFaultError: .*unreachable"
        ):
            await locks.acquire("k")


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("42", r"fencing token '42' as str; return an int"),
        (0, r"fencing token 0; tokens are positive integers below 2\*\*53"),
        (-3, r"fencing token -3; tokens are positive"),
        (2**53, r"fencing token 9007199254740992; tokens are positive"),
        (True, r"fencing token True as bool; return an int"),
        (4.0, r"fencing token 4.0 as float"),
    ],
)
async def test_a_token_outside_the_contract_is_refused_and_no_lock_is_believed_held(
    clock: ManualClock, token: object, message: str
):
    class BadTokens(PassThrough):
        async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
            await self.inner.acquire(key, owner, ttl_ms)
            return Acquired(token)  # type: ignore[arg-type]

    store = BadTokens(clock)
    async with Locks(store=store, clock=clock) as locks:
        with pytest.raises(LockStoreError, match=message):
            await locks.acquire("k")
        await wait_all_tasks_blocked()
        assert await store.inner.acquire("k", "someone", 1000) == Acquired(2)


@pytest.mark.parametrize("age", [-1, 2.5, "10", True])
async def test_a_lease_age_outside_the_contract_is_refused_and_no_lock_is_believed_held(
    clock: ManualClock, age: object
):
    class BadAges(PassThrough):
        async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
            answer = await self.inner.acquire(key, owner, ttl_ms)
            assert isinstance(answer, Acquired)
            return Acquired(answer.fencing_token, age)  # type: ignore[arg-type]

    store = BadAges(clock)
    async with Locks(store=store, clock=clock) as locks:
        with pytest.raises(
            LockStoreError,
            match=rf"returned lease_age_ms={age!r}; return a whole number of milliseconds",
        ):
            await locks.acquire("k")
        await wait_all_tasks_blocked()
        assert await store.inner.acquire("k", "someone", 1000) == Acquired(2)


async def test_a_store_answering_something_else_than_a_result_is_refused(clock: ManualClock):
    class Weird(PassThrough):
        async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
            return True  # type: ignore[return-value]

    async with Locks(store=Weird(clock), clock=clock) as locks:
        with pytest.raises(
            LockStoreError, match=r"returned True; return leaselock.stores.Acquired"
        ):
            await locks.acquire("k")


# --- lifecycle -----------------------------------------------------------------------------


async def test_using_a_locks_before_start_names_the_fix():
    locks = Locks(allow_in_memory_storage=True)
    with pytest.raises(LocksConfigurationError, match=r"not started; use `async with locks:`"):
        await locks.acquire("k")


async def test_starting_twice_is_refused(locks: Locks):
    with pytest.raises(LocksConfigurationError, match="already started; create a new Locks"):
        await locks.start()


async def test_after_close_the_locks_cannot_be_used_or_restarted(store, clock):
    locks = Locks(store=store, clock=clock)
    await locks.start()
    await locks.aclose()
    await locks.aclose()
    with pytest.raises(LocksConfigurationError, match="closed, not started"):
        await locks.acquire("k")
    with pytest.raises(LocksConfigurationError, match="already closed"):
        await locks.start()


async def test_close_releases_every_held_lock_and_aborts_its_signal(store, clock):
    locks = Locks(store=store, clock=clock)
    await locks.start()
    lock = await locks.acquire("k")
    assert lock is not None
    await locks.aclose()
    assert not lock.held
    reason = lock.signal.reason
    assert reason is not None
    assert reason.detected_by == "shutdown"
    assert isinstance(await store.acquire("k", "next", 1000), Acquired)


async def test_start_logs_the_store_without_its_password(caplog: pytest.LogCaptureFixture):
    class UrlStore(PassThrough):
        def __repr__(self) -> str:
            return "UrlStore('postgresql://app:s3cret@db.internal:5432/shop', password=hunter2)"

    with caplog.at_level(logging.INFO, logger="leaselock"):
        async with Locks(store=UrlStore(ManualClock())):
            pass
    assert (
        "leaselock started on UrlStore('postgresql://app:***@db.internal:5432/shop'" in caplog.text
    )
    assert "s3cret" not in caplog.text
    assert "hunter2" not in caplog.text


@pytest.mark.parametrize("variable", ["LEASELOCK_ENV", "ENV", "APP_ENV"])
async def test_production_without_a_store_refuses_to_start_and_says_why(
    monkeypatch: pytest.MonkeyPatch, variable: str
):
    monkeypatch.setenv(variable, "Production")
    locks = Locks()
    with pytest.raises(
        LocksConfigurationError,
        match=rf"{variable}=production.*ONE process.*SQLiteLockStore.*allow_in_memory_storage",
    ):
        await locks.start()
    assert not locks.started


async def test_production_with_the_in_memory_store_allowed_starts(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LEASELOCK_ENV", "production")
    async with Locks(allow_in_memory_storage=True) as locks:
        assert await locks.acquire("k") is not None


async def test_production_with_an_explicit_store_starts(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("APP_ENV", "production")
    async with Locks(store=InMemoryLockStore()) as locks:
        assert locks.started


async def test_a_locks_is_refused_on_another_event_loop(locks: Locks):
    def elsewhere() -> None:
        async def use() -> None:
            await locks.acquire("k")

        asyncio.run(use())

    with pytest.raises(LocksConfigurationError, match="started on another event loop"):
        await asyncio.to_thread(elsewhere)


# --- argument checks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ttl": 0}, "ttl=0 is zero"),
        ({"ttl": -5}, "negative"),
        ({"ttl": float("nan")}, r"ttl=nan is not a finite number of seconds"),
        ({"ttl": 1j}, r"ttl=1j \(complex\) is not a duration"),
        ({"ttl": True}, "is a bool"),
        ({"ttl": "ten seconds"}, "not a duration"),
        ({"ttl": "500d"}, "longer than one year"),
        ({"clock": object()}, "is not a clock; pass None"),
        ({"allow_in_memory_storage": "yes"}, "pass True or False"),
        ({"store": object()}, r"has no acquire\(\) method; a lock store implements"),
    ],
)
def test_bad_constructor_arguments_are_refused_with_the_fix(kwargs: dict, message: str):
    with pytest.raises(LocksConfigurationError, match=message):
        Locks(**kwargs)


def test_a_store_class_passed_instead_of_an_instance_is_refused_naming_the_fix():
    with pytest.raises(LocksConfigurationError, match=r"is a class; pass an instance of it"):
        Locks(store=InMemoryLockStore)  # type: ignore[arg-type]


def test_a_url_passed_as_the_store_is_refused_naming_store_from_url_without_its_password():
    with pytest.raises(LocksConfigurationError, match=r"store_from_url\(url\)") as refused:
        Locks(store="postgresql://app:s3cret@db:5432/shop")  # type: ignore[arg-type]
    assert "s3cret" not in str(refused.value)
    assert "postgresql://app:***@db:5432/shop" in str(refused.value)


async def test_a_plain_with_on_hold_or_a_lock_says_use_async_with_or_sync_locks(locks: Locks):
    with (
        pytest.raises(TypeError, match=r"use `async with locks.hold\(...\)`, or .*SyncLocks"),
        locks.hold("k"),
    ):
        pass
    lock = await locks.acquire("k")
    assert lock is not None
    with pytest.raises(TypeError, match=r"use `async with lock`, or .*SyncLocks"), lock:
        pass
    assert lock.held, "a refused with takes nothing and gives nothing back"


async def test_current_lock_is_the_lock_inside_async_with_lock_and_none_after(locks: Locks):
    lock = await locks.acquire("k")
    assert lock is not None
    async with lock:
        assert current_lock() is lock
    assert current_lock() is None
    assert not lock.held


async def test_the_in_memory_store_says_at_start_that_it_excludes_one_process_only(
    caplog: pytest.LogCaptureFixture,
):
    with caplog.at_level(logging.INFO, logger="leaselock"):
        async with Locks(clock=ManualClock()):
            pass
    (line,) = [r.getMessage() for r in caplog.records if "leaselock started on" in r.getMessage()]
    assert "it excludes callers in this process only" in line
    assert "SQLiteLockStore" in line


def test_a_store_whose_methods_are_not_coroutines_is_refused():
    class Blocking:
        def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
            return NotAcquired()

        async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
            return False

        async def release(self, key: str, owner: str) -> bool:
            return False

    with pytest.raises(LocksConfigurationError, match=r"acquire\(\) that is not a coroutine"):
        Locks(store=Blocking())  # type: ignore[arg-type]


@pytest.mark.parametrize("ttl", ["3ms", "99ms", 0.05, timedelta(milliseconds=10)])
def test_a_ttl_too_short_for_real_time_is_refused_saying_why(ttl):
    with pytest.raises(LocksConfigurationError, match=r"shorter than 100 ms: a store round trip"):
        Locks(ttl=ttl)


def test_a_manual_clock_allows_any_ttl_it_can_divide_by_three():
    assert Locks(ttl="3ms", clock=ManualClock()).ttl_ms == 3


async def test_a_call_with_a_ttl_too_short_for_real_time_is_refused():
    async with Locks(allow_in_memory_storage=True) as locks:
        with pytest.raises(LocksConfigurationError, match="shorter than 100 ms"):
            await locks.acquire("k", ttl="20ms")
        assert await locks.acquire("k", ttl="100ms") is not None


def test_a_store_missing_one_method_is_named():
    class NoRenew:
        async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult: ...
        async def release(self, key: str, owner: str) -> bool: ...

    with pytest.raises(LocksConfigurationError, match=r"has no renew\(\) method.*async def renew"):
        Locks(store=NoRenew())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda l: l.acquire(""), "key is empty"),
        (lambda l: l.acquire("x" * 501), "501 characters"),
        (lambda l: l.acquire(7), "key=7 is a int"),
        (lambda l: l.acquire("k", wait=-1), "wait=-1 is negative"),
        (lambda l: l.acquire("k", wait="forever"), "wait='forever' is not a duration"),
        (lambda l: l.acquire("k", ttl=0), "ttl=0 is zero"),
        (lambda l: l.acquire("k", signal=asyncio.Event()), "is not a LockSignal"),
        (lambda l: l.with_lock("k", "export"), "is not callable; pass the function itself"),
        (lambda l: l.with_lock("k", print, cancel_on_loss=True), "needs an async fn"),
    ],
)
async def test_bad_call_arguments_are_refused_with_the_fix(locks: Locks, call, message: str):
    with pytest.raises(LocksConfigurationError, match=message):
        await call(locks)


async def test_bad_hold_arguments_are_refused_when_hold_is_called(locks: Locks):
    with pytest.raises(LocksConfigurationError, match="key is empty"):
        locks.hold("")
    with pytest.raises(LocksConfigurationError, match=r"cancel_on_loss=1; pass True or False"):
        locks.hold("k", cancel_on_loss=1)  # type: ignore[arg-type]


async def test_the_configuration_errors_are_value_errors_too():
    with pytest.raises(ValueError, match="ttl"):
        Locks(ttl="0s")


async def test_closing_ends_a_wait_in_progress_with_none(store, clock):
    locks = Locks(store=store, clock=clock)
    await locks.start()
    await store.acquire("k", "someone-else", 3_600_000)
    waiting = asyncio.create_task(locks.acquire("k", wait="1h"))
    await wait_all_tasks_blocked()
    await locks.aclose()
    assert await waiting is None
    assert clock.next_due_ms is None


async def test_an_acquire_still_at_the_store_when_closing_is_handed_back_not_held(clock):
    store = faulty(clock)
    stuck = store.hang("acquire")
    locks = Locks(store=store, clock=clock)
    await locks.start()
    acquiring = asyncio.create_task(locks.acquire("k"))
    await wait_all_tasks_blocked()
    assert stuck.hits == 1
    closing = asyncio.create_task(locks.aclose())
    await wait_all_tasks_blocked()
    stuck.release()
    assert await acquiring is None
    await closing
    assert store.inner._rows == {}
    assert clock.next_due_ms is None


async def test_a_cancelled_close_still_finishes_and_a_second_close_waits_for_it(store, clock):
    locks = Locks(store=store, clock=clock)
    await locks.start()
    held = await locks.acquire("k")
    assert held is not None
    closing = asyncio.create_task(locks.aclose())
    await yield_once()
    closing.cancel()
    await locks.aclose()
    assert not held.held
    assert store._rows == {}
    assert clock.next_due_ms is None


class ListenerRefused(PassThrough):
    """Opens fine, then refuses to follow releases; records its lifecycle."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.lifecycle: list[str] = []

    async def open(self) -> None:
        self.lifecycle.append("open")

    async def aclose(self) -> None:
        self.lifecycle.append("close")

    def follow_releases(self, on_release: object) -> object:
        raise PermissionError("LISTEN is not allowed for this user")


async def test_a_failed_start_closes_what_it_opened_and_can_be_retried(clock):
    store = ListenerRefused(clock)
    locks = Locks(store=store, clock=clock)
    with pytest.raises(PermissionError, match="LISTEN"):
        await locks.start()
    assert store.lifecycle == ["open", "close"]
    assert not locks.started
    with pytest.raises(PermissionError):
        await locks.start()
