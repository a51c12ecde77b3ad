"""Simulated runs per second: the fenced tick export the tests verify, 3 instances, 10 minutes.

Each seed is one ``leaselock.testing.simulate`` run of the default fleet (3 instances, 10
simulated minutes, the default faults) with the fenced export of ``tests/sim_jobs.py`` and both
invariants the tests check. It prints seeds per second and fails if a seed broke an invariant.
The bar (issue 39): 1,000 seeds in under 60 s on two cores.

Run: .venv/bin/python benchmarks/bench_simulate.py [--seeds 1000] [--processes 2]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

# the job the tests verify, so the figure is for that very job
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from leaselock.testing import at_most_once, no_stale_writes, simulate
from sim_jobs import EXPORTED, fenced_export

INVARIANTS = (at_most_once(EXPORTED), no_stale_writes(EXPORTED))


def failing_seeds(seeds: range) -> list[int]:
    """Simulate ``seeds``; return those that broke an invariant."""
    # the runs' store faults are logged at WARNING: a benchmark prints its figures only
    logging.getLogger("leaselock").setLevel(logging.CRITICAL)
    return [
        seed for seed in seeds if not simulate(fenced_export, seed=seed, invariants=INVARIANTS).ok
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=1, help="seeds split between them")
    arguments = parser.parse_args()
    seeds, processes = arguments.seeds, max(1, arguments.processes)
    shares = [range(start, seeds, processes) for start in range(processes)]
    started = time.perf_counter()
    if processes == 1:
        failed = failing_seeds(shares[0])
    else:
        with ProcessPoolExecutor(processes) as pool:
            failed = sorted(seed for share in pool.map(failing_seeds, shares) for seed in share)
    elapsed_s = time.perf_counter() - started
    print(
        f"{seeds} seeds of a 3-instance, 10-minute fleet in {elapsed_s:.1f} s on {processes} "
        f"process{'es' * (processes > 1)}: {seeds / elapsed_s:.1f} seeds/s"
    )
    if failed:
        raise SystemExit(f"seeds that broke an invariant: {failed}")
    print("every seed kept each tick's effect at most once, and no stale write was accepted")


if __name__ == "__main__":
    main()
