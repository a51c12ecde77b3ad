"""Events: callbacks, async for, and the same facts on the leaselock logger."""

import asyncio
import logging
from datetime import UTC, datetime

import pytest

from leaselock import (
    Event,
    LeadershipLost,
    LeaseAcquired,
    LockAcquired,
    LockLost,
    LockReleased,
    Locks,
    TickSkipped,
)
from leaselock._events import Events, Publisher


async def lose(locks: Locks, store, clock, key: str) -> int:
    lock = await locks.acquire(key)
    assert lock is not None
    del store._rows[key]
    await clock.advance("10s")
    return lock.fencing_token


async def test_a_callback_gets_the_events_of_its_types_until_it_unsubscribes(locks, store, clock):
    seen: list[Event] = []
    unsubscribe = locks.events.subscribe(seen.append, "lock-lost")
    other: list[Event] = []
    locks.events.subscribe(other.append, "tick-skipped")
    token = await lose(locks, store, clock, "first")
    unsubscribe()
    await lose(locks, store, clock, "second")
    assert len(seen) == 1
    event = seen[0]
    assert isinstance(event, LockLost)
    assert (event.type, event.key, event.fencing_token, event.detected_by) == (
        "lock-lost",
        "first",
        token,
        "renewal",
    )
    assert event.owner is not None
    assert event.at.tzinfo is UTC
    assert abs((datetime.now(UTC) - event.at).total_seconds()) < 60
    assert other == []


async def test_async_for_streams_events_and_ends_when_the_locks_closes(store, clock):
    locks = Locks(store=store, clock=clock)
    await locks.start()
    received: list[str] = []
    every_event = aiter(locks.events)

    async def read() -> None:
        received.extend([f"{event.type} {event.key}" async for event in every_event])

    reader = asyncio.create_task(read())
    await lose(locks, store, clock, "a")
    await lose(locks, store, clock, "b")
    await locks.aclose()
    await asyncio.wait_for(reader, timeout=5)
    assert received == ["lock-acquired a", "lock-lost a", "lock-acquired b", "lock-lost b"]


async def test_a_stream_of_some_types_skips_the_others_and_closes_on_exit(locks, store, clock):
    async with locks.events.stream("tick-skipped") as skips:
        locks.events._emit(
            TickSkipped(
                key="job:owner",
                fencing_token=None,
                owner=None,
                job="job",
                reason="another-instance",
            )
        )
        await lose(locks, store, clock, "k")
        first = await asyncio.wait_for(anext(skips), timeout=5)
    assert isinstance(first, TickSkipped)
    with pytest.raises(StopAsyncIteration):
        await anext(skips)


async def test_a_failing_callback_is_logged_and_the_others_still_get_the_event(
    locks, store, clock, caplog: pytest.LogCaptureFixture
):
    def broken(event: Event) -> None:
        raise RuntimeError("subscriber bug")

    seen: list[Event] = []
    locks.events.subscribe(broken)
    locks.events.subscribe(seen.append)
    with caplog.at_level(logging.ERROR, logger="leaselock"):
        await lose(locks, store, clock, "k")
    assert [event.type for event in seen] == ["lock-acquired", "lock-lost"]
    assert "An event callback raised on lock-lost" in caplog.text


@pytest.mark.parametrize(
    ("event", "level", "line"),
    [
        (
            LockAcquired(key="orders:1", fencing_token=3, owner="o", ttl_ms=30_000),
            logging.DEBUG,
            'Acquired "orders:1" (fencing token 3, ttl 30000 ms)',
        ),
        (
            LockReleased(key="orders:1", fencing_token=3, owner="o", kept_ms=400),
            logging.DEBUG,
            'Released "orders:1" (fencing token 3), kept 400 ms more at the store',
        ),
        (
            LeaseAcquired(
                key="inventory:stock-reconciliation:owner",
                fencing_token=7,
                owner="o",
                job="inventory:stock-reconciliation",
            ),
            logging.INFO,
            (
                "inventory:stock-reconciliation runs on this instance "
                '(lease "inventory:stock-reconciliation:owner", fencing token 7)'
            ),
        ),
        (
            TickSkipped(
                key="StockReconciliationJob.reconcile_stock:owner",
                fencing_token=None,
                owner=None,
                job="StockReconciliationJob.reconcile_stock",
                reason="another-instance",
            ),
            logging.INFO,
            "Skipped StockReconciliationJob.reconcile_stock: it runs on another instance",
        ),
        (
            TickSkipped(key="j", fencing_token=None, owner=None, job="j", reason="in-progress"),
            logging.INFO,
            "Skipped j: a run is still in progress",
        ),
        (
            TickSkipped(
                key="j:owner",
                fencing_token=None,
                owner=None,
                job="j",
                reason="another-instance",
                holder="shop-3002",
                streak=20,
                streak_since=datetime(2026, 12, 1, 12, 3, 10, tzinfo=UTC),
                loud=True,
            ),
            logging.INFO,
            (
                "Skipped j: it runs on another instance (shop-3002); 20 ticks skipped since "
                "2026-12-01T12:03:10+00:00"
            ),
        ),
        (
            TickSkipped(
                key="j:owner",
                fencing_token=None,
                owner=None,
                job="j",
                reason="another-instance",
                streak=7,
                loud=False,
            ),
            logging.DEBUG,
            "Skipped j: it runs on another instance",
        ),
        (
            LockLost(key="k", fencing_token=3, owner="o", detected_by="deadline"),
            logging.WARNING,
            'Lost lock "k" (fencing token 3), detected by deadline',
        ),
        (
            LeadershipLost(
                key="inventory:warehouse-feed", fencing_token=4, owner="o", reason="released"
            ),
            logging.INFO,
            'Stepped down from "inventory:warehouse-feed"',
        ),
    ],
)
def test_every_event_goes_to_the_leaselock_logger_in_the_documented_wording(
    event: Event, level: int, line: str, caplog: pytest.LogCaptureFixture
):
    with caplog.at_level(logging.DEBUG, logger="leaselock"):
        Events()._emit(event)
    assert [(r.name, r.levelno) for r in caplog.records] == [("leaselock", level)]
    assert line in caplog.records[0].getMessage()


