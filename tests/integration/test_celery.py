"""Celery for real: a worker, a beat per replica, a Redis broker, and one run per tick.

examples/celery is the recipe README shows. Three beats (three replicas) each send every tick,
so each tick reaches the worker processes three times; with without_overlapping(min_hold=...)
exactly one of the three runs, whichever process takes it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("celery")

pytestmark = pytest.mark.redis

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "celery"
BEATS = 3
TICK_S = 2.0
RUN_FOR_S = 14


def celery(*arguments: str, environment: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(  # noqa: S603 -- our interpreter, our recipe
            [sys.executable, "-m", "celery", "-A", "tasks", *arguments],
            cwd=RECIPE,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
        )


def test_a_beat_per_replica_and_each_tick_runs_once(redis_url: str, tmp_path: Path):
    record = tmp_path / "ticks.log"
    run_id = uuid.uuid4().hex[:8]
    environment = os.environ | {
        "CELERY_BROKER_URL": redis_url,
        "CELERY_QUEUE": f"leaselock-test-{run_id}",
        "LEASELOCK_PREFIX": f"celery-test:{run_id}:",
        "LEASELOCK_RECORD": str(record),
        "TICK_SECONDS": str(TICK_S),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(RECIPE), os.environ.get("PYTHONPATH")])),
    }
    worker = celery(
        "worker", "--pool", "prefork", "--concurrency", "2", "--loglevel", "INFO",
        environment=environment, log=tmp_path / "worker.log",
    )  # fmt: skip
    beats = [
        celery(
            "beat",
            "--max-interval",
            "1",
            "--schedule",
            str(tmp_path / f"beat-{n}"),
            environment=environment,
            log=tmp_path / f"beat-{n}.log",
        )
        for n in range(BEATS)
    ]
    try:
        time.sleep(RUN_FOR_S)  # noqa: TID251 -- real processes, real ticks
    finally:
        for process in [*beats, worker]:
            process.send_signal(signal.SIGTERM)
        for process in [*beats, worker]:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    worker_log = (tmp_path / "worker.log").read_text(errors="replace")
    assert "Traceback" not in worker_log, worker_log[-3000:]
    received: Counter[int] = Counter()
    ran: Counter[int] = Counter()
    run_started: dict[int, float] = {}
    for line in record.read_text().splitlines():
        what, _, tick, at = line.split()
        (received if what == "received" else ran)[int(tick)] += 1
        if what == "ran":
            run_started.setdefault(int(tick), float(at))
    full_ticks = sorted(tick for tick, count in received.items() if count == BEATS)
    # min_hold keeps a run lock until its run STARTED plus min_hold: a run that started late
    # (a worker still starting, a loaded machine) holds it into the next tick, as ShedLock's
    # lockAtLeastFor does. Count the ticks whose previous tick was full and ran on time.
    min_hold_s = TICK_S / 2
    steady = [
        tick
        for tick in full_ticks
        if tick - 1 in full_ticks
        and run_started.get(tick - 1, float("inf")) + min_hold_s < tick * TICK_S
    ]
    assert len(steady) >= 3, f"each beat sends each tick: {dict(received)}, ran {run_started}"
    assert [ran[tick] for tick in steady] == [1] * len(steady), (
        f"received {dict(received)}, ran {dict(ran)}"
    )
