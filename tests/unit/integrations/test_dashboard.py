"""The dashboard, in process: who may see and act, what an action does, and what it costs."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest
from fastapi import FastAPI

import leaselock
from dashboard_client import ORIGIN, TOKEN, act, client, csrf_of, live_stream, sign_in
from leaselock import Event, Locks, LocksConfigurationError, OperatorActed
from leaselock.integrations.dashboard import dashboard
from leaselock.stores import InMemoryLockStore, SQLiteLockStore
from leaselock.testing import FaultyStore, ManualClock, wait_all_tasks_blocked


@leaselock.on_one_instance(key="reports:daily")
@leaselock.without_overlapping()
async def daily_report() -> str:
    return "sent"


@pytest.fixture
async def shop(store: InMemoryLockStore, clock: ManualClock) -> AsyncIterator[Locks]:
    """The application's Locks, with one job registered and run once."""
    async with Locks(store=store, clock=clock, instance="shop-1") as locks:
        locks.register(daily_report)
        await daily_report()
        yield locks


@pytest.fixture
async def other(store: InMemoryLockStore, clock: ManualClock) -> AsyncIterator[Locks]:
    """Another instance on the same store."""
    async with Locks(store=store, clock=clock, instance="shop-2") as locks:
        yield locks


async def is_held(locks: Locks, key: str) -> bool:
    found = await locks.read_lock(key)
    return found is not None and found.live


# --- who may look, who may act --------------------------------------------------------------


async def test_without_a_token_anyone_sees_the_locks_and_no_one_can_act(shop: Locks, other: Locks):
    await other.acquire("orders:1")
    app = dashboard(shop)
    async with client(app) as http:
        page = await http.get("/")
        confirmation = await http.get("/confirm", params={"action": "break", "target": "orders:1"})
        posted = await http.post(
            "/act", data={"action": "break", "target": "orders:1"}, headers=ORIGIN
        )
    assert page.status_code == 200
    assert "orders:1" in page.text
    assert "shop-2" in page.text
    assert "Break…" not in page.text
    assert "read-only" in page.text
    assert confirmation.status_code == 403
    assert "read-only: no token is configured" in confirmation.text
    assert posted.status_code == 403
    assert (await shop.read_lock("orders:1")) is not None


async def test_with_a_token_a_stranger_is_sent_to_sign_in_and_a_wrong_token_is_refused(
    shop: Locks, caplog: pytest.LogCaptureFixture
):
    app = dashboard(shop, token=TOKEN)
    async with client(app) as http:
        page = await http.get("/jobs")
        stream = await http.get("/events", params={"page": "locks"})
        with caplog.at_level(logging.WARNING, logger="leaselock.dashboard"):
            refused = await sign_in(http, token="not-the-token-at-all")  # noqa: S106 -- a wrong guess
        after = await http.get("/")
    assert (page.status_code, page.headers["location"]) == (303, "/login")
    assert stream.status_code == 303
    assert refused.status_code == 403
    assert "That is not the token" in refused.text
    assert after.status_code == 303
    assert "refused a sign-in as 'alice': wrong token from 127.0.0.1" in caplog.text


async def test_a_session_cookie_is_signed_http_only_and_same_site_strict(shop: Locks):
    app = dashboard(shop, token=TOKEN)
    async with client(app) as http:
        signed_in = await sign_in(http)
        http.cookies.set("leaselock_session", http.cookies["leaselock_session"][:-2] + "xx")
        forged = await http.get("/")
    cookie = signed_in.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert "Path=/" in cookie
    assert TOKEN not in cookie
    assert forged.status_code == 303


async def test_an_action_without_its_csrf_token_or_from_another_site_changes_nothing(
    shop: Locks, other: Locks
):
    await other.acquire("orders:1")
    app = dashboard(shop, token=TOKEN)
    async with client(app) as http:
        await sign_in(http)
        page = await http.get("/")
        fields = {"action": "break", "target": "orders:1"}
        without = await http.post("/act", data=fields, headers=ORIGIN)
        elsewhere = await http.post(
            "/act",
            data={**fields, "csrf": csrf_of(page.text)},
            headers={"origin": "http://evil.example"},
        )
    assert without.status_code == 403
    assert elsewhere.status_code == 403
    assert "not from this dashboard&#x27;s page" in without.text
    held = await shop.read_lock("orders:1")
    assert held is not None
    assert held.instance == "shop-2"


async def test_the_host_application_can_name_the_operator_instead_of_a_token(
    shop: Locks, other: Locks
):
    async def authenticate(scope: Mapping[str, object]) -> str | None:
        headers = dict(scope["headers"])  # type: ignore[call-overload]
        return "bob" if headers.get(b"x-user") == b"bob" else None

    await other.acquire("orders:1")
    app = dashboard(shop, authenticate=authenticate, secret="shared by the replicas")  # noqa: S106
    async with client(app) as http:
        refused = await http.get("/")
        http.headers["x-user"] = "bob"
        done = await act(http, "break", "orders:1")
    assert refused.status_code == 403
    assert done.status_code == 303
    assert not await is_held(shop, "orders:1")


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"token": "short"}, "at least 16 characters"),
        ({"token": TOKEN, "authenticate": lambda scope: None}, "pass one"),
    ],
)
async def test_a_short_token_or_two_ways_in_are_refused_naming_the_fix(
    shop: Locks, arguments: dict[str, object], says: str
):
    with pytest.raises(LocksConfigurationError, match=says):
        dashboard(shop, **arguments)  # type: ignore[arg-type]


