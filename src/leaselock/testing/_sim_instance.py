"""SimulatedInstance: one instance of the application in a simulated fleet, and its lives."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import inspect
import re
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar, final

from .._clock import Clock
from .._durations import Duration, parse_duration, parse_ttl
from .._errors import LocksConfigurationError
from .._event_types import Event
from .._locks import Locks
from ._sim_clock import InstanceClock
from ._sim_effects import CURRENT_ACTOR, CURRENT_TICK, Actor, SimulatedResource, Tick
from ._sim_store import InstanceStore
from ._sim_world import World

__all__ = ["Life", "Setup", "SimulatedInstance"]

T = TypeVar("T")

# owner ids are 128 random bits, fresh every run: the trace names the instance instead
_OWNER_ID: Final = re.compile(r"\b[0-9a-f]{32}@")
# what an event's line leaves out: said already, or different in every run, or noise
_UNTRACED: Final = frozenset(
    {"type", "key", "fencing_token", "owner", "at", "streak", "streak_since", "loud", "ttl_ms"}
)


@final
class SimulatedInstance:
    """One instance of your application in a simulated fleet: what your setup is given.

    The setup makes the application's jobs, registers them with :attr:`locks`, and says when
    each one's scheduler fires it with :meth:`every`. It runs again for every life of the
    instance: after a kill or a restart, the instance starts afresh, as a new process.

    Attributes:
        name: ``"instance-1"``, ``"instance-2"``...: the label of its :attr:`locks`.
        life: 1 at the first start, 2 after the first kill or restart, and so on.
        locks: this life's ``Locks``, on the shared store, not started yet (the simulation
            starts it after the setup).
        clock: this instance's clock (offset from the store's; frozen while it is paused).

    .. versionadded:: 0.3
    """

    __slots__ = ("_jobs", "_world", "clock", "life", "locks", "name")

    def __init__(self, name: str, life: int, locks: Locks, clock: Clock, world: World) -> None:
        """Make the handle of one life (internal: the simulation makes it)."""
        self.name = name
        self.life = life
        self.locks = locks
        self.clock = clock
        self._world = world
        self._jobs: dict[str, tuple[int, Callable[[], Awaitable[object]]]] = {}

    def every(
        self,
        interval: Duration,
        job: Callable[[], Awaitable[object]],
        *,
        name: str | None = None,
    ) -> None:
        """Fire ``await job()`` at every multiple of ``interval`` on this instance's clock.

        As a cron scheduler on each replica does: tick ``n`` fires at ``n * interval`` on each
        instance's clock, a little late (``Faults.tick_jitter``), so the instances fire the same
        ticks at about the same time. A paused instance fires the tick it missed when it
        resumes, once.

        Args:
            interval: the time between ticks.
            job: an async callable of no arguments: a decorated job's bound method.
            name: the job's name in the trace and in :class:`Tick` (default: its ``__name__``).

        Raises:
            LocksConfigurationError: ``job`` is not async (a sync job runs in a thread, whose
                timing a simulation cannot replay), or the name is taken.
        """
        interval_ms = parse_ttl(interval, name="interval")
        if not inspect.iscoroutinefunction(job):
            raise LocksConfigurationError(
                f"every(..., {job!r}): the simulation calls jobs on its own event loop; pass an "
                "async job (a sync one runs in a worker thread, whose timing no seed replays)"
            )
        job_name = name if name is not None else getattr(job, "__name__", "job")
        if job_name in self._jobs:
            raise LocksConfigurationError(
                f"every(..., name={job_name!r}): {self.name} already fires a job of that name; "
                "pass name=... to tell them apart"
            )
        self._jobs[job_name] = (interval_ms, job)

    def shared(self, name: str, make: Callable[[], T]) -> T:
        """Return the run's object ``name``: made by ``make()`` once, shared by every instance.

        For the world your jobs act on (the orders to export, a warehouse): one per run, fresh
        for every seed.

        Raises:
            LocksConfigurationError: ``name`` is not a string.
        """
        return self._world.shared(name, make)

    def resource(self, name: str) -> SimulatedResource:
        """Return the run's resource ``name``, the same for every instance: what jobs write to."""
        return self._world.resource(name)

    async def sleep(self, duration: Duration) -> None:
        """Wait ``duration`` on this instance's clock: a slow call, the work itself.

        Time passes in the simulation, not for real. A pause of the instance holds it.

        Raises:
            LocksConfigurationError: ``duration`` is not a duration.
        """
        duration_ms = parse_duration(duration, name="duration")
        done = asyncio.get_running_loop().create_future()

        async def wake() -> None:
            if not done.done():
                done.set_result(None)

        timer = self.clock.call_at(self.clock.now_ms() + duration_ms, wake)
        try:
            await done
        finally:
            timer.cancel()

    @property
    def jobs(self) -> dict[str, tuple[int, Callable[[], Awaitable[object]]]]:
        """The jobs :meth:`every` scheduled, by name: their interval (ms) and the callable."""
        return dict(self._jobs)

    def __repr__(self) -> str:
        """Name the instance and its life."""
        return f"<SimulatedInstance {self.name} life {self.life}>"


