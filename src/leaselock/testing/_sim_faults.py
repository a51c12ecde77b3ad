"""The faults of a simulated run: what to inject (Faults), and where and when (from the seed)."""

from __future__ import annotations

import random
from dataclasses import dataclass, fields
from typing import Final, Literal, TypeAlias, final

from .._durations import Duration, parse_duration
from .._errors import LocksConfigurationError
from ._faulty import Method
from ._sim_trace import FLEET

__all__ = ["FaultKind", "Faults", "InjectedFault", "plan_faults"]

FaultKind: TypeAlias = Literal[
    "pause", "kill", "restart", "store-outage", "slow-store", "lost-answer"
]
_INSTANCE_FAULTS: Final[tuple[FaultKind, ...]] = ("pause", "kill", "restart")
# the calls whose answer a lost-answer fault drops: the ones a job's run makes
_LOSABLE: Final[tuple[Method, ...]] = ("acquire", "renew", "release", "start_run", "end_run")
# a graceful restart waits for runs in progress: Locks' default shutdown_grace
_SHUTDOWN_GRACE_MS: Final = 30_000
# between two faults of one instance, so that the second finds it up and steady
_SETTLE_MS: Final = 5_000


@final
@dataclass(frozen=True, kw_only=True)
class Faults:
    """What a simulated run injects; each fault's instance, time and length come from the seed.

    The counts are per run (a longer run spreads them thinner). Faults of one instance never
    overlap: each finds it up, and the next comes after it has settled.

    Attributes:
        pauses: instances frozen (``SIGSTOP``, a long GC pause, a VM migration) for 1.1 to 3
            times the ttl: past their leases, after which they resume where they stopped.
        kills: instances killed (``kill -9``, an OOM kill): no hand-back, their leases expire;
            each comes back as a new process after 5 s to 3 ttl.
        restarts: graceful restarts (a deploy): runs finish, leases are handed back, and the
            instance comes back after 0.5 s to 20 s.
        outages: the store unreachable, every call failing, for 2 s to one ttl.
        slow_store: windows of 10 s to 60 s in which every call's request or answer is late
            by 50 ms to half a ttl.
        lost_answers: a call (acquire, renew, release, a run's start or end) that the store
            applies and whose answer never arrives.
        clock_offset: each instance's clock reads up to this much ahead of the store's (and of
            the others'), drawn per instance: its scheduler fires the same ticks that much
            sooner. Keep it under 1 s (what ``on_one_instance`` allows between instances that
            fire the same tick), or see ``min_hold``.
        tick_jitter: each tick fires up to this much late on its instance (a scheduler's
            latency).

    .. versionadded:: 0.3
    """

    pauses: int = 2
    kills: int = 1
    restarts: int = 1
    outages: int = 1
    slow_store: int = 2
    lost_answers: int = 3
    clock_offset: Duration = "500ms"
    tick_jitter: Duration = "50ms"

    def __post_init__(self) -> None:
        """Check every count and duration now, naming the one that is wrong."""
        for name in ("pauses", "kills", "restarts", "outages", "slow_store", "lost_answers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise LocksConfigurationError(
                    f"Faults({name}={value!r}); pass how many per run, an int >= 0"
                )
        parse_duration(self.clock_offset, name="clock_offset")
        parse_duration(self.tick_jitter, name="tick_jitter")

    @classmethod
    def none(cls) -> Faults:
        """Return no faults at all: a fleet on a perfect day (offsets and jitter zero)."""
        return cls(
            pauses=0,
            kills=0,
            restarts=0,
            outages=0,
            slow_store=0,
            lost_answers=0,
            clock_offset=0,
            tick_jitter=0,
        )

    @property
    def clock_offset_ms(self) -> int:
        """:attr:`clock_offset` in milliseconds."""
        return parse_duration(self.clock_offset, name="clock_offset")

    @property
    def tick_jitter_ms(self) -> int:
        """:attr:`tick_jitter` in milliseconds."""
        return parse_duration(self.tick_jitter, name="tick_jitter")

    def __repr__(self) -> str:
        """Show the fields that differ from the defaults, as Python."""
        default = Faults()
        changed = [
            f"{spec.name}={getattr(self, spec.name)!r}"
            for spec in fields(self)
            if getattr(self, spec.name) != getattr(default, spec.name)
        ]
        return f"Faults({', '.join(changed)})"


