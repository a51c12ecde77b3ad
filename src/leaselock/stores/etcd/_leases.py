"""LeaseBook: which etcd lease each lock of this store sits under, and which leases may be shared.

Every lock is a key under an etcd lease; the key lives while its lease does. Locks of one ttl
share a lease (a *cohort*), so one keep-alive renews them all. Two rules keep each lock's
expiry its own, and two more keep every renewal's promise:

- **A lease is kept alive only when every key under it is renewed in that very call.** A batch
  that renews some of a lease's keys moves them (owner-checked puts) to another lease and lets
  the old one expire with the keys whose holders stopped renewing.
- **A new key joins a lease only while that lease is young or empty**: its keep-alive, sent
  after the key joined, also extends the keys that joined in the last ``JOIN_WINDOW_S``, and
  nothing older. A key that joins a lease etcd confirmed within ``UNKEPT_JOIN_S`` sends no
  keep-alive: its lock's ttl counts from that confirmation, and its acquire says so
  (``Acquired.lease_age_ms``), so the holder's deadline comes no later than the lease's end.
- **A renewal is confirmed by the lease's key list alone only where one owner can be there**:
  etcd lists the keys under a lease but not their values, and a key freed (by a break
  elsewhere) may be taken again under the same lease by another owner of this store. The book
  keeps every put this store made under each lease that may still be there (:class:`Put`: an
  acquire's create, a renewal's move), dropping one only once etcd answered that it put
  nothing, or once a call sent after its answer found its owner gone. Where every put of a key
  under a lease was its renewal's owner's, and none came or went while etcd listed the lease,
  the key listed is that owner's (:meth:`LeaseBook.sole_puts`); any other key's owner is
  checked by etcd (one more call per 64 keys).
- **A renewal moves a key only onto a lease already confirmed to outlive it**: by a grant or
  keep-alive sent at the renewal's start or later, confirmed before the move
  (:meth:`Cohort.confirmed_since`). The engine trusts a lock until ttl after the last renewal
  it saw confirmed; a key moved onto an older lease, to be kept alive after, would die with it
  before then if that keep-alive were slow or lost. A move whose answer is lost leaves the key
  under its old lease or under one that outlives the renewal: either keeps every promise.

Times are the event loop's monotonic seconds. Which lease a key sits under, and its owner, the
book only believes: every answer to a caller is checked by etcd (the lease's key list, owner
compares), and a cohort the book forgot only costs a move. What it must know, not believe, is
every put it sent under a lease: a put left out of :attr:`Cohort.puts` could let a listed key
pass for another owner's, so puts are noted before they are sent and dropped only on etcd's word.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, final

from .._common._protocol import Renewal

__all__ = [
    "JOIN_WINDOW_S",
    "UNKEPT_JOIN_S",
    "Cohort",
    "LeaseBook",
    "Put",
    "RenewalPlan",
    "lease_seconds",
]

JOIN_WINDOW_S: Final = 0.2
"""How long after its first key a lease takes new keys: the most a lock can outlive its ttl
(besides etcd's rounding to seconds and its expiry sweep) because of its neighbours."""

UNKEPT_JOIN_S: Final = 0.2
"""How long after etcd last confirmed a lease (and within a tenth of the ttl) a new key joins
it without a keep-alive of its own: its lock counts its ttl from that confirmation instead, as
the acquire tells the engine (``Acquired.lease_age_ms``), so a burst of acquires costs one call
each, not two."""

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
class Put:
    """A put of a key under a lease by this store (an acquire's create, or a renewal's move).

    Attributes:
        owner: the value put: the owner of the lock.
        applied_at: the book's step when etcd answered that the put was applied; ``None``
            while no answer came (in flight, or lost: then it may still be applied).
    """

    owner: str
    applied_at: int | None = None


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
        members: the keys the book saw put under the lease, and their owners.
        puts: per key, the puts under the lease that may still be there; a key's tuple is
            replaced, never changed, so holding one tells whether any came or went since.
    """

    lease_id: int
    seconds: int
    granted_s: int
    sent_at: float
    answered_at: float
    members: dict[str, str] = field(default_factory=dict)
    puts: dict[str, tuple[Put, ...]] = field(default_factory=dict)
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

    def age_at_join(self, now: float, ttl_ms: int) -> float | None:
        """Return how long ago a key joining now may count its lock's ttl from, or ``None``.

        That is how long before ``now`` the lease's last confirmed grant or keep-alive was sent
        (0 when one was sent since). ``None``: the key needs a keep-alive of its own, the
        confirmation being older than :data:`UNKEPT_JOIN_S` or a tenth of ``ttl_ms``, or the
        lease granted shorter than its class.
        """
        age = now - self.sent_at
        if age <= 0:
            return 0.0
        if self.granted_s < self.seconds or age > min(UNKEPT_JOIN_S, ttl_ms / 10_000):
            return None
        return age

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

    __slots__ = ("_cohorts", "_holders", "_open", "_step")

    def __init__(self) -> None:
        """Know no lease yet."""
        # orders the book's events: which answers came before which calls were sent
        self._step = 0
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
        cohort.puts.clear()
        self._cohorts.discard(cohort)
        if self._open.get(cohort.seconds) is cohort:
            del self._open[cohort.seconds]

    def step(self) -> int:
        """Return a step later than every answer noted so far: take it before sending a call."""
        self._step += 1
        return self._step

    def putting(self, cohort: Cohort, key: str, owner: str) -> Put:
        """Note a put of ``key = owner`` under ``cohort``'s lease, before it is sent."""
        put = Put(owner)
        cohort.puts[key] = (*cohort.puts.get(key, ()), put)
        return put

    def applied(self, put: Put) -> None:
        """Note etcd's answer that ``put`` was applied."""
        put.applied_at = self.step()

    def refused(self, cohort: Cohort, key: str, put: Put) -> None:
        """Note etcd's answer that ``put`` wrote nothing."""
        self._drop(cohort, key, lambda kept: kept is put)

    def absent(self, key: str, owner: str | None, sent_at_step: int) -> None:
        """Note that a call sent at ``sent_at_step`` found ``owner``'s ``key`` gone.

        ``owner`` ``None``: every owner's (a break). Puts etcd applied before that call was
        sent are gone from every lease; a put in flight, or applied later, may still be there.
        """
        gone = _applied_before(owner, sent_at_step)
        for cohort in self._cohorts:
            self._drop(cohort, key, gone)

    def moved_away(self, cohort: Cohort, key: str, owner: str, sent_at_step: int) -> None:
        """Note that a move sent at ``sent_at_step`` took ``owner``'s ``key`` off other leases."""
        gone = _applied_before(owner, sent_at_step)
        for other in self._cohorts:
            if other is not cohort:
                self._drop(other, key, gone)

    @staticmethod
    def sole_puts(cohort: Cohort, key: str, owner: str) -> tuple[Put, ...] | None:
        """Return the puts of ``key`` under ``cohort``'s lease if every one is ``owner``'s.

        Then, while :meth:`puts_of` returns this very tuple, a listing of the lease that
        shows ``key`` shows ``owner``'s lock: nothing else of the key was put there.
        """
        puts = cohort.puts.get(key)
        if puts and all(put.owner == owner for put in puts):
            return puts
        return None

    @staticmethod
    def puts_of(cohort: Cohort, key: str) -> tuple[Put, ...] | None:
        """Return the puts of ``key`` under ``cohort``'s lease that may still be there."""
        return cohort.puts.get(key)

    @staticmethod
    def _drop(cohort: Cohort, key: str, dropped: Callable[[Put], bool]) -> None:
        puts = cohort.puts.get(key)
        if puts is None:
            return
        kept = tuple(put for put in puts if not dropped(put))
        if len(kept) == len(puts):
            return
        if kept:
            cohort.puts[key] = kept
        else:
            del cohort.puts[key]

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


def _applied_before(owner: str | None, sent_at_step: int) -> Callable[[Put], bool]:
    """Return whether a put is ``owner``'s (any owner's: ``None``), applied before that step."""

    def gone(put: Put) -> bool:
        return (
            (owner is None or put.owner == owner)
            and put.applied_at is not None
            and put.applied_at < sent_at_step
        )

    return gone
