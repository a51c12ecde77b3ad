"""The store contract: three async methods, and optional capabilities found by shape.

A store is anything with these methods; it needs nothing from leaselock to type-check. What a
type cannot say (atomicity, expiry on the store's clock, token order) the contract suite checks:
:func:`leaselock.testing.lock_store_contract`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from typing import NamedTuple, Protocol, final, runtime_checkable

__all__ = [
    "MAX_FENCING_TOKEN",
    "AcquireResult",
    "Acquired",
    "FollowingNothing",
    "Grant",
    "LockStore",
    "NotAcquired",
    "Queued",
    "ReleaseFollower",
    "Renewal",
    "SupportsBatchRenew",
    "SupportsHandoff",
    "SupportsLifecycle",
    "SupportsReleaseNotifications",
    "SupportsReleasesInTurn",
    "WaitingLine",
]

MAX_FENCING_TOKEN = 2**53 - 1
"""The largest fencing token a store may return: exact in a JSON number and a JavaScript peer."""


@final
@dataclass(frozen=True, slots=True)
class Acquired:
    """The key was free and is now held by the caller.

    Attributes:
        fencing_token: greater than every token this key was ever given; an ``int`` in
            ``1 .. 2**53 - 1``.
        lease_age_ms: how long before the call began the store's expiry of the new lock
            started to count: the lock lives ``ttl_ms`` from then, not from the call (a store
            whose locks share a lease, renewed a moment before, puts the key under it as it
            is). ``0``, the contract's own rule, unless the store says otherwise; the holder
            counts its deadline that much earlier.
    """

    fencing_token: int
    lease_age_ms: int = 0


@final
@dataclass(frozen=True, slots=True)
class NotAcquired:
    """A live lock held the key; nothing changed.

    Attributes:
        holder: the owner id of the live lock, where the store can tell it in the same round
            trip (every shipped store but MySQL does), else ``None``. Owner ids made by
            leaselock end in ``@<instance label>``, so a skipped tick can say where its job runs.
    """

    holder: str | None = None


AcquireResult = Acquired | NotAcquired


class Renewal(NamedTuple):
    """One lease to renew in a batch."""

    key: str
    owner: str
    ttl_ms: int


@runtime_checkable
class LockStore(Protocol):
    """Where every instance's locks meet.

    Every rule: "if owner still holds a live lock" is checked in the same statement that writes;
    expiry is measured on the store's clock; an expired lock does not exist for any method; a
    ``ttl_ms`` may be weeks long.
    """

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        """Take ``key`` for ``owner`` for ``ttl_ms`` if no live lock holds it.

        Of any number of concurrent callers on a free key exactly one gets :class:`Acquired`,
        whose token is greater than every token ``key`` had before.
        """
        ...

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Move the expiry to ``ttl_ms`` from now if ``owner`` holds a live lock on ``key``."""
        ...

    async def release(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` holds a live lock on it; ``False`` otherwise."""
        ...


@runtime_checkable
class SupportsBatchRenew(Protocol):
    """A store that renews many leases in one round trip."""

    async def renew_many(self, renewals: Sequence[Renewal]) -> Sequence[bool]:
        """Renew each lease as :meth:`LockStore.renew` would; one result per renewal, in order."""
        ...


class ReleaseFollower(Protocol):
    """Hears the releases of the keys it is told to follow, for one :meth:`follow_releases`."""

    def following(self, key: str) -> AbstractAsyncContextManager[None]:
        """Hear ``key``'s releases, by any process, while entered.

        Entering returns once every release from then on will be heard, or once the store
        gave up trying (a warning is logged; waiters then find the key free by retrying). It
        raises no store error: notifications only make waiters wake sooner.
        """
        ...


@final
class FollowingNothing:
    """The follower of a store (or a mode) that announces no releases: it hears nothing.

    The engine tells it apart: a waiter following with it keeps retrying at its quick pace.
    """

    def following(self, key: str) -> AbstractAsyncContextManager[None]:  # noqa: ARG002 -- the protocol's signature
        """Return a context that hears nothing: waiters on ``key`` find it free by retrying."""
        return nullcontext()


@runtime_checkable
class SupportsReleaseNotifications(Protocol):
    """A store that tells a process of a release only when that process follows the key.

    A release reaches the processes that wait on its key, and no others, so what each
    process receives does not grow with the size of the fleet.
    """

    def follow_releases(
        self, on_release: Callable[[str], None]
    ) -> AbstractAsyncContextManager[ReleaseFollower]:
        """Call ``on_release(key)`` on this loop for releases of the keys followed, while entered.

        Opens nothing until a key is followed. A key may also be heard when no follower of it
        is left (a release in flight while it was unfollowed): callers treat a release as a
        hint to look again, never as a grant.
        """
        ...


@runtime_checkable
class SupportsReleasesInTurn(Protocol):
    """A store whose release wakes only the follower that has waited longest for its key.

    Followers of a key stand in a queue at the store, across processes, in the order they began
    following it; a release reaches the first of them still alive, so one process tries the key
    instead of every waiting one. A follower whose process died loses its turn within seconds.
    """

    def follow_releases_in_turn(
        self, on_release: Callable[[str], None]
    ) -> AbstractAsyncContextManager[ReleaseFollower]:
        """As :meth:`SupportsReleaseNotifications.follow_releases`, for this follower's turns.

        ``on_release(key)`` is called for a release of a followed key when this follower is
        the first alive in the key's queue, or when the store could name no follower (then
        every follower of the key hears it). Hints only, as for ``follow_releases``.
        """
        ...


@final
@dataclass(frozen=True, slots=True)
class Queued:
    """A live lock held the key; the caller keeps (or took) its place in the key's line.

    Attributes:
        holder: the live lock's owner id where the store can tell it, as for
            :class:`NotAcquired`.
    """

    holder: str | None = None


@final
@dataclass(frozen=True, slots=True)
class Grant:
    """A key handed to a waiter in line, by a release (or a break, or a free key's next look).

    Attributes:
        key: the key handed over.
        owner: the waiter's owner id, now the holder of the key's live lock.
        fencing_token: the new lock's token, greater than every token the key had before.
        ticket: the ticket of the waiter's :meth:`WaitingLine.queue` call that last kept its
            place: the lock lives ``queue_ms`` from when that call ran, so the waiter's deadline
            is ``queue_ms`` from when it SENT that call.
    """

    key: str
    owner: str
    fencing_token: int
    ticket: int


class WaitingLine(Protocol):
    """One process's places in the keys' lines, and where the grants to them arrive.

    A key's line is first come, first served, across processes. Each place is live for the
    ``queue_ms`` its last :meth:`queue` call gave it, counted on the store's clock from when
    that call ran; a place whose time is up is passed over and dropped. When the key's lock is
    freed (a release, a break) and a live place waits, the lock passes to the first live place
    in the same atomic step: its owner holds the key, with a new token, for what is left of the
    place's time (a waiter that died blocks the key no longer than its place would have lived),
    and the line's ``on_grant`` hears a :class:`Grant`.
    """

    async def queue(
        self, key: str, owner: str, ttl_ms: int, queue_ms: int, ticket: int
    ) -> Acquired | Queued:
        """Take ``key``, or wait in its line for ``queue_ms`` more; one atomic step.

        - ``owner`` already holds the live lock (a grant it may not have heard of): the expiry
          moves to ``ttl_ms`` from now; :class:`Acquired` with the lock's token.
        - No live lock, and no live place ahead of ``owner``'s: ``owner`` takes the key for
          ``ttl_ms`` with a new token and leaves the line; :class:`Acquired`.
        - No live lock, and a live place ahead: the key passes to the first live place, as at a
          release; then as below.
        - A live lock: ``owner``'s place (kept where it was, else at the end of the line) is
          live for ``queue_ms`` from now and remembers ``ticket``; :class:`Queued`.
        """
        ...

    async def leave(self, key: str, owner: str) -> bool:
        """Leave ``key``'s line; if ``owner`` holds its live lock (granted), release it too.

        Returns:
            Whether a live lock of ``owner`` was released (and handed to the next in line).
        """
        ...


@runtime_checkable
class SupportsHandoff(Protocol):
    """A store whose release hands the key to the waiter that has waited longest, in one step.

    The waiter holds the key as the release ends, with no round trip of its own: a handoff is
    one hop, and the line is fair across processes (first come, first served).
    """

    def wait_in_line(
        self, on_grant: Callable[[Grant], None]
    ) -> AbstractAsyncContextManager[WaitingLine | None]:
        """Call ``on_grant(grant)`` on this loop for each grant to a place of this line.

        It yields the line, or ``None`` where a store that wraps another finds no lines in it
        (waiters then retry, as on any store without lines). A grant may go unheard (a lost
        connection): the waiter's next :meth:`WaitingLine.queue` answers it instead. A grant
        to an owner that has left, or that has heard of it already, is ignored by the caller:
        each owner leaves its line when its wait ends, which releases what was granted to it.
        """
        ...


@runtime_checkable
class SupportsLifecycle(Protocol):
    """A store that opens and closes resources (pools, files).

    :class:`leaselock.Locks` calls :meth:`open` at start and :meth:`aclose` at its end; a store
    shared by several ``Locks`` counts them and closes what it owns when the last one leaves.
    """

    async def open(self) -> None:
        """Get ready to serve calls; idempotent per caller."""
        ...

    async def aclose(self) -> None:
        """Undo one :meth:`open`; close owned resources after the last one."""
        ...
