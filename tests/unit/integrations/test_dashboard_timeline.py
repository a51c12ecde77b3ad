"""The dashboard's live timeline: leases told by readings follow the rules of leaselock timeline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from leaselock import LockAcquired, LockHandedBack, LockLost, LockReleased, RunEnded
from leaselock.integrations._dashboard._history import History
from leaselock.integrations._dashboard._watch import Seen, Snapshot
from leaselock.stores import JobRecord, LockInfo, RunRecord

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TTL_MS = 6000


def reading(history: History, at_s: float, *held: tuple[str, str, int | None, int]) -> None:
    """A reading at ``T0 + at_s`` that finds ``held``: (key, owner, token, ms left) each."""
    at = T0 + timedelta(seconds=at_s)
    snapshot = Snapshot()
    snapshot.locks = {
        key: Seen(LockInfo(key, owner, token, left), at) for key, owner, token, left in held
    }
    snapshot.read_at["locks"] = at
    history.observe("locks", snapshot)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_killed_holder_is_drawn_expired_from_its_last_renewal_and_never_over_its_successor():
    history = History(timedelta(minutes=5), own_instance=None)
    reading(history, 0, ("feed", "a@shop-1", 7, TTL_MS))
    reading(history, 1, ("feed", "a@shop-1", 7, TTL_MS))  # renewed: alive at 1 s
    for second in range(2, 7):  # SIGKILLed: its expiry stands still
        reading(history, second, ("feed", "a@shop-1", 7, TTL_MS - (second - 1) * 1000))
    reading(history, 7, ("feed", "b@shop-2", 8, TTL_MS))  # the next holder, a greater token

    killed, successor = history.leases(at(8))

    assert (killed.instance, killed.ended, killed.token) == ("shop-1", "expired", 7)
    assert killed.held_until == at(1)
    assert killed.end <= successor.start == at(7)
    assert (successor.instance, successor.ended, successor.end) == ("shop-2", "held", at(8))


def test_a_lock_gone_before_its_expiry_was_released_then():
    history = History(timedelta(minutes=5), own_instance=None)
    reading(history, 0, ("orders:1", "a@shop-1", 3, TTL_MS))
    reading(history, 1)

    [released] = history.leases(at(2))

    assert (released.ended, released.held_until, released.end) == ("released", at(1), at(1))


def test_leases_over_before_the_window_are_forgotten():
    history = History(timedelta(seconds=30), own_instance=None)
    reading(history, 0, ("orders:1", "a@shop-1", 3, TTL_MS))
    reading(history, 1)
    reading(history, 40, ("orders:2", "a@shop-1", 4, TTL_MS))

    assert [lease.key for lease in history.leases(at(41))] == ["orders:2"]


def test_a_store_without_tokens_orders_a_keys_leases_by_their_start():
    history = History(timedelta(minutes=5), own_instance=None)
    reading(history, 0, ("feed", "a@shop-1", None, 1000))
    reading(history, 2, ("feed", "b@shop-2", None, TTL_MS))

    first, second = history.leases(at(3))

    assert (first.ended, first.token, second.token) == ("expired", None, None)
    assert first.end <= second.start


def test_this_processs_events_tell_its_leases_ends_exactly():
    history = History(timedelta(minutes=5), own_instance="shop-1")
    owner = "a" * 32 + "@shop-1"
    history.heard(LockAcquired(key="feed", fencing_token=3, owner=owner, at=at(0), ttl_ms=TTL_MS))
    history.heard(
        LockLost(key="feed", fencing_token=3, owner=owner, at=at(2), detected_by="renewal")
    )
    history.heard(LockAcquired(key="job", fencing_token=4, owner=owner, at=at(3), ttl_ms=TTL_MS))
    history.heard(LockReleased(key="job", fencing_token=4, owner=owner, at=at(4)))
    history.heard(
        LockHandedBack(key="job", fencing_token=4, owner=owner, at=at(4), reason="idle", job="job")
    )

    lost, handed_back = history.leases(at(5))

    assert (lost.ended, lost.detected_by, lost.end) == ("lost", "renewal", at(2))
    assert (handed_back.ended, handed_back.end) == ("handed-back", at(4))


def test_a_run_seen_both_in_the_records_and_as_an_event_is_kept_once():
    history = History(timedelta(minutes=5), own_instance="shop-1")
    owner = "b" * 32 + "@shop-1"
    ended = RunEnded(
        key="job", fencing_token=7, owner=owner, at=at(2), job="job", outcome="ok", duration_ms=500
    )
    history.heard(ended)
    snapshot = Snapshot()
    run = RunRecord("job", "shop-1", 7, at(1.5), at(2), "ok")
    snapshot.records = [JobRecord("job", run, run)]
    history.observe("records", snapshot)

    assert [(r.instance, r.fencing_token) for r in history.runs("job")] == [("shop-1", 7)]
