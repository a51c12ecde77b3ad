"""A Locks or SyncLocks started before a fork is refused at once in the child, never hung."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection

import pytest

from leaselock import Locks, SyncLocks
from leaselock._engine import new_owner
from leaselock.stores import InMemoryLockStore

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="this platform cannot fork")

CHILD_SECONDS = 10


def in_forked_child(work: Callable[[], str]) -> str:
    """Run ``work`` in a forked child; return what it says, or that it hung."""
    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)

    def child(pipe: Connection) -> None:
        try:
            pipe.send(work())
        except BaseException as error:  # noqa: BLE001 -- the parent reads what happened
            pipe.send(f"{type(error).__name__}: {error}")

    with warnings.catch_warnings():
        # Python 3.12+ warns about forking a process with threads: that is the case under test
        warnings.simplefilter("ignore", DeprecationWarning)
        process = context.Process(target=child, args=(writer,))
        process.start()
    process.join(CHILD_SECONDS)
    if process.is_alive():
        process.kill()
        process.join()
        return "HUNG"
    return str(reader.recv()) if reader.poll() else f"exited {process.exitcode} silently"


def test_a_sync_locks_started_before_a_fork_is_refused_in_the_child():
    with SyncLocks(store=InMemoryLockStore()) as locks:

        def hold_in_child() -> str:
            with locks.hold("k", wait="1s"):
                return "held"

        said = in_forked_child(hold_in_child)
        assert said.startswith("LocksConfigurationError: This SyncLocks was started in the parent")
        assert "post_fork" in said
        assert locks.acquire("k") is not None, "the parent's SyncLocks still works"


def test_closing_an_inherited_sync_locks_in_the_child_leaves_the_parents_alone():
    store = InMemoryLockStore()
    with SyncLocks(store=store) as locks:
        lock = locks.acquire("k")
        assert lock is not None

        def close_in_child() -> str:
            locks.close()
            return "closed"

        assert in_forked_child(close_in_child) == "closed"
        assert lock.held
        assert "k" in store._rows


async def test_a_locks_started_before_a_fork_is_refused_in_the_child():
    async with Locks(store=InMemoryLockStore()) as locks:

        def acquire_in_child() -> str:
            async def acquire() -> str:
                return repr(await locks.acquire("k", wait="1s"))

            return asyncio.run(acquire())

        said = in_forked_child(acquire_in_child)
        assert said.startswith("LocksConfigurationError: This Locks was started in the parent")
        assert await locks.acquire("k") is not None


def test_a_sync_locks_made_but_not_started_before_the_fork_starts_in_the_child():
    locks = SyncLocks(store=InMemoryLockStore())

    def start_in_child() -> str:
        with locks, locks.hold("k") as lock:
            return f"token {lock.fencing_token}"

    assert in_forked_child(start_in_child) == "token 1"


def test_a_forked_child_draws_owner_ids_of_its_own():
    # the child's first ids against the parent's next: without a reseed at the fork, the two
    # would draw the same ids, and one could release what the other acquired
    said = in_forked_child(lambda: " ".join(new_owner("child") for _ in range(3)))
    in_child = {owner.split("@")[0] for owner in said.split()}
    in_parent = {new_owner("parent").split("@")[0] for _ in range(3)}
    assert len(in_child) == 3, said
    assert not in_child & in_parent
