"""The history checker: what it proves from a record, and that it catches broken stores."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from helpers import yield_once
from leaselock import Locks
from leaselock.stores import Acquired, AcquireResult, InMemoryLockStore, NotAcquired
from leaselock.testing.history import HistoryRecorder, check_history

MS = 1_000_000


class History:
    """Entries as a HistoryRecorder writes them, built by hand (times in ms, stored as ns)."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._calls = 0

    def call(
        self, process: str, op: str, key: str, sent_ms: int, answered_ms: int | None, **fields: Any
    ) -> None:
        self._calls += 1
        call = f"{process}:{self._calls}"
        result = fields.pop("result", None)
        error = fields.pop("error", None)
        lease_age_ms = fields.pop("lease_age_ms", 0)
        self.entries.append(
            {"process": process, "call": call, "phase": "sent", "op": op, "key": key,
             "at": sent_ms * MS, **fields}
        )  # fmt: skip
        if answered_ms is not None:
            answer: dict[str, Any] = {"process": process, "call": call, "phase": "answered"}
            answer["at"] = answered_ms * MS
            answer.update({"error": error} if error else {"result": result})
            if lease_age_ms:
                answer["lease_age_ms"] = lease_age_ms
            self.entries.append(answer)

    def acquire(
        self,
        process: str,
        owner: str,
        sent: int,
        answered: int | None,
        token: int | None,
        *,
        lease_age_ms: int = 0,
    ) -> None:
        self.call(
            process, "acquire", "k", sent, answered,
            owner=owner, ttl_ms=1000, result=token, lease_age_ms=lease_age_ms,
        )  # fmt: skip

    def renew(self, process: str, owner: str, sent: int, answered: int, ok: bool = True) -> None:
        self.call(process, "renew", "k", sent, answered, owner=owner, ttl_ms=1000, result=ok)

    def release(self, process: str, owner: str, sent: int, answered: int | None) -> None:
        self.call(process, "release", "k", sent, answered, owner=owner, result=True)

    def write(self, process: str, token: int, sent: int, answered: int, accepted: bool) -> None:
        self.call(process, "write", "k", sent, answered, token=token, result=accepted)

    def queue(
        self, process: str, owner: str, sent: int, answered: int, *, ticket: int, token: int | None
    ) -> None:
        self.call(
            process, "queue", "k", sent, answered,
            owner=owner, ttl_ms=1000, queue_ms=3000, ticket=ticket, result=token,
        )  # fmt: skip

    def grant(self, process: str, owner: str, heard: int, ticket: int, token: int) -> None:
        self.call(process, "grant", "k", heard, heard, owner=owner, ticket=ticket, result=token)


def test_a_clean_handover_passes_with_its_counts():
    history = History()
    history.acquire("a", "a1", 0, 5, 1)
    history.renew("a", "a1", 300, 305)
    history.write("a", 1, 400, 410, accepted=True)
    history.release("a", "a1", 500, 505)
    history.acquire("b", "b1", 501, 506, 2)
    history.write("b", 2, 600, 610, accepted=True)
    report = check_history(history.entries)
    assert report.ok, report.summary()
    assert (report.acquisitions, report.renewals, report.releases) == (2, 1, 1)
    assert (report.writes_accepted, report.writes_refused, report.late_writes) == (2, 0, 0)
    assert [(lease.fencing_token, lease.start_ns, lease.end_ns) for lease in report.leases] == [
        (1, 5 * MS, 500 * MS),
        (2, 506 * MS, 1501 * MS),
    ]


def test_a_takeover_before_the_holders_deadline_is_two_live_leases():
    history = History()
    history.acquire("a", "a1", 0, 5, 1)
    history.renew("a", "a1", 300, 305)
    history.acquire("b", "b1", 1100, 1110, 2)
    report = check_history(history.entries)
    assert [violation.rule for violation in report.violations] == ["two live leases"]
    assert "token 1 of a" in str(report.violations[0])
    assert "+1.300000 s from the first call" in str(report.violations[0]), (
        "names when the first was live until"
    )


