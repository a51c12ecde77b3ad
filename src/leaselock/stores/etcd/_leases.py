"""LeaseBook: which etcd lease each lock of this store sits under, and which leases may be shared.

Every lock is a key under an etcd lease; the key lives while its lease does. Locks of one ttl
share a lease (a *cohort*), so one keep-alive renews them all. Two rules keep each lock's
expiry its own, and a third keeps every renewal's promise:

- **A lease is kept alive only when every key under it is renewed in that very call.** A batch
  that renews some of a lease's keys moves them (owner-checked puts) to another lease and lets
  the old one expire with the keys whose holders stopped renewing.
- **A new key joins a lease only while that lease is young or empty**: its keep-alive, sent
  after the key joined, also extends the keys that joined in the last ``JOIN_WINDOW_S``, and
  nothing older.
- **A renewal moves a key only onto a lease already confirmed to outlive it**: by a grant or
  keep-alive sent at the renewal's start or later, confirmed before the move
  (:meth:`Cohort.confirmed_since`). The engine trusts a lock until ttl after the last renewal
  it saw confirmed; a key moved onto an older lease, to be kept alive after, would die with it
  before then if that keep-alive were slow or lost. A move whose answer is lost leaves the key
  under its old lease or under one that outlives the renewal: either keeps every promise.

Times are the event loop's monotonic seconds. What the book believes is a cache: every answer
to a caller is checked by etcd (owner compares, the lease's key list); a cohort the book forgot
only costs a move.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, final

from .._common._protocol import Renewal

__all__ = ["JOIN_WINDOW_S", "Cohort", "LeaseBook", "RenewalPlan", "lease_seconds"]

JOIN_WINDOW_S: Final = 0.2
"""How long after its first key a lease takes new keys: the most a lock can outlive its ttl
(besides etcd's rounding to seconds and its expiry sweep) because of its neighbours."""

MIN_JOIN_LIFE_S: Final = 0.5
"""A new key joins a lease only if it has this long left: time for the join and its keep-alive
(the acquire answers once that keep-alive is confirmed, so a late one only fails it)."""

# etcd notices an expired lease within 500 ms, then revokes it through raft
_EXPIRY_SWEEP_S: Final = 1.0


def lease_seconds(ttl_ms: int) -> int:
    """Return the whole seconds of the lease a ``ttl_ms`` lock needs: never shorter than asked."""
    return max(1, -(-ttl_ms // 1000))


@final
@dataclass(eq=False, slots=True)
class Cohort:
    """One etcd lease, and the keys this store put under it (key to owner).

    Attributes:
        lease_id: etcd's id of the lease.
        seconds: the lease class: the whole seconds asked for.
        granted_s: what etcd granted (its minimum TTL can raise it).
        sent_at: when the last grant or keep-alive that etcd confirmed was sent: etcd expires
            the lease no earlier than ``sent_at + granted_s``.
        answered_at: when that confirmation came: etcd expires it no later than
            ``answered_at + granted_s`` and its expiry sweep.
    """

    lease_id: int
    seconds: int
    granted_s: int
    sent_at: float
    answered_at: float
    members: dict[str, str] = field(default_factory=dict)
    first_joined_at: float | None = None
    refreshing: tuple[float, asyncio.Future[bool]] | None = None

    def refreshed(self, sent_at: float, answered_at: float, granted_s: int) -> None:
        """Note a keep-alive etcd confirmed."""
        if sent_at > self.sent_at:
            self.sent_at, self.answered_at, self.granted_s = sent_at, answered_at, granted_s

    def confirmed_since(self, since: float) -> bool:
        """Whether a key renewed at ``since`` may move onto the lease.

        Only if etcd confirmed, by a grant or keep-alive sent at ``since`` or later, that the
        lease lives until ``since`` plus its class's seconds or longer.
        """
        return self.sent_at >= since and self.granted_s >= self.seconds

    def joinable(self, now: float) -> bool:
        """Whether a new key may join now, to be kept alive after (see the module's rules)."""
        if self.sent_at + self.granted_s - now < MIN_JOIN_LIFE_S:
            return False
        return self.first_joined_at is None or now - self.first_joined_at <= JOIN_WINDOW_S

    def surely_gone(self, now: float) -> bool:
        """Whether etcd has revoked the lease by now, unless someone kept it alive."""
        return now > self.answered_at + self.granted_s + _EXPIRY_SWEEP_S


@final
@dataclass(frozen=True, slots=True)
class RenewalPlan:
    """How to renew the renewals of one lease class.

    Attributes:
        target: the lease every key of which is renewed here: kept alive, then the lease the
            other renewals move to; ``None``: they move to another confirmed or a new lease.
        keep: indexes of the renewals of ``target``'s keys.
        move: indexes of the renewals whose keys move (owner-checked) to another lease.
    """

    target: Cohort | None
    keep: list[int]
    move: list[int]


@final
class LeaseBook:
    """The store's cohorts: which lease each (key, owner) sits under, and the open one per class."""

    __slots__ = ("_cohorts", "_holders", "_open")

    def __init__(self) -> None:
        """Know no lease yet."""
        # etcd keeps one lock a key: the key's last holder the book saw, and its lease
        self._holders: dict[str, tuple[str, Cohort]] = {}
        self._open: dict[int, Cohort] = {}
        self._cohorts: set[Cohort] = set()

    def __len__(self) -> int:
        """Return the number of leases the book follows."""
        return len(self._cohorts)

    def cohort_of(self, key: str, owner: str) -> Cohort | None:
        """Return the lease the book saw ``owner``'s lock on ``key`` put under, if any."""
        held = self._holders.get(key)
        return held[1] if held is not None and held[0] == owner else None

    def open_cohort(self, seconds: int) -> Cohort | None:
        """Return the lease of this class that new keys joined last, if it may take more."""
        return self._open.get(seconds)

    def joinable(self, seconds: int, now: float) -> Cohort | None:
        """Return the lease new keys of this class join now, if one may take them."""
        cohort = self._open.get(seconds)
        if cohort is not None and cohort.joinable(now):
            return cohort
        return None

    def granted(self, cohort: Cohort) -> None:
        """Follow a new lease; new keys of its class join it from now on."""
        self._cohorts.add(cohort)
        self._open[cohort.seconds] = cohort

    def joined(self, cohort: Cohort, key: str, owner: str, now: float) -> None:
        """Note that etcd put ``key`` (held by ``owner``) under ``cohort``'s lease."""
        held = self._holders.get(key)
        if held is not None:
            self.left(key, held[0])
        if cohort.first_joined_at is None:
            cohort.first_joined_at = now
        cohort.members[key] = owner
        self._holders[key] = (owner, cohort)
        self._cohorts.add(cohort)

    def left(self, key: str, owner: str) -> None:
        """Note that ``owner``'s lock on ``key`` is no longer under the lease the book knew."""
        cohort = self.cohort_of(key, owner)
        if cohort is None:
            return
        del self._holders[key]
        if cohort.members.get(key) == owner:
            del cohort.members[key]
            if not cohort.members:
                cohort.first_joined_at = None

    def gone(self, key: str) -> None:
        """Note that etcd deleted ``key``, whoever held it."""
        held = self._holders.get(key)
        if held is not None:
            self.left(key, held[0])

    def close(self, cohort: Cohort) -> None:
        """Take no new key under ``cohort`` any more: it must be left to expire."""
        if self._open.get(cohort.seconds) is cohort:
            del self._open[cohort.seconds]

    def forget(self, cohort: Cohort) -> None:
        """Drop a lease etcd no longer has, with every key the book had under it."""
        for key, owner in cohort.members.items():
            if self.cohort_of(key, owner) is cohort:
                del self._holders[key]
        cohort.members.clear()
        self._cohorts.discard(cohort)
        if self._open.get(cohort.seconds) is cohort:
            del self._open[cohort.seconds]

    def forget_expired(self, now: float) -> None:
        """Drop the leases etcd has surely revoked, so the book stays the size of what lives."""
        for cohort in [c for c in self._cohorts if c.surely_gone(now)]:
            self.forget(cohort)

    def plan(
        self, renewals: Sequence[Renewal], indexes: Sequence[int], seconds: int
    ) -> RenewalPlan:
        """Split the renewals (of one lease class) into the lease to keep alive and the moves.

        The target is the largest lease of this class whose every key is renewed here; the
        renewals of any other lease's keys (and of keys the book does not know under this
        class) move to it, so the leases of a batch merge into one.
        """
        groups: dict[Cohort, list[int]] = {}
        move: list[int] = []
        for index in indexes:
            renewal = renewals[index]
            cohort = self.cohort_of(renewal.key, renewal.owner)
            if cohort is None or cohort.seconds != seconds:
                move.append(index)
            else:
                groups.setdefault(cohort, []).append(index)
        whole = [
            cohort
            for cohort, members in groups.items()
            if {renewals[i].key for i in members} == cohort.members.keys()
            and len(members) == len(cohort.members)
        ]
        target = max(whole, key=lambda cohort: len(cohort.members), default=None)
        keep: list[int] = []
        for cohort, members in groups.items():
            (keep if cohort is target else move).extend(members)
        return RenewalPlan(target, keep, move)
