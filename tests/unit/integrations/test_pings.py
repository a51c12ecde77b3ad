"""Pings to a dead-man's switch: what reaches a real local HTTP server, and that a slow, hung or
dead endpoint never holds up (or fails) the event callback."""

from __future__ import annotations

import base64
import json
import logging
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

import leaselock
from leaselock import Locks, LocksConfigurationError
from leaselock._event_types import (
    Event,
    JobFailing,
    JobMissed,
    LockLost,
    RunEnded,
    RunStarted,
)
from leaselock._events import Events, Publisher
from leaselock.integrations.pings import HealthchecksPings, WebhookPings, _shown
from leaselock.stores import InMemoryLockStore
from leaselock.testing import ManualClock

OWNER = "0123456789abcdef0123456789abcdef@shop-1"
JOB = "reports:daily"
CHECK_UUID = "5bf66975-d4c7-4bf5-bcc8-b8d8a82ea278"
FAST_S = 0.1  # an event callback that only queues returns in microseconds; this is headroom


@dataclass
class Received:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> object:
        return json.loads(self.body)


@dataclass
class Server:
    """A real HTTP server on 127.0.0.1 that records every request it gets."""

    url: str = ""
    requests: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    status: int = 200
    first_arrived: threading.Event = field(default_factory=threading.Event)
    # when set up, the first request is held until it is set: a worker stuck on a slow endpoint
    hold_first: threading.Event | None = None

    def received(self) -> list[Received]:
        with self.lock:
            return list(self.requests)


def handler_for(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            split = urlsplit(self.path)
            with server.lock:
                server.requests.append(
                    Received(
                        self.command,
                        split.path,
                        parse_qs(split.query),
                        dict(self.headers.items()),
                        body,
                    )
                )
                first = len(server.requests) == 1
            if first:
                server.first_arrived.set()
                if server.hold_first is not None:
                    server.hold_first.wait(10)
            self.send_response(server.status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, fmt: str, *args: object) -> None:
            pass  # the test reads what was received; stderr lines would be noise

    return Handler


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # a proxy in the environment must not stand between the senders and 127.0.0.1
    monkeypatch.setenv("no_proxy", "*")


@pytest.fixture
def server() -> Iterator[Server]:
    recorder = Server()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(recorder))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    recorder.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield recorder
    finally:
        if recorder.hold_first is not None:
            recorder.hold_first.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture
def hung_url() -> Iterator[str]:
    """A server that takes connections and never answers: the kernel completes the handshake
    for a listening socket, so the client connects, sends, and waits for a reply for ever."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture
def down_url() -> str:
    """A port where nothing listens: connections are refused at once."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@dataclass
class Hub:
    """What attach() takes (an ``events`` attribute), and the engine's side that emits."""

    events: Events = field(default_factory=Events)

    def emit(self, event: Event) -> float:
        """Emit ``event`` to every subscriber; return how long the callbacks took, in s."""
        began = time.perf_counter()
        Publisher(self.events).emit(event)
        return time.perf_counter() - began


@pytest.fixture
def hub() -> Hub:
    return Hub()


def started(job: str = JOB, token: int = 7) -> RunStarted:
    return RunStarted(key=job, fencing_token=token, owner=OWNER, job=job)


def ended(
    job: str = JOB, token: int = 7, outcome: str = "ok", error: str | None = None
) -> RunEnded:
    return RunEnded(
        key=job,
        fencing_token=token,
        owner=OWNER,
        job=job,
        outcome=outcome,
        error=error,
        duration_ms=1234,
    )


def failing(failures: int) -> JobFailing:
    return JobFailing(
        key=JOB, fencing_token=failures, owner=OWNER, job=JOB, failures=failures, error="boom"
    )


def pings_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("leaselock-pings-")]


# --- healthchecks.io ---------------------------------------------------------------------------


