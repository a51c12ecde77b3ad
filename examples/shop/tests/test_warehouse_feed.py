"""7. The warehouse feed: one connection to the low-stock alerts, handed over with the lease."""

from __future__ import annotations

from datetime import timedelta

import pytest

from helpers import wait_for_real
from leaselock.testing import wait_all_tasks_blocked
from shop_harness import Cluster

SALMON = "salmon-kibble-2kg"


def low_stock_lines(logs: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """Return (instance, message) of every ``Low stock`` line."""
    return [
        (getattr(record, "instance", "?"), record.getMessage())
        for record in logs.records
        if record.getMessage().startswith("Low stock:")
    ]


async def test_one_of_three_instances_connects_to_the_warehouse_alerts(
    cluster: Cluster, logs: pytest.LogCaptureFixture
) -> None:
    await cluster.start_many(3)
    await cluster.backend.pass_time(cluster.backend.ttl_ms)  # campaigns go on; one stays leader
    await wait_all_tasks_blocked()
    assert cluster.warehouse.subscribers == ["instance-0"]
    assert cluster.warehouse.connections_opened == 1
    assert cluster.warehouse.publish_low_stock(SALMON, 3) == 1
    await wait_all_tasks_blocked()
    assert low_stock_lines(logs) == [("instance-0", f"Low stock: 3 left of {SALMON}")]


async def test_when_the_leader_shuts_down_another_instance_connects_at_once(
    cluster: Cluster,
) -> None:
    leader, *_ = await cluster.start_many(3)
    await wait_all_tasks_blocked()
    assert cluster.warehouse.subscribers == ["instance-0"]
    await leader.stop()
    # the release wakes the standbys' campaigns: no time passes on the instances' clock
    for _ in range(200):
        if len(cluster.warehouse.subscribers) == 1:
            break
        await wait_for_real(10)
    assert len(cluster.warehouse.subscribers) == 1
    assert cluster.warehouse.subscribers[0] in {"instance-1", "instance-2"}
    assert cluster.warehouse.connections_opened == 2


async def test_a_paused_leader_still_receives_alerts_until_its_next_renewal_fails(
    cluster: Cluster, logs: pytest.LogCaptureFixture
) -> None:
    paused = await cluster.start(paused=True)
    await cluster.start_many(2)
    await wait_all_tasks_blocked()
    assert cluster.warehouse.subscribers == ["instance-0"]
    ttl_ms = cluster.backend.ttl_ms

    await cluster.backend.pass_ttl()
    await cluster.backend.pass_time_until(
        lambda: len(cluster.warehouse.subscribers) == 2, step_ms=ttl_ms // 3, limit_ms=ttl_ms
    )
    new_leader = cluster.warehouse.subscribers[1]
    # two connections: the paused leader cannot know that its lease expired
    assert cluster.warehouse.publish_low_stock(SALMON, 2) == 2
    await wait_all_tasks_blocked()
    assert {instance for instance, _ in low_stock_lines(logs)} == {"instance-0", new_leader}

    assert paused.clock is not None
    await paused.clock.advance(timedelta(milliseconds=ttl_ms // 3))  # its next renewal: refused
    await wait_all_tasks_blocked()
    assert cluster.warehouse.subscribers == [new_leader]
    assert cluster.warehouse.publish_low_stock(SALMON, 1) == 1
