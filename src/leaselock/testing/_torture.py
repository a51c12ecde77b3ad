"""A bounded torture test of a real store: worker processes, a nemesis, and the history's verdict.

Worker processes take one key again and again on the store under test and make fenced writes to
a resource (a SQLite file of the check's own); a nemesis pauses holders past the ttl (SIGSTOP),
kills workers (SIGKILL, then starts new ones) and, when it is given a way, crashes the store.
Every store call and write is recorded (:mod:`leaselock.testing.history`) and checked at the end.

Time here is real on purpose: real processes, paused and killed for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import multiprocessing
import os
import random
import signal
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import final

from .._durations import Duration, parse_ttl
from .._errors import LockNotAcquiredError, LocksConfigurationError, LockStoreError
from .._locks import Locks
from ..stores import store_from_url
from .history import HistoryRecorder, HistoryReport, check_history

__all__ = ["CheckResult", "check_store"]

_RESOURCE = "fenced_resource"
_NS_PER_MS = 1_000_000


@final
@dataclass(frozen=True)
class _Job:
    """What every worker does (picklable: workers are spawned)."""

    url: str
    factory: str | None
    prefix: str
    key: str
    files: Path
    until_ns: int
    ttl_ms: int


@final
@dataclass
class CheckResult:
    """What :func:`check_store` saw, and the history checker's verdict.

    Attributes:
        report: the checker's report (counts, leases, violations).
        faults: how many pauses, kills and restarts the nemesis made.
        takeovers_ms: after each kill of a holder, how long until another worker held the key.
        seconds: how long the check ran.
    """

    report: HistoryReport
    faults: Counter[str] = field(default_factory=Counter)
    takeovers_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether no promise was broken."""
        return self.report.ok

    def summary(self) -> str:
        """Return the counts and the verdict, one fact a line."""
        faults = ", ".join(f"{count} {name}" for name, count in sorted(self.faults.items()))
        takeover = "no holder was killed"
        if self.takeovers_ms:
            takeover = (
                f"p50 {statistics.median(self.takeovers_ms):.0f} ms, "
                f"max {max(self.takeovers_ms):.0f} ms ({len(self.takeovers_ms)} kills of holders)"
            )
        verdict = (
            "OK: no two holders, tokens grew, no stale write accepted"
            if self.ok
            else (f"FAILED: {len(self.report.violations)} violations")
        )
        return "\n".join(
            [
                f"ran {self.seconds:.0f} s; nemesis: {faults or 'nothing'}",
                self.report.summary(),
                f"takeover after a holder was killed: {takeover}",
                verdict,
            ]
        )


