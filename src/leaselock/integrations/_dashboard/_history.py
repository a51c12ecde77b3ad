"""What the dashboard has seen happen: the leases of its live timeline, and each job's runs.

The timeline uses the lease model and the rules of ``leaselock timeline``
(:mod:`leaselock._timeline`); what differs is where the leases come from:

- this process's ``Locks`` tells its own leases by its events, exactly: when each was
  acquired (or first read, if before the dashboard listened), and released, lost or handed
  back;
- every other lease is told by the readings of the store, a second or two apart: it started
  when a reading first saw it; its holder was alive at the last reading that found its expiry
  moved later (a renewal); and when a reading finds it gone, it was released then if its
  expiry was still ahead, else it expired, with no end recorded: held up to that last
  renewal, over by its expiry at the latest, as a SIGKILLed holder's lease is drawn from
  event logs. No lease is drawn past the start of its key's next one.

A reading cannot see a lease taken and freed between two readings, nor tell a release from a
break; the events of the process that holds a lock can, so a dashboard mounted in the
application draws its own leases exactly, and the others to the second.

Runs: the store keeps each job's last run and last success only. Every last run a reading
finds is kept here (ten per job), and every run this process's ``Locks`` ends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Final, cast, final, get_args

from ..._event_types import Event, LockAcquired, LockHandedBack, LockLost, LockReleased, RunEnded
from ..._keys import instance_label
from ..._timeline import Ended, Lease, end_by_the_next_token
from ...stores._common._capabilities import RunOutcome, RunRecord
from ._watch import Read, Seen, Snapshot

__all__ = ["RUNS_KEPT", "History"]

RUNS_KEPT: Final = 10
# an expiry that moved later by more than this between two readings was a renewal
RENEWAL_SLACK: Final = timedelta(milliseconds=50)


@final
class History:
    """The leases and runs seen in the last ``window``.

    Args:
        window: how far back the timeline reaches.
        own_instance: the label of the ``Locks`` whose events this history hears, whose
            leases the readings then leave alone; ``None`` when it hears none.
    """

    __slots__ = ("_closed", "_open", "_own", "_runs", "window")

    def __init__(self, window: timedelta, own_instance: str | None) -> None:
        """Start with nothing seen."""
        self.window = window
        self._own = own_instance
        self._open: dict[tuple[str, str], Lease] = {}
        self._closed: list[Lease] = []
        self._runs: dict[str, deque[RunRecord]] = {}

    # --- from the readings ----------------------------------------------------------------

    def observe(self, read: Read, snapshot: Snapshot) -> None:
        """Take in a reading of the store (a :class:`Watch` listener)."""
        if read == "records":
            for record in snapshot.records:
                if record.last_run is not None:
                    self._keep_run(record.last_run)
        elif read == "locks":
            self._observe_locks(snapshot)

    def _observe_locks(self, snapshot: Snapshot) -> None:
        at = snapshot.read_at["locks"]
        # every lease a reading finds is drawn, this process's too (it may predate the events
        # heard); only the events end this process's own leases
        live = {
            (seen.info.key, seen.info.owner): seen
            for seen in snapshot.locks.values()
            if seen.info.owner is not None
        }
        for (key, owner), seen in live.items():
            lease = self._open.get((key, owner))
            if lease is None:
                self._open[key, owner] = _first_seen(key, owner, seen, at)
            else:
                _seen_again(lease, seen, at)
        for (key, owner), lease in list(self._open.items()):
            if (key, owner) in live or self._told_by_events(owner):
                continue
            if snapshot.truncated and key not in snapshot.locks:
                # past the listing's limit: not seen, not known to be gone
                continue
            del self._open[key, owner]
            if lease.end <= at + RENEWAL_SLACK:
                lease.ended = "expired"
            else:
                lease.held_until = lease.end = at
                lease.ended = "released"
            self._closed.append(lease)
        self._forget_before(at - self.window)

    def _told_by_events(self, owner: str) -> bool:
        return self._own is not None and instance_label(owner) == self._own

    # --- from this process's events ---------------------------------------------------------

    def heard(self, event: Event) -> None:
        """Take in an event of this process's ``Locks``."""
        if isinstance(event, RunEnded):
            self._keep_run(_run_of(event))
            return
        owner = event.owner
        if owner is None:
            return
        if isinstance(event, LockAcquired):
            instance = instance_label(owner) or owner
            ttl = timedelta(milliseconds=event.ttl_ms)
            self._open[event.key, owner] = Lease(
                event.key, owner, instance, event.fencing_token, event.at, ttl, event.at, event.at
            )
            return
        ending: Ended | None = None
        if isinstance(event, LockReleased):
            ending = "released"
        elif isinstance(event, LockLost):
            ending = "lost"
        elif isinstance(event, LockHandedBack):
            ending = "handed-back"
        if ending is not None:
            self._end(event, owner, ending)

    def _end(self, event: Event, owner: str, ending: Ended) -> None:
        lease = self._open.pop((event.key, owner), None)
        if lease is None:
            # an idle owner hands back a lease it released already: mark that one
            done = (c for c in reversed(self._closed) if (c.key, c.owner) == (event.key, owner))
            released = next(done, None)
            if released is not None and ending == "handed-back":
                released.ended = ending
            return
        lease.held_until = lease.end = event.at
        lease.ended = ending
        lease.detected_by = getattr(event, "detected_by", None) if ending == "lost" else None
        self._closed.append(lease)

    # --- what the pages show -----------------------------------------------------------------

    def leases(self, now: datetime, prefix: str = "") -> list[Lease]:
        """Return the leases of the last ``window`` under ``prefix``, live ones ``"held"``.

        Each is a copy, cut at the start of its key's next lease; sorted by key and start.
        """
        since = now - self.window
        drawn = [replace(lease) for lease in self._closed if lease.key.startswith(prefix)]
        drawn += [
            replace(lease, held_until=now, end=now, ended="held")
            for lease in self._open.values()
            if lease.key.startswith(prefix)
        ]
        end_by_the_next_token(drawn)
        return sorted(
            (lease for lease in drawn if lease.end >= since),
            key=lambda lease: (lease.key, lease.start),
        )

    def runs(self, job: str) -> Sequence[RunRecord]:
        """Return the runs of ``job`` seen, newest first."""
        return sorted(self._runs.get(job, ()), key=lambda run: run.started_at, reverse=True)

    def _keep_run(self, run: RunRecord) -> None:
        kept = self._runs.setdefault(run.job, deque(maxlen=RUNS_KEPT))
        if not any(_same_run(run, other) for other in kept):
            kept.append(run)

    def _forget_before(self, since: datetime) -> None:
        self._closed = [lease for lease in self._closed if lease.end >= since]


