"""1. Plain cron, without leaselock: every instance runs every tick (the problem)."""

from __future__ import annotations

import asyncio

from shop.schedule import INVOICE_EXPORT_JOB, STOCK_RECONCILIATION_JOB
from shop.seed import PLACED_ORDER_IDS
from shop_harness import Cluster


async def test_one_tick_on_three_instances_books_every_invoice_three_times(
    plain_cluster: Cluster,
) -> None:
    instances = await plain_cluster.start_many(3, leaselock_jobs=False)
    # replicas' cron ticks coincide: hold each upload until all three instances are uploading,
    # so that no instance marks the orders before another has read them
    uploads = plain_cluster.accounting.hold_uploads(3)
    tick = asyncio.create_task(plain_cluster.fire(INVOICE_EXPORT_JOB, *instances))
    await uploads.wait_until_held()
    uploads.resume()
    exports = await tick
    assert [export.exported for export in exports] == [3, 3, 3]
    assert len({export.batch_id for export in exports}) == 3
    for order_id in PLACED_ORDER_IDS:
        assert plain_cluster.accounting.times_booked(order_id) == 3


async def test_one_tick_on_three_instances_asks_the_warehouse_for_three_counts(
    plain_cluster: Cluster,
) -> None:
    instances = await plain_cluster.start_many(3, leaselock_jobs=False)
    reconciliations = await plain_cluster.fire(STOCK_RECONCILIATION_JOB, *instances)
    assert plain_cluster.warehouse.counts_asked == 3
    assert [run.counted for run in reconciliations] == [3, 3, 3]
