"""What one running instance of the shop is made of, kept on ``app.state.shop``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette

from leaselock import Locks

from .clients import AccountingClient, WarehouseClient
from .feed import WarehouseFeed
from .jobs import InvoiceExportJob, StockReconciliationJob
from .settings import Settings


@dataclass(eq=False)
class Shop:
    """One instance of the shop: its settings, database, locks, clients and jobs."""

    settings: Settings
    engine: AsyncEngine
    locks: Locks
    accounting: AccountingClient
    warehouse: WarehouseClient
    invoice_export: InvoiceExportJob
    stock_reconciliation: StockReconciliationJob
    warehouse_feed: WarehouseFeed
    # an apscheduler AsyncIOScheduler (untyped) while the application runs, else None
    scheduler: Any = None


def shop_of(app: Starlette) -> Shop:
    """Return the shop an application built by ``create_app`` runs.

    Raises:
        TypeError: ``app`` was not built by ``shop.app.create_app``.
    """
    shop = getattr(app.state, "shop", None)
    if not isinstance(shop, Shop):
        raise TypeError(f"{app!r} has no shop; build it with shop.app.create_app(settings)")
    return shop
