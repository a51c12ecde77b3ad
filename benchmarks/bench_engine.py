"""The engine's own cost: what `Locks` adds to a store's acquire + release, on the in-memory store.

Every store's `Locks` cycle is the store's two calls plus the same engine work: the argument
checks, the owner id, the bound on each call, the lease, its renewal scheduling, events and
metrics, the `Lock` handle. On the in-memory store nothing waits on a socket, so that work is
most of what is measured:

(a) store   InMemoryLockStore.acquire + release, called directly (the floor)
(c) locks   Locks.acquire + lock.release() on an InMemoryLockStore of its own

The two take turns in slices (see _turns.py); printed are cycles/s, CPU us/cycle, and the
engine's CPU per cycle, (c) - (a).

``--instructions`` counts instead of timing: each variant runs under valgrind's callgrind for
N and 5N cycles, and the difference over 4N is its instructions per cycle. The count does not
depend on the machine's load, so it compares two trees exactly (``PYTHONPATH=<tree>/src``);
it needs valgrind (Debian: ``apt-get install valgrind``) and takes about a minute.

Run: .venv/bin/python benchmarks/bench_engine.py [--seconds N] [--instructions]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys

from _turns import Cycle, median_ratio, rates_of, take_turns

from leaselock import Locks
from leaselock.stores import Acquired, InMemoryLockStore

TTL_MS = 30_000
SLICE_CYCLES = 200
WARM_UP_SLICES = 20
# cycles of the shorter callgrind run; the longer runs five times as many
COUNTED_CYCLES = 1000
NAMES = {
    "a": "(a) InMemoryLockStore.acquire + release",
    "c": "(c) Locks.acquire + lock.release()",
}


def store_cycle(store: InMemoryLockStore) -> Cycle:
    async def cycle() -> None:
        taken = await store.acquire("k", "owner", TTL_MS)
        if not isinstance(taken, Acquired) or not await store.release("k", "owner"):
            raise RuntimeError(f"store cycle failed: acquire answered {taken!r}")

    return cycle


def locks_cycle(locks: Locks) -> Cycle:
    async def cycle() -> None:
        lock = await locks.acquire("k")
        if lock is None or not await lock.release():
            raise RuntimeError(f"Locks cycle failed: acquire answered {lock!r}")

    return cycle


def in_memory_locks() -> Locks:
    return Locks(store=InMemoryLockStore(), ttl=f"{TTL_MS}ms", allow_in_memory_storage=True)


async def timed(seconds: float) -> None:
    async with in_memory_locks() as locks:
        slices = await take_turns(
            {"a": store_cycle(InMemoryLockStore()), "c": locks_cycle(locks)},
            seconds,
            slice_cycles=SLICE_CYCLES,
            warm_up_slices=WARM_UP_SLICES,
        )
    rates = rates_of(slices)
    cpu = {name: statistics.median(each.cpu_us for each in turns) for name, turns in slices.items()}
    print(f"{'':44}{'cycles/s':>10}{'CPU us/cycle':>14}")
    for name, label in NAMES.items():
        print(f"{label:44}{statistics.median(rates[name]):>10,.0f}{cpu[name]:>14.1f}")
    print(f"(c)/(a) = {median_ratio(rates['c'], rates['a']):.2f} (median of the turns' ratios)")
    print(f"the engine's CPU per cycle, (c) - (a): {cpu['c'] - cpu['a']:.1f} us")


async def run_cycles(variant: str, cycles: int) -> None:
    """What one callgrind run executes: ``cycles`` cycles of ``variant``, each then a loop pass."""
    async with in_memory_locks() as locks:
        cycle = store_cycle(InMemoryLockStore()) if variant == "a" else locks_cycle(locks)
        for _ in range(cycles):
            await cycle()
            # a loop pass per cycle, as a store that waits on a socket would give the loop
            await asyncio.sleep(0)


def instructions(valgrind: str, variant: str, cycles: int) -> int:
    """Instructions callgrind counts for a whole run of ``cycles`` cycles of ``variant``."""
    done = subprocess.run(  # noqa: S603 -- this script and its own arguments
        [
            valgrind,
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--run",
            variant,
            str(cycles),
        ],
        capture_output=True,
        text=True,
        check=True,
        # the same dict layouts in every run: a count differs only where the code does
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count:\n{done.stderr}")
    return int(found.group(1))


def counted() -> None:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        sys.exit("--instructions needs valgrind (Debian: apt-get install valgrind)")
    per_cycle = {}
    for name in NAMES:
        short = instructions(valgrind, name, COUNTED_CYCLES)
        long = instructions(valgrind, name, 5 * COUNTED_CYCLES)
        per_cycle[name] = (long - short) / (4 * COUNTED_CYCLES)
    print(f"{'':44}{'instructions/cycle':>20}")
    for name, label in NAMES.items():
        print(f"{label:44}{per_cycle[name]:>20,.0f}")
    print(f"the engine's instructions per cycle, (c) - (a): {per_cycle['c'] - per_cycle['a']:,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time for each variant")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions under callgrind"
    )
    parser.add_argument("--run", nargs=2, metavar=("VARIANT", "CYCLES"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.run:
        variant, cycles = arguments.run
        asyncio.run(run_cycles(variant, int(cycles)))
    elif arguments.instructions:
        counted()
    else:
        asyncio.run(timed(arguments.seconds))


if __name__ == "__main__":
    main()
