"""`leaselock timeline`: leases from event logs, the SVG drawn from them, and their JSON."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from helpers import TIMELINE_T0 as T0
from helpers import timeline_event as event
from helpers import timeline_renewed as renewed
from helpers import write_timeline_story as write_logs
from leaselock._cli import main
from leaselock._timeline import Lease, leases_from, read_events, render_svg

SVG = "{http://www.w3.org/2000/svg}"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def leases_of(*lines: dict[str, Any]) -> list[Lease]:
    """The leases of hand-written lines, read as ``read_events`` reads a file."""
    events = [line | {"at": datetime.fromisoformat(str(line["at"]))} for line in lines]
    return leases_from(sorted(events, key=lambda e: e["at"]))


def overlaps(leases: list[Lease]) -> list[tuple[int, int]]:
    """The pairs of tokens of one key whose leases overlap in time."""
    return [
        (a.token, b.token)
        for a, b in itertools.combinations(leases, 2)
        if a.key == b.key and a.start < b.end and b.start < a.end
    ]


def test_leases_end_as_their_holders_lines_say_and_a_killed_holders_expire(tmp_path: Path):
    leases = leases_from(read_events(write_logs(tmp_path)))
    summary = [(l.key, l.instance, l.token, l.ended, l.detected_by) for l in leases]
    assert summary == [
        ("feed", "shop-3001", 1, "expired", None),
        ("feed", "shop-3003", 6, "released", None),
        ("job", "shop-3001", 3, "released", None),
        ("job", "shop-3001", 4, "expired", None),
        ("job", "shop-3002", 7, "lost", "max_run"),
        ("job:owner", "shop-3001", 2, "expired", None),
        ("job:owner", "shop-3002", 5, "handed-back", None),
    ]
    killed_feed, killed_run, killed_owner = leases[0], leases[3], leases[5]
    # held up to its holder's last line (a renewal at 3.4 s), expired a ttl (6 s) later at the
    # latest, or at the next token of its key if that came first
    assert [l.held_until for l in (killed_feed, killed_run, killed_owner)] == [at(3.4)] * 3
    assert killed_feed.end == at(8), "feed's next holder came at 8 s"
    assert killed_run.end == at(9.4), "the run lock's next token came later, at 9.5 s"
    assert killed_owner.end == at(9), "the job's lease was taken at 9 s"
    assert overlaps(leases) == []


def test_a_survivors_lines_naming_a_dead_holder_do_not_keep_its_lease_alive():
    dead_owner = f"{'0' * 31}1@shop-3001"
    leases = leases_of(
        event("lock-acquired", 0, "job:owner", "shop-3001", 1, ttl_ms=3000),
        event("run-started", 0.2, "job", "shop-3001", 2, job="job"),
        # killed at 0.3 s; shop-3002 takes the lease once it expired, and reports on the dead
        event("lock-acquired", 3.1, "job:owner", "shop-3002", 3, ttl_ms=3000),
        event("job-missed", 3.7, "job", "shop-3001", None, owner=dead_owner, by="shop-3002"),
        event("run-abandoned", 3.8, "job", "shop-3001", 2, owner="@shop-3001", by="shop-3002"),
        event("lock-released", 4, "job:owner", "shop-3002", 3),
    )
    dead = leases[0]
    assert (dead.owner, dead.ended) == (dead_owner, "expired")
    assert dead.held_until == at(0.2), "its holder's own last line"
    assert dead.end == at(3.1), "a ttl later (3.2 s), cut at the next token"
    assert overlaps(leases) == []


def test_a_holder_that_lost_no_lease_and_wrote_on_any_key_still_held_its_leases_then():
    leases = leases_of(
        event("lock-acquired", 0, "leader", "shop-3001", 1, ttl_ms=30_000),
        event("lock-acquired", 5, "other", "shop-3001", 2, ttl_ms=30_000),
        event("lock-released", 6, "other", "shop-3001", 2),
        renewed(40, "shop-3001"),
        renewed(50, "shop-3001"),
        # another instance's line: not shop-3001's sign of life
        renewed(70, "shop-3002"),
    )
    leader = next(lease for lease in leases if lease.key == "leader")
    assert (leader.ended, leader.held_until, leader.end) == ("expired", at(50), at(80))


def test_a_lease_with_no_other_line_of_its_holder_expires_a_ttl_after_it_started():
    (lease,) = leases_of(event("lock-acquired", 1, "k", "shop-3001", 1, ttl_ms=2000))
    assert (lease.held_until, lease.end) == (at(1), at(3))


def test_a_lease_carries_the_ticks_its_holders_runs_were_for_and_shows_the_latest():
    ticks = ["2026-12-06T10:00:00+00:00", "2026-12-06T10:00:10+00:00"]
    leases = leases_of(
        event("lock-acquired", 1, "job:owner", "shop-3001", 2, ttl_ms=6000),
        event("run-started", 1.1, "job:owner", "shop-3001", 2, tick=ticks[0]),
        event("run-started", 2.1, "job:owner", "shop-3001", 2, tick=ticks[1]),
        event("run-started", 2.2, "job:owner", "shop-3002", 9, tick=ticks[1], by="shop-3001"),
        event("run-started", 2.3, "job:owner", "shop-3001", 2, tick=None, trigger="manual"),
        event("lock-released", 3, "job:owner", "shop-3001", 2),
    )
    (lease,) = leases
    assert [tick.isoformat() for tick in lease.ticks] == ticks
    assert lease.as_json()["ticks"] == ticks
    (bar,) = [
        rect
        for rect in ET.fromstring(render_svg(leases)).iter(f"{SVG}rect")  # noqa: S314 -- ours
        if rect.get("class") == "lease"
    ]
    title = bar.find(f"{SVG}title")
    assert title is not None
    assert "tick 2026-12-06T10:00:10+00:00" in (title.text or "")


def test_a_lease_never_reaches_past_the_next_token_of_its_key_whatever_its_holder_wrote():
    leases = leases_of(
        event("lock-acquired", 0, "k", "shop-3001", 1, ttl_ms=1000),
        event("lock-acquired", 1.5, "k", "shop-3002", 2, ttl_ms=1000),
        # shop-3001 was paused past its lease: it found out at 4 s, after the takeover
        event("lock-lost", 4, "k", "shop-3001", 1, detected_by="deadline"),
        event("lock-released", 5, "k", "shop-3002", 2),
    )
    paused = leases[0]
    assert (paused.ended, paused.detected_by, paused.end) == ("lost", "deadline", at(1.5))
    assert overlaps(leases) == []


def test_the_svg_has_a_lane_per_key_a_bar_per_lease_with_its_token_and_its_end(tmp_path: Path):
    drawn = render_svg(leases_from(read_events(write_logs(tmp_path))))
    svg = ET.fromstring(drawn)  # noqa: S314 -- our own output
    lanes = [g.get("data-key") for g in svg.iter(f"{SVG}g") if g.get("class") == "lane"]
    assert lanes == ["feed", "job", "job:owner"]
    bars = [r for r in svg.iter(f"{SVG}rect") if r.get("class") == "lease"]
    assert [(b.get("data-key"), b.get("data-token"), b.get("data-ended")) for b in bars] == [
        ("feed", "1", "expired"),
        ("feed", "6", "released"),
        ("job", "3", "released"),
        ("job", "4", "expired"),
        ("job", "7", "lost"),
        ("job:owner", "2", "expired"),
        ("job:owner", "5", "handed-back"),
    ]
    assert bars[4].get("data-detected-by") == "max_run"
    colours = {b.get("data-instance"): b.get("fill") for b in bars}
    assert len(set(colours.values())) == 3, "one colour per instance"
    tokens = {t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "token"}
    assert {"1", "2", "5", "6", "7"} <= tokens
    marks = [t.get("class") for t in svg.iter(f"{SVG}text") if "mark" in (t.get("class") or "")]
    assert sorted(marks) == sorted(["mark expired"] * 3 + ["mark lost", "mark handed-back"])
    assert len([r for r in svg.iter(f"{SVG}rect") if r.get("class") == "fade"]) == 3


def test_no_bar_is_drawn_over_the_next_token_of_its_lane(tmp_path: Path):
    drawn = render_svg(leases_from(read_events(write_logs(tmp_path))))
    svg = ET.fromstring(drawn)  # noqa: S314 -- our own output
    for lane in (g for g in svg.iter(f"{SVG}g") if g.get("class") == "lane"):
        spans = []
        rects = [r for r in lane.iter(f"{SVG}rect") if r.get("class") in ("lease", "fade")]
        for rect in rects:
            left = float(rect.get("x", "0"))
            spans.append((left, left + float(rect.get("width", "0"))))
        spans.sort()
        for (_, right), (next_left, _) in itertools.pairwise(spans):
            assert right <= next_left + 0.1, f"{lane.get('data-key')}: {spans}"


def test_the_command_writes_svg_or_html_and_says_what_it_drew(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    logs = list(map(str, write_logs(tmp_path)))
    assert main(["timeline", *logs, "-o", str(tmp_path / "t.svg")]) == 0
    assert capsys.readouterr().out.startswith(
        f"Wrote {tmp_path / 't.svg'}: 3 keys, 7 leases, 3 instances, 14 events"
    )
    ET.fromstring((tmp_path / "t.svg").read_text())  # noqa: S314 -- our own output
    assert main(["timeline", *logs, "-o", str(tmp_path / "t.html")]) == 0
    html = (tmp_path / "t.html").read_text()
    assert html.startswith("<!doctype html>")
    assert html.count('class="lease"') == 7


def test_json_prints_every_lease_with_its_times_and_how_it_ended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    assert main(["timeline", "--json", *map(str, write_logs(tmp_path))]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert len(printed) == 7
    assert printed[0] == {
        "key": "feed",
        "instance": "shop-3001",
        "owner": f"{'0' * 31}1@shop-3001",
        "fencing_token": 1,
        "start": at(0).isoformat(),
        "held_until": at(3.4).isoformat(),
        "end": at(8).isoformat(),
        "ended": "expired",
        "detected_by": None,
        "ttl_ms": 6000,
        "ticks": [],
    }
    lost = printed[4]
    assert (lost["ended"], lost["detected_by"], lost["end"]) == (
        "lost",
        "max_run",
        at(12).isoformat(),
    )
    assert not list(tmp_path.glob("*.html")), "nothing drawn"


@pytest.mark.parametrize(
    ("content", "options", "message"),
    [
        ("not json\n", ["-o", "t.html"], "is not a leaselock event"),
        ("", ["-o", "t.html"], "hold no lease"),
        (json.dumps(event("lock-acquired", 0, "k", "a", 1)) + "\n", ["-o", "t.png"], "--json"),
        (
            json.dumps(event("lock-acquired", 0, "k", "a", 1)) + "\n",
            ["--json", "-o", "t.svg"],
            "> ",
        ),
    ],
)
def test_bad_logs_and_outputs_are_one_line_and_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str,
    options: list[str],
    message: str,
):
    log = tmp_path / "events.jsonl"
    log.write_text(content)
    files = [str(tmp_path / option) if "." in option else option for option in options]
    assert main(["timeline", str(log), *files]) == 2
    error = capsys.readouterr().err
    assert message in error
    assert len(error.strip().splitlines()) == 1
