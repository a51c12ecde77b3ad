"""``leaselock locks``, ``break`` and ``jobs``: what an operator reads from a store, and breaks.

Each opens a ``Locks`` on the store for the one call (bounded like every store call) and prints
a table (or JSON with ``--json``). No command creates a file or a table on any store: one
pointed at the wrong file or database says what is missing, rather than answer "No locks."
from tables it just made, or write a pause no instance will ever read. Commands that only read
open the store read-only where it can be (a SQLite file with ``mode=ro``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import os
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

from .._errors import LocksConfigurationError
from .._jobs import CLOCK_OFFSET_BOUND_MS, JobStatus
from .._locks import Locks
from .._redact import redact_secrets
from ..stores._common._capabilities import LockInfo, RunRecord
from ..stores._common._job_control import JobPause
from ..stores._common._urls import store_from_url
from ._arguments import add_url_argument

__all__ = [
    "add_operator_commands",
    "add_redis_prefix_argument",
    "cli_locks",
    "on_store",
    "operator_name",
    "out",
    "refuse_a_missing_sqlite_file",
]

T = TypeVar("T")

SHORT_OWNER: Final = 8
DEFAULT_LIMIT: Final = 1000


def add_operator_commands(commands: Any) -> None:  # noqa: ANN401 -- argparse's subparsers action is untyped
    """Add ``locks``, ``break`` and ``jobs`` to the command's subcommands."""
    locks = commands.add_parser(
        "locks",
        help="list the locks under a key prefix: holder, token, time left",
        description="List the locks whose key starts with PREFIX (all by default), by key.",
    )
    locks.add_argument("prefix", nargs="?", default="", metavar="PREFIX")
    add_url_argument(locks)
    add_redis_prefix_argument(locks)
    locks.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="at most this many")
    locks.add_argument("--json", action="store_true", help="one JSON array instead of a table")
    locks.set_defaults(run=_run_locks)

    breaking = commands.add_parser(
        "break",
        help="free a stuck lock whoever holds it; the next acquire gets a greater token",
        description=(
            "Free KEY whoever holds it: the next acquire anywhere wins at once with a greater "
            "fencing token, and the broken holder learns it at its next renewal. Asks first."
        ),
    )
    breaking.add_argument("key", metavar="KEY")
    add_url_argument(breaking)
    add_redis_prefix_argument(breaking)
    breaking.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    breaking.set_defaults(run=_run_break)

    jobs = commands.add_parser(
        "jobs",
        help="each job's last run and last success, from the store's run records",
        description=(
            "Each job's last run (outcome, when, how long, where) and last success, and where "
            "it is owned and running now, from the run records every instance writes."
        ),
    )
    add_url_argument(jobs)
    add_redis_prefix_argument(jobs)
    jobs.add_argument("--json", action="store_true", help="one JSON array instead of a table")
    jobs.set_defaults(run=_run_jobs)


def add_redis_prefix_argument(parser: argparse.ArgumentParser) -> None:
    """``--redis-prefix``, for a Redis store under another prefix than the default."""
    parser.add_argument(
        "--redis-prefix",
        default=None,
        help='the key prefix of a Redis store (default "leaselock:")',
    )


# --- the commands ----------------------------------------------------------------------------


def _run_locks(arguments: argparse.Namespace) -> int:
    found = on_store(
        arguments,
        lambda locks: locks.inspect(arguments.prefix, limit=arguments.limit),
        read_only=True,
    )
    if arguments.json:
        out(json.dumps([_lock_json(info) for info in found], indent=2))
        return 0
    if not found:
        out(f"No locks under {arguments.prefix!r}." if arguments.prefix else "No locks.")
        return 0
    rows = [("KEY", "HOLDER", "OWNER", "TOKEN", "EXPIRES IN")]
    rows += [
        (
            info.key,
            info.holder or "-",
            (info.owner or "-")[:SHORT_OWNER],
            "-" if info.fencing_token is None else str(info.fencing_token),
            _expires(info),
        )
        for info in found
    ]
    _table(rows)
    return 0


