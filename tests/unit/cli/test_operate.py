"""`leaselock locks`, `break` and `jobs` in-process, on a SQLite file: output and exit codes."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

import leaselock
from leaselock import Locks
from leaselock._cli import main
from leaselock.stores import SQLiteLockStore


def hold_a_lock_and_run_a_job(path: Path) -> int:
    """Take orders:1 (kept: the Locks is closed without a release) and run one job; the token."""

    @leaselock.without_overlapping(key="feed:import")
    async def import_feed() -> None:
        return None

    async def run() -> int:
        store = SQLiteLockStore(path)
        locks = Locks(store=store, instance="shop-3002", ttl="30s")
        await locks.start()
        locks.register(import_feed)
        await import_feed()
        lock = await locks.acquire("orders:1")
        assert lock is not None
        # a holder that died: its lease stays in the file until it expires
        await store.aclose()
        return lock.fencing_token

    return asyncio.run(run())


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'locks.db'}"


def test_locks_prints_a_table_and_json(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    token = hold_a_lock_and_run_a_job(tmp_path / "locks.db")
    assert main(["locks", "orders:", "--url", url]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["KEY", "HOLDER", "OWNER", "TOKEN", "EXPIRES", "IN"]
    assert table[1].split()[:2] == ["orders:1", "shop-3002"]
    assert table[1].split()[3] == str(token)
    assert main(["locks", "--url", url, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(i["key"], i["live"]) for i in listed] == [("feed:import", False), ("orders:1", True)]
    assert main(["locks", "nothing:", "--url", url]) == 0
    assert capsys.readouterr().out == "No locks under 'nothing:'.\n"


def test_break_asks_first_and_does_what_the_answer_says(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    hold_a_lock_and_run_a_job(tmp_path / "locks.db")

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    assert main(["break", "orders:1", "--url", url]) == 0
    assert capsys.readouterr().out.endswith("Left as it was.\n")
    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    assert main(["break", "orders:1", "--url", url]) == 0
    assert "it was held by shop-3002" in capsys.readouterr().out
    assert main(["break", "orders:1", "--url", url]) == 0
    assert capsys.readouterr().out == "No live lock holds 'orders:1'; nothing to break.\n"
    assert main(["break", "orders:1", "--url", url, "--yes"]) == 0
    assert capsys.readouterr().out == "No live lock held 'orders:1'; nothing was broken.\n"


def test_jobs_prints_the_run_records(url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["jobs", "--url", f"sqlite:///{tmp_path / 'empty.db'}"]) == 2
    assert "no SQLite file at" in capsys.readouterr().err
    hold_a_lock_and_run_a_job(tmp_path / "locks.db")
    assert main(["jobs", "--url", url]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["JOB", "LAST", "RUN"]
    assert table[1].split()[0] == "feed:import"
    assert "ok" in table[1].split()
    assert main(["jobs", "--url", url, "--json"]) == 0
    [job] = json.loads(capsys.readouterr().out)
    assert (job["job"], job["last_run"]["outcome"], job["last_run"]["instance"]) == (
        "feed:import",
        "ok",
        "shop-3002",
    )
