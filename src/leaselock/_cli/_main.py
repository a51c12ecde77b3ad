"""Argument parsing and dispatch of the ``leaselock`` command."""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
from collections.abc import Sequence
from typing import Final

from .._errors import LockError
from ._check import add_check_command
from ._operate import add_operator_commands, out
from ._serve import add_serve_command
from ._steer import add_steering_commands
from ._timeline import add_timeline_command
from ._watch import add_watch_command

__all__ = ["main"]

EXIT_OK: Final = 0
EXIT_BROKEN: Final = 1
EXIT_USAGE: Final = 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``leaselock`` command; return its exit status.

    0: done, or the check passed; 1: the check found a broken promise; 2: the command could not
    run (a bad URL, an unreachable server, a missing table), with one line saying why; 3: the
    check found no violation but lacked the evidence to pass (run it longer).
    """
    parser = argparse.ArgumentParser(
        prog="leaselock",
        description=(
            "Distributed lease locks with fencing tokens: see who holds what, break a stuck "
            "lock, read the jobs' run records, pause, resume and run jobs, serve a dashboard of "
            "it all, and check a lock store."
        ),
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"leaselock {importlib.metadata.version('leaselock')}",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_check_command(commands)
    add_operator_commands(commands)
    add_steering_commands(commands)
    add_watch_command(commands)
    add_timeline_command(commands)
    add_serve_command(commands)
    arguments = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(message)s")
    try:
        status: int = arguments.run(arguments)
    except LockError as error:
        out(f"leaselock {arguments.command}: {error}", error=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_USAGE
    return status
