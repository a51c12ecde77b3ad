"""OperatorStore: the store calls beside locking (run records; reading and breaking locks).

Each is bounded on the injected clock and reported as leaselock's own errors: a store without a
capability is refused with a message naming what it lacks; a store that fails, hangs or answers
out of shape raises :class:`LockStoreError`, never the driver's error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Final, TypeVar, final

from .._errors import LocksConfigurationError, LockStoreError
from ..stores._common._capabilities import (
    JobRecord,
    LockInfo,
    RunRecord,
    SupportsInspection,
    SupportsRunRecords,
)
from ..stores._common._job_control import (
    JobPause,
    JobState,
    RunStart,
    RunStartAnswer,
    SupportsJobControl,
)
from ..stores._common._protocol import Acquired, LockStore, NotAcquired
from ..stores._common._store_clock import SupportsStoreClock
from ._bounded import StoreCallBounds, StoreCallTimeoutError
from ._checked_store import AcquireCall

__all__ = ["OPERATOR_BOUND_MS", "OperatorStore"]

OPERATOR_BOUND_MS: Final = 5000
"""How long an operator's or a run record's store call may take before it fails."""

T = TypeVar("T")


@final
class OperatorStore:
    """The run-record and inspection calls of one store."""

    __slots__ = ("_bounds", "_clock", "_store")

    def __init__(self, store: LockStore, bounds: StoreCallBounds) -> None:
        """Call ``store``, every call within a bound of ``bounds``."""
        self._store = store
        self._bounds = bounds
        self._clock = bounds.clock

    @property
    def keeps_run_records(self) -> bool:
        """Whether the store has ``record_run`` and ``job_records``."""
        return isinstance(self._store, SupportsRunRecords)

    @property
    def keeps_job_control(self) -> bool:
        """Whether the store keeps pauses and open runs (``start_run`` and the rest)."""
        return isinstance(self._store, SupportsJobControl)

    @property
    def can_inspect(self) -> bool:
        """Whether the store has ``read_lock``, ``list_locks`` and ``break_lock``."""
        return isinstance(self._store, SupportsInspection)

    @property
    def shows_its_clock(self) -> bool:
        """Whether the store reads its server's wall clock (``store_time_ms``)."""
        return isinstance(self._store, SupportsStoreClock)

    async def store_time_ms(self) -> int:
        """Return the store's wall clock now, in milliseconds since the epoch.

        Raises:
            LocksConfigurationError: the store shows no clock.
            LockStoreError: the store failed, did not answer in time, or answered out of shape.
        """
        store = self._store
        if not isinstance(store, SupportsStoreClock):
            raise LocksConfigurationError(f"{store!r} shows no clock of its own (store_time_ms)")
        read = await self._call("store_time_ms", store.store_time_ms)
        if type(read) is not int:
            raise self._out_of_shape("store_time_ms", read, "an int")
        return read

    async def record_run(self, run: RunRecord) -> None:
        """Keep ``run`` in the store.

        Raises:
            LocksConfigurationError: the store keeps no run records.
            LockStoreError: the store failed or did not answer in time.
        """
        store = self._run_records()
        await self._call("record_run", lambda: store.record_run(run))

    async def job_records(self, jobs: Sequence[str] | None) -> list[JobRecord]:
        """Return the records of ``jobs`` (every job when ``None``).

        Raises:
            LocksConfigurationError: the store keeps no run records.
            LockStoreError: the store failed, did not answer in time, or answered out of shape.
        """
        store = self._run_records()
        records = await self._call("job_records", lambda: store.job_records(jobs))
        return self._list_of("job_records", records, JobRecord)

    async def read_lock(self, key: str) -> LockInfo | None:
        """Return ``key``'s lock as the store sees it, or ``None``.

        Raises:
            LocksConfigurationError: the store cannot be inspected.
            LockStoreError: the store failed, did not answer in time, or answered out of shape.
        """
        store = self._inspection()
        return self._one_lock(
            "read_lock", await self._call("read_lock", lambda: store.read_lock(key))
        )

    async def list_locks(self, prefix: str, limit: int) -> list[LockInfo]:
        """Return up to ``limit`` locks whose key starts with ``prefix``.

        Raises:
            LocksConfigurationError: the store cannot be inspected.
            LockStoreError: the store failed, did not answer in time, or answered out of shape.
        """
        store = self._inspection()
        found = await self._call("list_locks", lambda: store.list_locks(prefix, limit))
        return self._list_of("list_locks", found, LockInfo)

    async def break_lock(self, key: str) -> LockInfo | None:
        """Free ``key`` whoever holds it; return what held it.

        Raises:
            LocksConfigurationError: the store cannot be inspected.
            LockStoreError: the store failed, did not answer in time, or answered out of shape.
        """
        store = self._inspection()
        broken = await self._call("break_lock", lambda: store.break_lock(key))
        return self._one_lock("break_lock", broken)

    def starter(self, start: RunStart, answers: list[RunStartAnswer]) -> AcquireCall:
        """Return an acquire that starts ``start``, taking the lock it is called with.

        The engine bounds and checks it as an acquire; the store's whole answer is appended to
        ``answers``. Where a pause or its tick's earlier start stopped it, it answers
        ``NotAcquired()``.

        Raises:
            LocksConfigurationError: the store keeps no job control.
        """
        store = self._job_control()

        async def acquire(key: str, owner: str, ttl_ms: int) -> Acquired | NotAcquired:
            taking = replace(start, take_key=key, owner=owner, ttl_ms=ttl_ms)
            answer = await store.start_run(taking)
            if not isinstance(answer, RunStartAnswer):
                raise self._out_of_shape("start_run", answer, "a RunStartAnswer")
            answers.append(answer)
            return NotAcquired() if answer.taken is None else answer.taken

        return acquire

    async def start_run(self, start: RunStart) -> RunStartAnswer:
        """Start a run that takes no lock (its lease is held); see ``SupportsJobControl``.

        Raises:
            LocksConfigurationError: the store keeps no job control.
            LockStoreError: the store failed, did not answer in time, or answered out of shape.
        """
        store = self._job_control()
        answer = await self._call("start_run", lambda: store.start_run(start))
        if not isinstance(answer, RunStartAnswer):
            raise self._out_of_shape("start_run", answer, "a RunStartAnswer")
        return answer

    async def end_run(self, run: RunRecord) -> bool:
        """Record ``run``'s end and close it (job control); see ``SupportsJobControl``.

        Returns whether a trigger was noted during it (the job runs once more).

        Raises:
            LocksConfigurationError: the store keeps no job control.
            LockStoreError: the store failed, did not answer in time, or answered out of shape.
        """
        store = self._job_control()
        served = await self._call("end_run", lambda: store.end_run(run))
        if not isinstance(served, bool):
            raise self._out_of_shape("end_run", served, "True or False")
        return served

    async def note_missed(self, job: str, missed_at: datetime) -> None:
        """Record a missed tick of ``job``.

        Raises:
            LocksConfigurationError: the store keeps no job control.
            LockStoreError: the store failed or did not answer in time.
        """
        store = self._job_control()
        await self._call("note_missed", lambda: store.note_missed(job, missed_at))

    async def pause_jobs(self, pause: JobPause) -> None:
        """Keep ``pause``.

        Raises:
            LocksConfigurationError: the store keeps no job control.
            LockStoreError: the store failed or did not answer in time.
        """
        store = self._job_control()
        await self._call("pause_jobs", lambda: store.pause_jobs(pause))

    async def resume_jobs(self, target: str) -> JobPause | None:
        """Remove the pause of ``target``; return it.

        Raises:
            LocksConfigurationError: the store keeps no job control.
            LockStoreError: the store failed, did not answer in time, or answered out of shape.
        """
        store = self._job_control()
        removed = await self._call("resume_jobs", lambda: store.resume_jobs(target))
        if removed is not None and not isinstance(removed, JobPause):
            raise self._out_of_shape("resume_jobs", removed, "a JobPause or None")
        return removed

    async def job_pauses(self) -> list[JobPause]:
        """Return every pause kept.

        Raises:
            LocksConfigurationError: the store keeps no job control.
            LockStoreError: the store failed, did not answer in time, or answered out of shape.
        """
        store = self._job_control()
        found = await self._call("job_pauses", store.job_pauses)
        return self._list_of("job_pauses", found, JobPause)

    async def job_states(self, jobs: Sequence[str] | None) -> list[JobState]:
        """Return the states of ``jobs`` (every job when ``None``).

        Raises:
            LocksConfigurationError: the store keeps no job control.
            LockStoreError: the store failed, did not answer in time, or answered out of shape.
        """
        store = self._job_control()
        found = await self._call("job_states", lambda: store.job_states(jobs))
        return self._list_of("job_states", found, JobState)

    def _job_control(self) -> SupportsJobControl:
        if not isinstance(self._store, SupportsJobControl):
            raise LocksConfigurationError(
                f"{self._store!r} cannot pause jobs or keep their open runs (it has no "
                "start_run(), end_run() and the pause methods of "
                "leaselock.stores.SupportsJobControl); every shipped store can, or add them to "
                "this store (docs/stores/writing-a-store.md)"
            )
        return self._store

    def _run_records(self) -> SupportsRunRecords:
        if not isinstance(self._store, SupportsRunRecords):
            raise LocksConfigurationError(
                f"{self._store!r} keeps no job run records (it has no record_run() and "
                "job_records()); every shipped store keeps them, or add them to this store "
                "(docs/stores/writing-a-store.md)"
            )
        return self._store

    def _inspection(self) -> SupportsInspection:
        if not isinstance(self._store, SupportsInspection):
            raise LocksConfigurationError(
                f"{self._store!r} cannot show or break its locks (it has no read_lock(), "
                "list_locks() and break_lock()); every shipped store can, or add them to this "
                "store (docs/stores/writing-a-store.md)"
            )
        return self._store

    async def _call(self, method: str, work: Callable[[], Awaitable[T]]) -> T:
        try:
            with self._bounds.until(self._clock.now_ms() + OPERATOR_BOUND_MS):
                return await work()
        except StoreCallTimeoutError:
            raise LockStoreError(
                f"{self._store!r} did not answer {method}() within {OPERATOR_BOUND_MS} ms; "
                "check that its server is reachable"
            ) from None
        except (asyncio.CancelledError, LockStoreError, LocksConfigurationError):
            raise
        except Exception as error:
            raise LockStoreError(
                f"{self._store!r}.{method} failed: {type(error).__name__}: {error}. Check that "
                "the store's server is reachable"
            ) from error

    def _one_lock(self, method: str, answer: object) -> LockInfo | None:
        if answer is not None and not isinstance(answer, LockInfo):
            raise self._out_of_shape(method, answer, "a LockInfo or None")
        return answer

    def _list_of(self, method: str, answer: object, kind: type[T]) -> list[T]:
        if not isinstance(answer, list) or not all(isinstance(item, kind) for item in answer):
            raise self._out_of_shape(method, answer, f"a list of {kind.__name__}")
        return answer

    def _out_of_shape(self, method: str, answer: object, expected: str) -> LockStoreError:
        return LockStoreError(
            f"{self._store!r}.{method} returned {answer!r} ({type(answer).__name__}); return "
            f"{expected}"
        )
