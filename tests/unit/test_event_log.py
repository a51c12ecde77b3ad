"""Locks(event_log=...): every event as a line of JSON, from start to close."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from leaselock import EventLog, Locks, LocksConfigurationError
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


def files_in(directory: Path) -> list[Path]:
    return sorted(directory.iterdir())


async def test_the_log_rotates_past_its_size_keeping_its_backups_and_every_line_whole(
    tmp_path: Path, clock: ManualClock
):
    log = tmp_path / "events.jsonl"
    bounded = EventLog(log, max_bytes=2000, backups=2)
    async with Locks(clock=clock, instance="shop-3001", event_log=bounded) as locks:
        for n in range(60):
            lock = await locks.acquire(f"orders:{n}")
            assert lock is not None
            await lock.release()
    files = files_in(tmp_path)
    assert [path.name for path in files] == ["events.jsonl", "events.jsonl.1", "events.jsonl.2"]
    for path in files:
        assert path.stat().st_size < 2000 + 400, "past the bound by one line at most"
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert all(line["by"] == "shop-3001" for line in lines)
    newest = [json.loads(line) for line in log.read_text().splitlines()]
    previous = [json.loads(line) for line in (tmp_path / "events.jsonl.1").read_text().splitlines()]
    assert previous[-1]["at"] <= newest[0]["at"], ".1 holds the lines just before the current file"
    assert newest[-1]["key"] == "orders:59"


async def test_a_plain_path_is_bounded_by_default(tmp_path: Path, clock: ManualClock):
    log = tmp_path / "events.jsonl"
    async with Locks(clock=clock, event_log=log) as locks:
        assert locks._event_log is not None
        assert (locks._event_log.max_bytes, locks._event_log.backups) == (50 * 1024 * 1024, 2)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"max_bytes": 0}, "max_bytes=0; pass the file's largest size in bytes"),
        ({"max_bytes": True}, "max_bytes=True"),
        ({"backups": 0}, "backups=0; pass how many rotated files to keep, 1 or more"),
    ],
)
def test_a_bad_bound_is_refused_naming_the_fix(
    tmp_path: Path, arguments: dict[str, object], message: str
):
    with pytest.raises(LocksConfigurationError, match=message):
        EventLog(tmp_path / "events.jsonl", **arguments)  # type: ignore[arg-type]
