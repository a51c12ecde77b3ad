"""simulate() and check_seeds(): your application's fleet under faults, from a seed, in one line.

Why a run replays exactly: one seeded ``random.Random`` draws every choice, in an order the run
itself fixes; timers fire in order of due time, ties in the order they were set; asyncio's ready
queue is first-in first-out, and a fresh event loop holds nothing else; leaselock iterates
nothing in an order that memory addresses or string hashes decide; the trace holds no owner id,
task name or wall-clock time. Nothing waits for real and nothing reads the system's clocks: the
loop's time and the wall clock are the simulation's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Final, final

from .._clock import wall_time_from
from .._durations import Duration, parse_ttl
from .._errors import LocksConfigurationError
from ._clock import ManualClock
from ._sim_faults import Faults
from ._sim_instance import Setup
from ._sim_invariants import Check, Invariant, as_invariant
from ._sim_report import SimulationReport
from ._sim_run import WALL_EPOCH, RunOptions, SimulatedRun

__all__ = ["check_seeds", "simulate"]

_DEFAULT_INSTANCES: Final = 3
_DEFAULT_DURATION: Final = "10m"
_DEFAULT_TTL: Final = "30s"
_MAX_INSTANCES: Final = 64


def simulate(
    setup: Setup,
    *,
    seed: int,
    instances: int = _DEFAULT_INSTANCES,
    duration: Duration = _DEFAULT_DURATION,
    ttl: Duration = _DEFAULT_TTL,
    faults: Faults | None = None,
    invariants: Sequence[Invariant | Check] = (),
) -> SimulationReport:
    """Run a fleet of your application in one process, under seeded faults; check invariants.

    Each of ``instances`` instances runs ``setup`` on a :class:`SimulatedInstance` of its own:
    a ``Locks`` on one shared in-memory store, a clock offset from the store's, and
    :meth:`~SimulatedInstance.every` to fire its jobs. For ``duration`` of simulated time
    (milliseconds of real time), the instances tick, and ``faults`` strike them and the store,
    all drawn from ``seed``. Then every invariant reads what the run recorded.

    The same arguments give the same run, event for event: a failing seed is a regression test
    in one line (:attr:`SimulationReport.replay`). It runs on an event loop of its own, never
    waits for real, and never reads the system's clocks or opens a connection.

    Args:
        setup: called for every life of every instance (``setup(instance)``, sync or async):
            makes the jobs (fresh objects: one instance's jobs are not another's), registers
            them (``instance.locks.register(job)``) and schedules them
            (``instance.every("1m", job.run)``).
        seed: the seed every choice is drawn from.
        instances: how many instances the fleet has.
        duration: how long the run lasts, in simulated time.
        ttl: every instance's ``Locks`` ttl.
        faults: what to inject (default :class:`Faults`; ``Faults.none()`` for none).
        invariants: what must hold: :func:`at_most_once`, :func:`no_stale_writes`,
            :func:`leaders_never_overlap`, or your own function of the
            :class:`SimulationRecord` that returns the violations it finds.

    Returns:
        The run's report; ``report.ok`` says whether every invariant held.

    Raises:
        LocksConfigurationError: a bad argument, or called where an event loop runs (a ``async
            def`` test): call it from sync code.

    .. versionadded:: 0.3
    """
    run = SimulatedRun(
        _checked(
            setup,
            seed=seed,
            instances=instances,
            duration=duration,
            ttl=ttl,
            faults=faults,
            invariants=invariants,
        )
    )
    if _loop_running():
        raise LocksConfigurationError(
            "simulate() runs an event loop of its own, and one runs in this thread already; call "
            "it from a plain def (a sync test), or from a thread: await asyncio.to_thread("
            "simulate, ...)"
        )
    loop = _SimulationLoop(run.clock)
    try:
        # the simulated wall clock: what events and run records read (leaselock._clock)
        with wall_time_from(lambda: _wall_time(run.clock)):
            return loop.run_until_complete(run.run())
    finally:
        _close(loop)


def check_seeds(
    setup: Setup,
    seeds: int | Iterable[int] = 100,
    *,
    instances: int = _DEFAULT_INSTANCES,
    duration: Duration = _DEFAULT_DURATION,
    ttl: Duration = _DEFAULT_TTL,
    faults: Faults | None = None,
    invariants: Sequence[Invariant | Check] = (),
) -> None:
    """Simulate ``seeds`` (a count from 0, or the seeds) and fail at the first that breaks one.

    For a test::

        def test_the_shop_keeps_its_invariants():
            check_seeds(shop, 200, invariants=[no_stale_writes("products")])

    Raises:
        AssertionError: a seed broke an invariant; the message is its report (violations, what
            led to them, the faults) and the one-line regression test to paste.
        LocksConfigurationError: a bad argument (see :func:`simulate`).

    .. versionadded:: 0.3
    """
    if isinstance(seeds, bool) or not isinstance(seeds, int | Iterable):
        raise LocksConfigurationError(f"seeds={seeds!r}; pass a count (200) or the seeds")
    for passed, seed in enumerate(range(seeds) if isinstance(seeds, int) else seeds):
        report = simulate(
            setup,
            seed=seed,
            instances=instances,
            duration=duration,
            ttl=ttl,
            faults=faults,
            invariants=invariants,
        )
        if not report.ok:
            message = (
                f"{report.summary()}\n\n{passed} seeds passed before seed {seed} failed. "
                f"Paste this regression test; it replays the run exactly:\n\n"
                f"    assert {report.replay}.ok"
            )
            raise AssertionError(message)


@final
class _SimulationLoop(asyncio.SelectorEventLoop):
    """An event loop whose time is the simulation's: it never reads the system's clock.

    ``asyncio.sleep`` and timeouts in simulated code then run on simulated time too, though
    only :meth:`SimulatedInstance.sleep` is held by a pause.
    """

    def __init__(self, clock: ManualClock) -> None:
        self._simulated = clock
        super().__init__()

    def time(self) -> float:
        """Return the simulation's time, in seconds."""
        return self._simulated.now_ms() / 1000