def test_a_violation_names_its_times_on_the_wall_clock_of_the_recorders_start():
    history = History()
    # what each recorder writes first: where the monotonic clock stood on the wall clock
    start_wall_ns = 1_796_500_000 * 10**9  # 2026-12-05T19:46:40+00:00
    history.entries.append({"process": "a", "phase": "clock", "at": 0, "wall_ns": start_wall_ns})
    history.acquire("a", "a1", 0, 5, 1)
    history.acquire("b", "b1", 700, 710, 2)
    report = check_history(history.entries)
    (violation,) = report.violations
    assert "live until 2026-12-05T19:46:41.000000+00:00 (+1.000000 s)" in str(violation)
    assert "began at 2026-12-05T19:46:40.710000+00:00 (+0.710000 s)" in str(violation)


def test_a_takeover_after_the_deadline_of_the_last_confirmed_renewal_is_fine():
    history = History()
    history.acquire("a", "a1", 0, 5, 1)
    history.renew("a", "a1", 300, 305)
    history.renew("a", "a1", 1250, 1350)  # confirmed after the 1300 ms deadline: does not count
    history.acquire("b", "b1", 1300, 1310, 2)
    report = check_history(history.entries)
    assert report.ok, report.summary()


def test_an_acquire_answered_after_its_ttl_is_not_a_lease():
    history = History()
    history.acquire("a", "a1", 0, 1000, 1)
    history.acquire("b", "b1", 500, 1001, 2)
    report = check_history(history.entries)
    assert report.ok, report.summary()
    assert report.late_acquisitions == 1


@pytest.mark.parametrize(("lease_age_ms", "ok"), [(300, True), (0, False)])
def test_an_acquire_under_a_lease_renewed_before_it_ends_that_much_sooner(
    lease_age_ms: int, ok: bool
):
    history = History()
    history.acquire("a", "a1", 0, 5, 1, lease_age_ms=lease_age_ms)
    history.acquire("b", "b1", 750, 760, 2)
    report = check_history(history.entries)
    assert report.ok is ok, report.summary()


