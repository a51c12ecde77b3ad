"""The two scheduled jobs: the nightly invoice export and the stock reconciliation.

Each job is a class whose scheduled method is what the scheduler calls on every instance, and
whose plain method does the work. The export's decorators are leaselock's shared form: they only
mark the method, and each instance's ``Locks`` binds the object it registers, so three instances
of the shop can run in one process (the tests) as well as in three. The reconciliation is bound
in ``create_app`` with ``locks.on_one_instance(...)`` instead, because its dead-man's switch
(``expect_every``) comes from the settings.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from pydantic import BaseModel
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

import leaselock
from leaselock import Lock, current_lock

from .clients import AccountingClient, Invoice, WarehouseClient
from .models import Order, OrderStatus, Product

INVOICE_EXPORT_KEY: Final = "invoices:nightly-export"
STOCK_RECONCILIATION_KEY: Final = "inventory:stock-reconciliation"

_log = logging.getLogger("shop")


class ExportResult(BaseModel):
    """What an export did: how many invoices it sent, in which batch (``None``: none)."""

    exported: int
    batch_id: str | None


class InvoiceExportJob:
    """Uploads every placed order without an invoice to accounting, as one batch."""

    def __init__(
        self, engine: AsyncEngine, accounting: AccountingClient, *, instance_name: str
    ) -> None:
        """Export the orders of ``engine``'s database to ``accounting``."""
        self._engine = engine
        self._accounting = accounting
        self._instance_name = instance_name

    @leaselock.on_one_instance(key=INVOICE_EXPORT_KEY)
    @leaselock.without_overlapping()
    async def export_nightly(self) -> ExportResult | None:
        """Run the scheduled export on one instance, never two at once.

        Returns:
            What :meth:`export` did, or ``None`` where leaselock skipped the tick.
        """
        return await self.export()

    async def export(self) -> ExportResult:
        """Upload every placed order without an invoice, then mark them with the batch id.

        Every such order, not "yesterday's": an order missed by a failed night goes out the next.
        Under a lock (the scheduled run, or the admin endpoint's), the upload stops if the lock
        is lost before it.

        Raises:
            LockLostError: the lock was lost before the upload; nothing was booked or marked.
        """
        lock = current_lock()
        async with self._engine.connect() as connection:
            orders = (
                await connection.execute(
                    select(Order.id, Order.user_id, Order.total_cents)
                    .where(Order.status == OrderStatus.PLACED, Order.invoice_batch.is_(None))
                    .order_by(Order.id)
                )
            ).all()
        if not orders:
            _log.info("No orders to export")
            return ExportResult(exported=0, batch_id=None)
        batch_id = f"batch_{uuid.uuid4().hex[:12]}"
        await self._accounting.upload_batch(
            batch_id,
            [Invoice(order.id, order.user_id, order.total_cents) for order in orders],
            uploaded_by=self._instance_name,
            signal=None if lock is None else lock.signal,
        )
        # marked even if the lock is lost now: accounting has booked the batch, and the mark
        # says so; only the still-unmarked orders are touched
        async with self._engine.begin() as connection:
            await connection.execute(
                update(Order)
                .where(Order.id.in_([order.id for order in orders]), Order.invoice_batch.is_(None))
                .values(invoice_batch=batch_id, invoiced_at=datetime.now(UTC))
            )
        _log.info("Exported %d invoices to accounting as %s", len(orders), batch_id)
        return ExportResult(exported=len(orders), batch_id=batch_id)


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """What a reconciliation run did."""

    counted: int
    written: int
    stale_writes: int
    fencing_token: int | None


class StockReconciliationJob:
    """Asks the warehouse for a full count and writes it to the products table."""

    def __init__(
        self, engine: AsyncEngine, warehouse: WarehouseClient, *, fenced_writes: bool = True
    ) -> None:
        """Write ``warehouse``'s counts to ``engine``'s database, fenced unless told not to."""
        self._engine = engine
        self._warehouse = warehouse
        self._fenced_writes = fenced_writes

    async def reconcile_stock(self) -> Reconciliation:
        """Run the scheduled reconciliation, under the run lock ``create_app`` binds it to.

        ``create_app`` wraps it in ``on_one_instance`` and ``without_overlapping`` on
        ``inventory:stock-reconciliation``: the wrapped call returns ``None`` where leaselock
        skipped the tick.

        Returns:
            What :meth:`reconcile` did.
        """
        # the run lock: a new fencing token every run, and the signal of this run
        lock = current_lock()
        if lock is None:
            raise RuntimeError("reconcile_stock ran without its run lock; call it through Locks")
        return await self.reconcile(lock)

    async def reconcile(self, lock: Lock | None = None) -> Reconciliation:
        """Count the stock and write each product's count, fenced by ``lock``'s token.

        Args:
            lock: the run's lock. ``None`` (plain cron) writes without a token: a late write of
                an older run then overwrites a newer one.

        Raises:
            LockLostError: the lock was lost during the count; nothing was written.
        """
        signal = None if lock is None else lock.signal
        counts = await self._warehouse.count_stock(signal=signal)
        if signal is not None:
            signal.raise_if_aborted()
        token = lock.fencing_token if lock is not None and self._fenced_writes else None
        stale = 0
        async with self._engine.begin() as connection:
            for product_id, in_stock in sorted(counts.items()):
                if token is None:
                    write = (
                        update(Product).where(Product.id == product_id).values(in_stock=in_stock)
                    )
                    await connection.execute(write)
                    continue
                # a row written by a newer run (higher token) is left alone: the check and the
                # write are one statement, so no newer write can slip in between
                fenced_write = (
                    update(Product)
                    .where(Product.id == product_id, Product.stock_fencing_token <= token)
                    .values(in_stock=in_stock, stock_fencing_token=token)
                )
                if (await connection.execute(fenced_write)).rowcount == 0:
                    stale += 1
        if stale:
            _log.warning(
                "Skipped %d stale stock writes: a newer run (token > %d) wrote those products",
                stale,
                token,
            )
        written = len(counts) - stale
        _log.info(
            "Stock reconciled (%s): %d of %d products written",
            "unfenced" if token is None else f"fencing token {token}",
            written,
            len(counts),
        )
        return Reconciliation(
            counted=len(counts), written=written, stale_writes=stale, fencing_token=token
        )
