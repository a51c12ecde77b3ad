"""Every operator action is an operator-acted event naming who asked: the audit trail."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import leaselock
from leaselock import Event, Locks, LocksConfigurationError, OperatorActed
from leaselock.stores import InMemoryLockStore
from leaselock.testing import ManualClock


@leaselock.without_overlapping(key="reports:daily")
async def daily_report() -> str:
    return "sent"


def actions(events: list[Event]) -> list[tuple[str, str, str]]:
    return [(e.action, e.key, e.operator) for e in events if isinstance(e, OperatorActed)]


async def test_a_break_names_who_asked_and_the_broken_holder(
    store: InMemoryLockStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
):
    heard: list[Event] = []
    async with (
        Locks(store=store, clock=clock, instance="stuck") as stuck,
        Locks(store=store, clock=clock, instance="ops-1") as operator,
    ):
        operator.events.subscribe(heard.append, "operator-acted")
        held = await stuck.acquire("invoices:export")
        assert held is not None
        with caplog.at_level(logging.WARNING, logger="leaselock"):
            await operator.break_lock("invoices:export", by="alice")
    [event] = heard
    assert isinstance(event, OperatorActed)
    assert (event.action, event.operator, event.instance) == ("break", "alice", "stuck")
    assert event.fencing_token == held.fencing_token
    assert (
        f'Broke the lock on "invoices:export" held by stuck (fencing token '
        f"{held.fencing_token}); asked by alice"
    ) in caplog.text


async def test_pause_resume_and_run_now_name_who_asked_and_default_to_the_instance(
    store: InMemoryLockStore, clock: ManualClock
):
    heard: list[Event] = []
    async with Locks(store=store, clock=clock, instance="shop-1") as locks:
        locks.register(daily_report)
        locks.events.subscribe(heard.append)
        await locks.pause("reports:*", note="month-end close", by="alice")
        await locks.resume("reports:*", by="bob")
        await locks.run_now("reports:daily")
        assert await locks.resume("reports:*", by="bob") is None
    assert actions(heard) == [
        ("pause", "reports:*", "alice"),
        ("resume", "reports:*", "bob"),
        ("run", "reports:daily", "shop-1"),
    ]
    resumed = [e for e in heard if isinstance(e, OperatorActed)][1]
    assert resumed.message() == (
        "Resumed reports:* (paused by alice: month-end close); asked by bob"
    )


async def test_a_run_now_of_an_unknown_job_is_refused_before_any_audit_event(locks: Locks):
    heard: list[Event] = []
    locks.events.subscribe(heard.append, "operator-acted")
    with pytest.raises(LocksConfigurationError, match="No job 'feed:export'"):
        await locks.run_now("feed:export", by="alice")
    assert heard == []


async def test_a_blank_operator_is_refused_naming_the_fix(locks: Locks):
    with pytest.raises(LocksConfigurationError, match="who asks"):
        await locks.break_lock("invoices:export", by=" ")


async def test_the_audit_event_is_written_to_the_event_log(
    store: InMemoryLockStore, clock: ManualClock, tmp_path: Path
):
    log = tmp_path / "events.jsonl"
    async with Locks(store=store, clock=clock, instance="shop-1", event_log=log) as locks:
        await locks.pause("reports:*", note="quiet", by="alice")
    [line] = [json.loads(text) for text in log.read_text().splitlines()]
    assert (line["type"], line["operator"], line["action"], line["by"]) == (
        "operator-acted",
        "alice",
        "pause",
        "shop-1",
    )
