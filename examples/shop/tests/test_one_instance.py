"""2. With leaselock: each tick runs on one instance, always the same one."""

from __future__ import annotations

import pytest

from shop.jobs import ExportResult, Reconciliation
from shop.schedule import INVOICE_EXPORT_JOB, STOCK_RECONCILIATION_JOB
from shop.seed import PLACED_ORDER_IDS
from shop_harness import Cluster

RUNS_HERE = "inventory:stock-reconciliation runs on this instance"
SKIPPED_ELSEWHERE = "Skipped inventory:stock-reconciliation: it runs on another instance"


async def test_one_tick_on_three_instances_books_every_invoice_once(cluster: Cluster) -> None:
    instances = await cluster.start_many(3)
    exports = await cluster.fire(INVOICE_EXPORT_JOB, *instances)
    ran = [export for export in exports if export is not None]
    assert len(ran) == 1
    assert isinstance(ran[0], ExportResult)
    assert ran[0].exported == 3
    assert [booking.order_ids for booking in cluster.accounting.bookings] == [PLACED_ORDER_IDS]
    for order_id in PLACED_ORDER_IDS:
        assert cluster.accounting.times_booked(order_id) == 1


async def test_two_reconciliation_ticks_on_three_instances_make_two_counts(
    cluster: Cluster, logs: pytest.LogCaptureFixture
) -> None:
    instances = await cluster.start_many(3)
    first = await cluster.fire(STOCK_RECONCILIATION_JOB, *instances)
    second = await cluster.fire(STOCK_RECONCILIATION_JOB, *instances)
    assert cluster.warehouse.counts_asked == 2
    owner = [run is not None for run in first]
    assert owner.count(True) == 1
    assert [run is not None for run in second] == owner, "the same instance runs every tick"
    runs = [run for run in first + second if isinstance(run, Reconciliation)]
    assert runs[0].fencing_token is not None
    assert runs[1].fencing_token is not None
    assert runs[1].fencing_token > runs[0].fencing_token, "every run has a token of its own"
    assert logs.text.count(RUNS_HERE) == 1
    assert logs.text.count(SKIPPED_ELSEWHERE) == 4
