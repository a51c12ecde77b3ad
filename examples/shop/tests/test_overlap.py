"""4. A count that outlives its ticks: no second count starts on any instance."""

from __future__ import annotations

import pytest

from shop.jobs import Reconciliation
from shop.schedule import STOCK_RECONCILIATION_JOB
from shop_harness import Cluster

SKIPPED_IN_PROGRESS = "Skipped inventory:stock-reconciliation: a run is still in progress"
SKIPPED_ELSEWHERE = "Skipped inventory:stock-reconciliation: it runs on another instance"


async def test_a_count_held_open_through_three_ticks_is_one_count_then_the_next_tick_counts(
    cluster: Cluster, logs: pytest.LogCaptureFixture
) -> None:
    owner, other = await cluster.start_many(2)
    month_end_count = cluster.warehouse.hold_counts()
    long_run = owner.run_directly(STOCK_RECONCILIATION_JOB)
    await month_end_count.wait_until_held()

    for _ in range(3):
        # a tick later, and more than a lease later: the run keeps its lock renewed
        await cluster.backend.pass_ttl()
        assert await cluster.fire(STOCK_RECONCILIATION_JOB, owner, other) == [None, None]
    assert cluster.warehouse.counts_asked == 1
    assert logs.text.count(SKIPPED_IN_PROGRESS) == 3
    assert logs.text.count(SKIPPED_ELSEWHERE) == 3

    month_end_count.resume()
    finished = await long_run
    assert isinstance(finished, Reconciliation)
    assert finished.counted == 3
    [again, skipped] = await cluster.fire(STOCK_RECONCILIATION_JOB, owner, other)
    assert isinstance(again, Reconciliation)
    assert skipped is None
    assert cluster.warehouse.counts_asked == 2