def test_a_run_pings_start_then_success_paired_by_one_run_id(server: Server, hub: Hub):
    with HealthchecksPings(f"{server.url}/{CHECK_UUID}") as pings:
        pings.attach(hub)
        hub.emit(started(token=7))
        hub.emit(ended(token=7, outcome="ok"))
        hub.emit(started(token=8))
    start, success, next_start = server.received()
    assert (start.method, start.path) == ("POST", f"/{CHECK_UUID}/start")
    assert (success.method, success.path) == ("POST", f"/{CHECK_UUID}")
    rid = start.query["rid"][0]
    assert success.query == {"rid": [rid]}
    # healthchecks.io takes a run id in the canonical UUID form only
    assert str(uuid.UUID(rid)) == rid
    assert next_start.query["rid"] != [rid]
    assert start.body.decode() == "Started reports:daily (fencing token 7)\ninstance: shop-1"
    assert start.headers["User-Agent"] == "leaselock-pings"


def test_the_run_id_is_the_same_from_every_sender(server: Server, hub: Hub):
    with (
        HealthchecksPings(f"{server.url}/{CHECK_UUID}") as first,
        HealthchecksPings(f"{server.url}/{CHECK_UUID}") as second,
    ):
        first.attach(hub)
        second.attach(hub)
        hub.emit(started())
    assert [r.query["rid"] for r in server.received()] == [server.received()[0].query["rid"]] * 2


@pytest.mark.parametrize(
    ("outcome", "error"),
    [
        ("error", "ValueError: the warehouse refused the export"),
        ("cancelled", None),
        ("lost", None),
    ],
)
def test_a_run_that_ends_any_other_way_pings_fail_with_what_happened(
    server: Server, hub: Hub, outcome: str, error: str | None
):
    with HealthchecksPings(f"{server.url}/{CHECK_UUID}") as pings:
        pings.attach(hub)
        hub.emit(started())
        hub.emit(ended(outcome=outcome, error=error))
    start, fail = server.received()
    assert fail.path == f"/{CHECK_UUID}/fail"
    assert fail.query == start.query
    body = fail.body.decode()
    assert f"({outcome}" in body
    if error is not None:
        assert error in body


def test_jobs_route_each_job_to_its_check_and_ignore_the_others(server: Server, hub: Hub):
    pings = HealthchecksPings(
        f"{server.url}/unused",
        jobs={JOB: f"{server.url}/check-reports", "stock:sync": f"{server.url}/check-stock/"},
    )
    with pings:
        pings.attach(hub)
        hub.emit(started(JOB))
        hub.emit(started("orders:cleanup"))
        hub.emit(ended("stock:sync", outcome="error", error="boom"))
        hub.emit(ended("orders:cleanup"))
        hub.emit(ended(JOB))
    assert [r.path for r in server.received()] == [
        "/check-reports/start",
        "/check-stock/fail",
        "/check-reports",
    ]


def test_a_slug_in_jobs_joins_the_ping_key_url_which_keeps_its_query(server: Server, hub: Hub):
    with HealthchecksPings(
        f"{server.url}/ping-key-abc?create=1", jobs={JOB: "daily-report"}
    ) as pings:
        pings.attach(hub)
        hub.emit(started())
    (start,) = server.received()
    assert start.path == "/ping-key-abc/daily-report/start"
    assert start.query["create"] == ["1"]
    assert len(start.query["rid"]) == 1


def test_only_run_events_ping_a_check(server: Server, hub: Hub):
    with HealthchecksPings(f"{server.url}/{CHECK_UUID}") as pings:
        pings.attach(hub)
        hub.emit(failing(3))
        hub.emit(LockLost(key=JOB, fencing_token=7, owner=OWNER, detected_by="renewal"))
    assert server.received() == []


def test_it_attaches_to_a_real_locks(server: Server, locks: Locks):
    with HealthchecksPings(f"{server.url}/{CHECK_UUID}") as pings:
        pings.attach(locks)
        locks._publisher.emit(started())
    assert [r.path for r in server.received()] == [f"/{CHECK_UUID}/start"]


# --- webhooks ----------------------------------------------------------------------------------


