"""Job control written once (JobControlOnDocuments) meets the contract's job-control cases.

Its store here is the in-memory one's locks and records plus documents in a dict whose every
call yields to the loop first, so racing starts interleave between the reads, the acquire and
the swap as they do on a server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from helpers import yield_once
from leaselock.stores import (
    Acquired,
    AcquireResult,
    InMemoryLockStore,
    JobRecord,
    LockInfo,
    OpenRun,
    RunRecord,
    RunStart,
)
from leaselock.stores._common._job_control import WhenBusy
from leaselock.stores._common._job_documents import JobControlOnDocuments
from leaselock.testing import ContractCase, ManualClock, lock_store_contract
from leaselock.testing._contract_check import JOB_CONTROL

STARTED = datetime(2026, 1, 1, tzinfo=UTC)


class DocumentedMemoryStore(JobControlOnDocuments):
    """Locks and records from the in-memory store; job control from the documents alone.

    A swap that would write a document containing a string in ``held_swaps`` waits for that
    string's event first: a test orders two callers' swaps that way.
    """

    def __init__(self) -> None:
        self.locks = InMemoryLockStore(clock=ManualClock())
        self.documents: dict[str, str] = {}
        self.swaps = 0
        self.held_swaps: dict[str, asyncio.Event] = {}

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        return await self.locks.acquire(key, owner, ttl_ms)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        return await self.locks.renew(key, owner, ttl_ms)

    async def release(self, key: str, owner: str) -> bool:
        return await self.locks.release(key, owner)

    async def record_run(self, run: RunRecord) -> None:
        await self.locks.record_run(run)

    async def job_records(self, jobs: Sequence[str] | None = None) -> list[JobRecord]:
        return await self.locks.job_records(jobs)

    async def read_lock(self, key: str) -> LockInfo | None:
        return await self.locks.read_lock(key)

    async def list_locks(self, prefix: str = "", limit: int = 1000) -> list[LockInfo]:
        return await self.locks.list_locks(prefix, limit)

    async def break_lock(self, key: str) -> LockInfo | None:
        return await self.locks.break_lock(key)

    async def read_documents(self, names: Sequence[str]) -> list[str | None]:
        await yield_once()
        return [self.documents.get(name) for name in names]

    async def documents_under(self, prefix: str) -> dict[str, str]:
        await yield_once()
        return {n: d for n, d in self.documents.items() if n.startswith(prefix)}

    async def swap_document(self, name: str, expected: str | None, document: str | None) -> bool:
        for marker, event in self.held_swaps.items():
            if document is not None and marker in document:
                await event.wait()
        await yield_once()
        if self.documents.get(name) != expected:
            return False
        self.swaps += 1
        if document is None:
            self.documents.pop(name, None)
        else:
            self.documents[name] = document
        return True


STORES: list[DocumentedMemoryStore] = []


def make_store() -> DocumentedMemoryStore:
    STORES.append(DocumentedMemoryStore())
    return STORES[-1]


JOB_CONTROL_CASES = [
    case
    for case in lock_store_contract(make_store, concurrent={"callers": 32})
    if JOB_CONTROL in case.requires
]


def test_every_job_control_case_is_run() -> None:
    names = {case.name for case in JOB_CONTROL_CASES}
    assert {"start_and_end_of_runs", "pauses_stop_starts", "one_start_wins"} <= names
    assert "busy_starts_buffer_or_replace" in names


@pytest.mark.parametrize("case", JOB_CONTROL_CASES, ids=lambda case: case.name)
def test_job_control_on_documents(case: ContractCase) -> None:
    STORES.clear()
    asyncio.run(case.run())
    # the documents did the work: the case wrote job state or pauses through swaps
    assert STORES[-1].swaps > 0


def start(instance: str, *, minute: int, when_busy: WhenBusy = "skip") -> RunStart:
    opened = OpenRun(instance, None, STARTED.replace(minute=minute))
    return RunStart(
        "nightly",
        opened,
        take_key="nightly:run",
        owner=f"owner-{instance}",
        ttl_ms=60_000,
        when_busy=when_busy,
    )


def test_a_closed_run_leaves_no_document() -> None:
    """A job with nothing to say (no open run, streak, missed tick) keeps no document."""

    async def scenario() -> None:
        store = DocumentedMemoryStore()
        answer = await store.start_run(start("a", minute=0))
        assert isinstance(answer.taken, Acquired)
        assert store.documents.keys() == {"job:nightly"}
        run = RunRecord("nightly", "a", answer.taken.fencing_token, STARTED, STARTED, "ok", None)
        assert await store.end_run(run) is False
        assert store.documents == {}
        assert await store.job_states() == []

    asyncio.run(scenario())


def test_a_replaced_start_writing_last_leaves_the_replacing_run_open() -> None:
    """Start A takes the run lock; B replaces it and writes its open run before A writes its own.

    A's late write must not make A's run the open one: B holds the lock, with the greater token.
    """

    async def scenario() -> None:
        store = DocumentedMemoryStore()
        store.held_swaps["first-instance"] = asyncio.Event()
        first = asyncio.create_task(store.start_run(start("first-instance", minute=1)))
        while not await store.read_lock("nightly:run"):
            await yield_once()
        replacing = await store.start_run(start("second-instance", minute=2, when_busy="replace"))
        store.held_swaps["first-instance"].set()
        replaced = await first
        assert isinstance(replaced.taken, Acquired)
        assert isinstance(replacing.taken, Acquired)
        assert replacing.taken.fencing_token > replaced.taken.fencing_token
        (state,) = await store.job_states(["nightly"])
        assert state.open_run is not None
        assert state.open_run.instance == "second-instance"
        assert state.open_run.fencing_token == replacing.taken.fencing_token

    asyncio.run(scenario())
