"""SimulatedRun: one seeded run of a simulated fleet, from its start to its teardown.

How it goes: a :class:`ManualClock` that is the store's clock; an in-memory store behind a
:class:`FaultyStore`; N instances, each a :class:`Life` after another (a kill or a restart starts
the next), each on an :class:`InstanceClock` offset from the store's and an
:class:`InstanceStore` that a pause holds. The faults are drawn from the seed first, each armed
on the clock; then the clock is advanced through the run: every timer of every instance and of
the store fires in one order, and the loop settles between two of them. After the run, the
invariants read what it recorded, and the fleet is torn down, unrecorded.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final, final

from ..stores.memory import InMemoryLockStore
from ._clock import ManualClock
from ._faulty import FaultyStore
from ._settle import wait_all_tasks_blocked
from ._sim_faults import Faults, InjectedFault, plan_faults
from ._sim_instance import Life, Setup
from ._sim_invariants import Invariant, SimulationRecord
from ._sim_report import SimulationReport, lead_up
from ._sim_trace import digest
from ._sim_world import World

__all__ = ["WALL_EPOCH", "RunOptions", "SimulatedRun"]

WALL_EPOCH: Final = datetime(2030, 1, 1, tzinfo=UTC)
"""Where the simulated wall clock starts in every run, so events and run records replay too."""
# after the run, the fleet is closed with the clock moving in steps of a ttl, this many at most:
# enough for shutdown_grace and every bound on a store call
_TEAR_DOWN_STEPS: Final = 10


@final
@dataclass(frozen=True, slots=True)
class RunOptions:
    """What one run is: :func:`simulate`'s arguments, checked, and the line that replays it."""

    setup: Setup
    seed: int
    instances: int
    duration_ms: int
    ttl_ms: int
    faults: Faults
    invariants: tuple[Invariant, ...]
    replay: str


@final
class _Member:
    """One instance across its lives: its name, its clock's offset, and each life it had."""

    __slots__ = ("lives", "name", "offset_ms")

    def __init__(self, name: str, offset_ms: int) -> None:
        self.name = name
        self.offset_ms = offset_ms
        self.lives: list[Life] = []

    @property
    def life(self) -> Life:
        return self.lives[-1]