def test_a_webhook_gets_the_chosen_events_as_json(server: Server, hub: Hub):
    at = datetime(2025, 3, 1, 4, 0, 5, tzinfo=UTC)
    missed = JobMissed(
        key=JOB, fencing_token=41, owner=OWNER, job=JOB, missed_at=at, holder="shop-2", at=at
    )
    lost = LockLost(key="orders:7", fencing_token=9, owner=OWNER, detected_by="deadline", at=at)
    webhook = WebhookPings(f"{server.url}/hooks/leaselock", headers={"Authorization": "Bearer t0k"})
    with webhook:
        webhook.attach(hub)
        hub.emit(missed)
        hub.emit(started())  # not chosen by default
        hub.emit(ended(outcome="error", error="boom"))  # not chosen either
        hub.emit(lost)
    first, second = server.received()
    assert (first.method, first.path) == ("POST", "/hooks/leaselock")
    assert first.headers["Content-Type"] == "application/json"
    assert first.headers["Authorization"] == "Bearer t0k"
    assert first.json() == {
        "type": "job-missed",
        "key": JOB,
        "job": JOB,
        "fencing_token": 41,
        "instance": "shop-1",
        "at": "2025-03-01T04:00:05+00:00",
        "message": missed.message(),
        "event": "job-missed",
        "token": 41,
    }
    assert second.json() == {
        "type": "lock-lost",
        "key": "orders:7",
        "fencing_token": 9,
        "instance": "shop-1",
        "at": "2025-03-01T04:00:05+00:00",
        "message": lost.message(),
        "event": "lock-lost",
        "token": 9,
        "reason": "deadline",
    }


async def test_every_alert_a_webhook_sends_from_a_real_locks_names_its_instance(
    server: Server, store: InMemoryLockStore, clock: ManualClock
):
    class Feed:
        @leaselock.without_overlapping(key="feed:import", alert_after_failures=1, expect_every="1m")
        async def run(self) -> str:
            raise ValueError("supplier feed is HTML")

    feed = Feed()
    kinds = ("job-failing", "job-overdue", "job-missed", "run-abandoned", "lock-lost")
    async with (
        WebhookPings(server.url, events=kinds) as webhook,
        Locks(store=store, clock=clock, instance="shop-7") as locks,
    ):
        webhook.attach(locks)
        locks.register(feed)
        with pytest.raises(ValueError, match="HTML"):
            await feed.run()
        await clock.advance("3m")
    bodies = [received.json() for received in server.received()]
    assert {body["type"] for body in bodies if isinstance(body, dict)} >= {
        "job-failing",
        "job-overdue",
    }
    assert [body["instance"] for body in bodies if isinstance(body, dict)] == ["shop-7"] * len(
        bodies
    )


def test_a_webhook_sends_only_the_events_it_was_given(server: Server, hub: Hub):
    with WebhookPings(server.url, events=["run-ended", "run-ended"]) as webhook:
        webhook.attach(hub)
        hub.emit(started())
        hub.emit(failing(3))
        hub.emit(ended(outcome="error", error="ValueError: boom"))
    (only,) = server.received()
    body = only.json()
    assert isinstance(body, dict)
    assert (body["type"], body["message"]) == (
        "run-ended",
        "Ended reports:daily after 1234 ms (error: ValueError: boom)",
    )


def test_a_rejected_ping_is_logged_with_its_status(
    server: Server, hub: Hub, caplog: pytest.LogCaptureFixture
):
    server.status = 503
    with (
        caplog.at_level(logging.WARNING, logger="leaselock.pings"),
        WebhookPings(f"{server.url}/hook") as webhook,
    ):
        webhook.attach(hub)
        hub.emit(failing(3))
    assert len(server.received()) == 1
    (line,) = [r.getMessage() for r in caplog.records if r.name == "leaselock.pings"]
    assert "Could not send the job-failing of reports:daily ping" in line
    assert "HTTP 503" in line


def test_credentials_in_the_url_go_as_basic_auth(server: Server, hub: Hub):
    netloc = urlsplit(server.url).netloc
    with WebhookPings(f"http://hook%20user:p%40ss@{netloc}/hook") as webhook:
        webhook.attach(hub)
        hub.emit(failing(3))
    (only,) = server.received()
    assert only.path == "/hook"
    assert only.headers["Authorization"] == "Basic " + base64.b64encode(b"hook user:p@ss").decode()


# --- never blocking, never failing -------------------------------------------------------------


