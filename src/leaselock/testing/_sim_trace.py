"""The trace of a simulated run: every event, in the order it happened, and its digest."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final, final

from .._clock import Clock

__all__ = ["FLEET", "Trace", "TraceEvent", "digest"]

FLEET: Final = "fleet"
"""The trace's name for what happens to the fleet as a whole: the store's faults, the start."""


@final
@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One thing that happened in a simulated run.

    Attributes:
        at_ms: when, on the simulation's clock (the store's), in milliseconds from the start.
        instance: where: an instance's name (``"instance-2"``), or ``"fleet"`` for the store's
            faults.
        what: what happened, in words (``"tick export#3"``, ``"lease-acquired export:owner
            token 7"``, ``"paused for 41200 ms"``); owner ids, task names and wall-clock times,
            which differ from run to run, are never in it.

    .. versionadded:: 0.3
    """

    at_ms: int
    instance: str
    what: str

    def __str__(self) -> str:
        """Return ``"  12.345 s  instance-2  what"``."""
        return f"{self.at_ms / 1000:9.3f} s  {self.instance:<11} {self.what}"


@final
class Trace:
    """Records what happens in one run, in order, until it is closed."""

    __slots__ = ("_clock", "_closed", "events")

    def __init__(self, clock: Clock) -> None:
        """Record at the times ``clock`` reads."""
        self._clock = clock
        self._closed = False
        self.events: list[TraceEvent] = []

    @property
    def closed(self) -> bool:
        """Whether the run is over: what happens now (its teardown) is not recorded."""
        return self._closed

    def now_ms(self) -> int:
        """Return the simulation's time."""
        return self._clock.now_ms()

    def record(self, instance: str, what: str) -> None:
        """Record that ``what`` happened on ``instance`` now (nothing once closed)."""
        if not self._closed:
            self.events.append(TraceEvent(self._clock.now_ms(), instance, what))

    def close(self) -> None:
        """Stop recording."""
        self._closed = True


def digest(events: tuple[TraceEvent, ...]) -> str:
    """Return the SHA-256 of the events, one line each, in order: equal runs, equal digests."""
    hashed = hashlib.sha256()
    for event in events:
        hashed.update(f"{event.at_ms}\t{event.instance}\t{event.what}\n".encode())
    return hashed.hexdigest()