def _first_seen(key: str, owner: str, seen: Seen, at: datetime) -> Lease:
    expires_at = seen.expires_at or at
    ttl = max(expires_at - at, timedelta(0))
    instance = seen.info.instance or owner
    return Lease(key, owner, instance, seen.info.fencing_token, at, ttl, at, expires_at)


def _seen_again(lease: Lease, seen: Seen, at: datetime) -> None:
    expires_at = seen.expires_at
    if expires_at is None:
        return
    if expires_at > lease.end + RENEWAL_SLACK:
        # renewed since the last reading: its holder was alive at this one
        lease.held_until = at
        lease.ttl = max(lease.ttl, expires_at - at)
    lease.end = max(lease.end, expires_at)


def _same_run(one: RunRecord, other: RunRecord) -> bool:
    if one.instance != other.instance:
        return False
    if one.fencing_token is not None and other.fencing_token is not None:
        return one.fencing_token == other.fencing_token
    # an event's start is its end less its duration: within a second of the record's
    return abs(one.started_at - other.started_at) < timedelta(seconds=1)


def _run_of(event: RunEnded) -> RunRecord:
    outcome = cast(
        "RunOutcome", event.outcome if event.outcome in get_args(RunOutcome) else "error"
    )
    return RunRecord(
        job=event.job,
        instance=event.instance or "",
        fencing_token=event.fencing_token,
        started_at=event.at - timedelta(milliseconds=event.duration_ms),
        ended_at=event.at,
        outcome=outcome,
        error=event.error,
        trigger=event.trigger,
    )
