"""``leaselock pause``, ``resume`` and ``run``: an operator steering jobs from a shell.

``pause`` and ``resume`` write the pause into the store, where every instance's next tick finds
it. ``run`` imports the job (``--job module:attribute``), registers it with a ``Locks`` on the
store and runs it once, here, under its run lock.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
from typing import Any

from .._errors import LocksConfigurationError
from ._arguments import add_url_argument
from ._operate import add_redis_prefix_argument, cli_locks, on_store, operator_name, out

__all__ = ["add_steering_commands"]


def add_steering_commands(commands: Any) -> None:  # noqa: ANN401 -- argparse's subparsers action is untyped
    """Add ``pause``, ``resume`` and ``run`` to the command's subcommands."""
    pause = commands.add_parser(
        "pause",
        help="pause a job (or every job under a prefix ending in *) on every instance",
        description=(
            "Pause KEY, a job's key or a prefix ending in '*' ('reports:*'): every instance "
            "skips its ticks, saying who paused it and why, until `leaselock resume KEY` or "
            "--until. Runs in progress finish; paused ticks are not replayed."
        ),
    )
    pause.add_argument("key", metavar="KEY")
    pause.add_argument("--note", default="", help="why: shown with every skipped tick")
    pause.add_argument("--until", default=None, help='end it by itself after this ("2h", "90s")')
    pause.add_argument("--by", default=None, help="who pauses (default: user@host)")
    add_url_argument(pause)
    add_redis_prefix_argument(pause)
    pause.set_defaults(run=_run_pause)

    resume = commands.add_parser(
        "resume",
        help="resume a paused job or prefix: its next tick runs",
        description="Remove the pause of KEY (as it was paused); the job runs from its next tick.",
    )
    resume.add_argument("key", metavar="KEY")
    add_url_argument(resume)
    add_redis_prefix_argument(resume)
    resume.set_defaults(run=_run_resume)

    run = commands.add_parser(
        "run",
        help="run a job once, now, here, under its run lock (ignoring its pause)",
        description=(
            "Import the decorated job (--job module:attribute: a function, or an object whose "
            "methods are jobs), and run KEY once now, under its run lock, recorded as a manual "
            "run. Fails if a run of it is in progress."
        ),
    )
    run.add_argument("key", metavar="KEY")
    run.add_argument(
        "--job", required=True, help="where the job is: module:attribute (myapp.jobs:export)"
    )
    add_url_argument(run)
    add_redis_prefix_argument(run)
    run.set_defaults(run=_run_now)


def _run_pause(arguments: argparse.Namespace) -> int:
    by = arguments.by or operator_name()
    pause = on_store(
        arguments,
        lambda locks: locks.pause(arguments.key, note=arguments.note, until=arguments.until, by=by),
        read_only=False,
    )
    until = "" if pause.until is None else f" until {pause.until.isoformat(timespec='seconds')}"
    out(f"Paused {pause.target!r}{until} (by {pause.paused_by}): every instance skips its ticks.")
    return 0


def _run_resume(arguments: argparse.Namespace) -> int:
    removed = on_store(
        arguments, lambda locks: locks.resume(arguments.key, by=operator_name()), read_only=False
    )
    if removed is None:
        out(f"{arguments.key!r} was not paused.")
    else:
        out(
            f"Resumed {removed.target!r} (paused by {removed.paused_by}"
            f"{': ' + removed.note if removed.note else ''}): it runs from its next tick."
        )
    return 0


def _run_now(arguments: argparse.Namespace) -> int:
    job = _imported(arguments.job)

    async def run() -> object:
        async with cli_locks(arguments, read_only=False) as locks:
            locks.register(job)
            return await locks.run_now(arguments.key, by=operator_name())

    result = asyncio.run(run())
    out(f"Ran {arguments.key!r} once: {result!r}")
    return 0


def _imported(where: str) -> object:
    module_name, _, attribute = where.partition(":")
    if not module_name or not attribute:
        raise LocksConfigurationError(
            f"--job {where!r}; pass module:attribute, such as myapp.jobs:export_invoices"
        )
    try:
        found: object = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as error:
        raise LocksConfigurationError(
            f"--job {where!r} cannot be imported ({error}); check the module is on the path "
            "(run from the application's directory) and the attribute's name"
        ) from error
    return found
