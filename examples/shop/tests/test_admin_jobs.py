"""7. The jobs' run records through the admin API, and a scheduler paused and resumed."""

from __future__ import annotations

from shop.schedule import STOCK_RECONCILIATION_JOB
from shop_harness import ADMIN_TOKEN, Cluster

HEADERS = {"x-admin-token": ADMIN_TOKEN}


async def test_the_run_records_of_every_instance_are_listed_by_any_instance(
    cluster: Cluster,
) -> None:
    first, second = await cluster.start_many(2)
    ran = await cluster.fire(STOCK_RECONCILIATION_JOB, first, second)
    owner, other = (first, second) if ran[0] is not None else (second, first)

    answer = await other.client.get("/admin/jobs", headers=HEADERS)
    refused = await other.client.get("/admin/jobs")

    assert (answer.status_code, refused.status_code) == (200, 403)
    jobs = {job["job"]: job for job in answer.json()}
    reconciliation = jobs["inventory:stock-reconciliation"]
    assert reconciliation["last_run"]["instance"] == owner.name
    assert reconciliation["last_run"]["outcome"] == "ok"
    assert reconciliation["last_success"] == reconciliation["last_run"]
    assert (reconciliation["owner"], reconciliation["overdue"]) == (owner.name, False)
    assert jobs["invoices:nightly-export"]["last_run"] is None


async def test_a_paused_scheduler_fires_nothing_until_resumed(cluster: Cluster) -> None:
    instance = await cluster.start()
    paused = await instance.client.post("/admin/scheduler/pause", headers=HEADERS)
    job = instance.shop.scheduler.get_job(STOCK_RECONCILIATION_JOB)
    assert paused.json() == {"scheduler": "paused"}
    assert instance.shop.scheduler.state == 2  # STATE_PAUSED
    resumed = await instance.client.post("/admin/scheduler/resume", headers=HEADERS)
    assert resumed.json() == {"scheduler": "running"}
    assert instance.shop.scheduler.state == 1  # STATE_RUNNING
    assert job.next_run_time is not None
    unknown = await instance.client.post("/admin/scheduler/stop", headers=HEADERS)
    assert unknown.status_code == 422
