"""A Celery app whose periodic task runs ONCE per tick, with a beat on every replica.

Every replica runs a worker and its own beat, so each tick reaches the workers once per replica,
each message to ONE worker process of the shared queue, whichever takes it.
``without_overlapping(min_hold=...)`` keeps the run lock for a while after the run started, so
the first message of a tick runs and its duplicates skip, wherever they land. (Not
``on_one_instance``: its sticky owner fits schedulers that fire on every instance; with a queue,
every message of a tick may land on processes that are not the owner, and the tick is missed.)::

    celery -A tasks worker            # on every replica
    celery -A tasks beat              # on every replica too: no single beat to keep alive

The SyncLocks is made here and started in each worker process (``worker_process_init``): one
started in the parent before Celery forks its pool would be refused in the children.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta
from typing import Any

from celery import Celery  # type: ignore[import-untyped]
from celery.schedules import schedstate, schedule  # type: ignore[import-untyped]
from celery.signals import (  # type: ignore[import-untyped]
    task_prerun,
    worker_process_init,
    worker_process_shutdown,
)

from leaselock import SyncLocks
from leaselock.stores.redis import RedisLockStore

BROKER = os.environ.get("CELERY_BROKER_URL", "redis://localhost:6379/0")
RECORD = os.environ.get("LEASELOCK_RECORD")
TICK_S = float(os.environ.get("TICK_SECONDS", "60"))

app = Celery("shop", broker=BROKER)
app.conf.task_default_queue = os.environ.get("CELERY_QUEUE", "celery")
app.conf.worker_hijack_root_logger = False

PREFIX = os.environ.get("LEASELOCK_PREFIX", "shop:leaselock:")

locks = SyncLocks(store=RedisLockStore.from_url(BROKER, prefix=PREFIX), ttl="30s")


class every(schedule):  # type: ignore[misc]  # noqa: N801 -- named as Celery's schedules are
    """A tick at every multiple of ``run_every`` on the wall clock: all beats fire together."""

    def is_due(self, last_run_at: datetime) -> schedstate:
        """Due once per period, at the period's boundary."""
        period = self.run_every.total_seconds()
        now = time.time()
        boundary = now - now % period
        return schedstate(last_run_at.timestamp() < boundary, period - now % period)


app.conf.beat_schedule = {
    "reconcile-stock": {"task": "reconcile_stock", "schedule": every(timedelta(seconds=TICK_S))}
}


@worker_process_init.connect  # type: ignore[untyped-decorator]
def start_locks(**_: Any) -> None:  # noqa: ANN401 -- Celery's signal arguments
    """Start this worker process's SyncLocks, after the pool's fork."""
    locks.start()


@worker_process_shutdown.connect  # type: ignore[untyped-decorator]
def close_locks(**_: Any) -> None:  # noqa: ANN401 -- Celery's signal arguments
    """Hand this worker process's leases back."""
    locks.close()


def record(what: str) -> None:
    """Note a message received or a run, with the tick it belongs to."""
    if RECORD:
        tick = int(time.time() // TICK_S)
        with open(RECORD, "a") as lines:  # noqa: PTH123 -- one short append per line
            lines.write(f"{what} {os.getpid()} {tick} {time.time():.3f}\n")


@task_prerun.connect  # type: ignore[untyped-decorator]
def received(**_: Any) -> None:  # noqa: ANN401 -- Celery's signal arguments
    """Every message a worker starts, duplicates included."""
    record("received")


@app.task(name="reconcile_stock")  # type: ignore[untyped-decorator]
@locks.without_overlapping(key="shop:stock-reconciliation", min_hold=TICK_S / 2)
def reconcile_stock() -> None:
    """Ask the warehouse for a count and write it: once per tick, on whichever worker."""
    record("ran")
