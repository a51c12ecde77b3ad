"""RenewalScheduler: one timer per Locks renews every held lease and watches every deadline.

No task or thread per lock: held leases sit in buckets keyed by when each is next due for
renewal, a batch in flight is watched once at the earliest deadline among its leases, the times
of both sit in one heap, and one clock timer is armed for the earliest. When it fires, every due
renewal goes to the store in one batch, with every lease due within half a renewal interval:
renewed together once, leases of one ttl stay in step, so a process holding thousands of leases
renews them in one or two round trips per interval instead of one per moment they were taken.
Leases renewed in one batch share their next times, hence their buckets: the heap holds a few
times, not an entry per lease, and a tick costs a few steps per lease.

A lease just taken is not filed at once: it waits in a list until the next tick (or until the
list is long), since most leases of a busy lock are released long before their first renewal,
and a lease released at once, the last one in, leaves the list again. Taking and releasing a
lock then costs the scheduler an append and a pop, not a bucket and a heap entry.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable
from typing import final

from .._clock import TimerHandle
from .._errors import DetectedBy, LockStoreError
from .._telemetry import Telemetry
from ._bounded import StoreCallBounds, StoreCallTimeoutError
from ._checked_store import CheckedStore
from ._lease import HELD, Lease

__all__ = ["RenewalScheduler"]

_log = logging.getLogger("leaselock.renewal")

# leases taken since the last tick that are filed at once: the list stays short where many
# tasks take and release out of order (each release pops only the last lease taken)
_FILE_ARRIVALS_AT = 256


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
        bounds: the bounds of store calls, on the holder's clock (deadlines and renewal times).
        on_lost: called once per lost lease, with how the loss was seen.
        on_failing: called for each failed renewal (the error, the milliseconds left).
        on_renewed: where given, called once per renewal call that the store confirmed for at
            least one lease (an event log records from it that its instance was alive).
        telemetry: where given, records each renewal's round trip.
    """

    __slots__ = (
        "_armed_at_ms",
        "_arriving",
        "_bounds",
        "_buckets",
        "_clock",
        "_on_failing",
        "_on_lost",
        "_on_renewed",
        "_store",
        "_telemetry",
        "_timer",
        "_times",
        "_watches",
    )

    def __init__(
        self,
        store: CheckedStore,
        bounds: StoreCallBounds,
        on_lost: Callable[[Lease, DetectedBy], None],
        on_failing: Callable[[Lease, LockStoreError, int], None],
        *,
        on_renewed: Callable[[], object] | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        """Create a scheduler with nothing to renew."""
        self._store = store
        self._telemetry = telemetry
        self._bounds = bounds
        self._clock = bounds.clock
        self._on_lost = on_lost
        self._on_failing = on_failing
        self._on_renewed = on_renewed
        # due time -> (schedule version, lease) entries of leases waiting for their renewal
        self._buckets: dict[int, list[tuple[int, Lease]]] = {}
        # watch time -> batches in flight, looked at then for deadlines that passed unanswered
        self._watches: dict[int, list[_Batch]] = {}
        # the keys of _buckets and _watches, heaped
        self._times: list[int] = []
        self._timer: TimerHandle | None = None
        self._armed_at_ms: int | None = None
        # leases taken since the last tick, not filed in a bucket yet; the timer is armed no
        # later than the earliest renewal due among them
        self._arriving: list[Lease] = []

    def track(self, lease: Lease) -> None:
        """Start renewing ``lease``; it stays tracked until it is no longer HELD."""
        arriving = self._arriving
        arriving.append(lease)
        if len(arriving) > _FILE_ARRIVALS_AT:
            self._file_arrivals()
        due_ms = min(lease.next_renew_ms, lease.deadline_ms)
        if self._armed_at_ms is None or due_ms < self._armed_at_ms:
            self._arm_at(due_ms)

    def forget(self, lease: Lease) -> None:
        """Drop ``lease``, no longer HELD, if it is the last one taken (cheap; else it waits)."""
        arriving = self._arriving
        if arriving and arriving[-1] is lease:
            arriving.pop()

    def close(self) -> None:
        """Stop the timer; held leases are left to the caller."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._armed_at_ms = None
        self._arriving.clear()
        self._buckets.clear()
        self._watches.clear()
        self._times.clear()

    def _file_arrivals(self) -> None:
        arriving, self._arriving = self._arriving, []
        held = HELD  # a local: this loop runs once per lease taken
        for lease in arriving:
            if lease.state is held:
                self._schedule(lease)

    def _schedule(self, lease: Lease) -> None:
        lease.schedule_version += 1
        due_ms = min(lease.next_renew_ms, lease.deadline_ms)
        self._bucket_at(due_ms).append((lease.schedule_version, lease))

    def _bucket_at(self, due_ms: int) -> list[tuple[int, Lease]]:
        bucket = self._buckets.get(due_ms)
        if bucket is None:
            bucket = self._buckets[due_ms] = []
            if due_ms not in self._watches:
                heapq.heappush(self._times, due_ms)
        return bucket

    def _watch(self, batch: _Batch, at_ms: int) -> None:
        watches = self._watches.get(at_ms)
        if watches is None:
            watches = self._watches[at_ms] = []
            if at_ms not in self._buckets:
                heapq.heappush(self._times, at_ms)
        watches.append(batch)

    def _arm(self) -> None:
        self._drop_stale_times()
        if not self._times:
            return
        due_ms = self._times[0]
        if self._armed_at_ms is not None and self._armed_at_ms <= due_ms:
            return
        self._arm_at(due_ms)

    def _arm_at(self, due_ms: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_at_ms = due_ms
        self._timer = self._clock.call_at(due_ms, self._tick)

    def _drop_stale_times(self) -> None:
        """Drop the earliest times while they hold only moved leases and answered batches."""
        while self._times:
            due_ms = self._times[0]
            # newest first: the lease just filed is the likeliest to be live
            if not all(_is_stale(entry) for entry in reversed(self._buckets.get(due_ms, ()))):
                return
            if not all(batch.answered for batch in self._watches.get(due_ms, ())):
                return
            self._pop_time()

    def _pop_time(self) -> tuple[int, list[tuple[int, Lease]], list[_Batch]]:
        due_ms = heapq.heappop(self._times)
        return due_ms, self._buckets.pop(due_ms, []), self._watches.pop(due_ms, [])

    async def _tick(self) -> None:
        self._timer = None
        self._armed_at_ms = None
        self._file_arrivals()
        now_ms = self._clock.now_ms()
        due: list[Lease] = []
        held = HELD  # a local: these loops run once per lease due
        while self._times and self._times[0] <= now_ms:
            _, bucket, watches = self._pop_time()
            for batch in watches:
                self._look_at(batch, now_ms)
            for version, lease in bucket:
                if version != lease.schedule_version or lease.state is not held:
                    continue
                if now_ms >= lease.deadline_ms:
                    self._on_lost(lease, "deadline")
                elif now_ms >= lease.next_renew_ms:
                    due.append(lease)
                else:
                    self._schedule(lease)
        if due:
            due.extend(self._due_soon(now_ms))
            batch = _Batch(due, now_ms)
            for lease in due:
                lease.renewing = True
                lease.schedule_version += 1
            # looked at when the call is slow, while a warning can still save the leases
            slow_at_ms = now_ms + renew_interval_ms(min(lease.ttl_ms for lease in due))
            self._watch(batch, min(slow_at_ms, *(lease.deadline_ms for lease in due)))
        # re-arm before awaiting the store: deadlines must fire even while renewals hang
        self._arm()
        if due:
            await self._renew(batch, now_ms)

    def _look_at(self, batch: _Batch, now_ms: int) -> None:
        """Warn of a slow unanswered batch; lose its leases past their deadlines, watch the rest."""
        if batch.answered:
            return
        waiting = [lease for lease in batch.leases if lease.state is HELD]
        if waiting and not batch.warned:
            self._warn_if_slow(batch, now_ms - batch.sent_at_ms, answered=False)
        for lease in waiting:
            if now_ms >= lease.deadline_ms:
                self._on_lost(lease, "deadline")
        later = [lease.deadline_ms for lease in waiting if lease.deadline_ms > now_ms]
        if later:
            self._watch(batch, min(later))

    def _due_soon(self, now_ms: int) -> list[Lease]:
        """Take the next leases due within their early window into this batch.

        In due order, bucket by bucket: a bucket holding a lease that is not a renewal within
        its window is the last one looked at, and keeps that lease.
        """
        soon: list[Lease] = []
        while self._times:
            due_ms = self._times[0]
            bucket = self._buckets.get(due_ms)
            if bucket is None:
                # a batch in flight is still unanswered near its deadline: the store is failing,
                # and the leases due after that renew at their own times
                return soon
            kept: list[tuple[int, Lease]] = []
            for entry in bucket:
                version, lease = entry
                if version != lease.schedule_version or lease.state is not HELD:
                    continue
                if due_ms - now_ms > early_renewal_ms(lease.ttl_ms):
                    kept.append(entry)
                    continue
                soon.append(lease)
            if kept:
                self._buckets[due_ms] = kept
                return soon
            self._pop_time_keeping_watches(due_ms)
        return soon

    def _pop_time_keeping_watches(self, due_ms: int) -> None:
        del self._buckets[due_ms]
        if due_ms not in self._watches:
            heapq.heappop(self._times)

    async def _renew(self, batch: _Batch, sent_at_ms: int) -> None:
        leases = batch.leases
        # past the last deadline of the batch no answer can save any of its leases
        bound_ms = max(lease.deadline_ms for lease in leases)
        results: list[bool | LockStoreError]
        try:
            with self._bounds.until(bound_ms):
                results = await self._store.renew_many([lease.renewal for lease in leases])
        except StoreCallTimeoutError:
            unanswered = LockStoreError(
                f"{self._store.inner!r} did not answer the renewal before the holder's deadline"
            )
            results = [unanswered] * len(leases)
        batch.answered = True
        confirmed_at_ms = self._clock.now_ms()
        took_ms = confirmed_at_ms - sent_at_ms
        if self._telemetry is not None:
            self._telemetry.renewed(took_ms / 1000)
        self._warn_if_slow(batch, took_ms, answered=True)
        # leases of one ttl renewed together share their next renewal time, so their bucket
        ttl_ms = next_ms = deadline_ms = -1
        bucket: list[tuple[int, Lease]] = []
        held = HELD  # a local: this loop runs once per lease of the batch
        for lease, result in zip(leases, results, strict=True):
            lease.renewing = False
            if result is True and lease.state is held and confirmed_at_ms < lease.deadline_ms:
                if lease.ttl_ms != ttl_ms:
                    ttl_ms = lease.ttl_ms
                    deadline_ms = sent_at_ms + ttl_ms
                    next_ms = sent_at_ms + renew_interval_ms(ttl_ms)
                    bucket = self._bucket_at(next_ms)
                lease.deadline_ms = deadline_ms
                lease.next_renew_ms = next_ms
                version = lease.schedule_version + 1
                lease.schedule_version = version
                bucket.append((version, lease))
            else:
                self._settle(lease, result, confirmed_at_ms)
        self._arm()
        # ttl_ms stays -1 unless the loop above confirmed a lease: told once a call, not a lease
        if ttl_ms != -1 and self._on_renewed is not None:
            self._tell_renewed(self._on_renewed)

    @staticmethod
    def _tell_renewed(on_renewed: Callable[[], object]) -> None:
        try:
            on_renewed()
        except Exception:  # noqa: BLE001 -- what observes renewals must never stop them
            _log.exception("Recording a confirmed renewal failed; renewals go on")

    @staticmethod
    def _warn_if_slow(batch: _Batch, took_ms: int, *, answered: bool) -> None:
        # a pool busy with the application's queries delays renewals silently until one is
        # lost: said once a batch, as soon as it has waited a third of a ttl, while the
        # leases still have two thirds of it left
        leases = batch.leases
        if batch.warned or took_ms < renew_interval_ms(min(lease.ttl_ms for lease in leases)):
            return
        batch.warned = True
        slow = [lease for lease in leases if took_ms >= renew_interval_ms(lease.ttl_ms)]
        _log.warning(
            'Renewing "%s"%s %s %d ms, more than a third of its ttl (%d ms): the store or its '
            "connection pool is overloaded, and a renewal that takes the whole ttl loses the "
            "lock. Give the store connections of its own, or size a shared pool for the "
            "application's queries plus the release listener plus renewals",
            slow[0].key,
            f" and {len(slow) - 1} more" if len(slow) > 1 else "",
            "took" if answered else "has waited for the store's answer for",
            took_ms,
            slow[0].ttl_ms,
        )

    def _settle(self, lease: Lease, result: bool | LockStoreError, confirmed_at_ms: int) -> None:
        """Settle a renewal that did not simply succeed in time (that path is in _renew)."""
        if lease.state is not HELD:
            return
        if isinstance(result, LockStoreError):
            self._on_failing(lease, result, lease.deadline_ms - confirmed_at_ms)
            lease.next_renew_ms = confirmed_at_ms + retry_interval_ms(lease.ttl_ms)
            self._schedule(lease)
            return
        if not result:
            self._on_lost(lease, "renewal")
            return
        # the holder gave up at its deadline; the store's yes came too late to count
        self._on_lost(lease, "deadline")


@final
class _Batch:
    """Leases sent in one renewal call, watched for their deadlines until it is answered."""

    __slots__ = ("answered", "leases", "sent_at_ms", "warned")

    def __init__(self, leases: list[Lease], sent_at_ms: int) -> None:
        self.leases = leases
        self.sent_at_ms = sent_at_ms
        self.answered = False
        self.warned = False


def _is_stale(entry: tuple[int, Lease]) -> bool:
    version, lease = entry
    return lease.state is not HELD or version != lease.schedule_version
