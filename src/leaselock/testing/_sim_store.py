"""InstanceStore: one simulated instance's connection to the shared store, which a pause holds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TypeVar, final

from ..stores._common._capabilities import JobRecord, LockInfo, RunRecord
from ..stores._common._job_control import JobPause, JobState, RunStart, RunStartAnswer
from ..stores._common._protocol import Acquired, AcquireResult, Grant, Queued, WaitingLine
from ._faulty import FaultyStore

__all__ = ["InstanceStore"]

T = TypeVar("T")


@final
class InstanceStore:
    """The shared store, as one instance (one process) reaches it.

    Every call goes on to the simulation's :class:`FaultyStore` (its faults apply to every
    instance), and its answer comes back, unless the instance is frozen: then the answer, or
    the error, waits until it thaws, as an answer waits in a paused process's socket buffer. A
    grant of the store's waiting lines waits the same way. The store itself goes on meanwhile:
    a request already sent is applied, and leases expire.

    Each instance's store is an object of its own, so a release wakes the waiters of the
    instance that released in-process, and no other: other processes hear of it through the
    store, as they would in production (the in-memory store tells no one).
    """

    __slots__ = ("_held_answers", "_held_grants", "_inner")

    def __init__(self, inner: FaultyStore) -> None:
        """Reach ``inner``, the store every instance shares."""
        self._inner = inner
        # None: answers pass at once; a list: frozen, the answers and grants waiting in order
        self._held_answers: list[asyncio.Future[None]] | None = None
        self._held_grants: list[tuple[Callable[[Grant], None], Grant]] = []

    def freeze(self) -> None:
        """Hold every answer and grant that arrives from now on, until :meth:`thaw`."""
        if self._held_answers is None:
            self._held_answers = []

    def thaw(self) -> None:
        """Deliver what was held, answers first, each in the order it arrived."""
        held, self._held_answers = self._held_answers or [], None
        for waiting in held:
            if not waiting.done():
                waiting.set_result(None)
        grants, self._held_grants = self._held_grants, []
        for on_grant, grant in grants:
            on_grant(grant)

    async def _answer(self, call: Awaitable[T]) -> T:
        try:
            answer = await call
        except asyncio.CancelledError:
            # a cancellation comes from the instance itself (its bound on the call), never
            # while it is frozen
            raise
        except BaseException:
            await self._delivered()
            raise
        await self._delivered()
        return answer

    async def _delivered(self) -> None:
        if self._held_answers is None:
            return
        waiting = asyncio.get_running_loop().create_future()
        self._held_answers.append(waiting)
        await waiting

    # --- the store contract --------------------------------------------------------------------

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        """Acquire through the shared store."""
        return await self._answer(self._inner.acquire(key, owner, ttl_ms))

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Renew through the shared store."""
        return await self._answer(self._inner.renew(key, owner, ttl_ms))

    async def release(self, key: str, owner: str) -> bool:
        """Release through the shared store."""
        return await self._answer(self._inner.release(key, owner))

    # --- job control and run records, which the jobs use ----------------------------------------

    async def start_run(self, start: RunStart) -> RunStartAnswer:
        """Start a run through the shared store."""
        return await self._answer(self._inner.start_run(start))

    async def end_run(self, run: RunRecord) -> bool:
        """End a run through the shared store."""
        return await self._answer(self._inner.end_run(run))

    async def note_missed(self, job: str, missed_at: datetime) -> None:
        """Note a missed tick through the shared store."""
        await self._answer(self._inner.note_missed(job, missed_at))

    async def pause_jobs(self, pause: JobPause) -> None:
        """Pause jobs through the shared store."""
        await self._answer(self._inner.pause_jobs(pause))

    async def resume_jobs(self, target: str) -> JobPause | None:
        """Resume jobs through the shared store."""
        return await self._answer(self._inner.resume_jobs(target))

    async def job_pauses(self) -> list[JobPause]:
        """Read the pauses through the shared store."""
        return await self._answer(self._inner.job_pauses())

    async def job_states(self, jobs: Sequence[str] | None = None) -> list[JobState]:
        """Read the jobs' states through the shared store."""
        return await self._answer(self._inner.job_states(jobs))

    async def record_run(self, run: RunRecord) -> None:
        """Record a run through the shared store."""
        await self._answer(self._inner.record_run(run))

    async def job_records(self, jobs: Sequence[str] | None = None) -> list[JobRecord]:
        """Read run records through the shared store."""
        return await self._answer(self._inner.job_records(jobs))

    # --- inspection, for setups that use the operator's calls ------------------------------------

    async def read_lock(self, key: str) -> LockInfo | None:
        """Read a lock through the shared store."""
        return await self._answer(self._inner.read_lock(key))

    async def list_locks(self, prefix: str = "", limit: int = 1000) -> list[LockInfo]:
        """List locks through the shared store."""
        return await self._answer(self._inner.list_locks(prefix, limit))

    async def break_lock(self, key: str) -> LockInfo | None:
        """Break a lock through the shared store."""
        return await self._answer(self._inner.break_lock(key))

    # --- waiting lines ---------------------------------------------------------------------------

    @asynccontextmanager
    async def wait_in_line(
        self, on_grant: Callable[[Grant], None]
    ) -> AsyncIterator[WaitingLine | None]:
        """Wait in the shared store's lines; a grant heard while frozen waits for the thaw."""

        def heard(grant: Grant) -> None:
            if self._held_answers is None:
                on_grant(grant)
            else:
                self._held_grants.append((on_grant, grant))

        async with self._inner.wait_in_line(heard) as line:
            yield None if line is None else _Line(line, self)

    def __repr__(self) -> str:
        """Name the shared store."""
        return f"InstanceStore({self._inner!r})"


@final
class _Line:
    """The shared store's waiting line, its answers held as the instance's other answers."""

    __slots__ = ("_line", "_store")

    def __init__(self, line: WaitingLine, store: InstanceStore) -> None:
        self._line = line
        self._store = store

    async def queue(
        self, key: str, owner: str, ttl_ms: int, queue_ms: int, ticket: int
    ) -> Acquired | Queued:
        """Queue in the shared line."""
        return await self._store._answer(  # noqa: SLF001 -- the line belongs to its store
            self._line.queue(key, owner, ttl_ms, queue_ms, ticket)
        )

    async def leave(self, key: str, owner: str) -> bool:
        """Leave the shared line."""
        return await self._store._answer(self._line.leave(key, owner))  # noqa: SLF001 -- as above
