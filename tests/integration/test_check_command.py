"""`leaselock check`, end to end in a subprocess: it passes every shipped store, catches broken
ones, and never says OK without evidence.

Each passing run is short (`SECONDS` once every worker is ready); `leaselock check` defaults to
60. The nemesis makes its first pause and kill at once, so a short run still has both.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis.asyncio

from helpers import leaselock_command as leaselock
from leaselock._cli import main

SECONDS = "8"
# a loaded machine (CI beside other jobs) or a slow store (etcd's leases run in whole seconds)
# may need longer to show every kind of evidence: the check goes on until it has, this long
AT_MOST = "60"
# a check that needed its whole AT_MOST, after its workers took long to start
pytestmark = pytest.mark.timeout(240)
EXIT_INCONCLUSIVE = 3
SHIPPED_STORES = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("mysql", marks=pytest.mark.mysql),
    pytest.param("etcd", marks=pytest.mark.etcd),
    pytest.param("redis_cluster", marks=pytest.mark.redis_cluster),
]


def url_of(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if store == "sqlite":
        return f"sqlite:///{tmp_path / 'locks.db'}"
    url: str = request.getfixturevalue(f"{store}_url")
    if store == "redis_cluster":
        return url.replace("redis://", "redis+cluster://", 1)
    if store == "etcd":
        return url.replace("http://", "etcd://", 1)
    return url


@pytest.mark.parametrize("store", SHIPPED_STORES)
def test_the_check_passes_every_shipped_store_with_evidence(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
):
    url = url_of(store, tmp_path, request)
    checked = leaselock(
        "check", "--url", url, "--seconds", SECONDS, "--at-most", AT_MOST, "--workers", "3"
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "OK: no two holders, tokens grew, no stale write accepted" in checked.stdout
    assert "0 violations" in checked.stdout
    assert "INCONCLUSIVE" not in checked.stdout


def test_the_check_with_orm_writes_passes_and_the_database_refused_the_stale_ones(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'locks.db'}"
    checked = leaselock(
        "check", "--url", url, "--orm", "--seconds", SECONDS, "--at-most", AT_MOST, "--workers", "3"
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "OK: no two holders, tokens grew, no stale write accepted" in checked.stdout
    assert "0 violations" in checked.stdout
    refused = re.search(r"fenced writes: \d+ accepted, (\d+) refused", checked.stdout)
    assert refused is not None
    assert int(refused.group(1)) > 0


@pytest.mark.redis
def test_the_check_leaves_no_key_behind_on_redis(tmp_path: Path, redis_url: str):
    async def check_keys() -> list[bytes]:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            return [name async for name in client.scan_iter(match="leaselock-check:*")]
        finally:
            await client.aclose()

    checked = leaselock("check", "--url", redis_url, "--seconds", "2", "--workers", "2")
    assert checked.returncode in {0, EXIT_INCONCLUSIVE}, checked.stdout + checked.stderr
    assert asyncio.run(check_keys()) == []


def test_a_one_second_run_is_inconclusive_naming_what_it_lacked(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'locks.db'}"
    checked = leaselock("check", "--url", url, "--seconds", "1")
    assert checked.returncode == EXIT_INCONCLUSIVE, checked.stdout + checked.stderr
    assert "OK" not in checked.stdout
    assert "INCONCLUSIVE: no violation, but the run lacked evidence:" in checked.stdout
    assert "no holder was killed and followed by another holder" in checked.stdout
    assert "run longer (--seconds 30 or more)" in checked.stdout


@pytest.mark.parametrize(
    ("factory", "violation"),
    [
        ("check_stores:read_then_write", "two live leases"),
        ("check_stores:tokens_go_back", "a token given twice"),
    ],
)
def test_the_check_fails_a_broken_store_naming_the_violation_at_a_readable_time(
    factory: str, violation: str, tmp_path: Path
):
    url = f"sqlite:///{tmp_path / 'broken.db'}"
    checked = leaselock(
        "check", "--url", url, "--store", factory, "--seconds", SECONDS, "--at-most", AT_MOST
    )
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "FAILED:" in checked.stdout
    (line, *_) = [line for line in checked.stdout.splitlines() if violation in line]
    # an ISO wall-clock time with its offset from the start, not raw clock nanoseconds
    assert "+00:00 (+" in line, line


@pytest.mark.postgres
def test_every_line_of_a_check_hides_the_urls_password(postgres_url: str, tmp_path: Path):
    # the throwaway and CI servers trust local connections: any password is taken, and shown
    parts = urlsplit(postgres_url)
    netloc = f"{parts.username or 'postgres'}:S3cr3tPw9@{parts.hostname}:{parts.port}"
    url = urlunsplit(parts._replace(netloc=netloc))
    checked = leaselock("check", "--url", url, "--seconds", "1", "--workers", "2")
    assert checked.returncode == EXIT_INCONCLUSIVE, checked.stdout + checked.stderr
    assert "S3cr3tPw9" not in checked.stdout + checked.stderr
    assert f"{parts.username or 'postgres'}:***@" in checked.stdout


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:S3cr3tPw9@127.0.0.1:1/none",
        "mysql://app:S3cr3tPw9@127.0.0.1:1/none",
        "redis://:S3cr3tPw9@127.0.0.1:1/0",
    ],
)
def test_a_check_that_cannot_reach_its_server_hides_the_password(url: str):
    checked = leaselock("check", "--url", url, "--seconds", "1")
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "S3cr3tPw9" not in checked.stdout + checked.stderr
    assert ":***@" in checked.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--url", "bogus://host"], "is not a store URL leaselock knows; pass postgresql://"),
        (["--url", "sqlite:////no/such/dir/locks.db"], "does not exist; create it first"),
        (
            ["--url", "postgresql://postgres@127.0.0.1:1/none"],
            "cannot start: could not connect",
        ),
        (["--url", "sqlite:///TMP/x.db", "--seconds", "0"], "seconds=0.0; pass a number"),
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


def test_in_this_process_the_check_passes_runs_the_failover_command_and_reports_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    # SQLite has no replica to promote: the command only proves when and how often it ran
    failovers = tmp_path / "failovers"
    status = main(
        [
            "check",
            "--url",
            f"sqlite:///{tmp_path / 'locks.db'}",
            "--seconds",
            "8",
            "--at-most",
            AT_MOST,
            "--workers",
            "2",
            "--failover-command",
            f"echo failed over >> {failovers}",
        ]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    assert "OK: no two holders, tokens grew, no stale write accepted" in out
    assert "  2 workers ready; running 8 s" in out
    assert "  5 s: " in out, "a progress line at least every 5 s"
    ran = failovers.read_text().splitlines()
    assert ran, "the nemesis ran the failover command"
    assert f"{len(ran)} failover" in out
