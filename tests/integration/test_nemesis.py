"""Mutual exclusion and fencing under a nemesis: paused holders, killed workers, crashed stores.

leaselock.testing's torture check (what `leaselock check` runs) on SQLite, PostgreSQL and Redis,
with one more fault the command never makes on a user's server: the store crashes and restarts,
down for a fraction of a second to 1.5 s. The servers are throwaway ones of this test's own.
Every store call and write is recorded with its send and answer times, and the history checker
proves from that record that no two leases were live at once, that tokens grew, and that no stale
write was accepted. Run longer with LEASELOCK_NEMESIS_SECONDS=60.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from leaselock.testing.check import check_store
from servers import ServerUnavailable, crashable_postgres_server, crashable_redis_server

WORKERS = 4
SECONDS = float(os.environ.get("LEASELOCK_NEMESIS_SECONDS", "10"))


@contextlib.contextmanager
def store_under_test(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[str, str | None, Callable[[], None] | None]]:
    """URL, store factory and restart of a store of this test's own."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'locks.db'}", None, None
        return
    start = crashable_postgres_server if kind == "postgres" else crashable_redis_server
    # the documented way to share an application's Redis client, with redis-py's own retries
    factory = "check_stores:redis_on_an_application_client" if kind == "redis" else None
    rng = random.Random()  # noqa: S311 -- how long the server stays down, not a secret
    try:
        with start() as server:
            yield server.url, factory, lambda: server.crash_restart(rng.uniform(0.2, 1.5))
    except ServerUnavailable as unavailable:
        if request.config.getoption("--require-servers"):
            pytest.fail(f"--require-servers: no throwaway {kind} server: {unavailable}")
        pytest.skip(f"no throwaway {kind} server to crash: {unavailable}")


@pytest.mark.nemesis
@pytest.mark.parametrize("kind", ["sqlite", "postgres", "redis"])
def test_no_two_holders_no_token_back_no_stale_write_under_pauses_kills_and_crashes(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
):
    with store_under_test(kind, tmp_path, request) as (url, factory, restart):
        result = check_store(
            url,
            factory=factory,
            seconds=SECONDS,
            workers=WORKERS,
            ttl="1s",
            # on a loaded machine, as long as it takes to show every kind of fault's evidence
            at_most=SECONDS * 6,
            restart=restart,
            directory=tmp_path,
        )
    print(f"\n{kind}:\n{result.summary()}")  # noqa: T201 -- the run's counts, for the record
    assert result.ok, result.summary()
    assert result.report.processes >= WORKERS
    assert result.report.acquisitions >= 10, result.summary()
    assert result.report.writes_accepted >= 5, result.summary()
    assert result.faults["pauses"] + result.faults["kills"] >= 2, result.summary()
    if restart is not None:
        assert result.faults["restarts"] >= 1, result.summary()