# --- what an action does -------------------------------------------------------------------


async def test_breaking_a_lock_is_confirmed_first_then_frees_it_naming_the_operator(
    shop: Locks, other: Locks
):
    held = await other.acquire("orders:1")
    assert held is not None
    heard: list[Event] = []
    shop.events.subscribe(heard.append, "operator-acted")
    app = dashboard(shop, token=TOKEN)
    async with client(app) as http:
        await sign_in(http, "alice")
        confirmation = await http.get("/confirm", params={"action": "break", "target": "orders:1"})
        assert await is_held(shop, "orders:1")
        done = await act(http, "break", "orders:1")
        page = await http.get(done.headers["location"])
    assert "held by <b>shop-2</b>" in confirmation.text
    assert f"fencing token {held.fencing_token}" in confirmation.text
    assert done.status_code == 303
    assert "Broke the lock on &#x27;orders:1&#x27;: it was held by shop-2" in page.text
    assert not await is_held(shop, "orders:1")
    [event] = heard
    assert isinstance(event, OperatorActed)
    assert (event.action, event.operator, event.instance) == (
        "break",
        "alice (dashboard)",
        "shop-2",
    )


async def test_pausing_a_job_from_the_page_pauses_it_for_every_instance_until_resumed(
    shop: Locks, other: Locks
):
    app = dashboard(shop, token=TOKEN)
    async with client(app) as http:
        await sign_in(http, "alice")
        paused = await act(http, "pause", "reports:daily", note="month-end close", until="2h")
        page = await http.get("/jobs")
        pauses = await other.pauses()
        resumed = await act(http, "resume", "reports:daily")
    assert paused.status_code == 303
    assert "paused</span> by alice (dashboard): month-end close" in page.text
    [pause] = pauses
    assert (pause.target, pause.paused_by, pause.note) == (
        "reports:daily",
        "alice (dashboard)",
        "month-end close",
    )
    assert pause.until is not None
    assert resumed.status_code == 303
    assert await other.pauses() == []


async def test_a_pause_that_names_no_job_is_refused_before_anything_is_paused(shop: Locks):
    app = dashboard(shop, token=TOKEN)
    async with client(app) as http:
        await sign_in(http)
        await http.get("/jobs")
        refused = await http.get("/confirm", params={"action": "pause", "target": "repotrs:*"})
    assert "names no job this dashboard knows (its jobs: reports:daily)" in refused.text
    assert await shop.pauses() == []


async def test_run_now_runs_a_registered_job_here_and_refuses_one_it_does_not_have(shop: Locks):
    app = dashboard(shop, token=TOKEN)
    async with client(app) as http:
        await sign_in(http)
        ran = await act(http, "run", "reports:daily")
        unknown = await http.get("/confirm", params={"action": "run", "target": "feed:import"})
        await wait_all_tasks_blocked()
    status = await shop.job_status("reports:daily")
    assert ran.status_code == 303
    assert status.last_run is not None
    assert status.last_run.trigger == "manual"
    assert "cannot run from here" in unknown.text


# --- what it shows, and what it costs -------------------------------------------------------


async def test_a_live_page_shows_a_lock_another_instance_takes_at_the_next_reading(
    shop: Locks, other: Locks, clock: ManualClock
):
    app = dashboard(shop)
    async with live_stream(app, "locks") as stream:
        await clock.advance(0)
        first = await stream.latest()
        await other.acquire("orders:7")
        await clock.advance("1s")
        second = await stream.latest()
    assert "orders:7" not in first["html"]
    assert "orders:7" in second["html"]
    assert "shop-2" in second["html"]


async def test_this_applications_own_lock_shows_at_once_without_a_reading(
    shop: Locks, clock: ManualClock
):
    app = dashboard(shop)
    async with live_stream(app, "locks") as stream:
        await clock.advance(0)
        await stream.latest()
        reads = app.reads
        await shop.acquire("orders:8")
        shown = await stream.latest()
    assert "orders:8" in shown["html"]
    assert app.reads == reads


