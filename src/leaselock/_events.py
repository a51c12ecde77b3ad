"""The events hub of one Locks: subscribers, ``async for`` streams, and the logger."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import final

from ._event_types import Event, EventCallback, EventType

__all__ = ["EventStream", "Events", "Publisher"]

_log = logging.getLogger("leaselock")


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
        # checked first: a lock's acquire and release are events, and their DEBUG lines are
        # usually off; formatting them anyway would cost every acquire
        if _log.isEnabledFor(event.level):
            _log.log(event.level, event.message(), extra=event.log_fields())
        if self._callbacks:
            self._call_back(event)
        # most Locks have no stream: iterating an empty WeakSet still cost every acquire ~5 us
        if self._streams:
            for stream in list(self._streams):
                stream._push(event)  # noqa: SLF001 -- the hub and its streams are one concept

    def _call_back(self, event: Event) -> None:
        for callback, types in list(self._callbacks):
            if types and event.type not in types:
                continue
            try:
                callback(event)
            except Exception:  # noqa: BLE001 -- one subscriber must not silence the others
                _log.exception("An event callback raised on %s; it is ignored", event.type)

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

    def heard(self, level: int) -> bool:
        """Whether an event logged at ``level`` would reach anyone: the log, a callback, a stream.

        For the events of every acquire and release: building one (its wall-clock time, its
        frozen fields) cost a cold handoff ~45 us before its store call was sent, for nobody.
        """
        events = self._events
        return bool(events._callbacks or events._streams) or _log.isEnabledFor(level)  # noqa: SLF001 -- the hub and its sending side are one concept

    def close(self) -> None:
        """End every stream of the hub (its ``Locks`` closed)."""
        self._events._close()  # noqa: SLF001 -- the hub and its sending side are one concept