def check_store(
    url: str,
    *,
    factory: str | None = None,
    seconds: float = 60,
    workers: int = 4,
    ttl: Duration = "1s",
    restart: Callable[[], None] | None = None,
    directory: Path | None = None,
) -> CheckResult:
    """Torture the store at ``url`` for ``seconds``, then check its history.

    Args:
        url: the store, as :func:`leaselock.stores.store_from_url` takes it.
        factory: ``"package.module:callable"`` making your own store from ``url`` instead.
        seconds: how long the workers run (the nemesis stops 2 s before).
        workers: how many worker processes share the key (killed ones are replaced).
        ttl: the lease length; pauses last 1.6 times it.
        restart: crashes and restarts the store, if the check may (never a production server).
        directory: where the history and the resource go (default: a temporary directory).

    Returns:
        The result; ``result.ok`` is ``False`` if any promise was broken.

    Raises:
        LocksConfigurationError: a bad argument, or the store cannot start (the message says
            why and how to fix it).

    .. versionadded:: 0.2
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 2:  # noqa: PLR2004 -- a race needs two
        raise LocksConfigurationError(f"workers={workers!r}; pass an int of at least 2")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 3:  # noqa: PLR2004 -- the nemesis needs time to act
        raise LocksConfigurationError(f"seconds={seconds!r}; pass 3 or more")
    ttl_ms = parse_ttl(ttl)
    run_id = uuid.uuid4().hex[:8]
    prefix = f"leaselock-check:{run_id}:"
    asyncio.run(_preflight(url, factory, prefix))
    with contextlib.ExitStack() as stack:
        files = directory or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        started = time.monotonic()  # noqa: TID251 -- real processes, real seconds
        job = _Job(
            url,
            factory,
            prefix,
            f"leaselock-check:{run_id}",
            files,
            time.monotonic_ns() + int(seconds * 1e9),
            ttl_ms,
        )
        nemesis = _Nemesis(job, workers, restart)
        nemesis.run()
        report = check_history(files / "history.jsonl")
        return CheckResult(
            report,
            nemesis.done,
            _takeovers_ms(report, nemesis.kills),
            time.monotonic() - started,  # noqa: TID251 -- real processes, real seconds
        )


async def _preflight(url: str, factory: str | None, prefix: str) -> None:
    """Open the store once here, so a bad URL or an unreachable server fails at once."""
    try:
        async with Locks(store=store_from_url(url, factory=factory, prefix=prefix)):
            pass
    except LockStoreError as error:
        raise LocksConfigurationError(str(error)) from None


def _takeovers_ms(report: HistoryReport, kills: list[tuple[int, str]]) -> list[float]:
    takeovers = []
    for killed_at_ns, process in kills:
        later = [
            lease.start_ns
            for lease in report.leases
            if lease.start_ns > killed_at_ns and lease.process != process
        ]
        if later:
            takeovers.append((min(later) - killed_at_ns) / _NS_PER_MS)
    return takeovers


@final
class _Nemesis:
    """Starts the workers, then pauses, kills and restarts until the time is up."""

    def __init__(self, job: _Job, workers: int, restart: Callable[[], None] | None) -> None:
        self.job = job
        self.workers = workers
        self.restart_store = restart
        self.context = multiprocessing.get_context("spawn")
        self.processes: list[BaseProcess] = []
        self.done: Counter[str] = Counter()
        self.kills: list[tuple[int, str]] = []
        self.rng = random.Random()  # noqa: S311 -- choosing faults, not secrets
        self.holding = job.files / "holding"

    def run(self) -> None:
        self.holding.mkdir(exist_ok=True)
        with sqlite3.connect(self.job.files / "resource.db") as connection:
            connection.execute(f"CREATE TABLE {_RESOURCE} (key TEXT PRIMARY KEY, token INTEGER)")
            connection.execute(f"INSERT INTO {_RESOURCE} VALUES (?, 0)", (self.job.key,))  # noqa: S608 -- a constant table name
        connection.close()
        for _ in range(self.workers):
            self.spawn()
        kinds = ["pause", "kill", "pause"] + (["restart"] if self.restart_store else [])
        actions = itertools.cycle(kinds)
        while time.monotonic_ns() < self.job.until_ns - 2_000_000_000:
            time.sleep(self.rng.uniform(0.3, 0.9))  # noqa: TID251 -- the nemesis acts in real time
            getattr(self, next(actions))()
        for process in self.processes:
            process.join(timeout=60)
            if process.exitcode is None:
                process.kill()
                process.join()

    def spawn(self) -> None:
        process = self.context.Process(target=work, args=(self.job,), daemon=True)
        process.start()
        self.processes.append(process)

    def holders(self) -> list[int]:
        return [int(path.name) for path in self.holding.iterdir()]

    def pause(self) -> None:
        holders = self.holders()
        if not holders:
            return
        pid = self.rng.choice(holders)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
            time.sleep(self.job.ttl_ms * 1.6 / 1000)  # noqa: TID251 -- a real pause of a real process
            os.kill(pid, signal.SIGCONT)
            self.done["pauses"] += 1

    def kill(self) -> None:
        alive = [process for process in self.processes if process.is_alive()]
        holders = set(self.holders())
        victims = [process for process in alive if process.pid in holders]
        if not victims:
            return
        victim = self.rng.choice(victims)
        killed_at_ns = time.monotonic_ns()
        victim.kill()
        victim.join()
        (self.holding / str(victim.pid)).unlink(missing_ok=True)
        self.kills.append((killed_at_ns, f"worker-{victim.pid}"))
        self.done["kills"] += 1
        self.spawn()

    def restart(self) -> None:
        assert self.restart_store is not None  # noqa: S101 -- only cycled in when given
        self.restart_store()
        self.done["restarts"] += 1


def work(job: _Job) -> None:
    """One worker: take the key again and again until the time is up; record it all."""
    # losses are what the nemesis is for: the history tells them, the log need not
    logging.getLogger("leaselock").setLevel(logging.ERROR)
    asyncio.run(_work(job))


def _fenced_write(path: Path, key: str, token: int) -> bool:
    connection = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        written = connection.execute(
            f"UPDATE {_RESOURCE} SET token = ? WHERE key = ? AND token <= ?",  # noqa: S608 -- a constant table name
            (token, key, token),
        )
        return written.rowcount == 1
    finally:
        connection.close()


async def _work(job: _Job) -> None:
    pid = os.getpid()
    holding = job.files / "holding" / str(pid)
    resource = job.files / "resource.db"
    store = store_from_url(job.url, factory=job.factory, prefix=job.prefix)
    recorder = HistoryRecorder(store, job.files / "history.jsonl", process=f"worker-{pid}")
    rng = random.Random(pid)  # noqa: S311 -- pacing, not secrets

    async def write(token: int) -> bool:
        return await asyncio.to_thread(_fenced_write, resource, job.key, token)

    # the work inside a section sometimes outlives a renewal or two
    spans_s = [job.ttl_ms / 1000 * share for share in (0.01, 0.05, 0.1, 0.2, 0.6)]
    async with Locks(store=recorder, ttl=f"{job.ttl_ms}ms") as locks:
        while time.monotonic_ns() < job.until_ns:
            try:
                async with locks.hold(job.key, wait=f"{2 * job.ttl_ms}ms") as lock:
                    token = lock.fencing_token
                    holding.write_text(str(token))
                    # the nemesis pauses holders here: the write below then comes late, and the
                    # fence must refuse it once a newer holder has written
                    await asyncio.sleep(rng.choice(spans_s))  # noqa: TID251 -- real work time
                    await recorder.fenced_write(job.key, token, functools.partial(write, token))
                    holding.unlink(missing_ok=True)
            except (LockNotAcquiredError, LockStoreError):
                holding.unlink(missing_ok=True)
                await asyncio.sleep(0.05)  # noqa: TID251 -- back off while the store is away
    recorder.close()
