"""Simulated resources: what the fleet's jobs write, recorded with who wrote it, when, and why."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, final

from .._engine import current_lock
from .._fencing import checked_token
from ._sim_trace import Trace

__all__ = ["CURRENT_ACTOR", "CURRENT_TICK", "Actor", "Effect", "SimulatedResource", "Tick"]


@final
@dataclass(frozen=True, slots=True)
class Tick:
    """One firing of a scheduled job: the ``number``-th tick of ``job`` (1 for the first).

    Every instance's scheduler fires the same ticks, each on its own clock: tick 3 of a job
    every minute fires at minute 3 of each instance's clock.

    .. versionadded:: 0.3
    """

    job: str
    number: int

    def __str__(self) -> str:
        """Return ``"job#number"``."""
        return f"{self.job}#{self.number}"


@final
@dataclass(eq=False, slots=True)
class Actor:
    """One life of one instance (a start, until it is killed or shut down), as effects name it."""

    instance: str
    life: int
    gone: bool = False


# set for everything an instance runs (its start, its timers, its ticks): who acts
CURRENT_ACTOR: ContextVar[Actor | None] = ContextVar("leaselock.testing.actor", default=None)
# set for everything a tick's run does, and the tasks it starts: which tick it serves
CURRENT_TICK: ContextVar[Tick | None] = ContextVar("leaselock.testing.tick", default=None)


@final
@dataclass(frozen=True, slots=True)
class Effect:
    """One access of a simulated instance to a :class:`SimulatedResource`.

    Attributes:
        resource: the resource's name.
        kind: ``"write"`` or ``"read"``.
        value: what was written (``None`` for a read).
        at_ms: when, on the simulation's clock.
        instance: the instance that made it.
        tick: the tick whose run made it, if a scheduled run did (the tasks a run starts count).
        fencing_token: the token the access carried; for an access without one, the token of
            the lock its code held (``current_lock()``), which the resource never saw.
        lock_key: the key of that lock (``None`` outside any lock).
        fenced: whether the access carried its token, so that the resource could refuse it.
        accepted: whether the resource took the write (a read is always accepted).

    .. versionadded:: 0.3
    """

    resource: str
    kind: Literal["write", "read"]
    value: object
    at_ms: int
    instance: str
    tick: Tick | None
    fencing_token: int | None
    lock_key: str | None
    fenced: bool
    accepted: bool

    @property
    def action(self) -> str:
        """What the instance did, in words: ``"wrote 7 to 'exported' (fenced token 5, ...)"``."""
        what = f"wrote {self.value!r} to" if self.kind == "write" else "read"
        token = "" if self.fencing_token is None else f" token {self.fencing_token}"
        fenced = "fenced" if self.fenced else "unfenced"
        lock = "" if self.lock_key is None else f" under {self.lock_key!r}"
        tick = "" if self.tick is None else f", tick {self.tick}"
        refused = "" if self.accepted else " -> REFUSED (stale token)"
        return f"{what} {self.resource!r} ({fenced}{token}{lock}{tick}){refused}"

    def __str__(self) -> str:
        """Describe the access in one line: the instance, then :attr:`action`."""
        return f"{self.instance} {self.action}"


@final
class SimulatedResource:
    """A resource the simulated fleet shares: a table, an outbox, an accounting API.

    It keeps the values written to it, in order, and records every access as an
    :class:`Effect` (who, when, under which lock, for which tick), which invariants read
    after the run. Give it the run's fencing token and it is a fenced resource: it keeps the
    highest token it has been given and refuses a write with a lower one, as a table with a
    token column does (``WHERE token <= :token``). A read with a token fences too: a holder
    that read under a newer token makes the older holder's later write stale.

    Get one from :meth:`SimulatedInstance.resource`: the same name gives every instance the
    same resource.

    Attributes:
        name: the resource's name, as invariants name it.

    .. versionadded:: 0.3
    """

    __slots__ = ("_effects", "_highest", "_trace", "_values", "name")

    def __init__(self, name: str, trace: Trace, effects: list[Effect]) -> None:
        """Make the resource ``name`` of one run (internal: ask the instance for it)."""
        self.name = name
        self._trace = trace
        self._effects = effects
        self._values: list[object] = []
        self._highest: int | None = None

    @property
    def values(self) -> tuple[object, ...]:
        """The values written and accepted so far, in order."""
        return tuple(self._values)

    @property
    def highest_token(self) -> int | None:
        """The highest fencing token the resource has been given, or ``None``."""
        return self._highest

    def write(self, value: object, *, fencing_token: int | None = None) -> bool:
        """Write ``value``; with ``fencing_token``, refuse it if a greater token came before.

        Args:
            value: what to write; its ``repr`` goes into the trace, so give it a stable one
                (numbers, strings, tuples, dataclasses).
            fencing_token: the run's token (``lock.fencing_token``); ``None`` writes unfenced.

        Returns:
            Whether the write was accepted (always, unfenced).

        Raises:
            LocksConfigurationError: ``fencing_token`` is not a fencing token.
        """
        token = None if fencing_token is None else checked_token(fencing_token)
        if not self._counts():
            return False
        accepted = self._admit(token)
        self._record("write", value, token, accepted=accepted)
        if accepted:
            self._values.append(value)
        return accepted

    def read(self, *, fencing_token: int | None = None) -> tuple[object, ...]:
        """Return the values accepted so far; with ``fencing_token``, remember it first.

        Raises:
            LocksConfigurationError: ``fencing_token`` is not a fencing token.
        """
        token = None if fencing_token is None else checked_token(fencing_token)
        if self._counts():
            self._admit(token)
            self._record("read", None, token, accepted=True)
        return tuple(self._values)

    def _counts(self) -> bool:
        """Whether an access now counts: not after the run, nor from an instance that is gone."""
        actor = CURRENT_ACTOR.get()
        # a killed process does nothing more: only the teardown after the run gets here
        return not self._trace.closed and (actor is None or not actor.gone)

    def _admit(self, token: int | None) -> bool:
        if token is None:
            return True
        if self._highest is not None and token < self._highest:
            return False
        self._highest = token
        return True

    def _record(
        self, kind: Literal["write", "read"], value: object, token: int | None, *, accepted: bool
    ) -> None:
        actor = CURRENT_ACTOR.get()
        lock = current_lock()
        effect = Effect(
            resource=self.name,
            kind=kind,
            value=value,
            at_ms=self._trace.now_ms(),
            instance="outside" if actor is None else actor.instance,
            tick=CURRENT_TICK.get(),
            fencing_token=token if token is not None or lock is None else lock.fencing_token,
            lock_key=None if lock is None else lock.key,
            fenced=token is not None,
            accepted=accepted,
        )
        self._effects.append(effect)
        self._trace.record(effect.instance, effect.action)

    def __repr__(self) -> str:
        """Name the resource and count its values."""
        return f"SimulatedResource({self.name!r}, values={len(self._values)})"
