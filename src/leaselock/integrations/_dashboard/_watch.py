"""The dashboard's one reader of the store, shared by every open page and paced to a bound.

The bound (issue 40): watching adds at most one store round trip per second per open page,
however many locks and jobs there are. So every page, however many are open, reads through one
:class:`Watch`, which makes ONE read at a time, each a single store call:

- ``locks``: every lock (``inspect``, up to :data:`LISTING_LIMIT`), what the locks page and the
  timeline show, and where each job's lease and run lock are held;
- ``records``, ``states``, ``pauses``: the jobs' run records, failure streaks and missed
  ticks, and the pauses kept, for the jobs page.

With only locks or timeline pages open it lists the locks once a second, however many pages
there are. With a jobs page open it cycles listing, records, listing, states, listing,
pauses: once a second with that page alone (a listing every 2 s, the rest every 6 s), twice
a second when another page is open too, never faster. With no page open it reads nothing. A
read a page has never had comes first. Reads are spaced start to start on the injected clock,
so a slow store makes them rarer, never more frequent.

What a ``Locks`` of this process does is also heard from its events at no cost (its locks
taken, released, lost, handed back; its runs' ends), and shows at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final, Literal, TypeAlias, final

from ..._clock import Clock, TimerHandle, utc_now
from ..._errors import LockError
from ..._event_types import (
    Event,
    LockAcquired,
    LockHandedBack,
    LockLost,
    LockReleased,
)
from ..._jobs import JobsReader
from ..._locks import Locks, runtime_of
from ..._redact import redact_secrets
from ...stores._common._capabilities import JobRecord, LockInfo
from ...stores._common._job_control import JobPause, JobState

__all__ = [
    "JOBS_CYCLE",
    "LISTING_LIMIT",
    "READ_EVERY_MS",
    "Page",
    "Read",
    "Seen",
    "Snapshot",
    "Watch",
    "jobs_reader",
]

Read: TypeAlias = Literal["locks", "records", "states", "pauses"]
Page: TypeAlias = Literal["locks", "jobs", "timeline"]

READ_EVERY_MS: Final = 1000
"""One store read per second per open page, at most: the issue's bound."""
LISTING_LIMIT: Final = 5000
"""The most locks one listing reads; a store with more shows the first ones, by key."""
JOBS_CYCLE: Final[tuple[Read, ...]] = ("locks", "records", "locks", "states", "locks", "pauses")
LOCKS_CYCLE: Final[tuple[Read, ...]] = ("locks",)
# what a page needs before it can say anything, in the order it needs it
NEEDS: Final[dict[Page, tuple[Read, ...]]] = {
    "locks": ("locks",),
    "timeline": ("locks",),
    "jobs": ("records", "locks", "pauses", "states"),
}

_log = logging.getLogger("leaselock.dashboard")


@final
@dataclass(frozen=True, slots=True)
class Seen:
    """A lock as last seen: by a reading of the store, or by an event of this process."""

    info: LockInfo
    at: datetime

    @property
    def expires_at(self) -> datetime | None:
        """When it expires unless renewed (wall clock), or ``None`` when not live."""
        if not self.info.live or self.info.expires_in_ms is None:
            return None
        return self.at + timedelta(milliseconds=self.info.expires_in_ms)


@final
@dataclass(slots=True)
class Snapshot:
    """What the dashboard knows of the store now: the last result of each read, and when."""

    locks: dict[str, Seen] = field(default_factory=dict)
    read_at: dict[Read, datetime] = field(default_factory=dict)
    records: list[JobRecord] = field(default_factory=list)
    states: list[JobState] = field(default_factory=list)
    pauses: list[JobPause] = field(default_factory=list)
    errors: dict[Read, str] = field(default_factory=dict)
    truncated: bool = False
    version: int = 0

    def held(self) -> dict[str, LockInfo]:
        """The live locks, by key."""
        return {key: seen.info for key, seen in self.locks.items() if seen.info.live}


