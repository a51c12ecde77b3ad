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
import redis

pytest.importorskip("celery")

pytestmark = pytest.mark.redis

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "celery"
BEATS = 3
TICK_S = 2.0
STEADY_TICKS = 3
# how long the worker and beats may take to show STEADY_TICKS steady ticks, on a loaded machine
WITHIN_S = 90


def celery(*arguments: str, environment: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(  # noqa: S603 -- our interpreter, our recipe
            [sys.executable, "-m", "celery", "-A", "tasks", *arguments],
            cwd=RECIPE,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
        )


def ticks_seen(record: Path) -> tuple[list[int], Counter[int], Counter[int], dict[int, float]]:
    """The steady ticks so far, and each tick's messages received, runs and first run's start.

    min_hold keeps a run lock until its run STARTED plus min_hold: a run that started late (a
    worker still starting, a loaded machine) holds it into the next tick, as ShedLock's
    lockAtLeastFor does. A tick is steady when it and the one before were sent by every beat,
    and the one before ran on time.
    """
    received: Counter[int] = Counter()
    ran: Counter[int] = Counter()
    run_started: dict[int, float] = {}
    lines = record.read_text().splitlines() if record.exists() else []
    for line in lines:
        what, _, tick, at = line.split()
        (received if what == "received" else ran)[int(tick)] += 1
        if what == "ran":
            run_started.setdefault(int(tick), float(at))
    full_ticks = sorted(tick for tick, count in received.items() if count == BEATS)
    min_hold_s = TICK_S / 2
    steady = [
        tick
        for tick in full_ticks
        if tick - 1 in full_ticks
        and run_started.get(tick - 1, float("inf")) + min_hold_s < tick * TICK_S
        # its own run, if any, has had the time to be recorded
        and tick + 1 in received
    ]
    return steady, received, ran, run_started


def keys_of(redis_url: str) -> set[bytes]:
    client = redis.Redis.from_url(redis_url)
    try:
        return set(client.scan_iter(count=1000))
    finally:
        client.close()


def remove_new_keys(redis_url: str, before: set[bytes], run_id: str) -> None:
    """Delete what this test's beats, worker and locks wrote: keys of its run, and Celery's."""
    client = redis.Redis.from_url(redis_url)
    try:
        for name in client.scan_iter(count=1000):
            ours = run_id.encode() in name or name.startswith((b"_kombu.", b"unacked"))
            if ours and name not in before:
                client.delete(name)
    finally:
        client.close()


def test_a_beat_per_replica_and_each_tick_runs_once(redis_url: str, tmp_path: Path):
    record = tmp_path / "ticks.log"
    run_id = uuid.uuid4().hex[:8]
    before = keys_of(redis_url)
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
        # real processes, real ticks: wait for the evidence, however slow the machine is
        give_up = time.monotonic() + WITHIN_S  # noqa: TID251
        while len(ticks_seen(record)[0]) < STEADY_TICKS and time.monotonic() < give_up:  # noqa: TID251
            time.sleep(0.2)  # noqa: TID251
    finally:
        for process in [*beats, worker]:
            process.send_signal(signal.SIGTERM)
        for process in [*beats, worker]:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        remove_new_keys(redis_url, before, run_id)
    worker_log = (tmp_path / "worker.log").read_text(errors="replace")
    assert "Traceback" not in worker_log, worker_log[-3000:]
    steady, received, ran, run_started = ticks_seen(record)
    assert len(steady) >= STEADY_TICKS, (
        f"each beat sends each tick: {dict(received)}, ran {run_started}"
    )
    assert [ran[tick] for tick in steady] == [1] * len(steady), (
        f"received {dict(received)}, ran {dict(ran)}"
    )
    assert {name for name in keys_of(redis_url) if run_id.encode() in name} == set(), (
        "the run's keys are gone"
    )