@final
class SimulatedRun:
    """One run: its options, its clock, and, once running, its world and members."""

    __slots__ = ("_members", "_options", "_tasks", "_world", "clock")

    def __init__(self, options: RunOptions) -> None:
        """Prepare a run of ``options`` on a clock of its own; :meth:`run` runs it."""
        self._options = options
        self.clock = ManualClock()
        self._members: list[_Member] = []
        # the fleet's own tasks: its start, and each instance fault
        self._tasks: list[asyncio.Task[None]] = []
        self._world: World | None = None

    async def run(self) -> SimulationReport:
        """Start the fleet, inject the faults, advance to the end, check; then tear down."""
        options = self._options
        rng = random.Random(options.seed)  # noqa: S311 -- chance for a simulation, not secrets
        store = FaultyStore(InMemoryLockStore(clock=self.clock), clock=self.clock)
        world = self._world = World(
            self.clock, store, rng, tick_jitter_ms=options.faults.tick_jitter_ms
        )
        names = [f"instance-{number}" for number in range(1, options.instances + 1)]
        offset_ms = options.faults.clock_offset_ms
        self._members = [_Member(name, rng.randint(0, offset_ms)) for name in names]
        plan = plan_faults(
            rng,
            options.faults,
            instances=names,
            duration_ms=options.duration_ms,
            ttl_ms=options.ttl_ms,
        )
        try:
            # a task of its own, on the clock: a setup may wait on simulated time
            self._spawn(self._start_fleet())
            for fault in plan:
                self.clock.call_at(fault.at_ms, functools.partial(self._inject, fault))
            await self.clock.advance(_ms(options.duration_ms))
            world.trace.close()
            self._raise_what_failed()
            return self._report(world, plan)
        finally:
            world.trace.close()
            await self._tear_down()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run the fleet's own ``work`` (a start, a fault) in a task; what it raises is raised."""
        self._tasks.append(asyncio.get_running_loop().create_task(work))

    def _raise_what_failed(self) -> None:
        """Raise what a setup (or anything else of the fleet's own) raised during the run."""
        for task in self._tasks:
            failed = task.exception() if task.done() and not task.cancelled() else None
            if failed is not None:
                raise failed

    async def _start_fleet(self) -> None:
        """Start the instances one after the other, each with its clock's offset."""
        assert self._world is not None  # noqa: S101 -- set by run() first
        for member in self._members:
            self._world.trace.record(
                member.name, f"clock {member.offset_ms} ms ahead of the store's"
            )
            await self._start_life(member)

    async def _start_life(self, member: _Member) -> None:
        assert self._world is not None  # noqa: S101 -- set by run() first
        number = len(member.lives) + 1
        life = Life(member.name, number, member.offset_ms, self._world, self._options.ttl_ms)
        member.lives.append(life)
        await life.start(self._options.setup)

    async def _inject(self, fault: InjectedFault) -> None:
        world = self._world
        assert world is not None  # noqa: S101 -- faults are armed by run()
        world.trace.record(fault.instance, str(fault).split(maxsplit=3)[-1])
        if fault.kind == "store-outage":
            world.store.fail(None, lasting=_ms(fault.lasting_ms))
        elif fault.kind == "slow-store":
            world.store.delay(
                None, _ms(fault.late_by_ms), on=fault.on, lasting=_ms(fault.lasting_ms)
            )
        elif fault.kind == "lost-answer":
            # the next such call anywhere, within a ttl
            world.store.lose_answer(fault.method, times=1, lasting=_ms(self._options.ttl_ms))
        else:
            member = next(member for member in self._members if member.name == fault.instance)
            # instance faults take time (a shutdown, a downtime): their own task, so the clock
            # goes on meanwhile
            self._spawn(self._strike(member, fault))

    async def _strike(self, member: _Member, fault: InjectedFault) -> None:
        world = self._world
        assert world is not None  # noqa: S101 -- faults are armed by run()
        life = member.life
        if not life.up:
            world.trace.record(member.name, f"{fault.kind} skipped: the instance is not up")
            return
        if fault.kind == "pause":
            life.freeze()
            await world.sleep(fault.lasting_ms)
            world.trace.record(member.name, "resumed")
            life.thaw()
            return
        if fault.kind == "kill":
            life.kill()
        else:
            await life.shut_down()
            world.trace.record(member.name, "shut down")
        await world.sleep(fault.lasting_ms)
        await self._start_life(member)

    def _report(self, world: World, plan: list[InjectedFault]) -> SimulationReport:
        options = self._options
        trace = tuple(world.trace.events)
        record = SimulationRecord(tuple(world.effects), trace, world.objects)
        violations = tuple(
            replace(violation, trace=lead_up(violation, trace, options.ttl_ms))
            for invariant in options.invariants
            for violation in invariant.violations(record)
        )
        return SimulationReport(
            seed=options.seed,
            replay=options.replay,
            instances=options.instances,
            duration_ms=options.duration_ms,
            faults=tuple(plan),
            violations=violations,
            trace=trace,
            effects=record.effects,
            digest=digest(trace),
        )

    async def _tear_down(self) -> None:
        """Close every life's Locks, unrecorded, so nothing of the run outlives it."""
        for task in self._tasks:
            task.cancel()
        closing = [
            asyncio.get_running_loop().create_task(life.tear_down())
            for member in self._members
            for life in member.lives
        ]
        for _ in range(_TEAR_DOWN_STEPS):
            await wait_all_tasks_blocked()
            if all(task.done() for task in closing):
                break
            await self.clock.advance(_ms(self._options.ttl_ms))
        for task in closing:
            task.cancel()
        await asyncio.gather(*closing, *self._tasks, return_exceptions=True)


def _ms(milliseconds: int) -> timedelta:
    # a bare number is seconds to every Duration: milliseconds go as a timedelta
    return timedelta(milliseconds=milliseconds)
