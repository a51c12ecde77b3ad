"""`leaselock timeline`: leases from event logs, and the SVG drawn from them (structure)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from helpers import TIMELINE_T0 as T0
from helpers import timeline_event as event
from helpers import write_timeline_story as write_logs
from leaselock._cli import main
from leaselock._cli._timeline import leases_from, read_events, render_svg

SVG = "{http://www.w3.org/2000/svg}"


def test_leases_end_as_the_logs_say_and_a_killed_holders_fade_until_the_next_holder(
    tmp_path: Path,
):
    leases = leases_from(read_events(write_logs(tmp_path)))
    summary = [(l.key, l.instance, l.token, l.ended) for l in leases]
    assert summary == [
        ("feed", "shop-3001", 1, "unrecorded"),
        ("feed", "shop-3003", 6, "released"),
        ("job", "shop-3001", 3, "released"),
        ("job", "shop-3001", 4, "unrecorded"),
        ("job", "shop-3002", 7, "lost: max_run"),
        ("job:owner", "shop-3001", 2, "unrecorded"),
        ("job:owner", "shop-3002", 5, "handed-back"),
    ]
    killed_feed, killed_owner = leases[0], leases[5]
    # the last sign of life was at 3 s; the feed's next holder came at 8 s, before the ttl ran out
    assert killed_feed.end == T0 + timedelta(seconds=3)
    assert killed_feed.fades_until == T0 + timedelta(seconds=8)
    assert killed_owner.fades_until == T0 + timedelta(seconds=9)


def test_the_svg_has_a_lane_per_key_a_bar_per_lease_with_its_token_and_its_end(tmp_path: Path):
    drawn = render_svg(leases_from(read_events(write_logs(tmp_path))))
    svg = ET.fromstring(drawn)  # noqa: S314 -- our own output
    lanes = [g.get("data-key") for g in svg.iter(f"{SVG}g") if g.get("class") == "lane"]
    assert lanes == ["feed", "job", "job:owner"]
    bars = [r for r in svg.iter(f"{SVG}rect") if r.get("class") == "lease"]
    assert [(b.get("data-key"), b.get("data-token"), b.get("data-ended")) for b in bars] == [
        ("feed", "1", "unrecorded"),
        ("feed", "6", "released"),
        ("job", "3", "released"),
        ("job", "4", "unrecorded"),
        ("job", "7", "lost: max_run"),
        ("job:owner", "2", "unrecorded"),
        ("job:owner", "5", "handed-back"),
    ]
    colours = {b.get("data-instance"): b.get("fill") for b in bars}
    assert len(set(colours.values())) == 3, "one colour per instance"
    tokens = {t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "token"}
    assert {"1", "2", "5", "6", "7"} <= tokens
    marks = [t.get("class") for t in svg.iter(f"{SVG}text") if "mark" in (t.get("class") or "")]
    assert sorted(marks) == sorted(["mark unrecorded"] * 3 + ["mark lost", "mark handed-back"])
    assert len([r for r in svg.iter(f"{SVG}rect") if r.get("class") == "fade"]) == 3


def test_the_command_writes_svg_or_html_and_says_what_it_drew(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    logs = list(map(str, write_logs(tmp_path)))
    assert main(["timeline", *logs, "-o", str(tmp_path / "t.svg")]) == 0
    assert capsys.readouterr().out.startswith(
        f"Wrote {tmp_path / 't.svg'}: 3 keys, 7 leases, 3 instances, 11 events"
    )
    ET.fromstring((tmp_path / "t.svg").read_text())  # noqa: S314 -- our own output
    assert main(["timeline", *logs, "-o", str(tmp_path / "t.html")]) == 0
    html = (tmp_path / "t.html").read_text()
    assert html.startswith("<!doctype html>")
    assert html.count('class="lease"') == 7


@pytest.mark.parametrize(
    ("content", "output", "message"),
    [
        ("not json\n", "t.html", "is not a leaselock event"),
        ("", "t.html", "hold no lease"),
        (json.dumps(event("lock-acquired", 0, "k", "a", 1)) + "\n", "t.png", "a .svg or a .html"),
    ],
)
def test_bad_logs_and_outputs_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, output: str, message: str
):
    log = tmp_path / "events.jsonl"
    log.write_text(content)
    assert main(["timeline", str(log), "-o", str(tmp_path / output)]) == 2
    error = capsys.readouterr().err
    assert message in error
    assert len(error.strip().splitlines()) == 1
