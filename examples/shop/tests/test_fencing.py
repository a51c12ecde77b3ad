"""5. The stale write: a paused instance's late write, refused by the database (fenced tables)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from leaselock import LockLostError, StaleFencingTokenError
from shop.clients import HeldCalls
from shop.jobs import STOCK_RECONCILIATION_KEY, Reconciliation
from shop.schedule import STOCK_RECONCILIATION_JOB
from shop_harness import Cluster, Instance

SALMON = "salmon-kibble-2kg"


@dataclass
class StaleWrite:
    """Instance A, paused in the middle of its count; B's run, done after A's lease expired."""

    a: Instance
    a_count: HeldCalls
    a_run: asyncio.Task[Any]
    b_run: Reconciliation


async def pause_a_after_it_reads_12_and_let_b_write_9(
    cluster: Cluster, **settings: Any
) -> StaleWrite:
    """Instance A counts 12 bags and stands still; B takes over after the ttl and writes 9."""
    a = await cluster.start(paused=True, **settings)
    b = await cluster.start(**settings)
    a_count = cluster.warehouse.hold_counts()
    a_run = a.run_directly(STOCK_RECONCILIATION_JOB)
    await a_count.wait_until_held()
    cluster.warehouse.set_stock(SALMON, 9)
    await cluster.backend.pass_ttl()
    [b_run] = await cluster.fire(STOCK_RECONCILIATION_JOB, b)
    assert isinstance(b_run, Reconciliation)
    assert b_run.counted == 3
    assert (await cluster.products())[SALMON][0] == 9
    return StaleWrite(a, a_count, a_run, b_run)


async def test_without_fencing_the_paused_instances_late_write_wins(cluster: Cluster) -> None:
    stale = await pause_a_after_it_reads_12_and_let_b_write_9(cluster, fenced_stock_writes=False)
    stale.a_count.resume()
    await stale.a_run
    assert (await cluster.products())[SALMON][0] == 12


async def test_a_stale_run_is_refused_by_the_database_and_leaves_the_newer_runs_rows(
    cluster: Cluster,
) -> None:
    stale = await pause_a_after_it_reads_12_and_let_b_write_9(cluster)
    newer = stale.b_run.fencing_token
    assert newer is not None
    stale.a_count.resume()
    with pytest.raises(StaleFencingTokenError) as refused:
        await stale.a_run
    assert refused.value.key == STOCK_RECONCILIATION_KEY
    assert refused.value.fencing_token < newer
    assert refused.value.newer_token == newer
    products = await cluster.products()
    assert products[SALMON] == (9, newer)
    assert {token for _, token in products.values()} == {newer}


async def test_an_instance_that_reaches_its_next_renewal_first_stops_and_writes_nothing(
    cluster: Cluster,
) -> None:
    stale = await pause_a_after_it_reads_12_and_let_b_write_9(cluster)
    assert stale.a.clock is not None
    # A runs again, and its next renewal comes before its count returns: the store refuses it
    await stale.a.clock.advance(timedelta(milliseconds=cluster.backend.ttl_ms // 3))
    with pytest.raises(LockLostError) as lost:
        await stale.a_run
    assert lost.value.detected_by == "renewal"
    products = await cluster.products()
    assert products[SALMON] == (9, stale.b_run.fencing_token)
    assert {token for _, token in products.values()} == {stale.b_run.fencing_token}