Setup = Callable[[SimulatedInstance], Awaitable[None] | None]
"""Your application's setup, run for every life of every instance: register jobs, call every()."""


@final
class Life:
    """One life of one instance: its clock, its connection to the store, its Locks, its ticks.

    Everything it runs carries its :class:`Actor` (a context variable): the effects it makes
    are its, and once it is gone (killed, or shut down) nothing of it counts any more.
    """

    __slots__ = ("_context", "_started", "actor", "clock", "handle", "store", "world")

    def __init__(self, name: str, number: int, offset_ms: int, world: World, ttl_ms: int) -> None:
        """Make a life of ``name`` that has not started."""
        self.world = world
        self.actor = Actor(name, number)
        self.clock = InstanceClock(world.clock, offset_ms)
        self.store = InstanceStore(world.store)
        # no telemetry: OpenTelemetry stamps spans with the wall clock
        locks = Locks(
            store=self.store,
            ttl=timedelta(milliseconds=ttl_ms),
            clock=self.clock,
            instance=name,
            opentelemetry=False,
        )
        self.handle = SimulatedInstance(name, number, locks, self.clock, world)
        self._context = contextvars.copy_context()
        self._context.run(CURRENT_ACTOR.set, self.actor)
        self._started = False

    @property
    def up(self) -> bool:
        """Whether it runs: started, and neither gone nor paused."""
        return self._started and not self.actor.gone and not self.clock.frozen

    def spawn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``work`` in a task of this life (in a copy of its context)."""
        return asyncio.get_running_loop().create_task(work, context=self._context.copy())

    async def start(self, setup: Setup) -> None:
        """Run the setup, start the Locks, and start firing the jobs' ticks."""
        await self.spawn(self._start(setup))

    async def _start(self, setup: Setup) -> None:
        self.record(f"started (life {self.actor.life})")
        made = setup(self.handle)
        if inspect.isawaitable(made):
            await made
        self.handle.locks.events.subscribe(self._heard)
        await self.handle.locks.start()
        self._started = True
        for name, (interval_ms, job) in self.handle.jobs.items():
            _Schedule(self, name, interval_ms, job).start()

    def freeze(self) -> None:
        """Stop everything it does where it stands (a pause, or, never thawed, a kill)."""
        self.store.freeze()
        self.clock.freeze()

    def thaw(self) -> None:
        """Go on: answers first, then the timers that fell due, in order."""
        self.store.thaw()
        self.clock.thaw()

    def kill(self) -> None:
        """Stop it for good, handing nothing back: its leases expire on the store's clock."""
        self.freeze()
        self.actor.gone = True

    async def shut_down(self) -> None:
        """Close its Locks (runs finish, leases are handed back), then stop it for good."""
        await self.spawn(self.handle.locks.aclose())
        self.kill()

    async def tear_down(self) -> None:
        """After the run: let it go on, unrecorded, and close its Locks, whatever its state."""
        self.thaw()
        if self._started:
            await self.spawn(self.handle.locks.aclose())

    def _heard(self, event: Event) -> None:
        self.record(_describe(event))

    def record(self, what: str) -> None:
        """Put ``what`` in the run's trace, as this instance's (nothing once it is gone)."""
        if not self.actor.gone:
            self.world.trace.record(self.actor.instance, what)


@final
class _Schedule:
    """One job's scheduler on one life: tick n at n * interval on the instance's clock."""

    __slots__ = ("_interval_ms", "_job", "_life", "_name")

    def __init__(
        self, life: Life, name: str, interval_ms: int, job: Callable[[], Awaitable[object]]
    ) -> None:
        self._life = life
        self._name = name
        self._interval_ms = interval_ms
        self._job = job

    def start(self) -> None:
        self._arm(self._life.clock.now_ms() // self._interval_ms + 1)

    def _arm(self, number: int) -> None:
        world = self._life.world
        jitter_ms = world.rng.randint(0, world.tick_jitter_ms) if world.tick_jitter_ms else 0
        due_ms = number * self._interval_ms + jitter_ms
        self._life.clock.call_at(due_ms, functools.partial(self._fire, number))

    async def _fire(self, number: int) -> None:
        # the next tick is armed first: a run as long as the interval does not delay it
        self._arm(max(number, self._life.clock.now_ms() // self._interval_ms) + 1)
        tick = Tick(self._name, number)
        CURRENT_TICK.set(tick)
        self._life.record(f"tick {tick}")
        try:
            await self._job()
        except Exception as error:  # noqa: BLE001 -- a scheduler logs a failed run and goes on
            self._life.record(f"tick {tick} raised {type(error).__name__}: {error}")


def _describe(event: Event) -> str:
    """An event in one line: its type, key, token, and what else it says, owner ids named."""
    parts = [event.type, repr(event.key)]
    if event.fencing_token is not None:
        parts.append(f"token {event.fencing_token}")
    for spec in dataclasses.fields(event):
        value = getattr(event, spec.name)
        if spec.name in _UNTRACED or value is None or isinstance(value, datetime):
            continue
        parts.append(f"{spec.name}={value}")
    return _OWNER_ID.sub("", " ".join(parts))