async def test_watching_reads_the_store_at_most_once_a_second_per_open_page(
    store: InMemoryLockStore, clock: ManualClock
):
    faulty = FaultyStore(store, clock=clock)
    async with Locks(store=faulty, clock=clock, instance="shop-1") as locks:
        locks.register(daily_report)
        app = dashboard(locks)

        def reads() -> int:
            watched = {"list_locks", "job_records", "job_states", "job_pauses"}
            return sum(call.method in watched for call in faulty.calls)

        await clock.advance("10s")
        assert reads() == 0, "no page open, no read"
        async with live_stream(app, "locks"), live_stream(app, "timeline"):
            await clock.advance(0)
            before = reads()
            await clock.advance("10s")
            locks_and_timeline = reads() - before
        async with live_stream(app, "jobs"):
            await clock.advance(0)
            before = reads()
            await clock.advance("12s")
            jobs_alone = reads() - before
    # two pages: at most 20 reads in 10 s, and one listing a second is all they need
    assert locks_and_timeline == 10
    assert jobs_alone == 12
    methods = [c.method for c in faulty.calls if c.method.startswith("job_")]
    assert {"job_records", "job_states", "job_pauses"} <= set(methods)


async def test_a_store_that_cannot_be_read_is_one_line_on_the_page(
    store: InMemoryLockStore, clock: ManualClock
):
    faulty = FaultyStore(store, clock=clock)
    faulty.fail("list_locks")
    async with Locks(store=faulty, clock=clock) as locks, client(dashboard(locks)) as http:
        page = await http.get("/")
    assert page.status_code == 200
    assert 'class="error" role="alert"' in page.text
    assert "list_locks failed: InjectedFaultError" in page.text
    assert "Traceback" not in page.text


async def test_a_store_url_with_a_password_is_never_shown(clock: ManualClock):
    app = dashboard("redis://:hunter2-secret@127.0.0.1:1/0", clock=clock)
    async with client(app) as http:
        page = await http.get("/")
    await app.aclose()
    assert page.status_code == 200
    assert "hunter2" not in page.text
    assert 'class="error"' in page.text


async def test_mounted_under_a_path_every_link_and_cookie_stays_under_it(shop: Locks):
    host = FastAPI()
    host.mount("/admin/locks", dashboard(shop, token=TOKEN))
    async with client(host) as http:  # type: ignore[arg-type]
        sent = await http.get("/admin/locks/jobs")
        form = await http.get("/admin/locks/login")
    assert sent.headers["location"] == "/admin/locks/login"
    assert 'action="/admin/locks/login"' in form.text
    assert "Path=/admin/locks" in form.headers["set-cookie"]
    assert 'href="/admin/locks/static/dashboard.css"' in form.text


async def test_every_page_forbids_inline_script_and_framing(shop: Locks):
    async with client(dashboard(shop)) as http:
        page = await http.get("/timeline")
        script = await http.get("/static/dashboard.js")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert script.headers["content-type"].startswith("text/javascript")


async def test_signing_out_forgets_the_session(shop: Locks):
    app = dashboard(shop, token=TOKEN)
    async with client(app) as http:
        await sign_in(http)
        page = await http.get("/")
        out = await http.post("/logout", data={"csrf": csrf_of(page.text)}, headers=ORIGIN)
        after = await http.get("/")
    assert (out.status_code, out.headers["location"]) == (303, "/login")
    assert "Max-Age=0" in out.headers["set-cookie"]
    assert after.status_code == 303


async def test_an_unknown_page_is_one_line_and_404(shop: Locks):
    async with client(dashboard(shop)) as http:
        missing = await http.get("/nowhere")
    assert missing.status_code == 404
    assert "No page at /nowhere." in missing.text


async def test_a_locks_that_is_not_started_is_one_line_naming_the_fix(
    store: InMemoryLockStore, clock: ManualClock
):
    async with client(dashboard(Locks(store=store, clock=clock))) as http:
        page = await http.get("/")
    assert page.status_code == 200
    assert "the Locks given to the dashboard is not started" in page.text


async def test_a_dashboard_of_a_store_url_opens_the_store_and_closes_it_at_shutdown(
    tmp_path: Path, clock: ManualClock
):
    path = tmp_path / "locks.db"
    async with Locks(store=SQLiteLockStore(path), instance="shop-9") as holder:
        await holder.acquire("orders:9")
        app = dashboard(f"sqlite:///{path}", clock=clock)
        async with client(app) as http:
            page = await http.get("/")
        messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
        sent: list[str] = []

        async def receive() -> dict[str, str]:
            return next(messages)

        async def send(message: Mapping[str, object]) -> None:
            sent.append(str(message["type"]))

        await app({"type": "lifespan"}, receive, send)  # type: ignore[arg-type]
    assert "orders:9" in page.text
    assert "shop-9" in page.text
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


async def test_a_job_that_declares_its_schedule_shows_its_last_tick_and_where_it_ran(
    store: InMemoryLockStore, clock: ManualClock
):
    @leaselock.on_one_instance(key="feed:poll", every="1d")
    async def poll() -> None: ...

    async with Locks(store=store, clock=clock, instance="shop-7") as locks:
        locks.register(poll)
        await poll()
        tick = (await locks.job_status("feed:poll")).last_tick
        async with live_stream(dashboard(locks), "jobs") as stream:
            # the jobs page reads records, locks, pauses and states, one a second
            await clock.advance(0)
            for _ in range(4):
                await clock.advance("1s")
            shown = await stream.latest()
    assert tick is not None
    assert f"last tick {tick.at.isoformat(timespec='seconds')} on shop-7" in shown["html"]
