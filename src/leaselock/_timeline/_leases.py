"""The leases in event logs: who held which key, from when to when, and how each ended.

A lease is told by its holder's own lines only: its start and its end carry its owner id, and
its holder's last sign of life is the last line its instance wrote (``by``), an event or a
renewal. Another instance's line that merely names it (a ``job-missed`` about the dead owner's
tick, a ``run-abandoned``) says nothing of when it was held. A lease that expired (no end
recorded: its holder died) was held up to that last sign of life and was over ``ttl`` later at
the latest; and whatever its end, it was over when a later token of its key started, so no two
leases of a key ever overlap.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeAlias

from .._errors import LocksConfigurationError

__all__ = ["Ended", "Lease", "end_by_the_next_token", "leases_from", "read_events"]

Ended: TypeAlias = Literal["released", "handed-back", "lost", "expired", "held"]
"""How a lease ended; ``"held"``: it had not, when a live timeline was drawn (the dashboard)."""


@dataclass(slots=True)
class Lease:
    """One lease as its holder's own lines tell it: who held which key, from when to when.

    ``held_until`` is the last moment its holder is known to have held it: its recorded end,
    or, for a lease that ``expired`` (no end recorded), the last line its instance wrote.
    ``end`` is when it was over at the latest: its recorded end, or ``ttl`` after
    ``held_until``. Neither is later than the start of a later token of the same key.
    ``detected_by`` says how a ``lost`` lease was lost. ``token`` is ``None`` where it is not
    known: a live timeline of a store that keeps no token per key (Redis) sees other
    processes' leases without theirs. ``ticks`` are the scheduled ticks its runs were for
    (a job that declares its schedule), in order: one for a run lock, every tick its owner ran
    for a job's lease.
    """

    key: str
    owner: str
    instance: str
    token: int | None
    start: datetime
    ttl: timedelta
    held_until: datetime
    end: datetime
    ended: Ended = "expired"
    detected_by: str | None = None
    ticks: list[datetime] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        """Return the lease as the JSON object ``leaselock timeline --json`` prints."""
        return {
            "key": self.key,
            "instance": self.instance,
            "owner": self.owner,
            "fencing_token": self.token,
            "start": self.start.isoformat(),
            "held_until": self.held_until.isoformat(),
            "end": self.end.isoformat(),
            "ended": self.ended,
            "detected_by": self.detected_by,
            "ttl_ms": self.ttl // timedelta(milliseconds=1),
            "ticks": [tick.isoformat() for tick in self.ticks],
        }


def read_events(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Read every JSON line of ``paths``, sorted by ``at``.

    Raises:
        LocksConfigurationError: a file is missing or a line is not an event.
    """
    events = []
    for path in paths:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as error:
            raise LocksConfigurationError(
                f"cannot read the event log {str(path)!r}: {error}"
            ) from None
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
                event["at"] = datetime.fromisoformat(event["at"])
            except (ValueError, KeyError, TypeError):
                raise LocksConfigurationError(
                    f'{path}:{number} is not a leaselock event (a JSON object with "at"): '
                    "pass files that Locks(event_log=...) wrote"
                ) from None
            events.append(event)
    events.sort(key=lambda event: event["at"])
    return events


def leases_from(events: Sequence[dict[str, Any]]) -> list[Lease]:
    """Turn time-sorted events into leases, each with how it ended; sorted by key and start.

    A lease's start and recorded end are the lines that carry its owner id (owner ids are drawn
    afresh for every acquisition) and were written by its holder. A lease with no recorded end
    was held up to its instance's last line (``by``) and expired ``ttl`` later at the latest.
    Every lease ends by the start of the next token of its key, whatever its lines say.
    """
    open_leases: dict[tuple[str, str], Lease] = {}
    closed: list[Lease] = []
    # an instance's last line of all, on any key: while it wrote, it held what it had not lost
    last_sign: dict[str, datetime] = {}
    for event in events:
        writer = event.get("by")
        if isinstance(writer, str):
            last_sign[writer] = event["at"]
        key, owner = event.get("key"), event.get("owner")
        if not isinstance(key, str) or not isinstance(owner, str):
            continue
        instance = str(event.get("instance") or owner)
        if writer not in (None, instance):
            # another instance's report on this lease (a missed tick, an abandoned run): it
            # tells nothing of when the lease was held
            continue
        if event.get("type") == "lock-acquired":
            lease = _started(event, key, owner, instance)
            if lease is not None:
                open_leases[key, owner] = lease
            continue
        if event.get("type") == "run-started":
            _note_tick(open_leases.get((key, owner)), event.get("tick"))
            continue
        ending = _ending(event)
        if ending is not None:
            _end(open_leases.pop((key, owner), None), closed, event, ending)
    for lease in open_leases.values():
        lease.held_until = max(lease.start, last_sign.get(lease.instance, lease.start))
        lease.end = lease.held_until + lease.ttl
        closed.append(lease)
    end_by_the_next_token(closed)
    return sorted(closed, key=lambda lease: (lease.key, lease.start, lease.token))


def _started(event: dict[str, Any], key: str, owner: str, instance: str) -> Lease | None:
    token = event.get("fencing_token")
    if not isinstance(token, int):
        return None
    at = event["at"]
    ttl = timedelta(milliseconds=int(event.get("ttl_ms") or 0))
    return Lease(key, owner, instance, token, at, ttl, held_until=at, end=at)


def _note_tick(lease: Lease | None, tick: object) -> None:
    if lease is not None and isinstance(tick, str):
        try:
            lease.ticks.append(datetime.fromisoformat(tick))
        except ValueError:
            return


def _end(lease: Lease | None, closed: list[Lease], event: dict[str, Any], ending: Ended) -> None:
    if lease is None:
        # the hand-back of a lease already released (an idle owner): mark that one
        key, owner = event["key"], event["owner"]
        lease = next((c for c in reversed(closed) if (c.key, c.owner) == (key, owner)), None)
        if lease is not None and ending == "handed-back":
            lease.ended = ending
        return
    lease.held_until = lease.end = event["at"]
    lease.ended = ending
    lease.detected_by = event.get("detected_by") if ending == "lost" else None
    closed.append(lease)


def _ending(event: dict[str, Any]) -> Ended | None:
    kind = event.get("type")
    if kind == "lock-released":
        return "released"
    if kind == "lock-handed-back":
        return "handed-back"
    if kind == "lock-lost":
        return "lost"
    return None


def end_by_the_next_token(leases: Sequence[Lease]) -> None:
    """Cut every lease at the earliest start of a greater token of its key.

    The store gave that token only once this lease was over, so a lease drawn past it would be
    two holders at once: a holder that kept writing after its lease expired (paused, or its
    clock ahead), or an expiry bound (``ttl`` after the last sign of life) later than the
    takeover.
    """
    by_key: dict[str, list[Lease]] = {}
    for lease in leases:
        by_key.setdefault(lease.key, []).append(lease)
    for same_key in by_key.values():
        next_start: datetime | None = None
        # tokens grow with every acquisition of a key; where one is not known (a live timeline
        # of a store that keeps none per key), the starts are the order, each from one clock
        order = _by_start if any(lease.token is None for lease in same_key) else _by_token
        for lease in sorted(same_key, key=order, reverse=True):
            if next_start is not None:
                lease.held_until = max(lease.start, min(lease.held_until, next_start))
                lease.end = max(lease.held_until, min(lease.end, next_start))
            next_start = lease.start if next_start is None else min(next_start, lease.start)


def _by_token(lease: Lease) -> int:
    return lease.token or 0


def _by_start(lease: Lease) -> datetime:
    return lease.start
