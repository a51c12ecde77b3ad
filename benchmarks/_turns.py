"""Variants taking turns in short slices within one run: how the cycle benchmarks measure.

On a shared machine the speed of the same code drifts by 10 % and more from one second to the
next, and runs minutes apart differ more. Variants that take turns, a slice of a few
milliseconds each, see the same machine; a ratio taken turn by turn (a variant's slice over the
floor's slice of the same turn) cancels the drift, and the median of those ratios ignores the
few turns a neighbour's burst fell on.

Benchmarks run as scripts (``.venv/bin/python benchmarks/<name>.py``), so this module is
imported from their own directory.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

Cycle = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Slice:
    """One variant's slice: cycles per second (wall clock), and this process's CPU per cycle."""

    per_second: float
    cpu_us: float


async def timed_slice(cycle: Cycle, cycles: int) -> Slice:
    """Run ``cycle`` ``cycles`` times back to back."""
    cpu_started = time.process_time()
    started = time.perf_counter()
    for _ in range(cycles):
        await cycle()
    elapsed = time.perf_counter() - started
    cpu_s = time.process_time() - cpu_started
    return Slice(cycles / elapsed, cpu_s / cycles * 1e6)


async def take_turns(
    variants: dict[str, Cycle], seconds: float, *, slice_cycles: int, warm_up_slices: int
) -> dict[str, list[Slice]]:
    """Let the variants take turns, a slice each, until about ``seconds`` of each has run.

    Every variant first runs ``warm_up_slices`` slices that are not kept (connections, caches,
    prepared scripts). The lists returned are in turn order, equally long: index ``i`` of every
    variant is turn ``i``.
    """
    for cycle in variants.values():
        for _ in range(warm_up_slices):
            await timed_slice(cycle, slice_cycles)
    slices: dict[str, list[Slice]] = {name: [] for name in variants}
    deadline = time.perf_counter() + seconds * len(variants)
    while time.perf_counter() < deadline:
        for name, cycle in variants.items():
            slices[name].append(await timed_slice(cycle, slice_cycles))
    return slices


def rates_of(slices: dict[str, list[Slice]]) -> dict[str, list[float]]:
    """Each variant's cycles per second, turn by turn."""
    return {name: [each.per_second for each in turns] for name, turns in slices.items()}


def turn_ratios(rates: Sequence[float], floor: Sequence[float]) -> list[float]:
    """A variant's rate over the floor's in the same turn, turn by turn."""
    return [rate / under for rate, under in zip(rates, floor, strict=True)]


def median_ratio(rates: Sequence[float], floor: Sequence[float]) -> float:
    """The median of :func:`turn_ratios`: the figure the benchmarks report."""
    return statistics.median(turn_ratios(rates, floor))
