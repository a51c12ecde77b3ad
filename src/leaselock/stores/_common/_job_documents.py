"""Job control written once, over a store's small document capability and its own locks.

A store that keeps short text documents under names, and swaps one only if it still holds what
was read (:class:`KeepsJobDocuments`), gets every :class:`~._job_control.SupportsJobControl`
method from :class:`JobControlOnDocuments`: pauses are one document per target, and each job's
state (its open run, failure streak, missed tick and noted trigger) one document per job, read
and swapped until the swap finds what was read. The run lock itself is the store's own
``acquire`` (and ``break_lock`` to replace a holder), so its tokens and expiry are the lock's.

What it gives up against a store's own one-round-trip ``start_run``: a start is three parallel
reads, the acquire, and the swap, instead of one step. A pause put between the reads and the
acquire does not stop that start (it counts as put after it). An instance killed between its
acquire and its swap holds the run lock without an open run: nobody reports that run as
abandoned, and its lock expires with its ttl as every other lock does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final, Protocol, final

from ..._errors import LockStoreError
from ._capabilities import JobRecord, LockInfo, RunRecord, epoch_ms, from_epoch_ms
from ._job_control import (
    JobPause,
    JobState,
    OpenRun,
    RunStart,
    RunStartAnswer,
    TickRun,
    open_run_fields,
    open_run_from_fields,
    pause_from_json,
    pause_json,
    pause_matches,
    refusing_tick,
    tick_run_fields,
    tick_run_from_fields,
)
from ._protocol import AcquireResult, NotAcquired

__all__ = [
    "JOB_PREFIX",
    "PAUSE_PREFIX",
    "JobControlOnDocuments",
    "KeepsJobDocuments",
]

PAUSE_PREFIX: Final = "pause:"
JOB_PREFIX: Final = "job:"
# a swap that keeps finding another writer's change: far more than racing starts of one job take
# (each lost swap means another caller's swap went through), far fewer than a hung caller would
_MAX_SWAPS: Final = 1_000


class KeepsJobDocuments(Protocol):
    """What a store gives :class:`JobControlOnDocuments`: its locks, run records and documents.

    Documents are UTF-8 text under names (``"pause:<target>"``, ``"job:<key>"``), kept as
    durably as the store keeps its locks.
    """

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        """Take ``key``, as :meth:`~leaselock.stores.LockStore.acquire`."""
        ...

    async def release(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` holds it, as :meth:`~leaselock.stores.LockStore.release`."""
        ...

    async def break_lock(self, key: str) -> LockInfo | None:
        """Free ``key`` whoever holds it, as ``SupportsInspection.break_lock``."""
        ...

    async def record_run(self, run: RunRecord) -> None:
        """Keep ``run``, as ``SupportsRunRecords.record_run``."""
        ...

    async def job_records(self, jobs: Sequence[str] | None = None) -> list[JobRecord]:
        """Return the jobs' records, as ``SupportsRunRecords.job_records``."""
        ...

    async def read_documents(self, names: Sequence[str]) -> list[str | None]:
        """Return the document of each name in ``names``, in order; ``None`` where there is none.

        One round trip.
        """
        ...

    async def documents_under(self, prefix: str) -> dict[str, str]:
        """Return every document whose name starts with ``prefix``, by name. One round trip."""
        ...

    async def swap_document(self, name: str, expected: str | None, document: str | None) -> bool:
        """Make ``document`` the one under ``name`` (``None``: remove it) if ``expected`` is.

        Atomic: it writes only while the document under ``name`` is ``expected`` (``None``:
        there is none), and answers whether it wrote. One round trip.
        """
        ...


@final
class _Unread:
    """A document not read yet (``None`` would say there is none)."""


_UNREAD: Final = _Unread()


