"""Stand-ins for the external systems: the accounting system and the warehouse.

They run in-process and count what they are asked, so a test (or the demo) can tell how many
times an invoice was booked and how many stock counts were requested. A test can also hold calls
open (:meth:`AccountingClient.hold_uploads`, :meth:`WarehouseClient.hold_counts`) to model a
month-end count that takes long, or an instance that pauses in the middle of one, and then
resume them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Self, final

from leaselock import LockSignal

from .seed import PRODUCTS

__all__ = [
    "AccountingClient",
    "Booking",
    "HeldCalls",
    "Invoice",
    "LowStockAlert",
    "LowStockAlerts",
    "WarehouseClient",
]

_log = logging.getLogger("shop")

SEED_STOCK: Final = {product["id"]: int(product["in_stock"]) for product in PRODUCTS}

# the stand-in warehouse's pace when it sends alerts on its own (the demo): cats eat kibble
ALERTED_PRODUCT: Final = "salmon-kibble-2kg"
LOWEST_ALERTED_STOCK: Final = 1


@final
class HeldCalls:
    """The next ``calls`` calls of a stand-in wait at their start until :meth:`resume`.

    A held call still stops at its caller's lock signal: a caller whose lock is lost meanwhile
    gets :class:`~leaselock.LockLostError` at once, as a well-behaved client would raise.
    """

    def __init__(self, calls: int) -> None:
        """Hold the next ``calls`` calls."""
        self._capacity = calls
        self._arrived = 0
        self._all_arrived = asyncio.Event()
        self._resumed = asyncio.Event()

    def _takes_another(self) -> bool:
        return self._arrived < self._capacity

    async def wait_until_held(self) -> None:
        """Return once all ``calls`` calls have arrived and wait."""
        await self._all_arrived.wait()

    def resume(self) -> None:
        """Let the held calls (and any later one this hold takes) go on."""
        self._resumed.set()

    async def _hold(self, signal: LockSignal | None) -> None:
        self._arrived += 1
        if self._arrived == self._capacity:
            self._all_arrived.set()
        waits: set[asyncio.Future[object]] = {asyncio.ensure_future(self._resumed.wait())}
        if signal is not None:
            waits.add(asyncio.ensure_future(signal.wait()))
        _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for wait in pending:
            wait.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if signal is not None:
            signal.raise_if_aborted()


@final
class _Holds:
    """The holds a stand-in was given, in order; each call joins the first that takes it."""

    def __init__(self) -> None:
        self._holds: list[HeldCalls] = []

    def add(self, calls: int) -> HeldCalls:
        hold = HeldCalls(calls)
        self._holds.append(hold)
        return hold

    def resume_all(self) -> None:
        for hold in self._holds:
            hold.resume()

    async def pass_through(self, signal: LockSignal | None) -> None:
        for hold in self._holds:
            if hold._takes_another():  # noqa: SLF001 -- the holds and their calls are one concept
                await hold._hold(signal)  # noqa: SLF001
                return
        if signal is not None:
            signal.raise_if_aborted()


@dataclass(frozen=True, slots=True)
class Invoice:
    """One order's invoice, as the accounting system receives it."""

    order_id: str
    user_id: str
    total_cents: int


@dataclass(frozen=True, slots=True)
class Booking:
    """A batch the accounting system booked, and which instance uploaded it."""

    batch_id: str
    order_ids: tuple[str, ...]
    uploaded_by: str
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


@final
class AccountingClient:
    """The accounting system: books batches of invoices, every time it is asked.

    It does not deduplicate, as many real ones don't: an invoice uploaded three times is booked
    three times. ``ledger``, when given, is a file where each booked invoice is also appended as
    one JSON line, so that processes that each have their own client share one record.
    """

    def __init__(self, *, ledger: Path | None = None) -> None:
        """Create an accounting system that has booked nothing yet."""
        self._ledger = ledger
        self.uploads_asked = 0
        self.bookings: list[Booking] = []
        self._holds = _Holds()

    def times_booked(self, order_id: str) -> int:
        """Return how many times the invoice of ``order_id`` was booked."""
        return sum(booking.order_ids.count(order_id) for booking in self.bookings)

    def hold_uploads(self, calls: int = 1) -> HeldCalls:
        """Hold the next ``calls`` uploads open until the returned hold is resumed."""
        return self._holds.add(calls)

    def resume_held_uploads(self) -> None:
        """Resume every hold of :meth:`hold_uploads` (a test that ends early)."""
        self._holds.resume_all()

    async def upload_batch(
        self,
        batch_id: str,
        invoices: Sequence[Invoice],
        *,
        uploaded_by: str,
        signal: LockSignal | None = None,
    ) -> None:
        """Book ``invoices`` as the batch ``batch_id``.

        Raises:
            LockLostError: ``signal`` aborted before the batch was booked; nothing was booked.
        """
        self.uploads_asked += 1
        await self._holds.pass_through(signal)
        booking = Booking(batch_id, tuple(invoice.order_id for invoice in invoices), uploaded_by)
        self.bookings.append(booking)
        if self._ledger is not None:
            await asyncio.to_thread(_append_to_ledger, self._ledger, booking)


