"""``leaselock check``: torture a store for a bounded time, then judge its recorded history."""

from __future__ import annotations

import argparse
import functools
import importlib.util
import subprocess
from typing import Any, Final

from .._errors import LocksConfigurationError
from ..testing.check import FencedResource, check_store
from ._arguments import add_url_argument
from ._operate import out

__all__ = ["EXIT_INCONCLUSIVE", "add_check_command"]

FAILOVER_TIMEOUT_S: Final = 60.0

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
    check.add_argument(
        "--at-most",
        type=float,
        metavar="SECONDS",
        help=(
            "if the run lacks evidence after --seconds (a slow store, a loaded machine), go on "
            "until it has it, this long in all (default: stop at --seconds)"
        ),
    )
    check.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    check.add_argument("--ttl", default="1s", help='the lease length (default "1s")')
    check.add_argument(
        "--store",
        metavar="MODULE:FACTORY",
        help="check your own store: a callable that takes the URL and returns it",
    )
    check.add_argument(
        "--failover-command",
        metavar="COMMAND",
        help=(
            "a shell command that makes your highly available store fail over (promote a "
            "replica, kill the leader), run by the nemesis between faults; the URL must reach "
            "whichever server leads (redis+sentinel://, a multi-host postgresql:// URL with "
            "target_session_attrs=read-write, every etcd member). The run then needs a failover "
            "to pass"
        ),
    )
    check.add_argument(
        "--orm",
        action="store_true",
        help=(
            "make the fenced writes through SQLAlchemy: a fenced_table() written in "
            "fenced_sync() sessions, whose stale writes the database itself refuses (needs "
            "the sqlalchemy extra)"
        ),
    )
    check.set_defaults(run=_run)


def _fail_over(command: str) -> None:
    """Run the user's failover command; a failure stops the check, saying what it printed."""
    try:
        # the user's own command line, as they would type it: a shell is what they expect
        done = subprocess.run(  # noqa: S602
            command,
            shell=True,
            capture_output=True,
            text=True,
            timeout=FAILOVER_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise LocksConfigurationError(
            f"--failover-command {command!r} did not end within {FAILOVER_TIMEOUT_S:g} s; make "
            "it return once the failover has begun"
        ) from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise LocksConfigurationError(
            f"--failover-command {command!r} exited {done.returncode}"
            + (f": {said[-1]}" if said else "")
            + "; fix the command, or leave --failover-command out"
        )


def _orm_resource() -> FencedResource:
    """The resource of ``--orm``; SQLAlchemy is imported only for it."""
    if importlib.util.find_spec("sqlalchemy") is None:
        raise LocksConfigurationError(
            "--orm writes through SQLAlchemy: pip install 'leaselock[sqlalchemy]', or leave "
            "--orm out"
        )
    from ._check_orm import OrmResource  # noqa: PLC0415 -- SQLAlchemy stays optional

    return OrmResource()


def _run(arguments: argparse.Namespace) -> int:
    out(
        f"Checking {arguments.url if arguments.store is None else arguments.store} for "
        f"{arguments.seconds:g} s with {arguments.workers} workers (ttl {arguments.ttl}): "
        "pausing holders past their ttl and killing workers...",
        flush=True,
    )
    command: str | None = arguments.failover_command
    result = check_store(
        arguments.url,
        factory=arguments.store,
        seconds=arguments.seconds,
        workers=arguments.workers,
        ttl=arguments.ttl,
        at_most=arguments.at_most,
        failover=None if command is None else functools.partial(_fail_over, command),
        progress=lambda line: out(f"  {line}", flush=True),
        resource=_orm_resource() if arguments.orm else None,
    )
    out(result.summary())
    return {"ok": EXIT_PASSED, "failed": EXIT_FAILED, "inconclusive": EXIT_INCONCLUSIVE}[
        result.verdict
    ]
