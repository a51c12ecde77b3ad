"""Locks(event_log=...): every event as a line of JSON, from start to close."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from leaselock import Locks, LocksConfigurationError
from leaselock.stores import InMemoryLockStore
from leaselock.testing import ManualClock


async def test_every_event_is_one_json_line_with_its_fields(
    tmp_path: Path, store: InMemoryLockStore, clock: ManualClock
):
    log = tmp_path / "events.jsonl"
    async with Locks(store=store, clock=clock, instance="shop-3002", event_log=log) as locks:
        lock = await locks.acquire("orders:1", ttl="20s")
        assert lock is not None
        await lock.release()
        kept = await locks.acquire("orders:2")
        assert kept is not None
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["type"], e["key"]) for e in events] == [
        ("lock-acquired", "orders:1"),
        ("lock-released", "orders:1"),
        ("lock-acquired", "orders:2"),
        ("lock-handed-back", "orders:2"),
    ]
    first = events[0]
    assert (first["fencing_token"], first["instance"], first["ttl_ms"]) == (1, "shop-3002", 20_000)
    assert first["owner"] == lock.owner
    assert first["message"] == 'Acquired "orders:1" (fencing token 1, ttl 20000 ms)'
    assert first["at"].endswith("+00:00")


async def test_a_second_locks_appends_to_the_same_file(tmp_path: Path, clock: ManualClock):
    log = tmp_path / "events.jsonl"
    for label in ("shop-3001", "shop-3002"):
        async with Locks(clock=clock, instance=label, event_log=log) as locks:
            await locks.acquire("k")
    instances = [json.loads(line)["instance"] for line in log.read_text().splitlines()]
    assert instances == ["shop-3001", "shop-3001", "shop-3002", "shop-3002"]


async def test_a_log_that_cannot_be_written_fails_the_start_naming_it(tmp_path: Path):
    with pytest.raises(LocksConfigurationError, match="event_log=3"):
        Locks(event_log=3)  # type: ignore[arg-type]
    locks = Locks(event_log=tmp_path / "missing" / "events.jsonl")
    with pytest.raises(LocksConfigurationError, match="cannot be opened for appending"):
        await locks.start()


async def test_every_line_names_the_instance_that_wrote_it(tmp_path: Path, clock: ManualClock):
    log = tmp_path / "events.jsonl"
    async with Locks(clock=clock, instance="shop-3001", event_log=log) as locks:
        await locks.acquire("k")
    assert {json.loads(line)["by"] for line in log.read_text().splitlines()} == {"shop-3001"}


async def test_a_renewal_is_recorded_only_when_nothing_else_was_written_since_the_last_one(
    tmp_path: Path, clock: ManualClock
):
    log = tmp_path / "events.jsonl"
    async with Locks(clock=clock, ttl="30s", instance="shop-3001", event_log=log) as locks:
        assert await locks.acquire("leader") is not None
        # busy: a line between every two renewals (at 10 s, 20 s, 30 s) is sign of life enough
        for _ in range(7):
            await clock.advance("6s")
            other = await locks.acquire("other")
            assert other is not None
            await other.release()
        busy = [json.loads(line)["type"] for line in log.read_text().splitlines()]
        # quiet from 42 s: each renewal (at 50 s, 60 s, 70 s) is recorded, but the first one,
        # which follows the last event
        await clock.advance("30s")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert "renewed" not in busy
    quiet = [line for line in lines[len(busy) :] if line["type"] == "renewed"]
    assert len(quiet) == 2
    assert set(quiet[0]) == {"type", "at", "by"}
    assert quiet[0]["by"] == "shop-3001"
