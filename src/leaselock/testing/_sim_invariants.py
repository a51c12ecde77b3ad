"""Invariants of a simulated run: what must hold of its effects, and three that most jobs need."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, final

from .._errors import LocksConfigurationError
from ._sim_effects import Effect, Tick
from ._sim_trace import TraceEvent

__all__ = [
    "Invariant",
    "InvariantViolation",
    "SimulationRecord",
    "as_invariant",
    "at_most_once",
    "leaders_never_overlap",
    "no_stale_writes",
]

# a violation's detail names this many values at most
_SHOWN_VALUES: Final = 10


@final
@dataclass(frozen=True, slots=True)
class InvariantViolation:
    """A run broke an invariant: which, how, the effects that prove it, and what led there.

    Attributes:
        rule: the invariant, in words (``"each tick's effect at most once"``).
        detail: what happened.
        effects: the effects that broke it (the report shows them with their ticks and locks).
        trace: the events that led to it: what its instances and their locks went through,
            up to the last of its effects (filled in by :func:`simulate`).

    .. versionadded:: 0.3
    """

    rule: str
    detail: str
    effects: tuple[Effect, ...] = ()
    trace: tuple[TraceEvent, ...] = ()

    def __str__(self) -> str:
        """Return the rule and the detail."""
        return f"{self.rule}: {self.detail}"


@final
@dataclass(frozen=True, slots=True)
class SimulationRecord:
    """What a simulated run recorded, as invariants see it.

    Attributes:
        effects: every access to a :class:`SimulatedResource`, in the order it happened.
        trace: every event of the run, in order.
        objects: the run's shared objects, by name (see :meth:`shared`).

    .. versionadded:: 0.3
    """

    effects: tuple[Effect, ...]
    trace: tuple[TraceEvent, ...] = ()
    objects: Mapping[str, object] = field(default_factory=dict, repr=False)

    def writes(self, resource: str | None = None) -> tuple[Effect, ...]:
        """Return the accepted writes, to ``resource`` or to any."""
        return tuple(
            effect
            for effect in self.effects
            if effect.kind == "write"
            and effect.accepted
            and (resource is None or effect.resource == resource)
        )

    def shared(self, name: str) -> object:
        """Return the run's shared object ``name`` (see :meth:`SimulatedInstance.shared`).

        Raises:
            LocksConfigurationError: no instance made one of that name.
        """
        if name not in self.objects:
            made = ", ".join(map(repr, self.objects)) or "none"
            raise LocksConfigurationError(
                f"the run has no shared object {name!r} (it has {made}); make it in the setup "
                f"with instance.shared({name!r}, factory)"
            )
        return self.objects[name]


Check = Callable[[SimulationRecord], Iterable["InvariantViolation | str"]]
"""A user's invariant: the violations it finds in a record (a string is a violation's detail)."""


@final
@dataclass(frozen=True, slots=True)
class Invariant:
    """A property every run must keep, checked over its record once the run is over.

    Attributes:
        rule: the property, in words; each violation is reported under it.
        check: finds the violations in a :class:`SimulationRecord`.
        code: how to write it in Python: a failing seed's replay line quotes it.

    .. versionadded:: 0.3
    """

    rule: str
    check: Check = field(repr=False)
    code: str

    def violations(self, record: SimulationRecord) -> list[InvariantViolation]:
        """Return what :attr:`check` found, each as an :class:`InvariantViolation`."""
        return [
            found if isinstance(found, InvariantViolation) else InvariantViolation(self.rule, found)
            for found in self.check(record)
        ]

    def __repr__(self) -> str:
        """Return :attr:`code`, so a list of invariants reads as Python."""
        return self.code


def as_invariant(invariant: Invariant | Check) -> Invariant:
    """Return ``invariant`` as an :class:`Invariant`; a plain callable is named by its name.

    Raises:
        LocksConfigurationError: it is neither.
    """
    if isinstance(invariant, Invariant):
        return invariant
    if not callable(invariant):
        raise LocksConfigurationError(
            f"invariant {invariant!r} is not callable; pass at_most_once(...), "
            "no_stale_writes(...), leaders_never_overlap(...), or a function of the "
            "SimulationRecord that returns the violations it finds"
        )
    name = getattr(invariant, "__name__", repr(invariant))
    return Invariant(rule=name.replace("_", " "), check=invariant, code=name)


def at_most_once(resource: str, *, key: Callable[[object], Hashable] | None = None) -> Invariant:
    """Each tick's effect at most once: no value is written to ``resource`` twice.

    The effect of a tick is what its run writes: an order booked, an email sent, a batch
    exported. Two accepted writes of equal ``key(value)`` (default: the value) break it: two
    instances both ran the work, as after a paused owner's late write.

    .. versionadded:: 0.3
    """
    identify: Callable[[object], Hashable] = key if key is not None else _itself

    def check(record: SimulationRecord) -> Iterable[InvariantViolation]:
        first: dict[Hashable, Effect] = {}
        # one violation per pair of runs that both wrote: (earlier, later, the values)
        twice: list[tuple[Effect, Effect, list[object]]] = []
        for effect in record.writes(resource):
            earlier = first.setdefault(identify(effect.value), effect)
            if earlier is not effect:
                _group(twice, earlier, effect)
        for earlier, later, values in twice:
            yield InvariantViolation(
                "each tick's effect at most once",
                f"{_values(values)} {'was' if len(values) == 1 else 'were'} written to "
                f"{resource!r} twice: by {_by(earlier)}, then by {_by(later)}",
                (earlier, later),
            )

    code = f"at_most_once({resource!r}{'' if key is None else ', key=...'})"
    return Invariant("each tick's effect at most once", check, code)


def no_stale_writes(resource: str) -> Invariant:
    """No write accepted from a stale token: nothing older lands after something newer.

    A write is stale when ``resource`` was already read or written under a newer token of
    the same lock: a newer run (or leader) was there, and the older one's write would
    overwrite its work. A fenced resource refuses it; an unfenced one takes it, and breaks
    this. A write's token is the one it carried, else the token of the lock its code held.

    .. versionadded:: 0.3
    """

    def check(record: SimulationRecord) -> Iterable[InvariantViolation]:
        newest: dict[str | None, Effect] = {}
        # one violation per stale run and the newer access it came after, with the values
        stale: list[tuple[Effect, Effect, list[object]]] = []
        for effect in record.effects:
            if effect.resource != resource or effect.fencing_token is None:
                continue
            seen = newest.get(effect.lock_key)
            if (
                effect.kind == "write"
                and effect.accepted
                and seen is not None
                and effect.fencing_token < (seen.fencing_token or 0)
            ):
                _group(stale, seen, effect)
            if seen is None or effect.fencing_token > (seen.fencing_token or 0):
                newest[effect.lock_key] = effect
        for seen, effect, values in stale:
            yield InvariantViolation(
                "no write accepted from a stale token",
                f"{resource!r} took {_values(values)} from {_by(effect)}, after "
                f"{_by(seen)} had {'written' if seen.kind == 'write' else 'read'} it",
                (seen, effect),
            )

    return Invariant(
        "no write accepted from a stale token", check, f"no_stale_writes({resource!r})"
    )


def leaders_never_overlap(key: str) -> Invariant:
    """A leader's side effects never overlap the next leader's: terms never interleave.

    Every write made under the lock ``key`` (an election's key: the leader's lock, as the
    hooks and the duty hold it), to any resource, must come after every write of the terms
    before it: a write of an older term after one of a newer term means two leaders acted at
    once. Fence every side effect with the term's token, or stop at the lock's signal.

    .. versionadded:: 0.3
    """

    def check(record: SimulationRecord) -> Iterable[InvariantViolation]:
        newest: Effect | None = None
        for effect in record.writes():
            if effect.lock_key != key or effect.fencing_token is None:
                continue
            if newest is not None and effect.fencing_token < (newest.fencing_token or 0):
                yield InvariantViolation(
                    "a leader's side effects never overlapping",
                    f"the term with token {effect.fencing_token} ({effect.instance}) wrote to "
                    f"{effect.resource!r} after the term with token {newest.fencing_token} "
                    f"({newest.instance}) had written to {newest.resource!r}",
                    (newest, effect),
                )
            if newest is None or effect.fencing_token > (newest.fencing_token or 0):
                newest = effect

    return Invariant(
        "a leader's side effects never overlapping", check, f"leaders_never_overlap({key!r})"
    )


def _itself(value: object) -> Hashable:
    if not isinstance(value, Hashable):
        raise LocksConfigurationError(
            f"at_most_once compares values, and {value!r} is not hashable; pass "
            "key=lambda value: ... that returns what identifies it"
        )
    return value


def _group(groups: list[tuple[Effect, Effect, list[object]]], one: Effect, other: Effect) -> None:
    """Add ``other``'s value to the group of the same two runs, or start one for them."""
    runs = (_run_of(one), _run_of(other))
    for first, second, values in groups:
        if (_run_of(first), _run_of(second)) == runs:
            values.append(other.value)
            return
    groups.append((one, other, [other.value]))


def _run_of(effect: Effect) -> tuple[str, int | None, Tick | None]:
    return effect.instance, effect.fencing_token, effect.tick


def _values(values: list[object]) -> str:
    shown = ", ".join(map(repr, values[:_SHOWN_VALUES]))
    more = len(values) - _SHOWN_VALUES
    return shown if more <= 0 else f"{shown} and {more} more"


def _by(effect: Effect) -> str:
    tick = "" if effect.tick is None else f" (tick {effect.tick})"
    token = "" if effect.fencing_token is None else f" with token {effect.fencing_token}"
    return f"{effect.instance}{token}{tick} at {effect.at_ms / 1000:.3f} s"