def _append_to_ledger(ledger: Path, booking: Booking) -> None:
    lines = "".join(
        json.dumps(
            {
                "order_id": order_id,
                "batch_id": booking.batch_id,
                "uploaded_by": booking.uploaded_by,
                "at": booking.at.isoformat(),
            }
        )
        + "\n"
        for order_id in booking.order_ids
    )
    with ledger.open("a", encoding="utf-8") as file:
        file.write(lines)


@dataclass(frozen=True, slots=True)
class LowStockAlert:
    """The warehouse's word that a product runs low."""

    product_id: str
    left: int


@final
class LowStockAlerts:
    """One connection to the warehouse's low-stock alerts: ``async for alert in alerts``.

    The iteration ends when the signal it was opened with aborts: the warehouse drops a
    subscriber that no longer holds the lease.
    """

    def __init__(self, subscriber: str) -> None:
        """Open a connection for ``subscriber`` (internal: see ``low_stock_alerts``)."""
        self.subscriber = subscriber
        self._queue: asyncio.Queue[LowStockAlert | None] = asyncio.Queue()

    def _deliver(self, alert: LowStockAlert | None) -> None:
        self._queue.put_nowait(alert)

    def __aiter__(self) -> Self:
        """Return the connection itself."""
        return self

    async def __anext__(self) -> LowStockAlert:
        """Return the next alert; stop once the connection is closed."""
        alert = await self._queue.get()
        if alert is None:
            # put back: a second reader stops too
            self._queue.put_nowait(None)
            raise StopAsyncIteration
        return alert


@final
class WarehouseClient:
    """The warehouse: full stock counts on request, and a stream of low-stock alerts."""

    def __init__(self, stock: Mapping[str, int] | None = None) -> None:
        """Create a warehouse holding ``stock`` (product id -> count; default the seed's)."""
        self._stock = dict(SEED_STOCK if stock is None else stock)
        self.counts_asked = 0
        self.connections_opened = 0
        self._connections: list[LowStockAlerts] = []
        self._holds = _Holds()

    def set_stock(self, product_id: str, count: int) -> None:
        """Change what is on the shelves: the next count reads ``count`` of ``product_id``."""
        self._stock[product_id] = count

    def hold_counts(self, calls: int = 1) -> HeldCalls:
        """Hold the next ``calls`` counts open (after they read the shelves) until resumed."""
        return self._holds.add(calls)

    def resume_held_counts(self) -> None:
        """Resume every hold of :meth:`hold_counts` (a test that ends early)."""
        self._holds.resume_all()

    async def count_stock(self, *, signal: LockSignal | None = None) -> dict[str, int]:
        """Count every product: a full count, slow at month end.

        Raises:
            LockLostError: ``signal`` aborted during the count; its result would be stale.
        """
        self.counts_asked += 1
        # the shelves are read first: a count that is then held open returns what it read
        counted = dict(self._stock)
        await self._holds.pass_through(signal)
        return counted

    @property
    def subscribers(self) -> list[str]:
        """Who is connected to the low-stock alerts now."""
        return [connection.subscriber for connection in self._connections]

    @asynccontextmanager
    async def low_stock_alerts(
        self, *, subscriber: str, signal: LockSignal
    ) -> AsyncIterator[LowStockAlerts]:
        """Connect to the low-stock alerts until the block ends or ``signal`` aborts."""
        connection = LowStockAlerts(subscriber)
        self._connections.append(connection)
        self.connections_opened += 1
        stop_on_loss = signal.add_callback(lambda _reason: connection._deliver(None))  # noqa: SLF001 -- the warehouse owns its connections
        try:
            yield connection
        finally:
            stop_on_loss()
            self._connections.remove(connection)

    def publish_low_stock(self, product_id: str, left: int) -> int:
        """Send a low-stock alert to every connection; return how many got it."""
        alert = LowStockAlert(product_id, left)
        for connection in self._connections:
            connection._deliver(alert)  # noqa: SLF001 -- the warehouse owns its connections
        return len(self._connections)

    async def send_alerts_every(self, seconds: float) -> None:
        """Run a stand-in's day: every ``seconds``, one salmon kibble bag fewer, and an alert."""
        while True:
            # the pace of a pretend warehouse, not lock timing: no lease depends on it
            await asyncio.sleep(seconds)  # noqa: TID251
            left = max(LOWEST_ALERTED_STOCK, self._stock.get(ALERTED_PRODUCT, 0) - 1)
            self._stock[ALERTED_PRODUCT] = left
            self.publish_low_stock(ALERTED_PRODUCT, left)
