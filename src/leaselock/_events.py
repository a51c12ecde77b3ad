"""Events: what happened to locks, as objects for code and as lines for the ``leaselock`` logger."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import ClassVar, Literal, TypeAlias, final

from ._errors import DetectedBy

__all__ = [
    "Event",
    "EventStream",
    "EventType",
    "Events",
    "LeadershipAcquired",
    "LeadershipLost",
    "LeaseAcquired",
    "LockLost",
    "Publisher",
    "SkipReason",
    "TickSkipped",
]

EventType: TypeAlias = Literal[
    "lease-acquired", "tick-skipped", "lock-lost", "leadership-acquired", "leadership-lost"
]
SkipReason: TypeAlias = Literal[
    "another-instance", "in-progress", "store-unavailable", "shutting-down"
]

_log = logging.getLogger("leaselock")


def _utc_now() -> datetime:
    # wall-clock time is for people reading events; every decision reads the injected Clock
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class _EventFields:
    key: str
    fencing_token: int | None
    owner: str | None
    at: datetime = field(default_factory=_utc_now)


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseAcquired(_EventFields):
    """An instance took the lease ``<job>:owner`` and runs ``job`` from now on."""

    type: Literal["lease-acquired"] = "lease-acquired"
    job: str
    level: ClassVar[int] = logging.INFO

    def message(self) -> str:
        """Return the log line."""
        return (
            f'{self.job} runs on this instance (lease "{self.key}", '
            f"fencing token {self.fencing_token})"
        )


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class TickSkipped(_EventFields):
    """A tick of ``job`` did not run here, for ``reason``.

    ``min_hold_ms`` is the job's ``min_hold`` when the reason is ``"in-progress"``: the run lock
    may be held by a run that already ended, for the rest of it.
    """

    type: Literal["tick-skipped"] = "tick-skipped"
    job: str
    reason: SkipReason
    min_hold_ms: int | None = None

    @property
    def level(self) -> int:
        """DEBUG for the skips that are the point; WARNING when the store failed."""
        return logging.WARNING if self.reason == "store-unavailable" else logging.DEBUG

    def message(self) -> str:
        """Return the log line."""
        why = {
            "another-instance": "it runs on another instance",
            "in-progress": "a run is still in progress",
            "store-unavailable": "the lock store is unavailable",
            "shutting-down": "this instance is shutting down",
        }[self.reason]
        if self.min_hold_ms:
            why += f", or one started less than min_hold ({self.min_hold_ms} ms) ago"
        return f"Skipped {self.job}: {why}"


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class LockLost(_EventFields):
    """A held lock was lost, noticed as ``detected_by`` says."""

    type: Literal["lock-lost"] = "lock-lost"
    detected_by: DetectedBy

    @property
    def level(self) -> int:
        """WARNING, but INFO at shutdown, where giving locks up is the plan."""
        return logging.INFO if self.detected_by == "shutdown" else logging.WARNING

    def message(self) -> str:
        """Return the log line."""
        how = {
            "renewal": "the store refused its renewal",
            "deadline": "no renewal was confirmed within its ttl",
            "shutdown": "its Locks closed while it was held",
        }[self.detected_by]
        return (
            f'Lost lock "{self.key}" (fencing token {self.fencing_token}), '
            f"detected by {self.detected_by}: {how}"
        )


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class LeadershipAcquired(_EventFields):
    """This instance leads the election ``key``."""

    type: Literal["leadership-acquired"] = "leadership-acquired"
    level: ClassVar[int] = logging.INFO

    def message(self) -> str:
        """Return the log line."""
        return f'Leading "{self.key}" (fencing token {self.fencing_token})'


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class LeadershipLost(_EventFields):
    """This instance no longer leads ``key``: the lease was ``"lost"`` or ``"released"``."""

    type: Literal["leadership-lost"] = "leadership-lost"
    reason: Literal["lost", "released"]
    level: ClassVar[int] = logging.INFO

    def message(self) -> str:
        """Return the log line."""
        if self.reason == "released":
            return f'Stepped down from "{self.key}"'
        return f'Lost leadership of "{self.key}" (fencing token {self.fencing_token})'


Event: TypeAlias = LeaseAcquired | TickSkipped | LockLost | LeadershipAcquired | LeadershipLost
EventCallback: TypeAlias = Callable[[Event], object]


@final
class EventStream:
    """An ``async for`` view of events, from its creation until it or its ``Locks`` closes.

    Events queue up while nobody iterates; close the stream (``async with``, or :meth:`aclose`)
    when you stop reading, or it keeps them until it is garbage-collected.
    """

    __slots__ = ("__weakref__", "_closed", "_queue", "_types", "_wakeup")

    def __init__(self, types: frozenset[str]) -> None:
        """Create a stream of ``types`` (all when empty); see :meth:`Events.stream`."""
        self._types = types
        self._queue: deque[Event] = deque()
        self._wakeup: asyncio.Event | None = None
        self._closed = False

    def _push(self, event: Event) -> None:
        if self._types and event.type not in self._types:
            return
        self._queue.append(event)
        if self._wakeup is not None:
            self._wakeup.set()

    def _end(self) -> None:
        self._closed = True
        if self._wakeup is not None:
            self._wakeup.set()

    def __aiter__(self) -> EventStream:
        """Return the stream itself."""
        return self

    async def __anext__(self) -> Event:
        """Return the next event; stop when the stream or its ``Locks`` is closed."""
        while not self._queue:
            if self._closed:
                raise StopAsyncIteration
            if self._wakeup is None:
                self._wakeup = asyncio.Event()
            self._wakeup.clear()
            await self._wakeup.wait()
        return self._queue.popleft()

    async def aclose(self) -> None:
        """Stop receiving; events already queued are dropped."""
        self._queue.clear()
        self._end()

    async def __aenter__(self) -> EventStream:
        """Return the stream; it closes when the block ends."""
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the stream."""
        await self.aclose()


