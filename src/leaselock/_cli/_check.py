"""``leaselock check``: torture a store for a bounded time, then judge its recorded history."""

from __future__ import annotations

import argparse
from typing import Any

from .._errors import LocksConfigurationError
from ..testing.check import check_store
from ._arguments import add_url_argument

__all__ = ["add_check_command"]


def add_check_command(commands: Any) -> None:  # noqa: ANN401 -- argparse's subparsers action is untyped
    """Add ``check`` to the command's subcommands."""
    check = commands.add_parser(
        "check",
        help="prove mutual exclusion and fencing on your own store, under pauses and kills",
        description=(
            "Worker processes take one key on the store again and again and make fenced writes, "
            "while a nemesis pauses holders past the ttl (SIGSTOP) and kills them (SIGKILL). "
            "Every store call is recorded, then checked: no two live leases, tokens growing, no "
            "stale write accepted. Exit 1 on a violation. Use a store no application uses "
            "during the check: it crashes no server, but it holds one key of its own."
        ),
    )
    add_url_argument(check)
    check.add_argument("--seconds", type=float, default=60, help="how long (default 60)")
    check.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    check.add_argument("--ttl", default="1s", help='the lease length (default "1s")')
    check.add_argument(
        "--store",
        metavar="MODULE:FACTORY",
        help="check your own store: a callable that takes the URL and returns it",
    )
    check.set_defaults(run=_run)


def _run(arguments: argparse.Namespace) -> int:
    if arguments.seconds < 3:  # noqa: PLR2004 -- the nemesis needs time to act
        raise LocksConfigurationError(f"--seconds {arguments.seconds:g}; pass 3 or more")
    print(  # noqa: T201 -- a command's output
        f"Checking {arguments.url if arguments.store is None else arguments.store} for "
        f"{arguments.seconds:g} s with {arguments.workers} workers (ttl {arguments.ttl}): "
        "pausing holders past their ttl and killing workers...",
        flush=True,
    )
    result = check_store(
        arguments.url,
        factory=arguments.store,
        seconds=arguments.seconds,
        workers=arguments.workers,
        ttl=arguments.ttl,
    )
    print(result.summary())  # noqa: T201 -- a command's output
    return 0 if result.ok else 1
