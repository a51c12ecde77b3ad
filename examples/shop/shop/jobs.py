"""The two scheduled jobs: the nightly invoice export and the stock reconciliation.

Each job is a class whose scheduled method is what the scheduler calls on every instance, and
whose plain method does the work. The export's decorators are leaselock's shared form: they only
mark the method, and each instance's ``Locks`` binds the object it registers, so three instances
of the shop can run in one process (the tests) as well as in three. The reconciliation is bound
in ``create_app`` with ``locks.on_one_instance(...)`` instead, because its dead-man's switch
(``expect_every``) comes from the settings.

Both write their tables (fenced: see ``models.py``) inside ``fenced(session, lock)`` with the
run's lock, so the database refuses the commit of a run whose lock a newer run has taken and
written under since: it raises ``StaleFencingTokenError`` and every row keeps the newer run's
write.
"""

from __future__ import annotations

import logging
import uuid
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from pydantic import BaseModel
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

import leaselock
from leaselock import Lock, current_lock
from leaselock.integrations.sqlalchemy import fenced, unfenced

from .clients import AccountingClient, Invoice, WarehouseClient
from .models import Order, OrderStatus, Product

INVOICE_EXPORT_KEY: Final = "invoices:nightly-export"
STOCK_RECONCILIATION_KEY: Final = "inventory:stock-reconciliation"

_log = logging.getLogger("shop")


def _writing(session: AsyncSession, lock: Lock | None) -> AbstractAsyncContextManager[AsyncSession]:
    """Fence the writes of ``session`` with ``lock``; without one, let them through unfenced.

    No lock is the shop without leaselock (``LEASELOCK_JOBS=false``) or without the token
    (``FENCED_STOCK_WRITES=false``): the problem the shop shows, so its writes go through on
    purpose, where the fenced tables would refuse them.
    """
    return unfenced(session) if lock is None else fenced(session, lock)


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
        is lost before it, and the marks are fenced by the lock's token.

        Raises:
            LockLostError: the lock was lost before the upload; nothing was booked or marked.
            StaleFencingTokenError: a newer holder of the lock marked orders before this run
                did; this run's marks are refused, the newer run's stay.
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
        # marked even if the lease has ended now: accounting has booked the batch, and the mark
        # says so; only the still-unmarked orders are touched, and the fence refuses the marks
        # only where a newer run has marked orders since (it has exported these too)
        async with AsyncSession(self._engine) as session, _writing(session, lock):
            await session.execute(
                update(Order)
                .where(Order.id.in_([order.id for order in orders]), Order.invoice_batch.is_(None))
                .values(invoice_batch=batch_id, invoiced_at=datetime.now(UTC))
            )
            await session.commit()
        _log.info("Exported %d invoices to accounting as %s", len(orders), batch_id)
        return ExportResult(exported=len(orders), batch_id=batch_id)


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """What a reconciliation run did."""

    counted: int
    # None: written without a token (plain cron, or FENCED_STOCK_WRITES=false)
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

        The counts are written in one transaction, inside ``fenced(session, lock)``: all of them,
        each product stamped with the token, or none.

        Args:
            lock: the run's lock. ``None`` (plain cron) writes without a token: a late write of
                an older run then overwrites a newer one.

        Raises:
            LockLostError: the lock was lost during the count; nothing was written.
            StaleFencingTokenError: a newer run wrote the stock while this one counted (it was
                paused past its lease); nothing was written, the newer run's counts stay.
        """
        signal = None if lock is None else lock.signal
        counts = await self._warehouse.count_stock(signal=signal)
        if signal is not None:
            signal.raise_if_aborted()
        fence = lock if self._fenced_writes else None
        async with AsyncSession(self._engine) as session, _writing(session, fence):
            for product_id, in_stock in sorted(counts.items()):
                await session.execute(
                    update(Product).where(Product.id == product_id).values(in_stock=in_stock)
                )
            await session.commit()
        token = None if fence is None else fence.fencing_token
        _log.info(
            "Stock reconciled (%s): %d products written",
            "unfenced" if token is None else f"fencing token {token}",
            len(counts),
        )
        return Reconciliation(counted=len(counts), fencing_token=token)
