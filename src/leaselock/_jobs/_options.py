"""The options of the job decorators, declared and documented once for every form of them.

``Locks.on_one_instance``, ``leaselock.on_one_instance`` and ``SyncLocks.on_one_instance`` (and
the same three of ``without_overlapping``) take their options as ``**options`` typed by these
``TypedDict`` (PEP 692): a type checker knows each name and type, and :func:`checked_options`
refuses at run time a name the form does not take. The sync forms have no ``cancel_on_loss``:
a thread cannot be cancelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, TypedDict

from .._durations import Duration
from .._errors import LocksConfigurationError
from ._spec import JobKind, Overlap

__all__ = [
    "OPTIONS_OF",
    "AnyJobOptions",
    "OnOneInstanceOptions",
    "SyncOnOneInstanceOptions",
    "SyncWithoutOverlappingOptions",
    "WithoutOverlappingOptions",
    "checked_options",
]


class _Watched(TypedDict, total=False):
    """What every job may ask for, besides its key and ttl.

    Attributes:
        expect_every: a dead-man's switch: when no run succeeded anywhere for this long (plus
            a tenth of it), every running instance that sees the job's ticks emits
            ``job-overdue`` and a WARNING (again each ``expect_every`` while it lasts), and
            ``job-recovered`` once a run succeeds.
        alert_after_failures: after this many runs in a row raised (default 3), a
            ``job-failing`` event (ERROR), once per streak.
        pause_after_failures: after this many runs in a row raised, pause the job in the store
            (``Locks.pause``): every instance skips it until an operator resumes it.
        recover: a run whose instance died is run again at once, by an instance that skipped a
            tick meanwhile (``trigger="recover"``; ``current_run().abandoned`` is the dead
            run), instead of at the next tick.
        every: the job's schedule, declared (the scheduler's own, restated): ticks at whole
            multiples of this interval since the Unix epoch (UTC). Each tick then runs once
            wherever it fires: the store keeps the last tick started, and refuses a start for
            it or an earlier one (``tick-skipped``, reason ``"tick-already-run"``), across
            restarts, handovers and clocks apart by less than half the interval.
        cron: the same, as a cron expression (``"30 2 * * *"``) on the clock of ``timezone``;
            needs ``pip install 'leaselock[cron]'`` (croniter).
        timezone: the IANA time zone of ``cron`` (default ``"UTC"``).
        fall_back: a ``cron`` time that the local clock repeats when daylight saving ends is
            one tick, its first (``"once"``, the default), or two (``"twice"``).
    """

    expect_every: Duration | None
    alert_after_failures: int | None
    pause_after_failures: int | None
    recover: bool
    every: Duration | None
    cron: str | None
    timezone: str | None
    fall_back: Literal["once", "twice"]


class SyncOnOneInstanceOptions(_Watched, total=False):
    """The options of ``SyncLocks.on_one_instance``: ``on_one_instance``'s but cancel_on_loss.

    Attributes:
        owner_idle: hand the lease back, logged at INFO, when no tick came for this long
            after the last one here ended (its run, or its skip): idle time, never counted
            while a tick runs (default: three times the interval between the ticks it saw, a
            second at least), so another instance takes over from one whose scheduler stopped
            while its process lives.
        catch_up: ``"latest"``: a tick skipped because another instance owns the job is
            looked at again once that owner's lease would have expired; if the owner never
            started it (it died), the job runs once now (``trigger="catch-up"``, and a
            ``job-missed`` event), never once per missed tick.
        catch_up_window: how old a missed tick may be to be caught up (default
            ``expect_every``; one of the two is needed with ``catch_up``).

    .. versionadded:: 0.2
    """

    owner_idle: Duration | None
    catch_up: Literal["latest"] | None
    catch_up_window: Duration | None


class SyncWithoutOverlappingOptions(_Watched, total=False):
    """The options of ``SyncLocks.without_overlapping``: its own but ``cancel_on_loss``.

    Attributes:
        min_hold: keep the run lock at least this long after the run STARTED, even if it
            ended sooner (ShedLock's ``lockAtLeastFor``): the same tick fired by several
            schedulers (a Celery beat per replica) then runs once. Keep it below the interval
            between ticks.
        max_run: a cap on a run (ShedLock's ``lockAtMostFor``): past it, the run's signal
            aborts (``detected_by="max_run"``), its run lock is released so the next tick can
            start, and a WARNING names the job and how long it ran.
        overlap: what a tick that finds a run in progress does: ``"skip"`` (the default);
            ``"buffer_one"``: one more run right after the running one, on its instance (many
            ticks meanwhile make one run, not a backlog); ``"replace"``: the tick's run takes
            the run lock with a greater token, the running run's signal aborts
            (``detected_by="replaced"`` in this process, ``"renewal"`` on another instance, at
            its next renewal), an async run is cancelled, and its late writes are refused by
            fencing.

    .. versionadded:: 0.2
    """

    min_hold: Duration | None
    max_run: Duration | None
    overlap: Overlap


class OnOneInstanceOptions(SyncOnOneInstanceOptions, total=False):
    """The options of ``on_one_instance`` (``Locks``' and the shared decorator).

    Attributes:
        cancel_on_loss: cancel an async run when its lock is lost; it then raises
            :class:`~leaselock.LockLostError`.

    With those of :class:`SyncOnOneInstanceOptions`.

    .. versionadded:: 0.2
    """

    cancel_on_loss: bool


class WithoutOverlappingOptions(SyncWithoutOverlappingOptions, total=False):
    """The options of ``without_overlapping`` (``Locks``' and the shared decorator).

    Attributes:
        cancel_on_loss: cancel an async run when its lock is lost (its ``max_run`` cap
            included); it then raises :class:`~leaselock.LockLostError`.

    With those of :class:`SyncWithoutOverlappingOptions`.

    .. versionadded:: 0.2
    """

    cancel_on_loss: bool


class AnyJobOptions(OnOneInstanceOptions, WithoutOverlappingOptions, total=False):
    """Every option of every job decorator: what the one function behind them all takes."""


OPTIONS_OF: Final[Mapping[tuple[JobKind, bool], frozenset[str]]] = {
    ("on_one_instance", False): OnOneInstanceOptions.__optional_keys__,
    ("on_one_instance", True): SyncOnOneInstanceOptions.__optional_keys__,
    ("without_overlapping", False): WithoutOverlappingOptions.__optional_keys__,
    ("without_overlapping", True): SyncWithoutOverlappingOptions.__optional_keys__,
}


def checked_options(
    kind: JobKind, options: Mapping[str, object], *, sync: bool = False
) -> Mapping[str, object]:
    """Return ``options`` if ``kind`` takes every one of them (``sync``: its sync form).

    Raises:
        LocksConfigurationError: an option the form does not take, named with those it does.
    """
    allowed = OPTIONS_OF[kind, sync]
    unknown = sorted(set(options) - allowed)
    if unknown:
        form = f"SyncLocks.{kind}" if sync else kind
        why = (
            "; a thread cannot be cancelled: check current_lock().signal between steps"
            if sync and "cancel_on_loss" in unknown
            else ""
        )
        raise LocksConfigurationError(
            f"{form}() takes no option {', '.join(map(repr, unknown))}{why}; it takes key, ttl "
            f"and {', '.join(sorted(allowed))}"
        )
    return options
