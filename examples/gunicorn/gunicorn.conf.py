"""gunicorn hooks: start leaselock in each worker after the fork, close it when the worker exits."""

from __future__ import annotations

from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler  # type: ignore[import-untyped]

schedulers: list[BackgroundScheduler] = []


def post_fork(server: Any, worker: Any) -> None:  # noqa: ANN401, ARG001 -- gunicorn's hook signature
    """Start this worker's SyncLocks, then its scheduler: a tick at every second."""
    from app import locks, tick  # noqa: PLC0415 -- the app module, loaded by --preload

    locks.start()
    scheduler = BackgroundScheduler()
    scheduler.add_job(tick, "cron", second="*")
    scheduler.start()
    schedulers.append(scheduler)


def worker_exit(server: Any, worker: Any) -> None:  # noqa: ANN401, ARG001 -- gunicorn's hook signature
    """Stop ticking, then hand this worker's leases back."""
    from app import locks  # noqa: PLC0415

    for scheduler in schedulers:
        scheduler.shutdown(wait=True)
    locks.close()
