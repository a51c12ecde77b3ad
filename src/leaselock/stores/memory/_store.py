"""InMemoryLockStore: the reference semantics of the store contract, for one process."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import final

from ..._clock import Clock, SystemClock
from .._common._capabilities import JobRecord, LockInfo, RunRecord, with_run
from .._common._job_control import (
    JobPause,
    JobState,
    RunStart,
    RunStartAnswer,
    TickRun,
    pause_matches,
    refusing_tick,
)
from .._common._protocol import (
    Acquired,
    AcquireResult,
    Grant,
    NotAcquired,
    Queued,
    Renewal,
    WaitingLine,
)

__all__ = ["InMemoryLockStore"]


@dataclass(slots=True)
class _Row:
    owner: str
    expires_at_ms: int
    fencing_token: int


@dataclass(slots=True)
class _Place:
    expires_at_ms: int
    ticket: int
    line: _MemoryLine


@final
class InMemoryLockStore:
    """Locks in a dict: they exclude callers in ONE process only.

    Every method runs without an ``await`` between its check and its write, under a thread lock,
    so each is atomic, even for several event loops in one process (``SyncLocks`` runs one).
    Tokens come from one counter that only grows, so a released key's row can be dropped without
    any risk of a token coming back.

    Use it for tests and single-process programs. Several processes (gunicorn workers, replicas)
    need a shared store: :class:`~leaselock.stores.SQLiteLockStore` on one host,
    :class:`~leaselock.stores.PostgresLockStore` or :class:`~leaselock.stores.RedisLockStore`
    across hosts.

    .. versionadded:: 0.1
    """

    __slots__ = (
        "_buffered",
        "_clock",
        "_guard",
        "_jobs",
        "_last_token",
        "_lines",
        "_pauses",
        "_rows",
        "_states",
    )

    def __init__(self, *, clock: Clock | None = None) -> None:
        """Create an empty store whose expiries are measured on ``clock``.

        Args:
            clock: the store's clock; pass the :class:`~leaselock.testing.ManualClock` of a test
                so that expiries move with it. Defaults to the system's monotonic clock.
        """
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._rows: dict[str, _Row] = {}
        # each key's line of waiters, first come first: owner -> place (a dict keeps the order)
        self._lines: dict[str, dict[str, _Place]] = {}
        self._last_token = 0
        self._jobs: dict[str, JobRecord] = {}
        self._states: dict[str, JobState] = {}
        self._pauses: dict[str, JobPause] = {}
        self._buffered: set[str] = set()
        self._guard = threading.Lock()

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        """Take ``key`` if no live lock holds it; the token is greater than any it had."""
        with self._guard:
            return self._acquire(key, owner, ttl_ms)

    def _acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        now_ms = self._clock.now_ms()
        row = self._rows.get(key)
        if row is not None and row.expires_at_ms > now_ms:
            return NotAcquired(holder=row.owner)
        self._last_token += 1
        self._rows[key] = _Row(owner, now_ms + ttl_ms, self._last_token)
        return Acquired(self._last_token)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Move the expiry to ``ttl_ms`` from now if ``owner`` holds a live lock on ``key``."""
        with self._guard:
            now_ms = self._clock.now_ms()
            row = self._rows.get(key)
            if row is None or row.owner != owner or row.expires_at_ms <= now_ms:
                return False
            row.expires_at_ms = now_ms + ttl_ms
            return True

    async def renew_many(self, renewals: Sequence[Renewal]) -> list[bool]:
        """Renew each lease as :meth:`renew` would, in order."""
        return [await self.renew(key, owner, ttl_ms) for key, owner, ttl_ms in renewals]

    async def release(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` holds a live lock on it."""
        with self._guard:
            row = self._rows.get(key)
            now_ms = self._clock.now_ms()
            if row is None or row.owner != owner or row.expires_at_ms <= now_ms:
                return False
            del self._rows[key]
            self._hand_on(key, now_ms)
            return True

    @asynccontextmanager
    async def wait_in_line(self, on_grant: Callable[[Grant], None]) -> AsyncIterator[WaitingLine]:
        """Wait in keys' lines while entered; ``on_grant`` hears each grant on this loop.

        Leaving gives up every place the line still has.
        """
        line = _MemoryLine(self, asyncio.get_running_loop(), on_grant)
        try:
            yield line
        finally:
            with self._guard:
                for key in list(self._lines):
                    self._drop_places(key, lambda place: place.line is line)

    def _queue(
        self, key: str, owner: str, ttl_ms: int, queue_ms: int, ticket: int, *, line: _MemoryLine
    ) -> Acquired | Queued:
        with self._guard:
            now_ms = self._clock.now_ms()
            row = self._rows.get(key)
            if row is not None and row.expires_at_ms > now_ms and row.owner == owner:
                row.expires_at_ms = now_ms + ttl_ms
                return Acquired(row.fencing_token)
            places = self._live_places(key, now_ms)
            if row is None or row.expires_at_ms <= now_ms:
                if next(iter(places), owner) == owner:
                    places.pop(owner, None)
                    self._drop_empty_line(key)
                    self._last_token += 1
                    self._rows[key] = _Row(owner, now_ms + ttl_ms, self._last_token)
                    return Acquired(self._last_token)
                self._hand_on(key, now_ms)
                places = self._live_places(key, now_ms)
                row = self._rows[key]
            place = places.get(owner)
            if place is None:
                places[owner] = _Place(now_ms + queue_ms, ticket, line)
            else:
                place.expires_at_ms, place.ticket = now_ms + queue_ms, ticket
            return Queued(holder=row.owner)

    def _leave(self, key: str, owner: str) -> bool:
        with self._guard:
            self._lines.get(key, {}).pop(owner, None)
            self._drop_empty_line(key)
            now_ms = self._clock.now_ms()
            row = self._rows.get(key)
            if row is None or row.owner != owner or row.expires_at_ms <= now_ms:
                return False
            del self._rows[key]
            self._hand_on(key, now_ms)
            return True

    def _live_places(self, key: str, now_ms: int) -> dict[str, _Place]:
        """Return ``key``'s line (made if missing), its places whose time is up dropped."""
        self._drop_places(key, lambda place: place.expires_at_ms <= now_ms)
        return self._lines.setdefault(key, {})

    def _drop_places(self, key: str, dropped: Callable[[_Place], bool]) -> None:
        places = self._lines.get(key)
        if places is None:
            return
        for owner in [owner for owner, place in places.items() if dropped(place)]:
            del places[owner]
        self._drop_empty_line(key)

    def _drop_empty_line(self, key: str) -> None:
        if key in self._lines and not self._lines[key]:
            del self._lines[key]

    def _hand_on(self, key: str, now_ms: int) -> None:
        """Give the freed ``key`` to the first live place in its line, if one waits."""
        places = self._live_places(key, now_ms)
        if not places:
            self._drop_empty_line(key)
            return
        owner, place = next(iter(places.items()))
        del places[owner]
        self._drop_empty_line(key)
        self._last_token += 1
        self._rows[key] = _Row(owner, place.expires_at_ms, self._last_token)
        place.line.tell(Grant(key, owner, self._last_token, place.ticket))

    async def record_run(self, run: RunRecord) -> None:
        """Keep ``run`` as its job's last run, and as its last success if it went well."""
        with self._guard:
            self._jobs[run.job] = with_run(self._jobs.get(run.job), run)

    async def start_run(self, start: RunStart) -> RunStartAnswer:
        """Start a run unless paused, taking its lock if asked; see ``SupportsJobControl``."""
        with self._guard:
            before = self._states.get(start.job) or JobState(start.job, None, 0, None)
            record = self._jobs.get(start.job)
            last_run = None if record is None else record.last_run
            if not start.ignore_pause:
                paused = self._live_pause(start.job, start.open_run.started_at)
                if paused is not None:
                    return RunStartAnswer(None, paused, before.open_run, last_run, before.failures)
            ran = refusing_tick(start, before.last_tick)
            if ran is not None:
                return RunStartAnswer(
                    None, None, before.open_run, last_run, before.failures, tick_ran=ran
                )
            taken = None
            token = start.open_run.fencing_token
            if start.take_key is not None:
                taken = self._acquire(start.take_key, start.owner, start.ttl_ms)
                if isinstance(taken, NotAcquired) and start.when_busy == "replace":
                    self._rows.pop(start.take_key)
                    taken = self._acquire(start.take_key, start.owner, start.ttl_ms)
                if isinstance(taken, NotAcquired):
                    if start.when_busy == "buffer":
                        self._buffered.add(start.job)
                    return RunStartAnswer(taken, None, before.open_run, last_run, before.failures)
                token = taken.fencing_token
            opened = replace(start.open_run, fencing_token=token)
            ticked = before.last_tick
            if start.tick is not None:
                ticked = TickRun(start.tick, opened.instance, token)
            self._states[start.job] = replace(before, open_run=opened, last_tick=ticked)
            self._buffered.discard(start.job)
            return RunStartAnswer(taken, None, before.open_run, last_run, before.failures)

    async def end_run(self, run: RunRecord) -> bool:
        """Record ``run``, close it if it is the open run, and count the failure streak.

        Returns whether a trigger was noted while it was the open run (cleared now).
        """
        with self._guard:
            self._jobs[run.job] = with_run(self._jobs.get(run.job), run)
            state = self._states.get(run.job) or JobState(run.job, None, 0, None)
            opened = state.open_run
            buffered = False
            if (
                opened is not None
                and opened.fencing_token == run.fencing_token
                and opened.started_at == run.started_at
            ):
                opened = None
                buffered = run.job in self._buffered
                self._buffered.discard(run.job)
            failures = {"ok": 0, "error": state.failures + 1}.get(run.outcome, state.failures)
            self._states[run.job] = replace(state, open_run=opened, failures=failures)
            return buffered

    async def note_missed(self, job: str, missed_at: datetime) -> None:
        """Record that the tick of ``missed_at`` of ``job`` was never started."""
        with self._guard:
            state = self._states.get(job) or JobState(job, None, 0, None)
            self._states[job] = replace(state, missed_at=missed_at)

    async def pause_jobs(self, pause: JobPause) -> None:
        """Keep ``pause``, replacing any pause of its target."""
        with self._guard:
            self._pauses[pause.target] = pause

    async def resume_jobs(self, target: str) -> JobPause | None:
        """Remove the pause of ``target``; return it, or ``None``."""
        with self._guard:
            return self._pauses.pop(target, None)

    async def job_pauses(self) -> list[JobPause]:
        """Return every pause kept, by target."""
        with self._guard:
            return [self._pauses[target] for target in sorted(self._pauses)]

    async def job_states(self, jobs: Sequence[str] | None = None) -> list[JobState]:
        """Return the states of ``jobs`` (every job when ``None``) that have one, by job."""
        with self._guard:
            wanted = self._states.keys() if jobs is None else set(jobs) & self._states.keys()
            found = (self._states[job] for job in sorted(wanted))
            return [state for state in found if state.worth_listing]

    def _live_pause(self, job: str, now: datetime) -> JobPause | None:
        for target in sorted(self._pauses):
            pause = self._pauses[target]
            if pause_matches(target, job) and pause.live(now):
                return pause
        return None

    async def job_records(self, jobs: Sequence[str] | None = None) -> list[JobRecord]:
        """Return the records of ``jobs`` (every job when ``None``) that have one, by job key."""
        with self._guard:
            wanted = self._jobs.keys() if jobs is None else set(jobs) & self._jobs.keys()
            return [self._jobs[job] for job in sorted(wanted)]

    async def read_lock(self, key: str) -> LockInfo | None:
        """Return ``key``'s live lock, or ``None``: a freed key leaves no trace here."""
        with self._guard:
            return self._live(key, self._clock.now_ms())

    async def list_locks(self, prefix: str = "", limit: int = 1000) -> list[LockInfo]:
        """Return the live locks whose key starts with ``prefix``, by key, at most ``limit``."""
        with self._guard:
            now_ms = self._clock.now_ms()
            found = (
                self._live(key, now_ms) for key in sorted(self._rows) if key.startswith(prefix)
            )
            return [info for info in found if info is not None][:limit]

    async def break_lock(self, key: str) -> LockInfo | None:
        """Free ``key`` whoever holds it; return what held it, or ``None`` if nothing did."""
        with self._guard:
            now_ms = self._clock.now_ms()
            broken = self._live(key, now_ms)
            if broken is not None:
                del self._rows[key]
                self._hand_on(key, now_ms)
            return broken

    def _live(self, key: str, now_ms: int) -> LockInfo | None:
        row = self._rows.get(key)
        if row is None or row.expires_at_ms <= now_ms:
            return None
        return LockInfo(key, row.owner, row.fencing_token, row.expires_at_ms - now_ms)

    def __repr__(self) -> str:
        """Describe the store as the start-up log shows it."""
        return f"InMemoryLockStore(clock={self._clock!r}, keys={len(self._rows)})"


@final
class _MemoryLine:
    """One :meth:`InMemoryLockStore.wait_in_line`: its places, and where their grants go."""

    __slots__ = ("_loop", "_on_grant", "_store")

    def __init__(
        self,
        store: InMemoryLockStore,
        loop: asyncio.AbstractEventLoop,
        on_grant: Callable[[Grant], None],
    ) -> None:
        self._store = store
        self._loop = loop
        self._on_grant = on_grant

    async def queue(
        self, key: str, owner: str, ttl_ms: int, queue_ms: int, ticket: int
    ) -> Acquired | Queued:
        """Take ``key``, or wait in its line for ``queue_ms`` more (see ``WaitingLine``)."""
        return self._store._queue(key, owner, ttl_ms, queue_ms, ticket, line=self)  # noqa: SLF001 -- the store's own line

    async def leave(self, key: str, owner: str) -> bool:
        """Leave ``key``'s line; release what was granted to ``owner`` (see ``WaitingLine``)."""
        return self._store._leave(key, owner)  # noqa: SLF001 -- the store's own line

    def tell(self, grant: Grant) -> None:
        """Deliver ``grant`` on the line's loop (any thread may call; a closed loop drops it)."""
        if self._loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            # the line's own loop: no wake-up byte through the loop's self-pipe
            self._loop.call_soon(self._on_grant, grant)
        else:
            self._loop.call_soon_threadsafe(self._on_grant, grant)
