"""The gunicorn recipe, for real: three pre-forked workers, one SQLite file, one run per tick.

examples/gunicorn is the recipe README shows: the SyncLocks is made at import (loaded once by
--preload, before the fork) and started in each worker's post_fork hook; every worker's
scheduler fires the job each second, and exactly one worker runs it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

pytest.importorskip("gunicorn")
pytest.importorskip("apscheduler")

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "gunicorn"
WORKERS = 3
RUN_FOR_S = 6


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_three_preforked_workers_fire_every_tick_and_one_of_them_runs_it(tmp_path: Path):
    record = tmp_path / "ticks.log"
    environment = os.environ | {
        "LEASELOCK_DB": str(tmp_path / "locks.db"),
        "LEASELOCK_RECORD": str(record),
    }
    argv = [
        sys.executable, "-m", "gunicorn",
        "--chdir", str(RECIPE),
        "--preload",
        "-w", str(WORKERS),
        "-c", str(RECIPE / "gunicorn.conf.py"),
        "-b", f"127.0.0.1:{free_port()}",
        "app:app",
    ]  # fmt: skip
    gunicorn = subprocess.Popen(  # noqa: S603 -- our interpreter, our recipe
        argv, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        time.sleep(RUN_FOR_S)  # noqa: TID251 -- real workers, real seconds
    finally:
        gunicorn.send_signal(signal.SIGTERM)
        output, _ = gunicorn.communicate(timeout=60)
    assert gunicorn.returncode == 0, output
    assert "Traceback" not in output, output
    fired: defaultdict[int, set[int]] = defaultdict(set)
    ran: Counter[int] = Counter()
    runners = set()
    for line in record.read_text().splitlines():
        what, pid, second = line.split()
        if what == "fired":
            fired[int(second)].add(int(pid))
        else:
            ran[int(second)] += 1
            runners.add(int(pid))
    full_ticks = [second for second, pids in fired.items() if len(pids) == WORKERS]
    assert len(full_ticks) >= RUN_FOR_S - 3, f"every worker fires each tick: {dict(fired)}"
    assert [ran[second] for second in full_ticks] == [1] * len(full_ticks), dict(ran)
    assert len(runners) == 1, "the lease is sticky: one worker runs every tick"
