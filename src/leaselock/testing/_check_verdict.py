"""The torture check's verdict: a broken promise fails it, and a pass needs evidence.

A run that recorded no violation proves nothing unless it exercised what could break: enough
acquisitions in total and by every worker, a holder paused past its ttl while another took the
key, a holder killed and the key taken after it, fenced writes accepted and refused (and, where
the check may crash the store or make it fail over, one of each). A run that lacks any of it is
INCONCLUSIVE, with what was missing and how to get it, never OK.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias, final

from .history import HistoryReport

__all__ = [
    "MIN_ACQUISITIONS",
    "MIN_ACQUISITIONS_PER_WORKER",
    "CheckResult",
    "Fault",
    "StoreFault",
    "Verdict",
    "judge",
]

Verdict: TypeAlias = Literal["ok", "failed", "inconclusive"]
StoreFault: TypeAlias = Literal["restart", "failover"]

MIN_ACQUISITIONS: Final = 10
MIN_ACQUISITIONS_PER_WORKER: Final = 2
_NS_PER_MS: Final = 1_000_000


@final
@dataclass(frozen=True, slots=True)
class Fault:
    """One fault the nemesis made: ``kind`` of ``process`` from ``start_ns`` to ``end_ns``.

    Times are ``CLOCK_MONOTONIC`` nanoseconds, as in the history; a kill's end is its start.
    """

    kind: Literal["pause", "kill", "restart", "failover"]
    process: str
    start_ns: int
    end_ns: int


@final
@dataclass
class CheckResult:
    """What :func:`~leaselock.testing.check.check_store` saw, and its verdict.

    Attributes:
        report: the history checker's report (counts, leases, violations).
        faults: how many pauses, kills, restarts and failovers the nemesis made.
        takeovers_ms: after each kill of a holder, how long until another worker held the key.
        seconds: how long the workers ran, from the moment every one of them was ready.
        missing: the evidence the run lacked, each with how to get it; empty when it had all.
        pause_takeovers: pauses past the ttl during which another worker took the key.
        acquisitions_by_worker: acquisitions per worker slot (a killed worker's replacement
            counts for its slot).
    """

    report: HistoryReport
    faults: Counter[str] = field(default_factory=Counter)
    takeovers_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0
    missing: list[str] = field(default_factory=list)
    pause_takeovers: int = 0
    acquisitions_by_worker: list[int] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        """``"failed"`` on any violation; else ``"inconclusive"`` if evidence is missing."""
        if self.report.violations:
            return "failed"
        return "inconclusive" if self.missing else "ok"

    @property
    def ok(self) -> bool:
        """Whether no promise was broken AND the run had the evidence to say so."""
        return self.verdict == "ok"

    def summary(self) -> str:
        """Return the counts and the verdict, one fact a line."""
        faults = ", ".join(f"{count} {name}" for name, count in sorted(self.faults.items()))
        takeover = "no holder was killed"
        if self.takeovers_ms:
            takeover = (
                f"p50 {statistics.median(self.takeovers_ms):.0f} ms, "
                f"max {max(self.takeovers_ms):.0f} ms ({len(self.takeovers_ms)} kills of holders)"
            )
        lines = [
            f"ran {self.seconds:.1f} s; nemesis: {faults or 'nothing'}",
            self.report.summary(),
            f"acquisitions by worker: {', '.join(map(str, self.acquisitions_by_worker))}",
            f"pauses past the ttl during which another worker took the key: {self.pause_takeovers}",
            f"takeover after a holder was killed: {takeover}",
        ]
        if self.verdict == "failed":
            lines.append(f"FAILED: {len(self.report.violations)} violations")
        elif self.verdict == "inconclusive":
            lines.append("INCONCLUSIVE: no violation, but the run lacked evidence:")
            lines += [f"  - {missing}" for missing in self.missing]
        else:
            lines.append("OK: no two holders, tokens grew, no stale write accepted")
        return "\n".join(lines)


def judge(
    report: HistoryReport,
    faults: Sequence[Fault],
    slots: Mapping[str, int],
    *,
    workers: int,
    seconds: float,
    store_faults: Iterable[StoreFault] = (),
) -> CheckResult:
    """Build the result: count the faults and what followed them, and list missing evidence.

    ``slots`` maps each worker process to its slot (0 to ``workers - 1``).
    """
    expected = ["pauses", "kills", *(f"{kind}s" for kind in store_faults)]
    counted = Counter(dict.fromkeys(expected, 0))
    counted.update(f"{fault.kind}s" for fault in faults)
    by_worker = [0] * workers
    for lease in report.leases:
        slot = slots.get(lease.process)
        if slot is not None:
            by_worker[slot] += 1
    takeovers = _takeovers_ms(report, [f for f in faults if f.kind == "kill"])
    paused = sum(_taken_during(report, fault) for fault in faults if fault.kind == "pause")
    result = CheckResult(
        report,
        counted,
        takeovers,
        seconds,
        pause_takeovers=paused,
        acquisitions_by_worker=by_worker,
    )
    result.missing = _missing(result, expected)
    return result


def _missing(result: CheckResult, expected: Sequence[str]) -> list[str]:
    longer = "run longer (--seconds 30 or more)"
    report = result.report
    missing = []
    total = len(report.leases)
    if total < MIN_ACQUISITIONS:
        missing.append(
            f"{total} acquisitions, under {MIN_ACQUISITIONS}: {longer}, or give the store a "
            "shorter round trip"
        )
    starved = [
        str(slot)
        for slot, count in enumerate(result.acquisitions_by_worker)
        if count < MIN_ACQUISITIONS_PER_WORKER
    ]
    if starved:
        missing.append(
            f"worker(s) {', '.join(starved)} took the key fewer than "
            f"{MIN_ACQUISITIONS_PER_WORKER} times: {longer}, or pass fewer --workers"
        )
    if result.pause_takeovers == 0:
        missing.append(
            "no holder was paused past its ttl while another worker took the key: "
            f"{longer}; a pause lasts at least 1.6 ttl"
        )
    if not result.takeovers_ms:
        missing.append(f"no holder was killed and followed by another holder: {longer}")
    if report.writes_accepted == 0:
        missing.append(f"no fenced write was accepted: {longer}")
    if report.writes_refused == 0:
        missing.append(f"no fenced write was refused (a paused holder's late write): {longer}")
    missing += [
        f"no {kind[:-1]} of the store was made: {longer}"
        for kind in expected[2:]
        if result.faults[kind] == 0
    ]
    return missing


def _takeovers_ms(report: HistoryReport, kills: Sequence[Fault]) -> list[float]:
    takeovers = []
    for kill in kills:
        later = [
            lease.start_ns
            for lease in report.leases
            if lease.start_ns > kill.start_ns and lease.process != kill.process
        ]
        if later:
            takeovers.append((min(later) - kill.start_ns) / _NS_PER_MS)
    return takeovers


def _taken_during(report: HistoryReport, pause: Fault) -> bool:
    return any(
        pause.start_ns < lease.start_ns < pause.end_ns and lease.process != pause.process
        for lease in report.leases
    )
