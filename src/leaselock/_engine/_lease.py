"""Lease: the engine's state of one lock it holds (the public handle is :class:`Lock`)."""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field
from typing import Final, final

from .._clock import Clock
from .._errors import DetectedBy, LockLostError
from ..stores._common._protocol import Renewal
from ._signal import Abort, LockSignal, new_signal

__all__ = ["HELD", "LOST", "RELEASED", "Lease", "LeaseState"]

_MAKING_SIGNALS = threading.Lock()


class LeaseState(enum.Enum):
    """Where a lease is in its life; it only ever moves away from HELD."""

    HELD = "held"
    RELEASED = "released"
    LOST = "lost"


# the members as module names: on Python 3.11 reading a member off its enum class goes through
# a descriptor (about 100 ns, ten times a plain name), and a lock cycle reads them a dozen times
HELD: Final = LeaseState.HELD
RELEASED: Final = LeaseState.RELEASED
LOST: Final = LeaseState.LOST


@final
@dataclass(eq=False, slots=True)
class Lease:
    """One acquisition: its identity, its timing, and its signal.

    ``deadline_ms`` is the holder's own deadline: ``ttl_ms`` after the send time of the last
    acquire or renewal the store confirmed. Renewal is due at ``next_renew_ms``.

    The signal and the renewal are made when first asked for: most leases of a busy lock are
    released before anyone looks at their signal, or before their first renewal.
    """

    key: str
    owner: str
    ttl_ms: int
    fencing_token: int
    deadline_ms: int
    next_renew_ms: int
    clock: Clock
    state: LeaseState = HELD
    renewing: bool = False
    # bumped at each reschedule: renewal-heap entries carrying an older value are stale
    schedule_version: int = 0
    _signal: LockSignal | None = field(default=None, init=False, repr=False)
    _abort: Abort | None = field(default=None, init=False, repr=False)
    _renewal: Renewal | None = field(default=None, init=False, repr=False)

    @property
    def signal(self) -> LockSignal:
        """The signal that aborts when the lease is lost; it reads the deadline from the clock."""
        signal = self._signal
        return self._make_signal()[0] if signal is None else signal

    @property
    def renewal(self) -> Renewal:
        """What a batch renewal sends for it, made once: its key, owner and ttl never change."""
        renewal = self._renewal
        if renewal is None:
            renewal = self._renewal = Renewal(self.key, self.owner, self.ttl_ms)
        return renewal

    def abort(self, detected_by: DetectedBy) -> LockLostError:
        """Abort the lease's signal with ``detected_by`` (once); return its reason."""
        abort = self._abort
        if abort is None:
            abort = self._make_signal()[1]
        return abort(detected_by)

    def _make_signal(self) -> tuple[LockSignal, Abort]:
        # a worker thread may ask for the signal as the loop aborts it: both must get one signal
        with _MAKING_SIGNALS:
            if self._signal is None or self._abort is None:
                self._signal, self._abort = new_signal(
                    self.key, self.fencing_token, deadline_passed=self.deadline_passed
                )
            return self._signal, self._abort

    @property
    def held(self) -> bool:
        """Whether the lease is held and its deadline has not passed."""
        return self.state is HELD and self.clock.now_ms() < self.deadline_ms

    @property
    def status(self) -> str:
        """``"held"``, ``"released"`` or ``"lost"``; a passed deadline reads as lost at once."""
        if self.deadline_passed():
            return LOST.value
        return self.state.value

    def deadline_passed(self) -> bool:
        """Whether the lease is still marked held although its deadline has passed."""
        return self.state is HELD and self.clock.now_ms() >= self.deadline_ms
