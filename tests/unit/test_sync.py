"""SyncLocks: the same engine for threads, through a loop thread of its own."""

import asyncio
import inspect
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from leaselock import (
    LockLostError,
    LockNotAcquiredError,
    Locks,
    LocksConfigurationError,
    SyncLock,
    SyncLocks,
    current_lock,
)
from leaselock.stores import InMemoryLockStore

# Locks' public async methods that SyncLocks has no method of the same name for, and why
WITHOUT_A_TWIN = {
    "aclose": "a thread closes with SyncLocks.close() (`with` calls it): there is nothing to await",
}

# the twins that do more than carry the call across to Locks on the loop thread, and why
OWN_TWINS = {
    "start": "it starts the loop thread first, then Locks on it",
    "acquire": "it returns a SyncLock, whose release blocks",
    "with_lock": "fn runs in the calling thread: sync functions only, and no cancel_on_loss",
}


def public_async_methods() -> list[str]:
    return sorted(
        name
        for name, member in vars(Locks).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(member)
    )


def carried_across() -> list[str]:
    """Locks' async methods whose sync twin only carries the call to the loop thread."""
    return [name for name in public_async_methods() if name not in WITHOUT_A_TWIN | OWN_TWINS]


def required_arguments(name: str) -> list[str]:
    """A key for each argument ``Locks.<name>`` requires (those methods require keys only)."""
    parameters = list(inspect.signature(getattr(Locks, name)).parameters.values())[1:]
    return ["k" for parameter in parameters if parameter.default is parameter.empty]


@pytest.fixture
def sync_locks():
    with SyncLocks(store=InMemoryLockStore(), ttl="30s") as started:
        yield started


def test_acquire_and_release_from_a_thread(sync_locks: SyncLocks):
    lock = sync_locks.acquire("k")
    assert isinstance(lock, SyncLock)
    assert lock.held
    assert sync_locks.acquire("k") is None
    assert lock.release() is True
    assert lock.release() is False
    assert not lock.held


def test_hold_sets_current_lock_in_the_calling_thread(sync_locks: SyncLocks):
    with sync_locks.hold("k") as lock:
        inside = current_lock()
        assert inside is not None
        assert inside.fencing_token == lock.fencing_token
        assert inside.key == "k"
    assert current_lock() is None
    assert sync_locks.acquire("k") is not None


def test_hold_of_a_held_key_raises_not_acquired(sync_locks: SyncLocks):
    held = sync_locks.acquire("k")
    assert held is not None
    with (
        pytest.raises(LockNotAcquiredError, match="'k' is held by another owner"),
        sync_locks.hold("k"),
    ):
        pytest.fail("the block must not run")


def test_with_lock_runs_the_function_in_the_callers_thread(sync_locks: SyncLocks):
    caller = threading.get_ident()

    def export() -> int:
        assert threading.get_ident() == caller
        lock = current_lock()
        assert lock is not None
        return lock.fencing_token

    assert sync_locks.with_lock("k", export) >= 1


def test_eight_threads_racing_with_lock_never_overlap_and_see_growing_tokens(
    sync_locks: SyncLocks,
):
    guard = threading.Lock()
    inside = 0
    overlaps = 0
    tokens: list[int] = []

    def critical_section() -> None:
        nonlocal inside, overlaps
        with guard:
            inside += 1
            overlaps += inside > 1
            lock = current_lock()
            assert lock is not None
            tokens.append(lock.fencing_token)
        with guard:
            inside -= 1

    def worker() -> None:
        for _ in range(25):
            sync_locks.with_lock("shared", critical_section, wait="1m")

    with ThreadPoolExecutor(max_workers=8) as pool:
        for future in [pool.submit(worker) for _ in range(8)]:
            future.result()
    assert overlaps == 0
    assert len(tokens) == 200
    assert tokens == sorted(set(tokens))


def test_a_thread_sees_the_loss_through_the_signal():
    store = InMemoryLockStore()
    with SyncLocks(store=store, ttl="300ms") as sync_locks, sync_locks.hold("k") as lock:
        del store._rows["k"]
        assert lock.signal.wait_blocking(timeout=10)
        with pytest.raises(LockLostError):
            lock.signal.raise_if_aborted()


def test_using_it_before_start_names_the_fix():
    sync_locks = SyncLocks(allow_in_memory_storage=True)
    with pytest.raises(LocksConfigurationError, match=r"not started; use `with locks:`"):
        sync_locks.acquire("k")


def test_bad_arguments_are_refused_in_the_calling_thread(sync_locks: SyncLocks):
    with pytest.raises(LocksConfigurationError, match="key is empty"):
        sync_locks.acquire("")
    with pytest.raises(LocksConfigurationError, match="wait=-1 is negative"):
        sync_locks.acquire("k", wait=-1)

    async def coroutine_function() -> None:
        return None

    with pytest.raises(LocksConfigurationError, match="not a sync function"):
        sync_locks.with_lock("k", coroutine_function)  # type: ignore[arg-type]
    with pytest.raises(LocksConfigurationError, match="ttl"):
        SyncLocks(ttl=0)


def test_a_sync_call_from_the_loop_thread_is_refused_instead_of_deadlocking(
    sync_locks: SyncLocks,
):
    errors: list[BaseException] = []
    handled = threading.Event()

    def on_event(event: object) -> None:
        try:
            sync_locks.acquire("inner")
        except LocksConfigurationError as error:
            errors.append(error)
        handled.set()

    sync_locks.events.subscribe(on_event)
    store = sync_locks.locks.store
    assert isinstance(store, InMemoryLockStore)
    lock = sync_locks.acquire("k", ttl="300ms")
    assert lock is not None
    del store._rows["k"]
    assert handled.wait(timeout=10)
    assert len(errors) == 1
    assert "this thread runs an event loop" in str(errors[0])
    assert "await locks.acquire(...)" in str(errors[0])


