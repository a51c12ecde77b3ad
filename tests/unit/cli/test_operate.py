"""`leaselock locks`, `break` and `jobs` in-process, on a SQLite file: output and exit codes.

Also what every command that opens a store (`cli_locks`) leaves in a file that is not a
leaselock one: nothing.
"""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
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


# every command that opens the store, each as an operator would type it
EVERY_STORE_COMMAND = [
    pytest.param(["locks"], id="locks"),
    pytest.param(["jobs"], id="jobs"),
    pytest.param(["watch"], id="watch"),
    pytest.param(["break", "orders:1"], id="break-asking"),
    pytest.param(["break", "orders:1", "--yes"], id="break"),
    pytest.param(["pause", "reports:*"], id="pause"),
    pytest.param(["resume", "reports:*"], id="resume"),
    pytest.param(["run", "feed:import", "--job", "steered_jobs:import_feed"], id="run"),
]


def an_application_database(path: Path) -> bytes:
    """Make an application's own SQLite file: a table of its own, none of leaselock's."""
    db = sqlite3.connect(path)
    try:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER NOT NULL)")
        db.execute("INSERT INTO orders (total) VALUES (42)")
        db.commit()
    finally:
        db.close()
    return path.read_bytes()


def tables_of(path: Path) -> list[str]:
    db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return [name for (name,) in db.execute("SELECT name FROM sqlite_master ORDER BY name")]
    finally:
        db.close()


@pytest.mark.parametrize("command", EVERY_STORE_COMMAND)
def test_a_command_on_a_file_without_leaselock_tables_names_them_in_one_line_and_changes_nothing(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    path = tmp_path / "app.db"
    before = an_application_database(path)

    assert main([*command, "--url", f"sqlite:///{path}"]) == 2

    output, error = capsys.readouterr()
    assert output == ""
    assert error.count("\n") == 1
    assert error.startswith(f"leaselock {command[0]}: ")
    assert '"leaselock_locks"' in error
    assert "start the application once" in error
    assert tables_of(path) == ["orders"]
    # byte for byte: no table, no row, and the journal mode (not switched to WAL) as it was
    assert path.read_bytes() == before
    assert [entry.name for entry in tmp_path.iterdir()] == ["app.db"]


@pytest.mark.parametrize("command", EVERY_STORE_COMMAND)
def test_a_command_on_a_missing_file_says_so_in_one_line_and_creates_no_file(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    assert main([*command, "--url", f"sqlite:///{tmp_path / 'app.db'}"]) == 2

    output, error = capsys.readouterr()
    assert output == ""
    assert error.count("\n") == 1
    assert "no SQLite file at" in error
    assert list(tmp_path.iterdir()) == []