def _checked(
    setup: Setup,
    *,
    seed: object,
    instances: object,
    duration: Duration,
    ttl: Duration,
    faults: Faults | None,
    invariants: Sequence[Invariant | Check],
) -> RunOptions:
    """Check simulate()'s arguments; each error names the one that is wrong."""
    if not callable(setup):
        raise LocksConfigurationError(
            f"setup={setup!r} is not callable; pass your application's setup, a function "
            "of the SimulatedInstance that registers and schedules its jobs"
        )
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise LocksConfigurationError(f"seed={seed!r}; pass an int")
    if isinstance(instances, bool) or not isinstance(instances, int):
        raise LocksConfigurationError(f"instances={instances!r}; pass an int from 1")
    if not 1 <= instances <= _MAX_INSTANCES:
        raise LocksConfigurationError(f"instances={instances!r}; pass from 1 to {_MAX_INSTANCES}")
    if faults is not None and not isinstance(faults, Faults):
        raise LocksConfigurationError(
            f"faults={faults!r}; pass Faults(...), Faults.none(), or None for the defaults"
        )
    checked = tuple(as_invariant(invariant) for invariant in invariants)
    return RunOptions(
        setup=setup,
        seed=seed,
        instances=instances,
        duration_ms=parse_ttl(duration, name="duration"),
        ttl_ms=parse_ttl(ttl),
        faults=Faults() if faults is None else faults,
        invariants=checked,
        replay=_replay_line(
            setup,
            seed=seed,
            instances=instances,
            duration=duration,
            ttl=ttl,
            faults=faults,
            invariants=checked,
        ),
    )


def _wall_time(clock: ManualClock) -> datetime:
    """The simulated wall clock: the same start in every run, moving with the clock."""
    return WALL_EPOCH + timedelta(milliseconds=clock.now_ms())


def _replay_line(
    setup: Setup,
    *,
    seed: int,
    instances: int,
    duration: Duration,
    ttl: Duration,
    faults: Faults | None,
    invariants: tuple[Invariant, ...],
) -> str:
    """The call that replays a run: ``simulate(<setup's name>, seed=..., <what was given>)``."""
    arguments = [getattr(setup, "__name__", "setup"), f"seed={seed}"]
    if instances != _DEFAULT_INSTANCES:
        arguments.append(f"instances={instances}")
    if duration != _DEFAULT_DURATION:
        arguments.append(f"duration={duration!r}")
    if ttl != _DEFAULT_TTL:
        arguments.append(f"ttl={ttl!r}")
    if faults is not None:
        arguments.append(f"faults={faults!r}")
    if invariants:
        arguments.append(f"invariants=[{', '.join(map(repr, invariants))}]")
    return f"simulate({', '.join(arguments)})"


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left on ``loop`` (nothing of a finished run should be), and close it."""
    try:
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