def _run_break(arguments: argparse.Namespace) -> int:
    if not arguments.yes:
        held = on_store(arguments, lambda locks: locks.read_lock(arguments.key), read_only=True)
        if held is None or not held.live:
            out(f"No live lock holds {arguments.key!r}; nothing to break.")
            return 0
        if not sys.stdin.isatty():
            raise LocksConfigurationError(
                f"breaking {arguments.key!r} (held by {held.holder}) needs a confirmation, and "
                "stdin is not a terminal: pass --yes"
            )
        answer = input(
            f"Break the lock on {arguments.key!r} held by {held.holder} "
            f"(token {held.fencing_token if held.fencing_token is not None else '-'}, "
            f"{_expires(held)} left)? [y/N] "
        )
        if answer.strip().lower() not in {"y", "yes"}:
            out("Left as it was.")
            return 0
    broken = on_store(
        arguments,
        lambda locks: locks.break_lock(arguments.key, by=operator_name()),
        read_only=False,
    )
    if broken is None:
        out(f"No live lock held {arguments.key!r}; nothing was broken.")
    else:
        token = "" if broken.fencing_token is None else f", fencing token {broken.fencing_token}"
        out(
            f"Broke the lock on {arguments.key!r}: it was held by {broken.holder}{token}. The "
            "next acquire takes it with a greater token; the holder finds out at its next renewal."
        )
    return 0


def _run_jobs(arguments: argparse.Namespace) -> int:
    statuses = on_store(arguments, lambda locks: locks.jobs(), read_only=True)
    if arguments.json:
        out(
            json.dumps(
                [
                    {
                        "job": status.job,
                        "last_run": _run_json(status.last_run),
                        "last_success": _run_json(status.last_success),
                        "owner": status.owner,
                        "running_on": status.running_on,
                        "paused": _pause_json(status.paused),
                        "failures": status.failures,
                        "missed_at": None
                        if status.missed_at is None
                        else status.missed_at.isoformat(),
                        "clock_offset_ms": None
                        if status.clock_offset is None
                        else round(status.clock_offset.total_seconds() * 1000),
                        "last_tick": None
                        if status.last_tick is None
                        else {
                            "at": status.last_tick.at.isoformat(),
                            "instance": status.last_tick.instance,
                            "fencing_token": status.last_tick.fencing_token,
                        },
                    }
                    for status in statuses
                ],
                indent=2,
            )
        )
        return 0
    if not statuses:
        out("No job has run records in this store yet.")
        return 0
    now = datetime.now(UTC)
    rows = [
        (
            "JOB",
            "LAST RUN",
            "OUTCOME",
            "TOOK",
            "ON",
            "LAST SUCCESS",
            "OWNER",
            "RUNNING ON",
            "STATE",
        )
    ]
    for status in statuses:
        last, success = status.last_run, status.last_success
        rows.append(
            (
                status.job,
                "-" if last is None else _ago(now, last.ended_at),
                "-" if last is None else _outcome(last),
                "-" if last is None else f"{last.duration.total_seconds():.1f} s",
                "-" if last is None else last.instance,
                "never" if success is None else _ago(now, success.ended_at),
                status.owner or "-",
                status.running_on or "-",
                _state(status, now),
            )
        )
    _table(rows)
    offset = statuses[0].clock_offset
    if offset is not None:
        out(_said_offset(offset))
    return 0


def _said_offset(offset: timedelta) -> str:
    """This host's clock against the store's, and whether jobs on one instance allow for it."""
    side = "behind" if offset > timedelta(0) else "ahead of"
    bound = timedelta(milliseconds=CLOCK_OFFSET_BOUND_MS)
    allowed = f"the {bound.total_seconds():g} s that jobs on one instance allow for"
    verdict = (
        f"more than {allowed}: keep the hosts' clocks in time (NTP, chrony)"
        if abs(offset) > bound
        else f"within {allowed}"
    )
    return f"This host's clock is {abs(offset).total_seconds():.3f} s {side} the store's, {verdict}"


def _state(status: JobStatus, now: datetime) -> str:
    """Paused, failing, missed and abandoned as a person reads them (``ok`` if none).

    Then the last tick started, where the job declares its schedule.
    """
    said = []
    if status.paused is not None:
        note = f": {status.paused.note}" if status.paused.note else ""
        said.append(f"paused by {status.paused.paused_by}{note}")
    if status.failures:
        said.append(f"failing ({status.failures} in a row)")
    if status.missed_at is not None:
        said.append(f"missed a tick {_ago(now, status.missed_at)}")
    last = status.last_run
    if last is not None and last.detected_by == "abandoned":
        said.append(f"last run abandoned on {last.instance}")
    ticked = status.last_tick
    tick = (
        ""
        if ticked is None
        else f"; last tick {ticked.at.isoformat(timespec='seconds')} on {ticked.instance}"
    )
    return ("; ".join(said) or "ok") + tick


