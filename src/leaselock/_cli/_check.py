"""``leaselock check``: torture a store for a bounded time, then judge its recorded history."""

from __future__ import annotations

import argparse
from typing import Any, Final

from ..testing.check import check_store
from ._arguments import add_url_argument
from ._operate import out

__all__ = ["EXIT_INCONCLUSIVE", "add_check_command"]

EXIT_PASSED: Final = 0
EXIT_FAILED: Final = 1
# neither passed nor failed: the run lacked the evidence for a verdict
EXIT_INCONCLUSIVE: Final = 3


def add_check_command(commands: Any) -> None:  # noqa: ANN401 -- argparse's subparsers action is untyped
    """Add ``check`` to the command's subcommands."""
    check = commands.add_parser(
        "check",
        help="prove mutual exclusion and fencing on your own store, under pauses and kills",
        description=(
            "Worker processes take one key on the store again and again and make fenced writes, "
            "while a nemesis pauses holders past the ttl (SIGSTOP) and kills them (SIGKILL). "
            "Every store call is recorded, then checked: no two live leases, tokens growing, no "
            "stale write accepted. Exit 0 when it passed, 1 on a violation, 3 when the run "
            "lacked the evidence for a verdict (too few acquisitions, no pause or kill followed "
            "by a takeover, no fenced write refused: run longer). Use a store no application "
            "uses during the check: it crashes no server, but it holds one key of its own, and "
            "removes what it wrote when done."
        ),
    )
    add_url_argument(check)
    check.add_argument(
        "--seconds",
        type=float,
        default=60,
        help="how long the workers run once all are ready (default 60; 10 or more for a verdict)",
    )
    check.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    check.add_argument("--ttl", default="1s", help='the lease length (default "1s")')
    check.add_argument(
        "--store",
        metavar="MODULE:FACTORY",
        help="check your own store: a callable that takes the URL and returns it",
    )
    check.set_defaults(run=_run)


def _run(arguments: argparse.Namespace) -> int:
    out(
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
        progress=lambda line: out(f"  {line}", flush=True),
    )
    out(result.summary())
    return {"ok": EXIT_PASSED, "failed": EXIT_FAILED, "inconclusive": EXIT_INCONCLUSIVE}[
        result.verdict
    ]
