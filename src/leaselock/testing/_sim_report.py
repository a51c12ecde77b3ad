"""SimulationReport: what a simulated run did, what it broke, and how to replay it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, final

from ._sim_effects import Effect
from ._sim_faults import InjectedFault
from ._sim_invariants import InvariantViolation
from ._sim_trace import FLEET, TraceEvent

__all__ = ["SimulationReport", "lead_up"]

# how far back before a violation's first effect its trace goes, in ttls: a run that began
# then, paused past its lease, may be what wrote last
_LEAD_UP_TTLS: Final = 3
# at most this many events of the lead-up are kept: the last ones
_LEAD_UP_EVENTS: Final = 60


@final
@dataclass(frozen=True)
class SimulationReport:
    """What one simulated run did, and whether it kept the invariants it was given.

    The same seed, setup and options give an equal report: the same trace, event for event,
    hence the same :attr:`digest`, the same effects and the same violations.

    Attributes:
        seed: the run's seed.
        replay: the call that runs it again (``"simulate(shop, seed=7, invariants=[...])"``).
        instances: how many instances the fleet had.
        duration_ms: how long it ran, in simulated milliseconds.
        faults: the faults it injected, in time order.
        violations: each broken invariant, with its effects and the events that led to it.
        trace: everything that happened, in order.
        effects: every access to a simulated resource, in order.
        digest: the SHA-256 of the trace: equal for equal runs.

    .. versionadded:: 0.3
    """

    seed: int
    replay: str
    instances: int
    duration_ms: int
    faults: tuple[InjectedFault, ...]
    violations: tuple[InvariantViolation, ...]
    trace: tuple[TraceEvent, ...]
    effects: tuple[Effect, ...]
    digest: str

    @property
    def ok(self) -> bool:
        """Whether every invariant held."""
        return not self.violations

    def summary(self) -> str:
        """Return the run in words: each violation with its lead-up, the faults, the replay."""
        verdict = (
            "every invariant held"
            if self.ok
            else _counted(len(self.violations), "invariant violation")
        )
        headline = (
            f"Seed {self.seed}: {self.instances} instances, {self.duration_ms / 60_000:g} min "
            f"simulated, {_counted(len(self.faults), 'fault')}, "
            f"{_counted(len(self.effects), 'effect')}: {verdict} (trace digest {self.digest[:16]})"
        )
        lines = [headline]
        for violation in self.violations:
            lines.append(f"  {violation}")
            lines += [f"      {effect}" for effect in violation.effects]
            if violation.trace:
                lines.append("    what led to it:")
                lines += [f"    {event}" for event in violation.trace]
        lines.append("  faults injected:" if self.faults else "  no faults injected")
        lines += [f"    {fault}" for fault in self.faults]
        lines.append(f"  replay: {self.replay}")
        return "\n".join(lines)


def _counted(count: int, thing: str) -> str:
    return f"{count} {thing}{'' if count == 1 else 's'}"


def lead_up(
    violation: InvariantViolation, trace: tuple[TraceEvent, ...], ttl_ms: int
) -> tuple[TraceEvent, ...]:
    """Return the events that led to ``violation``.

    What its instances (and the store) went through from ``3 * ttl`` before its first
    effect up to its last one; the last events of the run for a violation without effects.
    """
    if not violation.effects:
        return trace[-_LEAD_UP_EVENTS:]
    involved = {effect.instance for effect in violation.effects} | {FLEET}
    start_ms = min(effect.at_ms for effect in violation.effects) - _LEAD_UP_TTLS * ttl_ms
    end_ms = max(effect.at_ms for effect in violation.effects)
    led = [
        event for event in trace if start_ms <= event.at_ms <= end_ms and event.instance in involved
    ]
    return tuple(led[-_LEAD_UP_EVENTS:])
