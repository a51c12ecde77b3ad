"""3. An owner whose clock stands still loses its job to another instance after the ttl."""

from __future__ import annotations

import re

import pytest

from shop.jobs import ExportResult
from shop.schedule import INVOICE_EXPORT_JOB
from shop.seed import PLACED_ORDER_IDS
from shop_harness import Cluster

LEASE_TAKEN = re.compile(r"invoices:nightly-export runs on this instance .*fencing token (\d+)\)")


async def test_after_ttl_on_the_databases_clock_another_instance_exports_the_new_order(
    cluster: Cluster, logs: pytest.LogCaptureFixture
) -> None:
    owner = await cluster.start(paused=True)
    others = await cluster.start_many(2)
    [first] = await cluster.fire(INVOICE_EXPORT_JOB, owner)
    assert isinstance(first, ExportResult)
    assert first.exported == 3
    assert await cluster.fire(INVOICE_EXPORT_JOB, *others) == [None, None]
    await cluster.place_order("ord_1005")

    await cluster.backend.pass_ttl()
    # the owner stands still: its scheduler does not tick, and it renewed nothing
    exports = await cluster.fire(INVOICE_EXPORT_JOB, *others)

    [second] = [export for export in exports if export is not None]
    assert second.exported == 1
    assert second.batch_id not in {None, first.batch_id}
    bookings = [booking.order_ids for booking in cluster.accounting.bookings]
    assert bookings == [PLACED_ORDER_IDS, ("ord_1005",)]
    batches = await cluster.invoice_batches()
    assert batches["ord_1005"] == second.batch_id
    assert {batches[order_id] for order_id in PLACED_ORDER_IDS} == {first.batch_id}
    tokens = [int(token) for token in LEASE_TAKEN.findall(logs.text)]
    assert len(tokens) == 2
    assert tokens[1] > tokens[0]
