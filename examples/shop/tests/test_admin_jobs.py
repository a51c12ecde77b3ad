"""7. The jobs' run records through the admin API, jobs paused, resumed and run by hand, and a
scheduler paused and resumed."""

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


async def test_a_job_paused_through_one_instance_is_skipped_by_all_run_by_hand_and_resumed(
    cluster: Cluster,
) -> None:
    first, second = await cluster.start_many(2)
    key = "inventory:stock-reconciliation"
    paused = await second.client.post(
        f"/admin/jobs/{key}/pause", headers=HEADERS, json={"note": "stock-taking"}
    )
    assert paused.status_code == 200
    assert (paused.json()["note"], paused.json()["paused_by"]) == ("stock-taking", "admin API")

    assert await cluster.fire(STOCK_RECONCILIATION_JOB, first, second) == [None, None]
    listed = {
        job["job"]: job for job in (await first.client.get("/admin/jobs", headers=HEADERS)).json()
    }
    assert listed[key]["paused"]["note"] == "stock-taking"
    assert listed[key]["last_run"] is None

    ran = await first.client.post(f"/admin/jobs/{key}/run", headers=HEADERS)
    assert ran.status_code == 200
    status = await first.locks.job_status(key)
    assert status.last_run is not None
    assert (status.last_run.trigger, status.last_run.instance) == ("manual", first.name)

    resumed = await first.client.post(f"/admin/jobs/{key}/resume", headers=HEADERS)
    assert resumed.json()["resumed"]["target"] == key
    ran_again = await cluster.fire(STOCK_RECONCILIATION_JOB, first, second)
    assert sum(result is not None for result in ran_again) == 1

    unknown = await first.client.post("/admin/jobs/no-such-job/run", headers=HEADERS)
    assert unknown.status_code == 404
    for target in ("no-such-job", "no-such-prefix:*"):
        typo = await first.client.post(f"/admin/jobs/{target}/pause", headers=HEADERS, json={})
        assert typo.status_code == 404, typo.text
        assert "names no job of this shop" in typo.json()["detail"]
    listed = {
        job["job"]: job for job in (await first.client.get("/admin/jobs", headers=HEADERS)).json()
    }
    assert all(job["paused"] is None for job in listed.values()), "a refused pause paused nothing"
    bad = await first.client.post(
        f"/admin/jobs/{key}/pause", headers=HEADERS, json={"until": "soon"}
    )
    assert bad.status_code == 422
    refused = await first.client.post(f"/admin/jobs/{key}/pause", json={})
    assert refused.status_code == 403
