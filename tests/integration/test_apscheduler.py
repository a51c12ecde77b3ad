"""APScheduler 3 fires decorated jobs through its own machinery; leaselock keeps them to one."""

import asyncio
import threading
from datetime import UTC, datetime

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.schedulers.background import BackgroundScheduler

import leaselock
from leaselock import Locks, SyncLocks, current_lock
from leaselock.stores import InMemoryLockStore


class StockReconciliationJob:
    def __init__(self, name: str) -> None:
        self.name = name

    @leaselock.on_one_instance(key="inventory:stock-reconciliation")
    @leaselock.without_overlapping()
    async def reconcile_stock(self) -> str:
        lock = current_lock()
        assert lock is not None
        return f"{self.name} with token {lock.fencing_token}"


class InvoiceExportJob:
    def __init__(self, name: str) -> None:
        self.name = name
        self.thread = 0

    @leaselock.on_one_instance(key="invoices:nightly-export")
    def export(self) -> str:
        self.thread = threading.get_ident()
        assert current_lock() is not None
        return self.name


def fire_now(scheduler: AsyncIOScheduler | BackgroundScheduler, job_id: str) -> None:
    """Make the scheduler run the job at once, as if its trigger fired."""
    scheduler.get_job(job_id).modify(next_run_time=datetime.now(UTC))


async def test_three_asyncio_schedulers_fire_the_job_and_it_runs_on_one_instance(store, clock):
    results: asyncio.Queue[JobExecutionEvent] = asyncio.Queue()
    instances = []
    for n in range(3):
        locks = Locks(store=store, clock=clock)
        job = locks.register(StockReconciliationJob(f"instance-{n}"))
        await locks.start()
        scheduler = AsyncIOScheduler(timezone="Europe/Warsaw")
        scheduler.add_job(job.reconcile_stock, "cron", minute="*/5", id="reconcile")
        scheduler.add_listener(results.put_nowait, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        scheduler.start()
        instances.append((locks, scheduler))
    try:
        for tick in range(2):
            for _, scheduler in instances:
                fire_now(scheduler, "reconcile")
            events = [await asyncio.wait_for(results.get(), timeout=10) for _ in range(3)]
            assert all(event.exception is None for event in events)
            ran = [event.retval for event in events if event.retval is not None]
            assert len(ran) == 1, f"tick {tick}: {ran}"
            assert ran[0].startswith("instance-0")
    finally:
        for locks, scheduler in instances:
            scheduler.shutdown(wait=False)
            await locks.aclose()


def test_three_background_schedulers_run_a_sync_job_on_one_instance_in_their_threads():
    store = InMemoryLockStore()
    done = threading.Semaphore(0)
    events: list[JobExecutionEvent] = []

    def record(event: JobExecutionEvent) -> None:
        events.append(event)
        done.release()

    instances = []
    for n in range(3):
        locks = SyncLocks(store=store)
        locks.start()
        job = locks.register(InvoiceExportJob(f"instance-{n}"))
        scheduler = BackgroundScheduler(timezone="Europe/Warsaw")
        scheduler.add_job(job.export, "cron", hour=2, id="export")
        scheduler.add_listener(record, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        scheduler.start()
        instances.append((locks, scheduler, job))
    try:
        for _, scheduler, _ in instances:
            fire_now(scheduler, "export")
        for _ in range(3):
            assert done.acquire(timeout=10)
    finally:
        for locks, scheduler, _ in instances:
            scheduler.shutdown(wait=True)
            locks.close()
    assert all(event.exception is None for event in events)
    winners = [event.retval for event in events if event.retval is not None]
    assert len(winners) == 1
    owner = next(job for _, _, job in instances if job.name == winners[0])
    assert owner.thread not in {0, threading.get_ident()}
