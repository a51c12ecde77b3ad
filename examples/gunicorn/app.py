"""A WSGI app served by gunicorn workers, with a job that runs on ONE worker per tick.

Run it (three workers, the app loaded once before the fork)::

    LEASELOCK_DB=/tmp/locks.db gunicorn --preload -w 3 -c gunicorn.conf.py app:app

The SyncLocks is MADE here, at import, and STARTED in each worker (gunicorn.conf.py's post_fork):
one started before the fork would be the master's, whose loop thread the workers never get.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

from leaselock import SyncLocks
from leaselock.stores import SQLiteLockStore

locks = SyncLocks(store=SQLiteLockStore(os.environ["LEASELOCK_DB"]), ttl="3s")
RECORD = os.environ.get("LEASELOCK_RECORD")


def _record(line: str) -> None:
    if RECORD:
        with open(RECORD, "a") as record:  # noqa: PTH123 -- one short append per tick
            record.write(f"{line} {os.getpid()} {int(time.time())}\n")


@locks.on_one_instance(key="gunicorn:stock-reconciliation")
def reconcile_stock() -> None:
    """The job: every worker's scheduler fires it each second; one worker runs it."""
    _record("ran")


def tick() -> None:
    """What each worker's scheduler calls every second."""
    _record("fired")
    reconcile_stock()


def app(_environ: dict[str, object], start_response: Callable[..., object]) -> Iterable[bytes]:
    """Answer which worker this is."""
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [f"worker {os.getpid()}\n".encode()]
