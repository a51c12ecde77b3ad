"""Registry: the jobs and elections of one Locks, and the key conflicts that would hide bugs.

Two jobs with one key, a job key equal to another job's lease ``<key>:owner``, or an election key
equal to a job's key would exclude each other silently; they are refused at start (and at
registration afterwards), naming both.
"""

from __future__ import annotations

from typing import final

from .._durations import check_ttl_floor
from .._errors import LocksConfigurationError
from ._spec import ElectionSpec, JobSpec

__all__ = ["Registry"]


@final
class Registry:
    """Jobs and elections known to one ``Locks``."""

    __slots__ = ("_elections", "_jobs", "_objects")

    def __init__(self) -> None:
        """Create an empty registry."""
        self._jobs: list[JobSpec] = []
        self._objects: dict[JobSpec, object] = {}
        self._elections: dict[ElectionSpec, object | None] = {}

    @property
    def jobs(self) -> tuple[JobSpec, ...]:
        """The registered jobs."""
        return tuple(self._jobs)

    @property
    def elections(self) -> tuple[tuple[ElectionSpec, object | None], ...]:
        """The registered elections, each with its participant (``None``: make one at start)."""
        return tuple(self._elections.items())

    def add_job(self, spec: JobSpec) -> None:
        """Know ``spec`` (once)."""
        if all(known is not spec for known in self._jobs):
            self._jobs.append(spec)

    def add_method_job(self, spec: JobSpec, bound_to: object) -> None:
        """Know ``spec``, a method job of the registered object ``bound_to``."""
        self.add_job(spec)
        self._objects[spec] = bound_to

    def job(self, key: str) -> JobSpec:
        """Return the registered job whose key is ``key``.

        Raises:
            LocksConfigurationError: none is; the message lists the registered keys.
        """
        for spec in self._jobs:
            if spec.key == key:
                return spec
        known = ", ".join(repr(spec.key) for spec in self._jobs) or "none"
        raise LocksConfigurationError(
            f"No job {key!r} is registered with this Locks (registered: {known}); register the "
            "job (locks.register(...)) on the instance that should run it, and pass its key"
        )

    def bound_args(self, spec: JobSpec) -> tuple[object, ...]:
        """Return the arguments that bind ``spec``'s function: its object, for a method job."""
        bound = self._objects.get(spec)
        return () if bound is None else (bound,)

    def add_election(self, spec: ElectionSpec, participant: object | None) -> None:
        """Know the election ``spec``; a registered participant replaces an earlier one.

        Raises:
            LocksConfigurationError: the election already has a different participant.
        """
        known = self._elections.get(spec)
        if known is not None and participant is not None and known is not participant:
            raise LocksConfigurationError(
                f"Election {spec.key!r} already has the participant {known!r}; a Locks campaigns "
                f"once per election: register one of {known!r} and {participant!r}"
            )
        if known is None:
            self._elections[spec] = participant

    def participants(self) -> list[tuple[ElectionSpec, object]]:
        """Return every election with its participant, making one where none was registered.

        Raises:
            LocksConfigurationError: a class under ``leader_election`` needs arguments.
        """
        resolved: list[tuple[ElectionSpec, object]] = []
        for spec, registered in self._elections.items():
            participant = registered
            if participant is None:
                participant = spec.target if spec.runs_a_duty else _instantiate(spec)
                self._elections[spec] = participant
            resolved.append((spec, participant))
        return resolved

    def check(self, min_ttl_ms: int) -> None:
        """Refuse keys that would exclude each other silently, and ttls the clock cannot honour.

        Raises:
            LocksConfigurationError: naming both parties of the first conflict found, or the
                job or election whose ttl is shorter than ``min_ttl_ms``.
        """
        self._check_ttls(min_ttl_ms)
        self._check_keys()

    def check_job_control(self, store: object, *, keeps_job_control: bool) -> None:
        """Refuse an ``overlap``, ``catch_up``, ``recover`` or schedule the store cannot keep.

        Raises:
            LocksConfigurationError: a job asks for one and the store keeps no job control, or
                asks to catch up with no window.
        """
        for spec in self._jobs:
            if spec.catch_up and not (spec.catch_up_window_ms or spec.expect_every_ms):
                raise LocksConfigurationError(
                    f'{spec.describe()} has catch_up="latest" but no catch_up_window and no '
                    "expect_every: pass catch_up_window=..., how old a missed tick may be to be "
                    "caught up"
                )
            asks = [
                name
                for name, asked in (
                    (f'overlap="{spec.overlap}"', spec.overlap != "skip"),
                    ('catch_up="latest"', spec.catch_up),
                    ("recover=True", spec.recover),
                    (
                        "a declared schedule (every= or cron=)",
                        spec.schedule is not None,
                    ),
                )
                if asked
            ]
            if asks and not keeps_job_control:
                raise LocksConfigurationError(
                    f"{spec.describe()} has {', '.join(asks)}, which needs a store that keeps "
                    f"job control (leaselock.stores.SupportsJobControl), and {store!r} does "
                    "not; use a shipped store, or leave them out"
                )

    def _check_ttls(self, min_ttl_ms: int) -> None:
        for spec in self._jobs:
            for ttl_ms in (spec.one_instance_ttl_ms, spec.no_overlap_ttl_ms):
                if ttl_ms is not None:
                    check_ttl_floor(ttl_ms, min_ttl_ms, name=f"the ttl of {spec.describe()}")
        for election in self._elections:
            if election.ttl_ms is not None:
                check_ttl_floor(
                    election.ttl_ms, min_ttl_ms, name=f"the ttl of election {election.describe()}"
                )

    def _check_keys(self) -> None:
        owners: dict[str, str] = {}

        def claim(key: str, who: str, fix: str) -> None:
            other = owners.get(key)
            if other is not None:
                raise LocksConfigurationError(
                    f"{other} and {who} both use the key {key!r}, so they would exclude each "
                    f"other silently; {fix}"
                )
            owners[key] = who

        for spec in self._jobs:
            claim(spec.key, f"the job {spec.describe()}", "give one of them key=...")
        for spec in self._jobs:
            if spec.one_instance:
                claim(
                    spec.lease_key,
                    f"the lease of the job {spec.describe()}",
                    "rename the job whose key ends in ':owner'",
                )
        for election in self._elections:
            claim(
                election.key,
                f"the election {election.describe()}",
                "give the election a key of its own",
            )


def _instantiate(spec: ElectionSpec) -> object:
    try:
        return spec.target()
    except TypeError as error:
        raise LocksConfigurationError(
            f"The election {spec.describe()} needs an instance of {spec.target.__qualname__}, "
            f"which cannot be made without arguments ({error}); register one: "
            f"locks.register({spec.target.__qualname__}(...))"
        ) from error
