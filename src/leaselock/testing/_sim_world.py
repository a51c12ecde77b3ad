"""World: what one simulated run shares: its clock, store, seed, trace, resources and objects."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import TypeVar, cast, final

from .._errors import LocksConfigurationError
from ._clock import ManualClock
from ._faulty import FaultyStore
from ._sim_effects import Effect, SimulatedResource
from ._sim_trace import Trace

__all__ = ["World"]

T = TypeVar("T")


@final
class World:
    """The things every instance of one run shares, made fresh for every run.

    Args:
        clock: the simulation's clock, which is the store's.
        store: the store every instance reaches, faults and all.
        rng: the run's only source of chance, seeded.
        tick_jitter_ms: how late a scheduler may fire a tick.
    """

    __slots__ = (
        "_objects",
        "clock",
        "effects",
        "resources",
        "rng",
        "store",
        "tick_jitter_ms",
        "trace",
    )

    def __init__(
        self, clock: ManualClock, store: FaultyStore, rng: random.Random, *, tick_jitter_ms: int
    ) -> None:
        """Start a run's world: nothing written, nothing shared yet."""
        self.clock = clock
        self.store = store
        self.rng = rng
        self.tick_jitter_ms = tick_jitter_ms
        self.trace = Trace(clock)
        self.effects: list[Effect] = []
        self.resources: dict[str, SimulatedResource] = {}
        self._objects: dict[str, object] = {}

    @property
    def objects(self) -> dict[str, object]:
        """The shared objects, by name."""
        return self._objects

    def shared(self, name: str, make: Callable[[], T]) -> T:
        """Return the run's object ``name``, made by ``make()`` the first time it is asked for.

        Raises:
            LocksConfigurationError: ``name`` is not a string.
        """
        if not isinstance(name, str):
            raise LocksConfigurationError(f"name={name!r}; name a shared object with a str")
        if name not in self._objects:
            self._objects[name] = make()
        # what the first make() made: the same name asks for the same thing
        return cast("T", self._objects[name])

    def resource(self, name: str) -> SimulatedResource:
        """Return the run's resource ``name``, made the first time it is asked for.

        Raises:
            LocksConfigurationError: ``name`` is not a non-empty string.
        """
        if not isinstance(name, str) or not name:
            raise LocksConfigurationError(f"name={name!r}; name a resource with a non-empty str")
        if name not in self.resources:
            self.resources[name] = SimulatedResource(name, self.trace, self.effects)
        return self.resources[name]

    async def sleep(self, duration_ms: int) -> None:
        """Wait ``duration_ms`` on the simulation's clock (for the fleet's own doings)."""
        done = asyncio.get_running_loop().create_future()

        async def wake() -> None:
            if not done.done():
                done.set_result(None)

        self.clock.call_at(self.clock.now_ms() + duration_ms, wake)
        await done