async def test_a_graceful_shutdown_hands_locks_back_as_its_own_event_never_as_lock_lost(
    store, clock, caplog: pytest.LogCaptureFixture
):
    seen: list[Event] = []
    locks = Locks(store=store, clock=clock)
    locks.events.subscribe(seen.append)
    await locks.start()
    lock = await locks.acquire("report:monthly")
    assert lock is not None
    with caplog.at_level(logging.INFO, logger="leaselock"):
        await locks.aclose()
    assert [event.type for event in seen] == ["lock-acquired", "lock-handed-back"]
    reason = lock.signal.reason
    assert reason is not None
    assert reason.detected_by == "shutdown", "the signal still says why the lock ended"
    assert 'Handed back "report:monthly"' in caplog.text
    levels = {record.levelno for record in caplog.records if record.name == "leaselock"}
    assert levels == {logging.INFO}, "nothing at WARNING: a deploy is not an incident"


def test_log_records_carry_the_events_fields_for_log_pipelines(caplog: pytest.LogCaptureFixture):
    events = Events()
    with caplog.at_level(logging.DEBUG, logger="leaselock"):
        Publisher(events).emit(
            LockLost(
                key="invoices:nightly",
                fencing_token=7,
                owner="0123456789abcdef0123456789abcdef@shop-3002",
                detected_by="deadline",
            )
        )
    (record,) = caplog.records
    assert record.event == "lock-lost"  # type: ignore[attr-defined]
    assert record.key == "invoices:nightly"  # type: ignore[attr-defined]
    assert record.token == 7  # type: ignore[attr-defined]
    assert record.instance == "shop-3002"  # type: ignore[attr-defined]
    assert record.reason == "deadline"  # type: ignore[attr-defined]


def test_an_event_is_heard_by_the_log_at_its_level_by_a_callback_or_by_a_stream(
    caplog: pytest.LogCaptureFixture,
):
    events = Events()
    publisher = Publisher(events)
    with caplog.at_level(logging.INFO, logger="leaselock"):
        assert not publisher.heard(logging.DEBUG), "nobody listens: the event is not built"
        assert publisher.heard(logging.INFO)
        unsubscribe = events.subscribe(lambda event: None, "tick-skipped")
        assert publisher.heard(logging.DEBUG)
        unsubscribe()
        assert not publisher.heard(logging.DEBUG)
        stream = events.stream()
        assert publisher.heard(logging.DEBUG)
        del stream
        assert not publisher.heard(logging.DEBUG), "a stream gone is no longer heard"
    with caplog.at_level(logging.DEBUG, logger="leaselock"):
        assert publisher.heard(logging.DEBUG)


async def test_acquires_and_releases_reach_the_debug_log_with_no_subscriber(
    store, clock, caplog: pytest.LogCaptureFixture
):
    async with Locks(store=store, clock=clock) as locks:
        with caplog.at_level(logging.DEBUG, logger="leaselock"):
            lock = await locks.acquire("orders:7")
            assert lock is not None
            assert await lock.release()
        quiet = await locks.acquire("orders:8")
        assert quiet is not None
        assert await quiet.release()
    lines = [record.getMessage() for record in caplog.records if record.name == "leaselock"]
    token = lock.fencing_token
    assert lines == [
        f'Acquired "orders:7" (fencing token {token}, ttl 30000 ms)',
        f'Released "orders:7" (fencing token {token})',
    ]
