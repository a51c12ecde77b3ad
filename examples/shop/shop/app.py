"""The application factory: one call, one instance of the shop.

Several instances can run in one process (the tests run three on one database), each with its
own engine, ``Locks``, scheduler and jobs, exactly as separate processes would have.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI

from leaselock import Locks
from leaselock.integrations.asgi import locks_lifespan
from leaselock.integrations.dashboard import dashboard
from leaselock.testing import ManualClock

from . import admin
from .clients import AccountingClient, WarehouseClient
from .database import create_engine
from .feed import WarehouseFeed
from .jobs import STOCK_RECONCILIATION_KEY, InvoiceExportJob, StockReconciliationJob
from .locking import make_lock_store
from .schedule import Tick, start_scheduler
from .settings import Settings
from .state import Shop, shop_of

# where the operator's dashboard is mounted; `make demo` prints its URL
DASHBOARD_PATH = "/admin/locks"


def create_app(
    settings: Settings,
    *,
    clock: ManualClock | None = None,
    store_clock: ManualClock | None = None,
    accounting: AccountingClient | None = None,
    warehouse: WarehouseClient | None = None,
) -> FastAPI:
    """Build one instance of the shop; it starts and stops with the ASGI lifespan.

    Args:
        settings: the instance's settings (``Settings()`` reads them from the environment).
        clock: the clock of this instance's ``Locks`` (tests: a ``ManualClock``; one that is
            never advanced makes a paused instance). Default: the system clock.
        store_clock: where a SQLite lock store reads expiry (tests: the clock every instance
            shares, the "database's clock"). PostgreSQL and Redis keep their own time.
        accounting: the accounting system to book invoices in (tests share one among
            instances). Default: a stand-in of this instance's own.
        warehouse: the warehouse to count stock and hear alerts from, likewise.

    Returns:
        The FastAPI application; ``app.state.shop`` holds its parts (see :func:`shop_of`).
    """
    engine = create_engine(settings.database_url)
    if accounting is None:
        accounting = AccountingClient(ledger=settings.fake_accounting_ledger)
    if warehouse is None:
        warehouse = WarehouseClient()
    locks = Locks(
        store=make_lock_store(settings, engine, store_clock=store_clock),
        ttl=settings.lock_ttl,
        clock=clock,
        instance=settings.instance_name,
        event_log=settings.event_log,
    )
    invoice_export = InvoiceExportJob(engine, accounting, instance_name=settings.instance_name)
    stock_reconciliation = StockReconciliationJob(
        engine, warehouse, fenced_writes=settings.fenced_stock_writes
    )
    warehouse_feed = locks.register(WarehouseFeed(warehouse, instance_name=settings.instance_name))
    export_tick: Tick
    reconcile_tick: Tick
    if settings.leaselock_jobs:
        export_tick = locks.register(invoice_export).export_nightly
        # every run is recorded in the lock store; no success anywhere for expect_every, and
        # every instance warns (job-overdue) until one succeeds (job-recovered)
        reconcile_tick = locks.on_one_instance(
            key=STOCK_RECONCILIATION_KEY, expect_every=settings.stock_reconciliation_expect_every
        )(locks.without_overlapping()(stock_reconciliation.reconcile_stock))
    else:
        # plain cron: every instance runs every tick, as before leaselock
        export_tick, reconcile_tick = invoice_export.export, stock_reconciliation.reconcile
    # the operator's dashboard, behind the same ADMIN_TOKEN as the admin API: operators sign in
    # with it (and a name, which every action's audit line carries)
    admin_dashboard = dashboard(
        locks, token=settings.admin_token.get_secret_value(), title="Cat food shop: locks"
    )
    shop = Shop(
        settings=settings,
        engine=engine,
        locks=locks,
        accounting=accounting,
        warehouse=warehouse,
        invoice_export=invoice_export,
        stock_reconciliation=stock_reconciliation,
        warehouse_feed=warehouse_feed,
    )

    @contextlib.asynccontextmanager
    async def run_scheduler(_app: FastAPI) -> AsyncIterator[None]:
        # started inside the running Locks, so its jobs run under it
        shop.scheduler = start_scheduler(
            settings.timezone,
            export_invoices=(settings.invoice_export_cron, export_tick),
            reconcile_stock=(settings.stock_reconciliation_cron, reconcile_tick),
        )
        alert_every_s = settings.fake_warehouse_alert_every_s
        alerts = (
            None
            if alert_every_s is None
            else asyncio.create_task(warehouse.send_alerts_every(alert_every_s))
        )
        try:
            yield
        finally:
            # its reads stop, and a run asked for from its page ends, before the Locks closes
            await admin_dashboard.aclose()
            # no new ticks; runs in progress finish when the Locks closes, right after this
            shop.scheduler.shutdown(wait=False)
            shop.scheduler = None
            if alerts is not None:
                alerts.cancel()
                await asyncio.gather(alerts, return_exceptions=True)

    run_locks = locks_lifespan(locks, inner=run_scheduler)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            async with run_locks(app):
                yield
        finally:
            # after the Locks: the PostgreSQL lock store hands its leases back through it
            await engine.dispose()

    app = FastAPI(title="Cat food shop", lifespan=lifespan)
    app.state.shop = shop
    app.include_router(admin.router)
    app.mount(DASHBOARD_PATH, admin_dashboard)

    @app.get("/health")
    async def health() -> dict[str, str]:
        """Say that this instance is up, and which one it is."""
        return {"status": "ok", "instance": shop_of(app).settings.instance_name}

    return app
