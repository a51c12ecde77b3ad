"""A bounded torture test of a real store: worker processes, a nemesis, and the history's verdict.

Worker processes take one key again and again on the store under test and make fenced writes to
a resource (a SQLite file of the check's own, written as its ``FencedResource`` writes: by
default a conditional UPDATE); a nemesis pauses holders past the ttl (SIGSTOP) until another
worker has taken the key and written, kills holders (SIGKILL, then starts new workers) and,
when it is given a way, crashes the store. Every store call and write is recorded
(:mod:`leaselock.testing.history`) and checked at the end; a run that lacks the evidence for a
verdict ends inconclusive (:mod:`._check_verdict`).

The run's time starts once every worker is ready (interpreter up, store open), so a slow start
on a busy machine shortens nothing. Time here is real on purpose: real processes, paused and
killed for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import math
import multiprocessing
import os
import random
import signal
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Final, Literal, TypeAlias, final
from urllib.parse import urlsplit

from .._durations import Duration, parse_ttl
from .._errors import LockNotAcquiredError, LocksConfigurationError, LockStoreError
from .._locks import Locks
from .._redact import redact_secrets
from ..stores import SupportsDiscard, store_from_url
from ._check_resource import RESOURCE_TABLE, FencedResource, SqliteResource
from ._check_tally import Tally
from ._check_verdict import (
    MIN_ACQUISITIONS,
    MIN_ACQUISITIONS_PER_WORKER,
    CheckResult,
    Fault,
    StoreFault,
    judge,
)
from .history import HistoryRecorder, check_history

__all__ = ["CheckResult", "check_store"]

_NS_PER_S: Final = 1_000_000_000
# an interpreter, the store's driver and its first connection, on a loaded machine
STARTUP_TIMEOUT_S: Final = 120.0
PROGRESS_EVERY_S: Final = 5.0
_POLL_S: Final = 0.01
# a pause lasts at least this many ttls, and at most _PAUSE_MAX_TTLS waiting for a takeover
_PAUSE_MIN_TTLS: Final = 1.6
_PAUSE_MAX_TTLS: Final = 8.0
# a run that lacks evidence is moved on by this much at a time, this long before its end
_EXTENSION_NS: Final = 2 * _NS_PER_S

_FaultKind: TypeAlias = Literal["pause", "kill"] | StoreFault


@final
@dataclass(frozen=True)
class _Job:
    """What every worker does (picklable: workers are spawned)."""

    url: str
    factory: str | None
    prefix: str
    key: str
    files: Path
    ttl_ms: int
    resource: FencedResource
    # CLOCK_MONOTONIC ns when the workers stop; 0 until every worker is ready. Lock-free: a
    # worker killed or paused while reading it must not block the others
    until_ns: Synchronized[int]


def check_store(
    url: str,
    *,
    factory: str | None = None,
    seconds: float = 60,
    workers: int = 4,
    ttl: Duration = "1s",
    at_most: float | None = None,
    restart: Callable[[], None] | None = None,
    failover: Callable[[], None] | None = None,
    directory: Path | None = None,
    progress: Callable[[str], None] | None = None,
    resource: FencedResource | None = None,
) -> CheckResult:
    """Torture the store at ``url`` for ``seconds``, then check its history.

    Args:
        url: the store, as :func:`leaselock.stores.store_from_url` takes it.
        factory: ``"package.module:callable"`` making your own store from ``url`` instead.
        seconds: how long the workers run, counted from when every one of them is ready.
        workers: how many worker processes share the key (killed ones are replaced).
        ttl: the lease length; a pause lasts 1.6 times it, or longer until another worker
            has taken the key and written.
        at_most: if the run still lacks evidence after ``seconds`` (a slow store, a loaded
            machine), it goes on until it has it, ``at_most`` seconds in all; ``None``: it
            stops at ``seconds`` whatever it has.
        restart: crashes and restarts the store, if the check may (never a production server).
        failover: makes a highly available store fail over (promotes a replica, kills the
            leader), if the check may; the run then needs at least one.
        directory: where the history and the resource go (default: a temporary directory).
        progress: called with a line of progress (time, acquisitions, faults) at least every
            5 s while the workers run.
        resource: how the workers make their fenced writes (default: :class:`SqliteResource`,
            a conditional UPDATE); the check counts the stale writes it accepts.

    Returns:
        The result: ``result.verdict`` is ``"failed"`` if any promise was broken,
        ``"inconclusive"`` if the run lacked the evidence to pass (``result.missing`` says
        what, and how to get it), else ``"ok"``.

    Raises:
        LocksConfigurationError: a bad argument, or the store or the workers cannot start (the
            message says why and how to fix it).

    .. versionadded:: 0.2
    .. versionchanged:: 0.3
       ``resource``.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 2:  # noqa: PLR2004 -- a race needs two
        raise LocksConfigurationError(f"workers={workers!r}; pass an int of at least 2")
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or seconds <= 0
    ):
        raise LocksConfigurationError(f"seconds={seconds!r}; pass a number of seconds above 0")
    if at_most is not None and (
        isinstance(at_most, bool) or not isinstance(at_most, int | float) or at_most < seconds
    ):
        raise LocksConfigurationError(
            f"at_most={at_most!r}; pass a number of seconds of at least seconds={seconds!r}, "
            "or None"
        )
    ttl_ms = parse_ttl(ttl)
    run_id = uuid.uuid4().hex[:8]
    prefix = _prefix_for(url, run_id)
    asyncio.run(_preflight(url, factory, prefix))
    context = multiprocessing.get_context("spawn")
    try:
        with contextlib.ExitStack() as stack:
            files = directory or Path(stack.enter_context(tempfile.TemporaryDirectory()))
            job = _Job(
                url,
                factory,
                prefix,
                f"leaselock-check:{run_id}",
                files,
                ttl_ms,
                SqliteResource() if resource is None else resource,
                context.RawValue("q", 0),
            )
            store_faults: dict[StoreFault, Callable[[], None] | None] = {
                "restart": restart,
                "failover": failover,
            }
            nemesis = _Nemesis(
                job,
                workers,
                context,
                {kind: fault for kind, fault in store_faults.items() if fault is not None},
                progress,
            )
            nemesis.run(seconds, at_most=seconds if at_most is None else at_most)
            return judge(
                check_history(files / "history.jsonl"),
                nemesis.faults,
                nemesis.slots,
                workers=workers,
                seconds=nemesis.ran_s,
                store_faults=nemesis.store_faults.keys(),
            )
    finally:
        asyncio.run(_discard(url, factory, prefix))