def test_a_dead_endpoint_costs_the_callback_nothing_and_is_logged_without_secrets(
    down_url: str, hub: Hub, caplog: pytest.LogCaptureFixture
):
    netloc = urlsplit(down_url).netloc
    pings = HealthchecksPings(f"http://user:s3cret@{netloc}/{CHECK_UUID}", timeout=0.2)
    with caplog.at_level(logging.WARNING, logger="leaselock.pings"), pings:
        pings.attach(hub)
        took = [hub.emit(started()), hub.emit(ended(outcome="error", error="boom"))]
    assert max(took) < FAST_S
    lines = [r.getMessage() for r in caplog.records if r.name == "leaselock.pings"]
    assert len(lines) == 2
    shown = f"http://***@{netloc}/5bf6.../start?..."
    assert lines[0].startswith(f"Could not send the start of reports:daily ping to {shown} (")
    assert "the job is unaffected" in lines[0]
    assert all("s3cret" not in line and CHECK_UUID not in line for line in lines)


def test_a_hung_endpoint_costs_the_callback_nothing_and_each_ping_its_timeout(
    hung_url: str, hub: Hub, caplog: pytest.LogCaptureFixture
):
    pings = WebhookPings(hung_url, timeout=0.2)
    with caplog.at_level(logging.WARNING, logger="leaselock.pings"):
        pings.attach(hub)
        took = [hub.emit(failing(n)) for n in range(3)]
        assert max(took) < FAST_S
        pings.close(timeout=10)
    lines = [r.getMessage() for r in caplog.records if r.name == "leaselock.pings"]
    assert len(lines) == 3
    assert all("timed out" in line for line in lines)
    assert pings_threads() == []


def test_close_gives_up_on_a_hung_endpoint_after_its_timeout_and_the_thread_still_ends(
    hung_url: str, hub: Hub, caplog: pytest.LogCaptureFixture
):
    pings = WebhookPings(hung_url, timeout=0.5)
    with caplog.at_level(logging.WARNING, logger="leaselock.pings"):
        pings.attach(hub)
        for n in range(4):
            hub.emit(failing(n))
        began = time.perf_counter()
        pings.close(timeout=0.05)
        assert time.perf_counter() - began < 0.4  # not the 4 x 0.5 s the queue would take
        thread = pings._thread
        assert thread is not None
        thread.join(5)  # the request in flight ends at its own timeout; nothing more is sent
    assert not thread.is_alive()
    lines = [r.getMessage() for r in caplog.records if r.name == "leaselock.pings"]
    assert any("closed with 3 ping(s) not sent" in line for line in lines)


def test_a_full_queue_drops_the_oldest_and_warns_once(
    server: Server, hub: Hub, caplog: pytest.LogCaptureFixture
):
    server.hold_first = threading.Event()
    webhook = WebhookPings(server.url, events=("job-failing",), max_queue=2)
    with caplog.at_level(logging.WARNING, logger="leaselock.pings"):
        webhook.attach(hub)
        hub.emit(failing(0))
        assert server.first_arrived.wait(5)  # the worker is stuck on ping 0 now
        took = [hub.emit(failing(n)) for n in range(1, 6)]
        server.hold_first.set()
        webhook.close()
    assert max(took) < FAST_S
    assert [r.json()["fencing_token"] for r in server.received()] == [0, 4, 5]  # type: ignore[index]
    warnings = [r for r in caplog.records if "pings come faster than they are sent" in r.message]
    assert len(warnings) == 1
    assert "max_queue=2" in warnings[0].getMessage()


# --- lifecycle ---------------------------------------------------------------------------------


def test_one_daemon_thread_started_on_the_first_ping_and_gone_after_close(server: Server, hub: Hub):
    pings = HealthchecksPings(f"{server.url}/{CHECK_UUID}")
    pings.attach(hub)
    hub.emit(failing(1))  # not a ping: no thread for it
    assert pings_threads() == []
    hub.emit(started())
    hub.emit(ended())
    (thread,) = pings_threads()
    assert thread.daemon
    pings.close()
    assert not thread.is_alive()
    assert len(server.received()) == 2


def test_detach_and_close_stop_the_pings(server: Server, hub: Hub):
    pings = HealthchecksPings(f"{server.url}/{CHECK_UUID}")
    detach = pings.attach(hub)
    detach()
    detach()
    hub.emit(started())
    pings.attach(hub)
    pings.close()
    pings.close()
    hub.emit(started())
    assert server.received() == []
    assert pings_threads() == []
    with pytest.raises(LocksConfigurationError, match="is closed; make a new one"):
        pings.attach(hub)