@final
class Events:
    """The events of one :class:`~leaselock.Locks`: subscribe with a callback or ``async for``.

    Every event also goes to the ``leaselock`` logger, whether anyone subscribes or not.

    .. versionadded:: 0.1
    """

    __slots__ = ("_callbacks", "_streams")

    def __init__(self) -> None:
        """Create a hub with no subscribers (internal: use ``locks.events``)."""
        self._callbacks: list[tuple[EventCallback, frozenset[str]]] = []
        self._streams: weakref.WeakSet[EventStream] = weakref.WeakSet()

    def subscribe(self, callback: EventCallback, *types: EventType) -> Callable[[], None]:
        """Call ``callback(event)`` for every event of ``types`` (all when none are given).

        Callbacks run on the event loop of the ``Locks``; one that raises is logged and skipped.

        Returns:
            A function that unsubscribes.
        """
        entry = (callback, frozenset(types))
        self._callbacks.append(entry)

        def unsubscribe() -> None:
            if entry in self._callbacks:
                self._callbacks.remove(entry)

        return unsubscribe

    def stream(self, *types: EventType) -> EventStream:
        """Return an :class:`EventStream` of ``types`` (all when none are given), from now on."""
        stream = EventStream(frozenset(types))
        self._streams.add(stream)
        return stream

    def __aiter__(self) -> EventStream:
        """Iterate over every event from now on: ``async for event in locks.events``."""
        return self.stream()

    def _emit(self, event: Event) -> None:
        _log.log(event.level, event.message())
        for callback, types in list(self._callbacks):
            if types and event.type not in types:
                continue
            try:
                callback(event)
            except Exception:  # noqa: BLE001 -- one subscriber must not silence the others
                _log.exception("An event callback raised on %s; it is ignored", event.type)
        for stream in list(self._streams):
            stream._push(event)  # noqa: SLF001 -- the hub and its streams are one concept

    def _close(self) -> None:
        for stream in list(self._streams):
            stream._end()  # noqa: SLF001 -- the hub and its streams are one concept


@final
class Publisher:
    """The sending side of one :class:`Events` hub: what the engine, jobs and elections hold.

    Kept apart from :class:`Events` so that code subscribing to ``locks.events`` cannot emit.
    """

    __slots__ = ("_events",)

    def __init__(self, events: Events) -> None:
        """Publish to ``events``."""
        self._events = events

    def emit(self, event: Event) -> None:
        """Log ``event``, then hand it to every subscriber and stream of the hub."""
        self._events._emit(event)  # noqa: SLF001 -- the hub and its sending side are one concept

    def close(self) -> None:
        """End every stream of the hub (its ``Locks`` closed)."""
        self._events._close()  # noqa: SLF001 -- the hub and its sending side are one concept
