"""leaselock serve: what it refuses before it serves (serving itself: the browser tests)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from leaselock._cli import main
from leaselock._cli._serve import DEFAULT_HOST, add_serve_command


@pytest.fixture
def locks_file(tmp_path: Path) -> str:
    path = tmp_path / "locks.db"
    path.touch()
    return f"sqlite:///{path}"


def test_it_binds_this_machine_only_unless_told_otherwise():
    import argparse  # noqa: PLC0415 -- only this test builds the parser by hand

    parser = argparse.ArgumentParser()
    add_serve_command(parser.add_subparsers())
    arguments = parser.parse_args(["serve", "--url", "sqlite:///locks.db"])
    assert (arguments.host, DEFAULT_HOST) == ("127.0.0.1", "127.0.0.1")
    assert arguments.port == 8787


@pytest.mark.parametrize(
    ("written", "says"),
    [
        ("", "is empty; write the token into it"),
        ("short", "at least 16 characters"),
    ],
)
def test_a_token_file_that_is_empty_or_short_is_refused_in_one_line(
    tmp_path: Path,
    locks_file: str,
    written: str,
    says: str,
    capsys: pytest.CaptureFixture[str],
):
    token = tmp_path / "token"
    token.write_text(written)
    assert main(["serve", "--url", locks_file, "--token-file", str(token)]) == 2
    assert says in capsys.readouterr().err


def test_a_missing_token_file_or_store_file_is_refused_in_one_line(
    tmp_path: Path, locks_file: str, capsys: pytest.CaptureFixture[str]
):
    assert main(["serve", "--url", locks_file, "--token-file", str(tmp_path / "nope")]) == 2
    assert "cannot be read (No such file or directory)" in capsys.readouterr().err
    assert main(["serve", "--url", f"sqlite:///{tmp_path / 'nope.db'}"]) == 2
    assert "no SQLite file at" in capsys.readouterr().err


def test_a_port_taken_is_refused_in_one_line(locks_file: str, capsys: pytest.CaptureFixture[str]):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--url", locks_file, "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
