"""`leaselock check`, end to end in a subprocess: it passes the shipped stores, catches broken ones.

Each run is short (a few seconds); `leaselock check` defaults to 60.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import leaselock_command as leaselock
from leaselock._cli import main

SECONDS = "6"


@pytest.mark.parametrize(
    "store",
    [
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ],
)
def test_the_check_passes_a_shipped_store(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
):
    url = (
        f"sqlite:///{tmp_path / 'locks.db'}"
        if store == "sqlite"
        else (request.getfixturevalue(f"{store}_url"))
    )
    checked = leaselock("check", "--url", url, "--seconds", SECONDS, "--workers", "3")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "OK: no two holders, tokens grew, no stale write accepted" in checked.stdout
    assert "0 violations" in checked.stdout
    assert "pauses" in checked.stdout or "kills" in checked.stdout


@pytest.mark.parametrize(
    ("factory", "violation"),
    [
        ("check_stores:read_then_write", "two live leases"),
        ("check_stores:tokens_go_back", "a token given twice"),
    ],
)
def test_the_check_fails_a_broken_store_naming_the_violation(
    factory: str, violation: str, tmp_path: Path
):
    url = f"sqlite:///{tmp_path / 'broken.db'}"
    checked = leaselock("check", "--url", url, "--store", factory, "--seconds", SECONDS)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "FAILED:" in checked.stdout
    assert violation in checked.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--url", "bogus://host"], "is not a store URL leaselock knows; pass postgresql://"),
        (["--url", "sqlite:////no/such/dir/locks.db"], "does not exist; create it first"),
        (
            ["--url", "postgresql://postgres@127.0.0.1:1/none"],
            "cannot start: could not connect",
        ),
        (["--url", "sqlite:///TMP/x.db", "--seconds", "1"], "--seconds 1; pass 3 or more"),
        (["--url", "sqlite:///TMP/x.db", "--store", "no_such_module:f"], "cannot be loaded"),
    ],
)
def test_a_check_that_cannot_run_says_why_in_one_line_with_exit_code_2(
    arguments: list[str], message: str, tmp_path: Path
):
    checked = (
        leaselock("check", *arguments, "--seconds", "3")
        if "--seconds" not in arguments
        else (leaselock("check", *arguments))
    )
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert message in checked.stderr
    assert "Traceback" not in checked.stderr
    assert len(checked.stderr.strip().splitlines()) == 1


def test_the_url_may_come_from_leaselock_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LEASELOCK_URL", "bogus://from-the-environment")
    checked = leaselock("check", "--seconds", "3")
    assert checked.returncode == 2
    assert "bogus://from-the-environment" in checked.stderr


def test_the_command_in_this_process_checks_a_sound_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    status = main(
        ["check", "--url", f"sqlite:///{tmp_path / 'locks.db'}", "--seconds", "4", "--workers", "2"]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    assert "OK: no two holders, tokens grew, no stale write accepted" in out
