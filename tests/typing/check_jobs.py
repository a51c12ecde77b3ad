"""Public-API snippets that mypy must accept; ``assert_type`` pins what users see."""

from __future__ import annotations

from typing import assert_type

import leaselock
from leaselock import Lock, Locks, SyncLock, SyncLocks


class Job:
    @leaselock.on_one_instance(key="k")
    @leaselock.without_overlapping()
    async def run(self, batch: str) -> int:
        return len(batch)

    @leaselock.on_one_instance(key="sync")
    def count(self) -> int:
        return 1


async def a_skipped_tick_is_none_in_the_type(job: Job, locks: Locks) -> None:
    assert_type(await job.run("b1"), int | None)
    assert_type(job.count(), int | None)

    @locks.without_overlapping(key="bound")
    async def report(day: str) -> str:
        return day

    assert_type(await report("monday"), str | None)


async def locks_give_locks(locks: Locks) -> None:
    assert_type(await locks.acquire("k"), Lock | None)
    async with locks.hold("k", wait="2s") as lock:
        assert_type(lock.fencing_token, int)

    async def export() -> dict[str, int]:
        return {"exported": 3}

    assert_type(await locks.with_lock("k", export), dict[str, int])


def threads_give_sync_locks(locks: SyncLocks) -> None:
    assert_type(locks.acquire("k"), SyncLock | None)
    assert_type(locks.with_lock("k", lambda: 3), int)


def job_options_are_checked_by_name_and_type(locks: Locks, threads: SyncLocks) -> None:
    locks.on_one_instance(key="k", owner_idle="5m", catch_up="latest", cancel_on_loss=True)
    locks.on_one_instance(key="k", owner_idel="5m")  # type: ignore[call-arg]
    threads.without_overlapping(key="k", max_run="1h", overlap="buffer_one")
    # a thread cannot be cancelled: the sync form has no cancel_on_loss
    threads.without_overlapping(key="k", cancel_on_loss=True)  # type: ignore[call-arg]
    leaselock.without_overlapping(overlap="sometimes")  # type: ignore[arg-type]
