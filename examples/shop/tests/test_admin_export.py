"""6. The admin endpoint: the export by hand, under the nightly export's lock."""

from __future__ import annotations

import asyncio

import httpx

from leaselock import Event, TickSkipped
from shop.schedule import INVOICE_EXPORT_JOB
from shop.seed import PLACED_ORDER_IDS
from shop_harness import Cluster

# a request's wait for the lock is 2 s: the steps stop short of it, or go past it
STEP_MS = 100


async def test_an_export_without_the_admin_token_is_forbidden(cluster: Cluster) -> None:
    instance = await cluster.start()
    missing = await instance.post_export(token=None)
    wrong = await instance.post_export(token="not-the-admin-token")
    assert (missing.status_code, wrong.status_code) == (403, 403)
    assert "x-admin-token" in missing.json()["detail"]
    assert cluster.accounting.uploads_asked == 0


async def test_two_concurrent_requests_to_two_instances_export_three_orders_once(
    cluster: Cluster,
) -> None:
    a, b = await cluster.start_many(2)
    both = asyncio.gather(a.post_export(), b.post_export())
    # the second waits for the first; on SQLite it polls, on the manual clock
    responses: tuple[httpx.Response, httpx.Response] = await cluster.backend.pass_time_until_done(
        both, step_ms=STEP_MS, limit_ms=1_500
    )
    assert [response.status_code for response in responses] == [200, 200]
    exported = sorted(response.json()["exported"] for response in responses)
    assert exported == [0, 3]
    for order_id in PLACED_ORDER_IDS:
        assert cluster.accounting.times_booked(order_id) == 1


async def test_a_request_that_waits_past_two_seconds_gets_409(cluster: Cluster) -> None:
    a, b = await cluster.start_many(2)
    upload = cluster.accounting.hold_uploads()
    first = asyncio.create_task(a.post_export())
    await upload.wait_until_held()

    refused = await cluster.backend.pass_time_until_done(
        b.post_export(), step_ms=STEP_MS * 2, limit_ms=5_000
    )
    upload.resume()
    accepted = await first

    assert refused.status_code == 409
    assert refused.json()["detail"].startswith(
        "An invoice export is already running (lock 'invoices:nightly-export' stayed held for 2 s)"
    )
    assert accepted.status_code == 200
    assert accepted.json()["exported"] == 3


async def test_while_a_manual_export_runs_the_scheduled_tick_skips_on_every_instance(
    cluster: Cluster,
) -> None:
    instances = await cluster.start_many(3)
    skipped: list[Event] = []
    for instance in instances:
        instance.locks.events.subscribe(skipped.append, "tick-skipped")
    upload = cluster.accounting.hold_uploads()
    manual = asyncio.create_task(instances[1].post_export())
    await upload.wait_until_held()

    assert await cluster.fire(INVOICE_EXPORT_JOB, *instances) == [None, None, None]
    upload.resume()
    response = await manual

    reasons = sorted(event.reason for event in skipped if isinstance(event, TickSkipped))
    assert reasons == ["another-instance", "another-instance", "in-progress"]
    assert response.json()["exported"] == 3
    assert len(cluster.accounting.bookings) == 1
