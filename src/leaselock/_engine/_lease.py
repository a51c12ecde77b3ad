"""Lease: the engine's state of one lock it holds (the public handle is :class:`Lock`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import final

from .._clock import Clock
from .._errors import DetectedBy, LockLostError
from ..stores._common._protocol import Renewal
from ._signal import Abort, LockSignal, new_signal

__all__ = ["Lease", "LeaseState"]


class LeaseState(enum.Enum):
    """Where a lease is in its life; it only ever moves away from HELD."""

    HELD = "held"
    RELEASED = "released"
    LOST = "lost"


@final
@dataclass(eq=False, slots=True)
class Lease:
    """One acquisition: its identity, its timing, and its signal.

    ``deadline_ms`` is the holder's own deadline: ``ttl_ms`` after the send time of the last
    acquire or renewal the store confirmed. Renewal is due at ``next_renew_ms``.
    """

    key: str
    owner: str
    ttl_ms: int
    fencing_token: int
    deadline_ms: int
    next_renew_ms: int
    clock: Clock
    signal: LockSignal = field(init=False)
    # what a batch renewal sends for it, built once: its key, owner and ttl never change
    renewal: Renewal = field(init=False, repr=False)
    _abort: Abort = field(init=False, repr=False)
    state: LeaseState = LeaseState.HELD
    renewing: bool = False
    # bumped at each reschedule: renewal-heap entries carrying an older value are stale
    schedule_version: int = 0

    def __post_init__(self) -> None:
        """Give the lease its signal, which also reads the deadline straight from the clock."""
        self.renewal = Renewal(self.key, self.owner, self.ttl_ms)
        self.signal, self._abort = new_signal(
            self.key, self.fencing_token, deadline_passed=self.deadline_passed
        )

    def abort(self, detected_by: DetectedBy) -> LockLostError:
        """Abort the lease's signal with ``detected_by`` (once); return its reason."""
        return self._abort(detected_by)

    @property
    def held(self) -> bool:
        """Whether the lease is held and its deadline has not passed."""
        return self.state is LeaseState.HELD and self.clock.now_ms() < self.deadline_ms

    @property
    def status(self) -> str:
        """``"held"``, ``"released"`` or ``"lost"``; a passed deadline reads as lost at once."""
        if self.deadline_passed():
            return LeaseState.LOST.value
        return self.state.value

    def deadline_passed(self) -> bool:
        """Whether the lease is still marked held although its deadline has passed."""
        return self.state is LeaseState.HELD and self.clock.now_ms() >= self.deadline_ms