async def test_the_recorder_writes_the_age_of_the_lease_an_acquire_joined(tmp_path: Path):
    class LeaseMates:
        """The in-memory store, as if each new lock joined a lease renewed 300 ms before."""

        def __init__(self) -> None:
            self.inner = InMemoryLockStore()

        async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
            answer = await self.inner.acquire(key, owner, ttl_ms)
            return Acquired(answer.fencing_token, 300) if isinstance(answer, Acquired) else answer

        async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
            return await self.inner.renew(key, owner, ttl_ms)

        async def release(self, key: str, owner: str) -> bool:
            return await self.inner.release(key, owner)

    path = tmp_path / "history.jsonl"
    recorder = HistoryRecorder(LeaseMates(), path)
    assert await recorder.acquire("k", "a1", 1000) == Acquired(1, 300)
    recorder.close()
    history = History()
    history.entries = [json.loads(line) for line in path.read_text().splitlines()]
    # b's acquire 750 ms after a's was sent: a's lease, renewed 300 ms before it, was over
    sent_ns = next(entry["at"] for entry in history.entries if entry.get("phase") == "sent")
    history.acquire("b", "b1", sent_ns // MS + 750, sent_ns // MS + 760, 2)
    report = check_history(history.entries)
    assert report.ok, report.summary()


def test_a_release_sent_by_a_process_killed_before_the_answer_ends_the_lease():
    history = History()
    history.acquire("a", "a1", 0, 5, 1)
    history.release("a", "a1", 100, None)
    history.acquire("b", "b1", 101, 110, 2)
    assert check_history(history.entries).ok


def test_a_token_given_twice_and_tokens_going_back_are_violations():
    history = History()
    history.acquire("a", "a1", 0, 5, 7)
    history.release("a", "a1", 10, 11)
    history.acquire("b", "b1", 20, 25, 7)
    history.release("b", "b1", 30, 31)
    history.acquire("c", "c1", 40, 45, 3)
    rules = [violation.rule for violation in check_history(history.entries).violations]
    assert rules.count("a token given twice") == 1
    assert rules.count("tokens went back") == 2


def test_a_stale_write_accepted_after_a_newer_one_is_a_violation_and_a_refused_one_is_not():
    history = History()
    history.write("b", 5, 100, 110, accepted=True)
    history.write("a", 4, 120, 130, accepted=False)
    history.write("a", 4, 140, 150, accepted=True)
    report = check_history(history.entries)
    assert [violation.rule for violation in report.violations] == ["a stale fenced write accepted"]
    assert (report.writes_accepted, report.writes_refused, report.late_writes) == (2, 1, 3)


def test_a_grant_is_a_lease_from_when_it_was_heard_with_the_deadline_of_its_place():
    history = History()
    history.acquire("a", "a1", 0, 5, 1)
    history.queue("b", "b1", 100, 105, ticket=1, token=None)
    history.release("a", "a1", 500, 505)
    history.grant("b", "b1", 506, ticket=1, token=2)
    # the queue call that finds the grant again is the same lease, not a second one
    history.queue("b", "b1", 1100, 1105, ticket=2, token=2)
    report = check_history(history.entries)
    assert report.ok, report.summary()
    assert report.acquisitions == 3
    assert [(lease.fencing_token, lease.start_ns, lease.end_ns) for lease in report.leases] == [
        (1, 5 * MS, 500 * MS),
        (2, 506 * MS, 3100 * MS),  # the place's deadline: 3 s from its queue call's send
    ]


def test_a_grant_heard_after_its_place_ran_out_is_no_lease():
    history = History()
    history.queue("b", "b1", 100, 105, ticket=1, token=None)
    history.grant("b", "b1", 3100, ticket=1, token=2)
    history.acquire("c", "c1", 3101, 3105, 3)
    report = check_history(history.entries)
    assert report.ok, report.summary()
    assert report.late_acquisitions == 1


def test_a_grant_heard_while_the_holder_is_live_is_two_live_leases():
    history = History()
    history.acquire("a", "a1", 0, 5, 1)
    history.queue("b", "b1", 100, 105, ticket=1, token=None)
    history.grant("b", "b1", 300, ticket=1, token=2)
    history.release("a", "a1", 500, 505)
    report = check_history(history.entries)
    assert [violation.rule for violation in report.violations] == ["two live leases"]


def test_a_grant_whose_token_is_not_above_one_heard_before_its_ticket_is_tokens_going_back():
    history = History()
    history.acquire("a", "a1", 0, 5, 7)
    history.release("a", "a1", 10, 11)
    history.queue("b", "b1", 20, 25, ticket=1, token=None)
    history.grant("b", "b1", 30, ticket=1, token=7)
    rules = [violation.rule for violation in check_history(history.entries).violations]
    assert rules == ["a token given twice", "tokens went back"]


class ReadThenWrite:
    """A broken store: it reads the key, lets others run, then writes: every caller wins."""

    def __init__(self) -> None:
        self.inner = InMemoryLockStore()

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        if key in self.inner._rows:
            return NotAcquired()
        await yield_once()
        self.inner._rows.pop(key, None)
        return await self.inner.acquire(key, owner, ttl_ms)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        return await self.inner.renew(key, owner, ttl_ms)

    async def release(self, key: str, owner: str) -> bool:
        return await self.inner.release(key, owner)


@pytest.mark.parametrize(("store", "broken"), [(InMemoryLockStore, False), (ReadThenWrite, True)])
async def test_the_checker_catches_a_read_then_write_store_and_passes_a_sound_one(
    tmp_path: Path, store: type, broken: bool
):
    path = tmp_path / "history.jsonl"
    recorder = HistoryRecorder(store(), path)

    async def section(locks: Locks) -> None:
        async with locks.hold("k", wait="5s") as lock:
            await recorder.fenced_write("k", lock.fencing_token, _accept)
            await yield_once()

    async with Locks(store=recorder, ttl="5s") as locks:
        for _ in range(5):
            await asyncio.gather(*(section(locks) for _ in range(8)))
    recorder.close()
    report = check_history(path)
    assert report.acquisitions >= 40
    assert report.ok is not broken, report.summary()
    if broken:
        assert "two live leases" in {violation.rule for violation in report.violations}


async def _accept() -> bool:
    return True