@dataclass(frozen=True, slots=True)
class _Kept:
    """A job's state as its document keeps it."""

    open_run: OpenRun | None = None
    failures: int = 0
    missed_at_ms: int | None = None
    buffered: bool = False
    last_tick: TickRun | None = None

    @classmethod
    def of(cls, text: str | None) -> _Kept:
        if text is None:
            return cls()
        kept = json.loads(text)
        opened = kept.get("open_run")
        missed = kept.get("missed_at_ms")
        ticked = kept.get("last_tick")
        return cls(
            open_run=None if opened is None else open_run_from_fields(opened),
            failures=int(kept.get("failures") or 0),
            missed_at_ms=None if missed is None else int(missed),
            buffered=bool(kept.get("buffered")),
            last_tick=None if ticked is None else tick_run_from_fields(ticked),
        )

    def text(self) -> str | None:
        """The document, or ``None`` when there is nothing to keep (the document goes)."""
        if self == _Kept():
            return None
        opened, ticked = self.open_run, self.last_tick
        return json.dumps(
            {
                "open_run": None
                if opened is None
                else open_run_fields(opened, opened.fencing_token),
                "failures": self.failures,
                "missed_at_ms": self.missed_at_ms,
                "buffered": self.buffered,
                "last_tick": None
                if ticked is None
                else tick_run_fields(ticked.at, ticked.instance, ticked.fencing_token),
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )

    def state(self, job: str) -> JobState:
        missed = None if self.missed_at_ms is None else from_epoch_ms(self.missed_at_ms)
        return JobState(job, self.open_run, self.failures, missed, self.last_tick)


class JobControlOnDocuments:
    """``SupportsJobControl`` for a store that :class:`KeepsJobDocuments`: mix it in.

    Each method says what it costs in round trips; none holds anything between them, so any
    number of instances and processes may call at once (a swap that finds another's change
    reads again and decides again).
    """

    # no instance dict of its own: the stores that mix it in keep their __slots__
    __slots__ = ()

    async def start_run(self: KeepsJobDocuments, start: RunStart) -> RunStartAnswer:
        """Start a run unless paused, taking its lock if asked; see ``SupportsJobControl``.

        Three reads at once (pauses, the job's state, its records), the run lock's acquire
        when asked, and the state's swap: three round trips in a row (more when a racing
        start's swap comes first). The swap decides a tick: a start whose swap finds its tick
        run meanwhile releases the run lock it took (one round trip more) and is refused.
        """
        name = JOB_PREFIX + start.job
        pauses, (text,), records = await asyncio.gather(
            self.documents_under(PAUSE_PREFIX),
            self.read_documents([name]),
            self.job_records([start.job]),
        )
        before = _Kept.of(text)
        last_run = records[0].last_run if records else None
        answer = RunStartAnswer(None, None, before.open_run, last_run, before.failures)
        paused = (
            None
            if start.ignore_pause
            else _live_pause(pauses, start.job, start.open_run.started_at)
        )
        if paused is not None or _ran(before, start) is not None:
            return replace(answer, pause=paused, tick_ran=None if paused else _ran(before, start))
        taken: AcquireResult | None = None
        token = start.open_run.fencing_token
        if start.take_key is not None:
            taken = await _take(self, start)
            if isinstance(taken, NotAcquired):
                if start.when_busy == "buffer":
                    await _change(self, name, lambda kept: replace(kept, buffered=True), text)
                return replace(answer, taken=taken)
            token = taken.fencing_token
        opened = replace(start.open_run, fencing_token=token)
        before = await _open(self, name, start, opened, text)
        ran = _ran(before, start)
        if ran is not None and start.take_key is not None:
            await self.release(start.take_key, start.owner)
        if ran is not None:
            return replace(answer, open_run=before.open_run, tick_ran=ran)
        return replace(answer, taken=taken)

    async def end_run(self: KeepsJobDocuments, run: RunRecord) -> bool:
        """Record ``run``, close it if it is the open run, count the streak; see the protocol.

        The record's write, then the state's read and swap.
        """
        await self.record_run(run)

        def close_it(kept: _Kept) -> _Kept:
            failures = {"ok": 0, "error": kept.failures + 1}.get(run.outcome, kept.failures)
            opened = kept.open_run
            if (
                opened is not None
                and opened.fencing_token == run.fencing_token
                and opened.started_at == run.started_at
            ):
                return replace(kept, open_run=None, failures=failures, buffered=False)
            return replace(kept, failures=failures)

        before, after = await _change(self, JOB_PREFIX + run.job, close_it)
        # closed by this end: a trigger noted while it ran is the caller's to run
        return before.buffered and before.open_run is not None and after.open_run is None

    async def note_missed(self: KeepsJobDocuments, job: str, missed_at: datetime) -> None:
        """Record that the tick of ``missed_at`` of ``job`` was never started (read, swap)."""
        await _change(
            self, JOB_PREFIX + job, lambda kept: replace(kept, missed_at_ms=epoch_ms(missed_at))
        )

    async def pause_jobs(self: KeepsJobDocuments, pause: JobPause) -> None:
        """Keep ``pause``, replacing any pause of its target (read, swap)."""
        await _swap(self, PAUSE_PREFIX + pause.target, lambda _: pause_json(pause))

    async def resume_jobs(self: KeepsJobDocuments, target: str) -> JobPause | None:
        """Remove the pause of ``target``; return it, or ``None`` (read, swap)."""
        removed, _ = await _swap(self, PAUSE_PREFIX + target, lambda _: None)
        return None if removed is None else pause_from_json(target, removed)

    async def job_pauses(self: KeepsJobDocuments) -> list[JobPause]:
        """Return every pause kept, by target (one read)."""
        kept = await self.documents_under(PAUSE_PREFIX)
        return [pause_from_json(name[len(PAUSE_PREFIX) :], kept[name]) for name in sorted(kept)]

    async def job_states(
        self: KeepsJobDocuments, jobs: Sequence[str] | None = None
    ) -> list[JobState]:
        """Return the states of ``jobs`` (every job when ``None``) that have one, by job."""
        if jobs is None:
            kept = await self.documents_under(JOB_PREFIX)
            found = {name[len(JOB_PREFIX) :]: text for name, text in kept.items()}
        else:
            wanted = sorted(set(jobs))
            texts = await self.read_documents([JOB_PREFIX + job for job in wanted])
            found = {job: text for job, text in zip(wanted, texts, strict=True) if text}
        states = (_Kept.of(found[job]).state(job) for job in sorted(found))
        return [state for state in states if state.worth_listing]


async def _take(store: KeepsJobDocuments, start: RunStart) -> AcquireResult:
    """Acquire the run lock; with ``when_busy="replace"``, break whoever holds it until taken."""
    assert start.take_key is not None  # noqa: S101 -- the caller checked
    taken = await store.acquire(start.take_key, start.owner, start.ttl_ms)
    for _ in range(_MAX_SWAPS):
        if not isinstance(taken, NotAcquired) or start.when_busy != "replace":
            return taken
        # another replacing start may take it between the break and the acquire: break it too
        await store.break_lock(start.take_key)
        taken = await store.acquire(start.take_key, start.owner, start.ttl_ms)
    raise _contended(start.take_key)


async def _change(
    store: KeepsJobDocuments,
    name: str,
    change: Callable[[_Kept], _Kept],
    read: str | _Unread | None = _UNREAD,
) -> tuple[_Kept, _Kept]:
    """Apply ``change`` to the job state under ``name``; return the state before and after."""
    before, after = await _swap(store, name, lambda text: change(_Kept.of(text)).text(), read)
    return _Kept.of(before), _Kept.of(after)


async def _swap(
    store: KeepsJobDocuments,
    name: str,
    change: Callable[[str | None], str | None],
    read: str | _Unread | None = _UNREAD,
) -> tuple[str | None, str | None]:
    """Write ``change(document)`` under ``name`` until no other writer came between.

    ``read`` is the document as the caller read it, if it did: a swap on it costs no read more
    (one that changed since fails, and the document is read again). Returns the document before
    and after the write that went through.
    """
    (text,) = await store.read_documents([name]) if isinstance(read, _Unread) else (read,)
    for _ in range(_MAX_SWAPS):
        document = change(text)
        if document == text or await store.swap_document(name, text, document):
            return text, document
        (text,) = await store.read_documents([name])
    raise _contended(name)


def _live_pause(pauses: dict[str, str], job: str, now: datetime) -> JobPause | None:
    for name in sorted(pauses):
        target = name[len(PAUSE_PREFIX) :]
        if pause_matches(target, job):
            pause = pause_from_json(target, pauses[name])
            if pause.live(now):
                return pause
    return None


async def _open(
    store: KeepsJobDocuments, name: str, start: RunStart, opened: OpenRun, read: str | None
) -> _Kept:
    """Make ``opened`` the job's open run and keep its tick, unless the tick ran meanwhile.

    Returns the state before the swap: its last tick refuses ``start`` if the swap found it.
    """
    ticked = (
        None if start.tick is None else TickRun(start.tick, opened.instance, opened.fencing_token)
    )

    def open_it(kept: _Kept) -> _Kept:
        if _ran(kept, start) is not None:
            return kept
        if ticked is not None:
            kept = replace(kept, last_tick=ticked)
        running = kept.open_run
        if running is not None and _token(running) > _token(opened):
            # a start that replaced this one's run lock wrote first: its run is the open one
            return kept
        return replace(kept, open_run=opened, buffered=False)

    before, _ = await _change(store, name, open_it, read)
    return before


def _ran(kept: _Kept, start: RunStart) -> TickRun | None:
    """The job's last started tick if it refuses ``start``."""
    return refusing_tick(start, kept.last_tick)


def _token(run: OpenRun) -> int:
    return -1 if run.fencing_token is None else run.fencing_token


def _contended(name: str) -> LockStoreError:
    return LockStoreError(
        f"job control gave up on {name!r}: {_MAX_SWAPS} writes in a row found another "
        "caller's change first; something rewrites it in a loop (look for a client writing "
        "leaselock's job documents other than leaselock)"
    )