@final
@dataclass(frozen=True, slots=True)
class InjectedFault:
    """A fault a run injected.

    Attributes:
        kind: ``"pause"``, ``"kill"``, ``"restart"``, ``"store-outage"``, ``"slow-store"`` or
            ``"lost-answer"``.
        instance: the instance it hit, or ``"fleet"`` for the store's.
        at_ms: when it began, on the simulation's clock.
        lasting_ms: how long it lasted (a pause, an outage, a slow store), or the downtime (a
            kill, a restart); 0 for a lost answer.
        late_by_ms: how late a slow store's calls were.
        on: what of them was late: ``"request"`` or ``"answer"``.
        method: the call whose answer was lost (``"renew"``).

    .. versionadded:: 0.3
    """

    kind: FaultKind
    instance: str
    at_ms: int
    lasting_ms: int
    late_by_ms: int = 0
    on: Literal["request", "answer"] = "answer"
    method: Method | None = None

    @property
    def detail(self) -> str:
        """The fault's particulars, in words (empty for an instance's fault)."""
        if self.kind == "slow-store":
            return f"{self.on}s {self.late_by_ms} ms late"
        if self.kind == "lost-answer":
            return f"the answer to the next {self.method}"
        return ""

    def __str__(self) -> str:
        """Describe the fault in one line."""
        lasting = {
            "pause": f"paused for {self.lasting_ms} ms",
            "kill": f"killed (no hand-back), back after {self.lasting_ms} ms",
            "restart": f"restarted gracefully, back after {self.lasting_ms} ms",
            "store-outage": f"store unreachable for {self.lasting_ms} ms",
            "slow-store": f"store slow for {self.lasting_ms} ms",
            "lost-answer": "an answer lost",
        }[self.kind]
        detail = f": {self.detail}" if self.detail else ""
        return f"{self.at_ms / 1000:9.3f} s  {self.instance:<11} {lasting}{detail}"


def plan_faults(
    rng: random.Random, faults: Faults, *, instances: list[str], duration_ms: int, ttl_ms: int
) -> list[InjectedFault]:
    """Draw each fault's instance, time and length from ``rng``; return them in time order.

    Instance faults start in the middle 90% of the run; one that would overlap an earlier
    fault of its instance is moved after it (and dropped if that is past the end).
    """
    early_ms, late_ms = duration_ms // 20, duration_ms - duration_ms // 10
    planned: list[InjectedFault] = []
    kinds = [kind for kind in _INSTANCE_FAULTS for _ in range(_count(faults, kind))]
    drawn = [
        (rng.randint(early_ms, late_ms), rng.choice(instances), kind, _length(rng, kind, ttl_ms))
        for kind in kinds
    ]
    busy_until = dict.fromkeys(instances, 0)
    for at_ms, instance, kind, lasting_ms in sorted(drawn):
        start_ms = max(at_ms, busy_until[instance])
        if start_ms > late_ms:
            continue
        planned.append(InjectedFault(kind, instance, start_ms, lasting_ms))
        # a restart first waits for the runs in progress
        shutdown_ms = _SHUTDOWN_GRACE_MS if kind == "restart" else 0
        busy_until[instance] = start_ms + shutdown_ms + lasting_ms + _SETTLE_MS
    for _ in range(faults.outages):
        at_ms = rng.randint(early_ms, late_ms)
        planned.append(InjectedFault("store-outage", FLEET, at_ms, rng.randint(2000, ttl_ms)))
    for _ in range(faults.slow_store):
        at_ms = rng.randint(early_ms, late_ms)
        lasting_ms = rng.randint(10_000, 60_000)
        late_by_ms = rng.randint(50, max(50, ttl_ms // 2))
        on: Literal["request", "answer"] = rng.choice(("request", "answer"))
        planned.append(
            InjectedFault("slow-store", FLEET, at_ms, lasting_ms, late_by_ms=late_by_ms, on=on)
        )
    for _ in range(faults.lost_answers):
        at_ms = rng.randint(early_ms, late_ms)
        planned.append(InjectedFault("lost-answer", FLEET, at_ms, 0, method=rng.choice(_LOSABLE)))
    return sorted(planned, key=lambda fault: (fault.at_ms, fault.instance, fault.kind))


def _count(faults: Faults, kind: str) -> int:
    return {"pause": faults.pauses, "kill": faults.kills, "restart": faults.restarts}[kind]


def _length(rng: random.Random, kind: str, ttl_ms: int) -> int:
    if kind == "pause":
        return rng.randint(ttl_ms * 11 // 10, ttl_ms * 3)
    if kind == "kill":
        return rng.randint(5000, max(5000, ttl_ms * 3))
    return rng.randint(500, 20_000)