def _prefix_for(url: str, run_id: str) -> str:
    """A key prefix of the check's own, in the form the URL's store takes."""
    separator = "/" if urlsplit(url).scheme.startswith("etcd") else ":"
    return f"leaselock-check{separator}{run_id}{separator}"


async def _preflight(url: str, factory: str | None, prefix: str) -> None:
    """Open the store once here, so a bad URL or an unreachable server fails at once."""
    try:
        async with Locks(store=store_from_url(url, factory=factory, prefix=prefix)):
            pass
    except LockStoreError as error:
        raise LocksConfigurationError(str(error)) from None


async def _discard(url: str, factory: str | None, prefix: str) -> None:
    """Remove what the check wrote under its own prefix, where the store can."""
    store = store_from_url(url, factory=factory, prefix=prefix)
    if not isinstance(store, SupportsDiscard):
        return
    try:
        async with Locks(store=store):
            await store.discard_prefix()
    except LockStoreError as error:
        logging.getLogger("leaselock").warning(
            "Could not remove the check's keys (prefix %r) from the store: %s", prefix, error
        )


@final
class _Nemesis:
    """Starts the workers, then pauses and kills them, and fails the store, until the time is up."""

    def __init__(
        self,
        job: _Job,
        workers: int,
        context: multiprocessing.context.SpawnContext,
        store_faults: Mapping[StoreFault, Callable[[], None]],
        progress: Callable[[str], None] | None,
    ) -> None:
        self.job = job
        self.workers = workers
        self.context = context
        self.store_faults = store_faults
        self.progress = progress
        self.processes: list[BaseProcess] = []
        self.slots: dict[str, int] = {}
        self.faults: list[Fault] = []
        self.rng = random.Random()  # noqa: S311 -- choosing faults, not secrets
        self.holding = job.files / "holding"
        self.ready = job.files / "ready"
        self.tally = Tally(job.files / "history.jsonl")
        self.pause_took_over = False
        self.most_ns = 0
        self.started_ns = 0
        self.reported_ns = 0
        self.ran_s = 0.0
        # A holder paused in the middle of its write (or of opening or closing the file) holds
        # the file's lock. In WAL mode, and with this connection open all along (so a worker's
        # close is never the last one, which checkpoints under an exclusive lock), the nemesis
        # still reads the token, and so ends the pause; else it waited for that lock while the
        # holder waited for it, until a 30 s timeout failed the run.
        self.resource = sqlite3.connect(
            job.files / "resource.db", isolation_level=None, timeout=_POLL_S
        )

    def run(self, seconds: float, *, at_most: float) -> None:
        self.holding.mkdir(exist_ok=True)
        self.ready.mkdir(exist_ok=True)
        self.resource.execute("PRAGMA journal_mode=WAL")
        self.job.resource.prepare(self.job.files / "resource.db", self.job.key)
        try:
            for slot in range(self.workers):
                self.spawn(slot)
            self.await_ready()
            self.started_ns = self.reported_ns = time.monotonic_ns()
            self.job.until_ns.value = self.started_ns + int(seconds * _NS_PER_S)
            self.most_ns = self.started_ns + int(at_most * _NS_PER_S)
            self.say(f"{self.workers} workers ready; running {seconds:g} s")
            self.make_faults()
            self.idle_until(self.job.until_ns.value)
            self.ran_s = (time.monotonic_ns() - self.started_ns) / _NS_PER_S
        finally:
            self.stop_workers()
            self.resource.close()

    def spawn(self, slot: int) -> None:
        process = self.context.Process(target=work, args=(self.job,), daemon=True)
        process.start()
        self.processes.append(process)
        self.slots[f"worker-{process.pid}"] = slot

    def await_ready(self) -> None:
        """Wait until every worker has opened the store; raise if one died or none came."""
        deadline_ns = time.monotonic_ns() + int(STARTUP_TIMEOUT_S * _NS_PER_S)
        while len(list(self.ready.iterdir())) < self.workers:
            failed = sorted(self.job.files.glob("failed-*"))
            if failed:
                raise LocksConfigurationError(
                    f"a worker could not start: {failed[0].read_text().strip()}"
                )
            if time.monotonic_ns() > deadline_ns:
                raise LocksConfigurationError(
                    f"the {self.workers} workers did not all open the store within "
                    f"{STARTUP_TIMEOUT_S:g} s; check that the server takes "
                    f"{self.workers + 1} more connections, or pass fewer --workers"
                )
            time.sleep(_POLL_S)  # noqa: TID251 -- waiting for real processes

    def make_faults(self) -> None:
        """One fault of each kind first, so a run long enough has every one; then at random."""
        first: list[_FaultKind] = ["pause", "kill", *self.store_faults]
        kinds: list[_FaultKind] = ["pause", "kill", "pause", *self.store_faults]
        for kind in itertools.chain(first, itertools.cycle(kinds)):
            gap_ns = int(self.rng.uniform(0.3, 0.9) * _NS_PER_S)
            if not self.idle_until(time.monotonic_ns() + gap_ns):
                return
            if kind == "pause":
                self.pause()
            elif kind == "kill":
                self.kill()
            else:
                self.fail_store(kind)

    def idle_until(self, when_ns: int) -> bool:
        """Wait until ``when_ns`` (or the run's end), reporting progress; whether time is left."""
        while (now_ns := time.monotonic_ns()) < min(when_ns, self.job.until_ns.value):
            self.report_progress(now_ns)
            time.sleep(_POLL_S)  # noqa: TID251 -- the nemesis acts in real time
        return time.monotonic_ns() < self.job.until_ns.value

    def keep_going(self, now_ns: int) -> None:
        """Move the run's end on while it lacks evidence, up to ``at_most``.

        Before the end comes: a worker that saw it pass has stopped for good.
        """
        until_ns = self.job.until_ns.value
        if until_ns - now_ns < _EXTENSION_NS and until_ns < self.most_ns and self.lacks_evidence():
            self.job.until_ns.value = min(until_ns + _EXTENSION_NS, self.most_ns)

    def lacks_evidence(self) -> bool:
        """Whether the history so far misses what a verdict needs (the judge has the last word).

        The same evidence as :func:`._check_verdict.judge` asks, as far as a running count tells.
        """
        tally = self.tally
        tally.read()
        per_slot = [0] * self.workers
        for process, count in tally.by_process.items():
            per_slot[self.slots[process]] += count
        kills = [fault for fault in self.faults if fault.kind == "kill"]
        return (
            tally.acquisitions < MIN_ACQUISITIONS
            or min(per_slot) < MIN_ACQUISITIONS_PER_WORKER
            or not self.pause_took_over
            or not any(tally.won_since(kill.start_ns, other_than=kill.process) for kill in kills)
            or not (tally.writes_accepted and tally.writes_refused)
            or any(
                not any(fault.kind == kind for fault in self.faults) for kind in self.store_faults
            )
        )

    def report_progress(self, now_ns: int) -> None:
        self.keep_going(now_ns)
        if now_ns - self.reported_ns < PROGRESS_EVERY_S * _NS_PER_S:
            return
        self.reported_ns = now_ns
        kinds = [fault.kind for fault in self.faults]
        faults = ", ".join(
            f"{kinds.count(kind)} {kind}{'s' * (kinds.count(kind) > 1)}"
            for kind in ("pause", "kill", "restart", "failover")
            if kind in kinds
        )
        self.tally.read()
        self.say(
            f"{(now_ns - self.started_ns) / _NS_PER_S:.0f} s: "
            f"{self.tally.acquisitions} acquisitions; faults: {faults or 'none yet'}"
        )

    def say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)

    def left_ns(self) -> int:
        """How long the run may still last: up to ``at_most`` while it lacks evidence."""
        return self.latest_end_ns() - time.monotonic_ns()

    def latest_end_ns(self) -> int:
        until_ns = self.job.until_ns.value
        return self.most_ns if until_ns < self.most_ns and self.lacks_evidence() else until_ns

    def await_holder(self, needed_ns: int) -> tuple[int, int] | None:
        """A worker holding the key now, as (pid, token), while ``needed_ns`` are left."""
        alive = {process.pid for process in self.processes if process.is_alive()}
        while self.left_ns() > needed_ns:
            holders = [holder for holder in self.holders() if holder[0] in alive]
            if holders:
                return self.rng.choice(holders)
            self.report_progress(time.monotonic_ns())
            time.sleep(_POLL_S)  # noqa: TID251 -- waiting for a real process to take the key
        return None

    def holders(self) -> Iterator[tuple[int, int]]:
        for path in self.holding.iterdir():
            with contextlib.suppress(ValueError, FileNotFoundError):
                yield int(path.name), int(path.read_text())

    def pause(self) -> None:
        """Stop a holder past its ttl, until another worker has taken the key and written.

        The paused holder's own late write must then be refused.
        """
        ttl_ns = self.job.ttl_ms * 1_000_000
        holder = self.await_holder(int(ttl_ns * _PAUSE_MIN_TTLS * 1.5))
        if holder is None:
            return
        pid, token = holder
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
            start_ns = time.monotonic_ns()
            least_ns = start_ns + int(ttl_ns * _PAUSE_MIN_TTLS)
            most_ns = min(start_ns + int(ttl_ns * _PAUSE_MAX_TTLS), self.latest_end_ns())
            while (now_ns := time.monotonic_ns()) < most_ns and (
                now_ns < least_ns or self.resource_token(token) <= token
            ):
                self.report_progress(now_ns)
                time.sleep(_POLL_S)  # noqa: TID251 -- a real pause of a real process
            os.kill(pid, signal.SIGCONT)
            self.faults.append(Fault("pause", f"worker-{pid}", start_ns, time.monotonic_ns()))
            # the pause ended on another worker's write, not on its time limit
            self.pause_took_over |= self.resource_token(token) > token

    def resource_token(self, unknown: int) -> int:
        """The resource's token; ``unknown`` if the file cannot be read at once.

        The connection is open all along, in WAL mode, so a writer stopped in its commit does
        not block it; if the file is busy all the same, waiting for it could wait for the
        pause this read decides the end of.
        """
        try:
            (token,) = self.resource.execute(f"SELECT token FROM {RESOURCE_TABLE}").fetchone()  # noqa: S608 -- a constant table name
        except sqlite3.OperationalError:
            return unknown
        return int(token)

    def kill(self) -> None:
        holder = self.await_holder(self.job.ttl_ms * 3_000_000)
        if holder is None:
            return
        victim = next(process for process in self.processes if process.pid == holder[0])
        killed_at_ns = time.monotonic_ns()
        victim.kill()
        victim.join()
        (self.holding / str(victim.pid)).unlink(missing_ok=True)
        name = f"worker-{victim.pid}"
        self.faults.append(Fault("kill", name, killed_at_ns, killed_at_ns))
        self.spawn(self.slots[name])

    def fail_store(self, kind: StoreFault) -> None:
        start_ns = time.monotonic_ns()
        self.store_faults[kind]()
        self.faults.append(Fault(kind, "store", start_ns, time.monotonic_ns()))

    def stop_workers(self) -> None:
        # workers that never saw a start (the run failed before it) stop at once
        if self.job.until_ns.value == 0:
            self.job.until_ns.value = time.monotonic_ns()
        for process in self.processes:
            process.join(timeout=60)
            if process.exitcode is None:
                process.kill()
                process.join()


