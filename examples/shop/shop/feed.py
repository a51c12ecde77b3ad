"""The warehouse feed: ONE instance listens to the warehouse's low-stock alerts.

Listening on every instance would log (and, in a real shop, reorder) each alert three times. A
leader election picks one; the leader listens with its lease's signal, so the warehouse drops
the connection as soon as the leader learns that it lost the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

import leaselock
from leaselock import Lock

from .clients import WarehouseClient

WAREHOUSE_FEED_KEY: Final = "inventory:warehouse-feed"

_log = logging.getLogger("shop")


@leaselock.leader_election(WAREHOUSE_FEED_KEY)
class WarehouseFeed:
    """Connects to the warehouse's low-stock alerts while this instance leads."""

    def __init__(self, warehouse: WarehouseClient, *, instance_name: str) -> None:
        """Listen to ``warehouse`` as ``instance_name`` when elected."""
        self._warehouse = warehouse
        self._instance_name = instance_name
        self._listening: asyncio.Task[None] | None = None

    async def on_leadership_acquired(self, lock: Lock) -> None:
        """Connect to the alerts, for as long as ``lock`` is held."""
        self._listening = asyncio.create_task(self._listen(lock))

    async def on_leadership_lost(self, lock: Lock) -> None:
        """Disconnect (it already has if the lease was lost: the signal closed the stream)."""
        listening, self._listening = self._listening, None
        if listening is not None:
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listening
        _log.info(
            "No longer leading the warehouse feed (fencing token %d)",
            lock.fencing_token,
            extra={"instance": self._instance_name},
        )

    async def _listen(self, lock: Lock) -> None:
        extra = {"instance": self._instance_name}
        try:
            async with self._warehouse.low_stock_alerts(
                subscriber=self._instance_name, signal=lock.signal
            ) as alerts:
                _log.info(
                    "Connected to the warehouse's low-stock alerts (fencing token %d)",
                    lock.fencing_token,
                    extra=extra,
                )
                async for alert in alerts:
                    _log.warning(
                        "Low stock: %d left of %s", alert.left, alert.product_id, extra=extra
                    )
        finally:
            _log.info(
                "Disconnected from the warehouse's low-stock alerts (%s)",
                "lease lost" if lock.signal.aborted else "stepped down",
                extra=extra,
            )