async def test_async_with_sends_what_is_queued_when_the_block_ends(server: Server, hub: Hub):
    async with WebhookPings(server.url) as webhook:
        webhook.attach(hub)
        hub.emit(failing(2))
    assert len(server.received()) == 1
    assert pings_threads() == []


# --- configuration -----------------------------------------------------------------------------

URL = f"https://hc-ping.com/{CHECK_UUID}"


@pytest.mark.parametrize(
    ("make", "fix"),
    [
        (
            lambda: HealthchecksPings("hc-ping.com/x"),
            "is not an http:// or https:// URL with a host",
        ),
        (lambda: HealthchecksPings("ftp://hc-ping.com/x"), "is not an http:// or https:// URL"),
        (lambda: HealthchecksPings("https:///x"), "is not an http:// or https:// URL"),
        (lambda: HealthchecksPings("https://hc-ping.com:https/x"), "is not a valid URL"),
        (lambda: HealthchecksPings(f"{URL}/start"), "ends with /start; pass the check's own"),
        (lambda: HealthchecksPings(f"{URL}/fail/"), "ends with /fail; pass the check's own"),
        (lambda: HealthchecksPings(42), "pass the URL as a string"),  # type: ignore[arg-type]
        (lambda: HealthchecksPings(URL, timeout=0), "timeout=0; pass the seconds each ping"),
        (lambda: HealthchecksPings(URL, timeout=-1.5), "a number > 0"),
        (lambda: HealthchecksPings(URL, timeout=float("inf")), "a number > 0"),
        (lambda: HealthchecksPings(URL, timeout=True), "a number > 0"),
        (lambda: HealthchecksPings(URL, max_queue=0), "max_queue=0; pass how many pings"),
        (lambda: HealthchecksPings(URL, jobs={}), "jobs={} pings for no job; map each job"),
        (
            lambda: HealthchecksPings(URL, jobs={JOB: "Not A Slug"}),
            "neither a check URL nor a slug",
        ),
        (lambda: HealthchecksPings(URL, jobs={JOB: "ftp://h/x"}), "jobs['reports:daily']="),
        (lambda: HealthchecksPings(URL, jobs={"": URL}), "its keys are job keys"),
        (lambda: WebhookPings("example.com/hook"), "is not an http:// or https:// URL"),
        (lambda: WebhookPings(URL, events=("job-mised",)), "did you mean 'job-missed'?"),
        (lambda: WebhookPings(URL, events="job-missed"), "pass a collection of event types"),
        (lambda: WebhookPings(URL, events=()), "events is empty, so nothing would be sent"),
        (lambda: WebhookPings(URL, headers={"X-A": "1\r\nX-B: 2"}), "without line breaks"),
        (lambda: WebhookPings(URL, headers={"X A": "1"}), "is no HTTP header name"),
    ],
)
def test_a_wrong_argument_is_refused_naming_the_fix(make, fix: str):
    with pytest.raises(LocksConfigurationError, match=re.escape(fix)):
        make()


def test_a_refused_url_is_shown_without_its_secrets():
    with pytest.raises(LocksConfigurationError) as refused:
        HealthchecksPings(f"https://user:pw@hc-ping.com/{CHECK_UUID}/start")
    message = str(refused.value)
    assert "https://***@hc-ping.com/5bf6.../start" in message
    assert "pw" not in message
    assert CHECK_UUID not in message
    assert "5bf6" in repr(HealthchecksPings(URL))
    assert CHECK_UUID not in repr(HealthchecksPings(URL, jobs={JOB: "daily-report"}))


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"https://hc-ping.com/{CHECK_UUID}/fail?rid=abc", "https://hc-ping.com/5bf6.../fail?..."),
        (
            "https://a:b@hooks.example.com:8443/T0123/x",
            "https://***@hooks.example.com:8443/T0123/x",
        ),
        ("http://[::1]:8080/hook", "http://[::1]:8080/hook"),
        ("https://h:port/x", "<a malformed URL>"),
    ],
)
def test_a_url_in_a_log_line_hides_what_grants_a_ping(url: str, shown: str):
    assert _shown(url) == shown