def work(job: _Job) -> None:
    """One worker: take the key again and again until the time is up; record it all."""
    # losses are what the nemesis is for: the history tells them, the log need not
    logging.getLogger("leaselock").setLevel(logging.ERROR)
    try:
        asyncio.run(_work(job))
    except (LocksConfigurationError, LockStoreError) as error:
        (job.files / f"failed-{os.getpid()}").write_text(redact_secrets(str(error)))


async def _await_start(job: _Job) -> int:
    """When the run ends (ns); waits for the nemesis to start it."""
    # a value another process sets: there is no event of this loop to await
    while (until_ns := job.until_ns.value) == 0:  # noqa: ASYNC110
        await asyncio.sleep(_POLL_S)  # noqa: TID251 -- waiting for the other real processes
    return until_ns


async def _work(job: _Job) -> None:
    pid = os.getpid()
    holding = job.files / "holding" / str(pid)
    resource = job.files / "resource.db"
    store = store_from_url(job.url, factory=job.factory, prefix=job.prefix)
    recorder = HistoryRecorder(store, job.files / "history.jsonl", process=f"worker-{pid}")
    rng = random.Random(pid)  # noqa: S311 -- pacing, not secrets

    async def write(token: int) -> bool:
        return await asyncio.to_thread(job.resource.write, resource, job.key, token)

    # the work inside a section sometimes outlives a renewal or two
    spans_s = [job.ttl_ms / 1000 * share for share in (0.01, 0.05, 0.1, 0.2, 0.6)]
    async with Locks(store=recorder, ttl=f"{job.ttl_ms}ms") as locks:
        (job.files / "ready" / str(pid)).touch()
        await _await_start(job)
        # read at every turn: the nemesis extends a run that still lacks evidence
        while time.monotonic_ns() < job.until_ns.value:
            try:
                async with locks.hold(job.key, wait=f"{2 * job.ttl_ms}ms") as lock:
                    token = lock.fencing_token
                    holding.write_text(str(token))
                    # the nemesis pauses holders here: the write below then comes late, and the
                    # fence must refuse it once a newer holder has written
                    await asyncio.sleep(rng.choice(spans_s))  # noqa: TID251 -- real work time
                    await recorder.fenced_write(job.key, token, functools.partial(write, token))
                    holding.unlink(missing_ok=True)
                # time away from the key: on a store that cannot wake waiters, the one that
                # just released would otherwise take the key again before any poll finds it
                await asyncio.sleep(rng.choice(spans_s))  # noqa: TID251 -- real work time
            except (LockNotAcquiredError, LockStoreError):
                holding.unlink(missing_ok=True)
                await asyncio.sleep(0.05)  # noqa: TID251 -- back off while the store is away
    recorder.close()