async def test_sync_calls_from_a_coroutine_are_refused_naming_the_async_api():
    sync_locks = SyncLocks(allow_in_memory_storage=True)
    with pytest.raises(LocksConfigurationError, match=r"SyncLocks\.start blocks its thread"):
        sync_locks.__enter__()
    await asyncio.to_thread(sync_locks.start)
    try:
        with pytest.raises(LocksConfigurationError, match=r"await locks\.acquire\(\.\.\.\)"):
            sync_locks.acquire("k", wait="1s")
        with pytest.raises(LocksConfigurationError, match=r"SyncLocks\.hold blocks"):
            sync_locks.hold("k").__enter__()
        with pytest.raises(LocksConfigurationError, match=r"SyncLocks\.with_lock blocks"):
            sync_locks.with_lock("k", lambda: None)
        lock = await asyncio.to_thread(sync_locks.acquire, "k")
        assert lock is not None
        with pytest.raises(LocksConfigurationError, match=r"SyncLocks\.release blocks"):
            lock.release()
        assert await asyncio.to_thread(lock.release)
    finally:
        await asyncio.to_thread(sync_locks.close)


def test_job_status_inspect_and_break_from_a_thread(sync_locks: SyncLocks):
    @sync_locks.without_overlapping(key="feed:import")
    def import_feed() -> str:
        return "imported"

    assert import_feed() == "imported"
    status = sync_locks.job_status("feed:import")
    assert status.last_run is not None
    assert status.last_run.outcome == "ok"
    assert [s.job for s in sync_locks.jobs()] == ["feed:import"]
    held = sync_locks.acquire("orders:1")
    assert held is not None
    assert [(i.key, i.owner) for i in sync_locks.inspect("orders:")] == [("orders:1", held.owner)]
    one = sync_locks.read_lock("orders:1")
    assert one is not None
    assert (one.owner, one.fencing_token) == (held.owner, held.fencing_token)
    broken = sync_locks.break_lock("orders:1")
    assert broken is not None
    assert broken.fencing_token == held.fencing_token
    assert sync_locks.read_lock("orders:1") is None


def test_a_release_on_one_loop_hands_the_key_to_a_waiter_in_line_on_another():
    store = InMemoryLockStore()
    # two SyncLocks: two loop threads, so the grant crosses from one loop to the other
    with SyncLocks(store=store, ttl="30s") as here, SyncLocks(store=store, ttl="30s") as there:
        held = here.acquire("shared")
        assert held is not None
        with ThreadPoolExecutor(max_workers=1) as pool:
            waiting = pool.submit(there.acquire, "shared", wait="10s")
            until_queued(store, "shared")
            assert held.release()
            lock = waiting.result(timeout=5)
        assert lock is not None
        assert lock.fencing_token > held.fencing_token
        assert lock.release()


def until_queued(store: InMemoryLockStore, key: str) -> None:
    """Let the other loop's waiter take its place in ``key``'s line (it runs on a thread)."""
    deadline = time.monotonic() + 5  # noqa: TID251 -- another thread's loop, real time
    while not store._lines.get(key):
        assert time.monotonic() < deadline, f"nobody stood in the line of {key!r}"  # noqa: TID251
        time.sleep(0.01)  # noqa: TID251 -- another thread's loop cannot be awaited


def test_every_public_async_method_of_locks_has_a_blocking_twin_of_its_name():
    assert set(WITHOUT_A_TWIN) | set(OWN_TWINS) <= set(public_async_methods())
    missing = [
        name
        for name in public_async_methods()
        if name not in WITHOUT_A_TWIN
        and not (
            callable(getattr(SyncLocks, name, None))
            and not inspect.iscoroutinefunction(getattr(SyncLocks, name))
        )
    ]
    assert missing == []


@pytest.mark.parametrize("name", carried_across())
def test_an_operator_twin_has_the_signature_of_the_async_method(name: str):
    assert inspect.signature(getattr(SyncLocks, name)) == inspect.signature(getattr(Locks, name))
    # bound, as users and their editors see it: self is gone from both, and nothing is awaited
    twin = getattr(SyncLocks(allow_in_memory_storage=True), name)
    method = getattr(Locks(allow_in_memory_storage=True), name)
    assert inspect.signature(twin) == inspect.signature(method)


@pytest.mark.parametrize("name", carried_across())
def test_an_operator_twin_has_the_docs_of_the_async_method(name: str):
    assert inspect.getdoc(getattr(SyncLocks, name)) == inspect.getdoc(getattr(Locks, name))


@pytest.mark.parametrize("name", carried_across())
async def test_an_operator_twin_called_from_a_coroutine_is_refused_naming_the_async_call(
    name: str,
):
    sync_locks = SyncLocks(allow_in_memory_storage=True)
    await asyncio.to_thread(sync_locks.start)
    try:
        with pytest.raises(
            LocksConfigurationError,
            match=rf"SyncLocks\.{name} blocks its thread.*`await locks\.{name}\(\.\.\.\)`",
        ):
            getattr(sync_locks, name)(*required_arguments(name))
    finally:
        await asyncio.to_thread(sync_locks.close)


@pytest.mark.parametrize("name", carried_across())
def test_an_operator_twin_before_start_and_after_close_names_the_fix(name: str):
    sync_locks = SyncLocks(allow_in_memory_storage=True)
    twin = getattr(sync_locks, name)
    with pytest.raises(LocksConfigurationError, match=r"not started; use `with locks:`"):
        twin(*required_arguments(name))
    with sync_locks:
        pass
    with pytest.raises(LocksConfigurationError, match=r"not started; use `with locks:`"):
        twin(*required_arguments(name))
