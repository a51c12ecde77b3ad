"""8. The operator's dashboard at /admin/locks: behind the admin token, and its pauses obeyed."""

from __future__ import annotations

from dashboard_client import act, sign_in
from leaselock import Event, TickSkipped
from shop.app import DASHBOARD_PATH
from shop.schedule import STOCK_RECONCILIATION_JOB
from shop_harness import ADMIN_TOKEN, Cluster

RECONCILIATION = "inventory:stock-reconciliation"


async def test_the_dashboard_needs_the_admin_token_and_shows_the_shops_jobs(
    cluster: Cluster,
) -> None:
    instance = await cluster.start()
    http = instance.client

    stranger = await http.get(f"{DASHBOARD_PATH}/jobs")
    wrong = await sign_in(http, "mallory", "not-the-admin-token-at-all", root=DASHBOARD_PATH)
    signed_in = await sign_in(http, "alice", ADMIN_TOKEN, root=DASHBOARD_PATH)
    jobs = await http.get(f"{DASHBOARD_PATH}/jobs")

    assert (stranger.status_code, stranger.headers["location"]) == (303, f"{DASHBOARD_PATH}/login")
    assert wrong.status_code == 403
    assert signed_in.status_code == 303
    assert jobs.status_code == 200
    assert RECONCILIATION in jobs.text
    assert "Signed in as <b>alice</b>" in jobs.text


async def test_a_job_paused_from_one_instances_dashboard_is_skipped_where_it_is_owned(
    cluster: Cluster,
) -> None:
    first, second = await cluster.start_many(2)
    skipped: list[Event] = []
    for instance in (first, second):
        instance.locks.events.subscribe(skipped.append, "tick-skipped")
    await sign_in(first.client, "alice", ADMIN_TOKEN, root=DASHBOARD_PATH)
    await first.client.get(f"{DASHBOARD_PATH}/jobs")

    paused = await act(
        first.client, "pause", RECONCILIATION, root=DASHBOARD_PATH, note="stock-taking"
    )

    assert paused.status_code == 303
    assert await cluster.fire(STOCK_RECONCILIATION_JOB, first, second) == [None, None]
    # the owner skips it as paused, naming who paused it; the other as owned elsewhere
    reasons = {(e.reason, e.holder) for e in skipped if isinstance(e, TickSkipped)}
    assert ("paused", "alice (dashboard)") in reasons