def operator_name() -> str:
    """Who runs this command, for the audit trail of what it changes: ``user@host``."""
    return f"{getpass.getuser()}@{socket.gethostname()}"


# --- the store --------------------------------------------------------------------------------


def on_store(
    arguments: argparse.Namespace, call: Callable[[Locks], Awaitable[T]], *, read_only: bool
) -> T:
    """Open a Locks on the URL's store (see :func:`cli_locks`), make one call, close it."""

    async def run() -> T:
        async with cli_locks(arguments, read_only=read_only) as locks:
            return await call(locks)

    return asyncio.run(run())


@contextlib.asynccontextmanager
async def cli_locks(arguments: argparse.Namespace, *, read_only: bool) -> AsyncIterator[Locks]:
    """A started Locks on the store of ``--url`` (and ``--redis-prefix``), for a command.

    It creates no file and no table, whatever the command: its writes (a break, a pause, a
    run) go to the store an application uses, or nowhere. With ``read_only`` the store is
    opened for reading only where it can be (SQLite's ``mode=ro``).

    Raises:
        LocksConfigurationError: no SQLite file at the URL, or a URL leaselock cannot use.
        LockStoreError: the store cannot be reached or lacks its tables.
    """
    refuse_a_missing_sqlite_file(arguments.url)
    store = store_from_url(
        arguments.url, prefix=arguments.redis_prefix, create_schema=False, read_only=read_only
    )
    async with Locks(
        store=store,
        allow_in_memory_storage=True,
        instance=f"leaselock-cli@{socket.gethostname()}:{os.getpid()}",
    ) as locks:
        yield locks


def refuse_a_missing_sqlite_file(url: str) -> None:
    """Refuse a ``sqlite:///`` URL whose file does not exist, naming the fix.

    Raises:
        LocksConfigurationError: no file at the URL's path.
    """
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        return
    path = Path(url.removeprefix("sqlite:///"))
    if not path.is_file():
        raise LocksConfigurationError(
            f"no SQLite file at {str(path)!r}; pass the file your application's "
            "SQLiteLockStore opens (sqlite:///relative/path or sqlite:////absolute/path)"
        )


# --- printing ---------------------------------------------------------------------------------


def out(text: str, *, flush: bool = False, error: bool = False) -> None:
    """Print a line of the command's output (``error``: to stderr), with passwords redacted."""
    print(redact_secrets(text), flush=flush, file=sys.stderr if error else sys.stdout)


def _table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        out("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _expires(info: LockInfo) -> str:
    if not info.live:
        return "released"
    if info.expires_in_ms is None:
        return "-"
    return f"{info.expires_in_ms / 1000:.1f} s"


def _ago(now: datetime, moment: datetime) -> str:
    seconds = max((now - moment).total_seconds(), 0.0)
    if seconds < 120:  # noqa: PLR2004 -- seconds read best under two minutes
        return f"{seconds:.0f} s ago"
    if seconds < 7200:  # noqa: PLR2004 -- minutes under two hours
        return f"{seconds / 60:.0f} min ago"
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _outcome(run: RunRecord) -> str:
    manual = "" if run.trigger == "schedule" else f" ({run.trigger})"
    return (run.outcome if run.error is None else f"{run.outcome}: {run.error}") + manual


def _pause_json(pause: JobPause | None) -> dict[str, object] | None:
    if pause is None:
        return None
    return {
        "target": pause.target,
        "note": pause.note,
        "paused_by": pause.paused_by,
        "paused_at": pause.paused_at.isoformat(),
        "until": None if pause.until is None else pause.until.isoformat(),
    }


def _lock_json(info: LockInfo) -> dict[str, object]:
    return {
        "key": info.key,
        "live": info.live,
        "owner": info.owner,
        "instance": info.instance,
        "fencing_token": info.fencing_token,
        "expires_in_ms": info.expires_in_ms,
    }


def _run_json(run: RunRecord | None) -> dict[str, object] | None:
    if run is None:
        return None
    return {
        "instance": run.instance,
        "outcome": run.outcome,
        "error": run.error,
        "started_at": run.started_at.isoformat(),
        "ended_at": run.ended_at.isoformat(),
        "duration_s": run.duration.total_seconds(),
        "fencing_token": run.fencing_token,
        "trigger": run.trigger,
        "detected_by": run.detected_by,
    }
