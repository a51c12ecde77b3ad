"""`leaselock pause`, `resume` and `run` in-process, on a SQLite file: what instances then do."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import leaselock
from leaselock import Event, Locks
from leaselock._cli import main
from leaselock.stores import SQLiteLockStore


@leaselock.without_overlapping(key="reports:daily")
async def daily_report() -> str:
    return "reported"


def tick(path: Path) -> tuple[str | None, list[Event]]:
    """One tick of reports:daily on an instance of the file; what it returned and skipped."""

    async def run() -> tuple[str | None, list[Event]]:
        skipped: list[Event] = []
        async with Locks(store=SQLiteLockStore(path), instance="shop-3001") as locks:
            locks.register(daily_report)
            locks.events.subscribe(skipped.append, "tick-skipped")
            return await daily_report(), skipped

    return asyncio.run(run())


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "locks.db"


def test_pause_stops_every_instance_with_its_note_and_resume_lets_it_run(
    path: Path, capsys: pytest.CaptureFixture[str]
):
    url = f"sqlite:///{path}"
    assert tick(path)[0] == "reported"
    assert (
        main(["pause", "reports:*", "--note", "month-end close", "--by", "alice", "--url", url])
        == 0
    )
    assert "Paused 'reports:*' (by alice)" in capsys.readouterr().out

    result, skipped = tick(path)
    assert result is None
    assert [(e.reason, e.holder, e.note) for e in skipped] == [  # type: ignore[attr-defined]
        ("paused", "alice", "month-end close")
    ]
    assert main(["jobs", "--url", url]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[-1] == "STATE"
    assert table[1].endswith("paused by alice: month-end close")
    assert main(["jobs", "--url", url, "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert (listed["paused"]["target"], listed["paused"]["note"]) == (
        "reports:*",
        "month-end close",
    )

    assert main(["resume", "reports:*", "--url", url]) == 0
    assert "Resumed 'reports:*' (paused by alice: month-end close)" in capsys.readouterr().out
    assert main(["resume", "reports:*", "--url", url]) == 0
    assert capsys.readouterr().out == "'reports:*' was not paused.\n"
    assert tick(path)[0] == "reported"


def test_pause_until_and_bad_arguments_say_what_is_wrong(
    path: Path, capsys: pytest.CaptureFixture[str]
):
    url = f"sqlite:///{path}"
    tick(path)
    assert main(["pause", "reports:daily", "--until", "2h", "--url", url]) == 0
    assert " until 20" in capsys.readouterr().out
    assert main(["pause", "reports:daily", "--until", "later", "--url", url]) == 2
    assert "until" in capsys.readouterr().err


def test_run_imports_the_job_and_runs_it_once_recorded_as_manual(
    path: Path, capsys: pytest.CaptureFixture[str]
):
    url = f"sqlite:///{path}"
    tick(path)
    assert main(["pause", "feed:*", "--url", url]) == 0
    capsys.readouterr()
    assert main(["run", "feed:import", "--job", "steered_jobs:import_feed", "--url", url]) == 0
    assert capsys.readouterr().out == "Ran 'feed:import' once: 'imported (manual)'\n"
    assert main(["jobs", "--url", url, "--json"]) == 0
    by_job = {job["job"]: job for job in json.loads(capsys.readouterr().out)}
    assert by_job["feed:import"]["last_success"]["trigger"] == "manual"

    assert main(["run", "feed:import", "--job", "steered_jobs:nothing", "--url", url]) == 2
    assert "cannot be imported" in capsys.readouterr().err
    assert main(["run", "feed:import", "--job", "steered_jobs", "--url", url]) == 2
    assert "module:attribute" in capsys.readouterr().err
