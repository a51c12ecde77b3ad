"""RenewalScheduler: one timer per Locks renews every held lease and watches every deadline.

No task or thread per lock: held leases sit in buckets keyed by when each next needs attention
(its renewal, or its deadline while a renewal is in flight), the bucket times in one heap, and
one clock timer is armed for the earliest. When it fires, every due renewal goes to the store in
one batch, with every lease due within half a renewal interval: renewed together once, leases of
one ttl stay in step, so a process holding thousands of leases renews them in one or two round
trips per interval instead of one per moment they were taken. Leases renewed in one batch share
their next times, hence their buckets: the heap holds a few times, not an entry per lease.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable
from typing import final

from .._clock import Clock, TimerHandle
from .._errors import DetectedBy, LockStoreError
from .._telemetry import Telemetry
from ..stores._protocol import Renewal
from ._bounded import StoreCallTimeoutError, bounded
from ._checked_store import CheckedStore
from ._lease import Lease, LeaseState

__all__ = ["RenewalScheduler"]

_log = logging.getLogger("leaselock.renewal")


def renew_interval_ms(ttl_ms: int) -> int:
    """Return how long after a confirmed send the next renewal is due: a third of the ttl."""
    return ttl_ms // 3


def early_renewal_ms(ttl_ms: int) -> int:
    """Return how early a lease may be renewed to share a batch: half a renewal interval."""
    return renew_interval_ms(ttl_ms) // 2


def retry_interval_ms(ttl_ms: int) -> int:
    """Return how soon a renewal that failed is tried again: about five tries per ttl."""
    return max(1, ttl_ms // 6)


@final
class RenewalScheduler:
    """Keeps leases renewed and reports each loss once.

    Args:
        store: the store the leases live in.
        clock: the holder's clock (deadlines and renewal times).
        on_lost: called once per lost lease, with how the loss was seen.
        on_failing: called for each failed renewal (the error, the milliseconds left).
        telemetry: where given, records each renewal's round trip.
    """

    __slots__ = (
        "_armed_at_ms",
        "_buckets",
        "_clock",
        "_on_failing",
        "_on_lost",
        "_store",
        "_telemetry",
        "_timer",
        "_times",
    )

    def __init__(
        self,
        store: CheckedStore,
        clock: Clock,
        on_lost: Callable[[Lease, DetectedBy], None],
        on_failing: Callable[[Lease, LockStoreError, int], None],
        *,
        telemetry: Telemetry | None = None,
    ) -> None:
        """Create a scheduler with nothing to renew."""
        self._store = store
        self._telemetry = telemetry
        self._clock = clock
        self._on_lost = on_lost
        self._on_failing = on_failing
        # due time -> (schedule version, lease) entries; _times heaps the keys of _buckets
        self._buckets: dict[int, list[tuple[int, Lease]]] = {}
        self._times: list[int] = []
        self._timer: TimerHandle | None = None
        self._armed_at_ms: int | None = None

    def track(self, lease: Lease) -> None:
        """Start renewing ``lease``; it stays tracked until it is no longer HELD."""
        self._schedule(lease)
        self._arm()

    def close(self) -> None:
        """Stop the timer; held leases are left to the caller."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._armed_at_ms = None
        self._buckets.clear()
        self._times.clear()

    def _schedule(self, lease: Lease) -> None:
        lease.schedule_version += 1
        due_ms = lease.deadline_ms
        if not lease.renewing and lease.next_renew_ms < due_ms:
            due_ms = lease.next_renew_ms
        bucket = self._buckets.get(due_ms)
        if bucket is None:
            bucket = self._buckets[due_ms] = []
            heapq.heappush(self._times, due_ms)
        bucket.append((lease.schedule_version, lease))

    def _arm(self) -> None:
        self._drop_stale_buckets()
        if not self._times:
            return
        due_ms = self._times[0]
        if self._armed_at_ms is not None and self._armed_at_ms <= due_ms:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._armed_at_ms = due_ms
        self._timer = self._clock.call_at(due_ms, self._tick)

    def _drop_stale_buckets(self) -> None:
        """Drop the earliest buckets while they hold only released, lost or moved leases."""
        while self._times:
            due_ms = self._times[0]
            if not all(_is_stale(entry) for entry in self._buckets[due_ms]):
                return
            heapq.heappop(self._times)
            del self._buckets[due_ms]

    def _pop_bucket(self) -> tuple[int, list[tuple[int, Lease]]]:
        due_ms = heapq.heappop(self._times)
        return due_ms, self._buckets.pop(due_ms)

    async def _tick(self) -> None:
        self._timer = None
        self._armed_at_ms = None
        now_ms = self._clock.now_ms()
        due: list[Lease] = []
        while self._times and self._times[0] <= now_ms:
            _, bucket = self._pop_bucket()
            for entry in bucket:
                if _is_stale(entry):
                    continue
                lease = entry[1]
                if now_ms >= lease.deadline_ms:
                    self._on_lost(lease, "deadline")
                    continue
                if not lease.renewing and now_ms >= lease.next_renew_ms:
                    lease.renewing = True
                    due.append(lease)
                self._schedule(lease)
        if due:
            due.extend(self._due_soon(now_ms))
        # re-arm before awaiting the store: deadlines must fire even while renewals hang
        self._arm()
        if due:
            await self._renew(due, now_ms)

    def _due_soon(self, now_ms: int) -> list[Lease]:
        """Take the next leases due within their early window into this batch (marked renewing).

        In due order, bucket by bucket: a bucket holding a lease that is not a renewal within
        its window is the last one looked at, and keeps that lease.
        """
        soon: list[Lease] = []
        while self._times:
            due_ms, bucket = self._pop_bucket()
            kept: list[tuple[int, Lease]] = []
            for entry in bucket:
                if _is_stale(entry):
                    continue
                lease = entry[1]
                if lease.renewing or due_ms - now_ms > early_renewal_ms(lease.ttl_ms):
                    kept.append(entry)
                    continue
                lease.renewing = True
                soon.append(lease)
                self._schedule(lease)
            if kept:
                self._buckets.setdefault(due_ms, []).extend(kept)
                if len(self._buckets[due_ms]) == len(kept):
                    heapq.heappush(self._times, due_ms)
                break
        return soon

    async def _renew(self, leases: list[Lease], sent_at_ms: int) -> None:
        renewals = [Renewal(lease.key, lease.owner, lease.ttl_ms) for lease in leases]
        # past the last deadline of the batch no answer can save any of its leases
        bound_ms = max(lease.deadline_ms for lease in leases)
        results: list[bool | LockStoreError]
        try:
            async with bounded(self._clock, bound_ms):
                results = await self._store.renew_many(renewals)
        except StoreCallTimeoutError:
            unanswered = LockStoreError(
                f"{self._store.inner!r} did not answer the renewal before the holder's deadline"
            )
            results = [unanswered] * len(leases)
        took_ms = self._clock.now_ms() - sent_at_ms
        if self._telemetry is not None:
            self._telemetry.renewed(took_ms / 1000)
        self._warn_if_slow(leases, took_ms)
        confirmed_at_ms = self._clock.now_ms()
        for lease, result in zip(leases, results, strict=True):
            lease.renewing = False
            self._settle(lease, result, sent_at_ms, confirmed_at_ms)
        self._arm()

    def _warn_if_slow(self, leases: list[Lease], took_ms: int) -> None:
        # a pool busy with the application's queries delays renewals silently until one is lost
        slow = [lease for lease in leases if took_ms > renew_interval_ms(lease.ttl_ms)]
        if not slow:
            return
        _log.warning(
            'Renewing "%s"%s took %d ms, more than a third of its ttl (%d ms): the store or its '
            "connection pool is overloaded, and a renewal that takes the whole ttl loses the "
            "lock. Give the store connections of its own, or size a shared pool for the "
            "application's queries plus the release listener plus renewals",
            slow[0].key,
            f" and {len(slow) - 1} more" if len(slow) > 1 else "",
            took_ms,
            slow[0].ttl_ms,
        )

    def _settle(
        self, lease: Lease, result: bool | LockStoreError, sent_at_ms: int, confirmed_at_ms: int
    ) -> None:
        if lease.state is not LeaseState.HELD:
            return
        if isinstance(result, LockStoreError):
            self._on_failing(lease, result, lease.deadline_ms - confirmed_at_ms)
            lease.next_renew_ms = confirmed_at_ms + retry_interval_ms(lease.ttl_ms)
            self._schedule(lease)
            return
        if not result:
            self._on_lost(lease, "renewal")
            return
        if confirmed_at_ms >= lease.deadline_ms:
            # the holder gave up at its deadline; the store's yes came too late to count
            self._on_lost(lease, "deadline")
            return
        lease.deadline_ms = sent_at_ms + lease.ttl_ms
        lease.next_renew_ms = sent_at_ms + renew_interval_ms(lease.ttl_ms)
        self._schedule(lease)


def _is_stale(entry: tuple[int, Lease]) -> bool:
    version, lease = entry
    return lease.state is not LeaseState.HELD or version != lease.schedule_version
