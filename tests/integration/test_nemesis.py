"""Mutual exclusion and fencing under a nemesis: paused holders, killed workers, crashed stores.

Worker processes take one key on a real store again and again and make fenced writes to a
resource; a nemesis pauses holders past their ttl (SIGSTOP), kills workers (SIGKILL) and, on
PostgreSQL and Redis, crashes the server and starts it again. Every store call and write is
recorded with its send and answer times, and the history checker proves from that record that
no two leases were live at once, that tokens grew, and that no stale write was accepted.

The servers are throwaway ones of this test's own (a shared server is never crashed). Run for
longer with LEASELOCK_NEMESIS_SECONDS=60.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import random
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest

from leaselock.testing.history import check_history
from nemesis_worker import Job, create_resource, work
from servers import (
    CrashableServer,
    ServerUnavailable,
    crashable_postgres_server,
    crashable_redis_server,
)

WORKERS = 4
TTL = "1s"
PAUSE_S = 1.6  # longer than the ttl: the paused holder's lease expires while it sleeps
SECONDS = float(os.environ.get("LEASELOCK_NEMESIS_SECONDS", "10"))


@contextlib.contextmanager
def store_under_test(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[str, CrashableServer | None]]:
    if kind == "sqlite":
        yield str(tmp_path / "locks.db"), None
        return
    start = crashable_postgres_server if kind == "postgres" else crashable_redis_server
    try:
        with start() as server:
            where = server.url if kind == "postgres" else f"{server.url} nemesis:"
            yield where, server
    except ServerUnavailable as unavailable:
        if request.config.getoption("--require-servers"):
            pytest.fail(f"--require-servers: no throwaway {kind} server: {unavailable}")
        pytest.skip(f"no throwaway {kind} server to crash: {unavailable}")


class Nemesis:
    """Starts the workers, then pauses, kills and restarts until the time is up."""

    def __init__(self, kind: str, where: str, files: Path, server: CrashableServer | None) -> None:
        self.kind = kind
        self.where = where
        self.files = files
        self.server = server
        self.key = f"nemesis:{uuid.uuid4().hex[:8]}"
        self.until_ns = time.monotonic_ns() + int(SECONDS * 1e9)
        self.context = multiprocessing.get_context("spawn")
        self.workers: list[BaseProcess] = []
        self.done = Counter[str]()
        self.rng = random.Random()  # noqa: S311 -- choosing faults, not secrets

    def spawn(self) -> None:
        job = Job(self.kind, self.where, self.key, self.files, self.until_ns, TTL)
        process = self.context.Process(target=work, args=(job,))
        process.start()
        self.workers.append(process)

    def holders(self) -> list[int]:
        return [int(path.name) for path in (self.files / "holding").iterdir()]

    def run(self) -> None:
        (self.files / "holding").mkdir()
        create_resource(self.files / "resource.db", self.key)
        for _ in range(WORKERS):
            self.spawn()
        # every kind of fault in turn, at random moments
        actions = itertools.cycle(["pause", "kill", "pause"] + (["restart"] if self.server else []))
        while time.monotonic_ns() < self.until_ns - int(2e9):
            time.sleep(self.rng.uniform(0.3, 0.9))  # noqa: TID251 -- the nemesis acts in real time
            getattr(self, next(actions))()
        for process in self.workers:
            process.join(timeout=60)
            assert process.exitcode is not None, f"worker {process.pid} did not finish"

    def pause(self) -> None:
        holders = self.holders()
        if not holders:
            return
        pid = self.rng.choice(holders)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
            time.sleep(PAUSE_S)  # noqa: TID251 -- a real pause of a real process
            os.kill(pid, signal.SIGCONT)
            self.done["pauses"] += 1

    def kill(self) -> None:
        alive = [process for process in self.workers if process.is_alive()]
        holders = set(self.holders())
        victims = [process for process in alive if process.pid in holders] or alive
        if not victims:
            return
        victim = self.rng.choice(victims)
        victim.kill()
        victim.join()
        (self.files / "holding" / str(victim.pid)).unlink(missing_ok=True)
        self.done["kills"] += 1
        self.spawn()

    def restart(self) -> None:
        assert self.server is not None
        self.server.crash_restart(self.rng.uniform(0.2, 1.5))
        self.done["restarts"] += 1


@pytest.mark.nemesis
@pytest.mark.parametrize("kind", ["sqlite", "postgres", "redis"])
def test_no_two_holders_no_token_back_no_stale_write_under_pauses_kills_and_crashes(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
):
    with store_under_test(kind, tmp_path, request) as (where, server):
        nemesis = Nemesis(kind, where, tmp_path, server)
        nemesis.run()
    report = check_history(tmp_path / "history.jsonl")
    faults = ", ".join(f"{count} {name}" for name, count in sorted(nemesis.done.items()))
    print(f"\n{kind}, {SECONDS:.0f} s, {len(nemesis.workers)} workers; nemesis: {faults}")  # noqa: T201 -- the run's counts, for the record
    print(report.summary())  # noqa: T201
    assert report.ok, report.summary()
    assert report.processes >= WORKERS
    assert report.acquisitions >= 10, report.summary()
    assert report.writes_accepted >= 5, report.summary()
    assert nemesis.done["pauses"] + nemesis.done["kills"] >= 2, faults
    if server is not None:
        assert nemesis.done["restarts"] >= 1, faults