@final
class Watch:
    """Reads the store for every open page, one call at a time, within the bound.

    Args:
        open_locks: returns the started ``Locks`` to read through (a dashboard given a URL
            opens its own on first use); what it raises is shown as the read's error.
        clock: paces the reads.
    """

    __slots__ = (
        "_changed",
        "_clock",
        "_last_start_ms",
        "_listed_ms",
        "_listeners",
        "_open_locks",
        "_pages",
        "_reading",
        "_step",
        "_timer",
        "reads",
        "snapshot",
    )

    def __init__(self, open_locks: Callable[[], Awaitable[Locks]], clock: Clock) -> None:
        """Read nothing until a page opens."""
        self._open_locks = open_locks
        self._clock = clock
        self._pages: Counter[Page] = Counter()
        self._last_start_ms: int | None = None
        self._listed_ms: int | None = None
        self._timer: TimerHandle | None = None
        self._reading = asyncio.Lock()
        self._step = 0
        self._changed = asyncio.Event()
        self._listeners: list[Callable[[Read, Snapshot], None]] = []
        self.snapshot = Snapshot()
        self.reads = 0

    def listen(self, listener: Callable[[Read, Snapshot], None]) -> None:
        """Call ``listener(read, snapshot)`` after every read that succeeded."""
        self._listeners.append(listener)

    # --- pages ----------------------------------------------------------------------------

    @asynccontextmanager
    async def viewing(self, page: Page) -> AsyncIterator[None]:
        """Count ``page`` as open for the block: reads go on while any page is open."""
        self._pages[page] += 1
        self._schedule()
        try:
            yield
        finally:
            self._pages[page] -= 1
            self._schedule()

    async def ready(self, page: Page) -> None:
        """Make one read ``page`` lacks now, if the bound allows one now.

        For a page being rendered: with a read made in the last second it renders what is
        known, and its stream brings the rest.
        """
        async with self.viewing(page):
            missing = [read for read in NEEDS[page] if read not in self.snapshot.read_at]
            stale = self._stale_listing()
            wanted = missing[0] if missing else "locks" if stale else None
            if wanted is not None and self._may_read_now():
                await self._read_one(wanted)

    async def wait_change(self, after: int) -> int:
        """Wait until the snapshot's version is past ``after``; return it."""
        while self.snapshot.version <= after:
            await self._changed.wait()
        return self.snapshot.version

    def close(self) -> None:
        """Stop reading, whatever is open."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pages.clear()

    # --- pacing ---------------------------------------------------------------------------

    def _interval_ms(self) -> int:
        pages = sum(self._pages.values())
        # a jobs page's cycle is worth a second read a second once another page is open; the
        # locks and the timeline share one listing a second, however many of them are open
        per_second = min(pages, 2 if self._pages["jobs"] else 1)
        return READ_EVERY_MS // max(per_second, 1)

    def _may_read_now(self) -> bool:
        if self._reading.locked():
            return False
        last = self._last_start_ms
        return last is None or self._clock.now_ms() >= last + self._interval_ms()

    def _stale_listing(self) -> bool:
        # on the injected clock, as every decision: wall-clock times are for people
        read_ms = self._listed_ms
        return read_ms is None or self._clock.now_ms() - read_ms > READ_EVERY_MS

    def _schedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if sum(self._pages.values()) <= 0:
            return
        now_ms = self._clock.now_ms()
        last = self._last_start_ms
        due_ms = now_ms if last is None else max(now_ms, last + self._interval_ms())
        self._timer = self._clock.call_at(due_ms, self._tick)

    async def _tick(self) -> None:
        self._timer = None
        if sum(self._pages.values()) <= 0:
            return
        if self._may_read_now():
            await self._read_one(self._choose())
        self._schedule()

    def _choose(self) -> Read:
        open_pages = [page for page, count in self._pages.items() if count > 0]
        for page in open_pages:
            for read in NEEDS[page]:
                if read not in self.snapshot.read_at:
                    return read
        cycle = JOBS_CYCLE if self._pages["jobs"] else LOCKS_CYCLE
        read = cycle[self._step % len(cycle)]
        self._step += 1
        return read

    # --- reading --------------------------------------------------------------------------

    async def _read_one(self, read: Read) -> None:
        async with self._reading:
            self._last_start_ms = self._clock.now_ms()
            self.reads += 1
            started = utc_now()
            try:
                locks = await self._open_locks()
                await self._read(locks, read, started)
            except LockError as error:
                self.snapshot.errors[read] = redact_secrets(str(error))
            except Exception as error:  # noqa: BLE001 -- one line on the page, the rest logged
                _log.exception("The dashboard's %s read failed", read)
                self.snapshot.errors[read] = redact_secrets(f"{type(error).__name__}: {error}")
            else:
                self.snapshot.errors.pop(read, None)
                self.snapshot.read_at[read] = started
                if read == "locks":
                    self._listed_ms = self._last_start_ms
                for listener in self._listeners:
                    listener(read, self.snapshot)
            self._bump()

    async def _read(self, locks: Locks, read: Read, started: datetime) -> None:
        snapshot = self.snapshot
        if read == "locks":
            found = await locks.inspect("", limit=LISTING_LIMIT)
            # what this process's events said during the read is newer than the read
            kept = {key: seen for key, seen in snapshot.locks.items() if seen.at > started}
            snapshot.locks = {info.key: Seen(info, started) for info in found} | kept
            snapshot.truncated = len(found) >= LISTING_LIMIT
            return
        reader = jobs_reader(locks)
        if read == "records":
            snapshot.records = await reader.records() if reader.keeps_run_records else []
        elif read == "states":
            snapshot.states = await reader.states() if reader.keeps_job_control else []
        else:
            snapshot.pauses = await reader.pauses() if reader.keeps_job_control else []

    # --- this process's events -------------------------------------------------------------

    def heard(self, event: Event) -> None:
        """Show a lock event of this process's ``Locks`` at once, before the next reading."""
        now = utc_now()
        locks = self.snapshot.locks
        if isinstance(event, LockAcquired):
            info = LockInfo(event.key, event.owner, event.fencing_token, event.ttl_ms)
            locks[event.key] = Seen(info, now)
        elif isinstance(event, LockReleased) and event.kept_ms:
            info = LockInfo(event.key, event.owner, event.fencing_token, event.kept_ms)
            locks[event.key] = Seen(info, now)
        elif isinstance(event, LockReleased | LockLost | LockHandedBack):
            seen = locks.get(event.key)
            # only the lease the event is about: a successor may hold the key already
            if seen is not None and seen.info.owner == event.owner:
                locks[event.key] = Seen(LockInfo(event.key, None, event.fencing_token, None), now)
        else:
            return
        self._bump()

    def bump(self) -> None:
        """Tell every open page that something changed (an action, a run's end)."""
        self._bump()

    def _bump(self) -> None:
        self.snapshot.version += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


def jobs_reader(locks: Locks) -> JobsReader:
    """The job-data reader of a started ``locks``."""
    return runtime_of(locks).jobs_reader()
