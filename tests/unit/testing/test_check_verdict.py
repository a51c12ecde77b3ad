"""The torture check's verdict: a violation fails it, and a pass needs evidence of every kind."""

from __future__ import annotations

from leaselock.testing._check_verdict import Fault, judge
from leaselock.testing.history import HistoryReport, Lease, Violation

S = 1_000_000_000
SLOTS = {"worker-1": 0, "worker-2": 1, "worker-3": 1}


def lease(process: str, token: int, start_s: float, end_s: float) -> Lease:
    return Lease("k", process, f"{process}-owner", token, int(start_s * S), int(end_s * S))


def evidenced_report() -> HistoryReport:
    """Twelve leases in turns; worker-3 replaced worker-2 after it was killed at 6.5 s."""
    holders = ["worker-1", "worker-2"] * 3 + ["worker-1", "worker-3"] * 3
    leases = [lease(process, n + 1, n, n + 0.9) for n, process in enumerate(holders)]
    return HistoryReport(
        acquisitions=len(leases), writes_accepted=11, writes_refused=1, leases=leases
    )


# worker-1 paused from 1.5 s to 3.2 s, while worker-2 took the key at 3 s; worker-2 killed at 5.5 s
FAULTS = [
    Fault("pause", "worker-1", int(2.5 * S), int(3.2 * S)),
    Fault("kill", "worker-2", int(5.5 * S), int(5.5 * S)),
]


def test_a_run_with_every_kind_of_evidence_and_no_violation_is_ok():
    result = judge(evidenced_report(), FAULTS, SLOTS, workers=2, seconds=12)
    assert result.missing == []
    assert (result.verdict, result.ok) == ("ok", True)
    assert result.acquisitions_by_worker == [6, 6]
    assert result.pause_takeovers == 1
    assert result.takeovers_ms == [500.0]
    assert result.summary().endswith("OK: no two holders, tokens grew, no stale write accepted")


def test_a_violation_fails_the_run_whatever_evidence_it_lacks():
    report = HistoryReport(violations=[Violation("two live leases", "token 1 and token 2")])
    result = judge(report, [], SLOTS, workers=2, seconds=1)
    assert (result.verdict, result.ok) == ("failed", False)
    assert "FAILED: 1 violations" in result.summary()


def test_a_run_without_faults_or_enough_acquisitions_is_inconclusive_naming_each_gap():
    report = HistoryReport(
        acquisitions=3,
        writes_accepted=3,
        leases=[lease("worker-1", n, n, n + 0.5) for n in (1, 2, 3)],
    )
    result = judge(report, [], SLOTS, workers=2, seconds=1, store_faults=["restart"])
    assert (result.verdict, result.ok) == ("inconclusive", False)
    gaps = "\n".join(result.missing)
    assert "3 acquisitions, under 10" in gaps
    assert "worker(s) 1 took the key fewer than 2 times" in gaps
    assert "no holder was paused past its ttl while another worker took the key" in gaps
    assert "no holder was killed and followed by another holder" in gaps
    assert "no fenced write was refused" in gaps
    assert "no restart of the store was made" in gaps
    assert "no fenced write was accepted" not in gaps
    assert "run longer (--seconds 30 or more)" in gaps
    assert "INCONCLUSIVE: no violation, but the run lacked evidence:" in result.summary()


def test_a_pause_during_which_nobody_took_the_key_is_no_evidence():
    quiet_pause = Fault("pause", "worker-1", int(0.95 * S), int(0.99 * S))
    kill = FAULTS[1]
    result = judge(evidenced_report(), [quiet_pause, kill], SLOTS, workers=2, seconds=12)
    assert result.pause_takeovers == 0
    assert result.verdict == "inconclusive"
    assert result.faults["pauses"] == 1


def test_a_kill_after_which_nobody_took_the_key_is_no_evidence():
    last_kill = Fault("kill", "worker-3", 20 * S, 20 * S)
    result = judge(evidenced_report(), [FAULTS[0], last_kill], SLOTS, workers=2, seconds=21)
    assert result.takeovers_ms == []
    assert any("no holder was killed" in gap for gap in result.missing)
