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
