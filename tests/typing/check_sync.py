"""SyncLocks' operator methods, as mypy sees them: Locks' arguments, and its results unawaited."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, assert_type

from leaselock import JobPause, JobStatus, LockInfo, SyncLocks


def operators_block_and_return_what_locks_returns(locks: SyncLocks) -> None:
    assert_type(locks.job_status("feed:import"), JobStatus)
    assert_type(locks.jobs(), list[JobStatus])
    assert_type(locks.inspect("orders:", limit=10), list[LockInfo])
    assert_type(locks.read_lock("orders:1"), LockInfo | None)
    assert_type(locks.break_lock("orders:1", by="alice"), LockInfo | None)
    assert_type(locks.pause("reports:*", note="migration", until="2h", by="alice"), JobPause)
    assert_type(locks.pause("reports:*", until=timedelta(hours=2)), JobPause)
    assert_type(locks.resume("reports:*", by="alice"), JobPause | None)
    assert_type(locks.pauses(), list[JobPause])
    assert_type(locks.run_now("feed:import", by="alice"), Any)


def operator_arguments_are_checked_by_name_and_type(locks: SyncLocks) -> None:
    locks.pause("reports:*", note=3)  # type: ignore[arg-type]
    locks.pause("reports:*", reason="migration")  # type: ignore[call-arg]
    locks.pause("reports:*", "migration")  # type: ignore[call-arg]
    locks.inspect("orders:", limit="10")  # type: ignore[arg-type]
    locks.resume()  # type: ignore[call-arg]
    locks.jobs("feed:import")  # type: ignore[call-arg]
