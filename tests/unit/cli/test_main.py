"""The leaselock command's own process: arguments, exit codes, one-line errors (in-process)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from leaselock import LocksConfigurationError
from leaselock._cli import main
from leaselock._cli._check import _fail_over as fail_over


def test_version_prints_the_installed_release(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_status:
        main(["--version"])
    assert exit_status.value.code == 0
    assert capsys.readouterr().out == f"leaselock {importlib.metadata.version('leaselock')}\n"


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_status:
        main([])
    assert exit_status.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--url", "bogus://x"], "is not a store URL leaselock knows"),
        (
            ["--url", "sqlite:///x.db", "--seconds", "-1"],
            "seconds=-1.0; pass a number of seconds above 0",
        ),
        (["--url", "sqlite:///x.db", "--workers", "1"], "workers=1; pass an int of at least 2"),
        (["--url", "sqlite:///x.db", "--ttl", "soon"], "ttl='soon' is not a duration"),
    ],
)
def test_a_check_that_cannot_run_exits_2_with_one_line(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
):
    assert (
        main(
            ["check", *arguments, "--seconds", "3"]
            if "--seconds" not in arguments
            else ["check", *arguments]
        )
        == 2
    )
    error = capsys.readouterr().err
    assert error.startswith("leaselock check: ")
    assert message in error
    assert len(error.strip().splitlines()) == 1


def test_a_failover_command_that_fails_stops_the_check_naming_its_exit_and_last_line():
    with pytest.raises(
        LocksConfigurationError,
        match=r"exited 4: no replica to promote; fix the command, or leave --failover-command out",
    ):
        fail_over("echo starting; echo no replica to promote >&2; exit 4")


def test_a_failover_command_runs_in_a_shell_as_the_user_wrote_it(tmp_path: Path):
    fail_over(f"cd {tmp_path} && echo promoted > failover.log")
    assert (tmp_path / "failover.log").read_text() == "promoted\n"
