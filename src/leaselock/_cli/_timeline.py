"""``leaselock timeline``: who held what, from event logs, drawn as SVG or HTML or listed as JSON.

Each ``Locks(event_log=...)`` writes its events as JSON lines; the timeline merges any number of
those files by time and finds every lease in them (:mod:`leaselock._timeline`): its key, holder
and fencing token, when it started and ended, and how: released, handed back (a graceful
shutdown or an idle owner), lost (and how it was detected), or expired: no end recorded, the
holder died. It draws them, or prints them as JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .._errors import LocksConfigurationError
from .._timeline import leases_from, read_events, render_html, render_svg
from ._operate import out

__all__ = ["add_timeline_command"]

DEFAULT_OUTPUT = Path("leaselock-timeline.html")


def add_timeline_command(commands: Any) -> None:  # noqa: ANN401 -- argparse's subparsers action is untyped
    """Add ``timeline`` to the command's subcommands."""
    timeline = commands.add_parser(
        "timeline",
        help="who held which lock when, from event logs: drawn as SVG or HTML, or as JSON",
        description=(
            "Merge the JSON Lines event logs that Locks(event_log=...) wrote and draw a lane per "
            "key and a bar per lease, coloured by instance, with its token and how it ended. A "
            "lease whose holder died without a recorded end is drawn held up to its holder's "
            "last sign of life, then expired up to a ttl later, never past the next token."
        ),
    )
    timeline.add_argument("logs", nargs="+", metavar="EVENT_LOG", type=Path)
    timeline.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help=f"the file to draw into: .svg, or .html (default {DEFAULT_OUTPUT})",
    )
    timeline.add_argument(
        "--json",
        action="store_true",
        help=(
            "print the leases to stdout as one JSON array instead of drawing them, one object "
            "a lease in order of key and start: key, instance, owner, fencing_token, start, "
            "held_until, end (ISO 8601), ended (released, handed-back, lost, expired), "
            "detected_by (how a lost one was lost), ttl_ms"
        ),
    )
    timeline.set_defaults(run=_run_timeline)


def _run_timeline(arguments: argparse.Namespace) -> int:
    output: Path | None = arguments.output
    if arguments.json and output is not None:
        raise LocksConfigurationError(
            f"--json prints the leases to stdout, and --output {str(output)!r} names a drawing; "
            "drop one (redirect --json to a file: > leases.json)"
        )
    output = output or DEFAULT_OUTPUT
    if not arguments.json and output.suffix not in {".svg", ".html"}:
        raise LocksConfigurationError(
            f"--output {str(output)!r}; name a .svg or a .html file, or print JSON with --json"
        )
    events = read_events(arguments.logs)
    leases = leases_from(events)
    if not leases:
        raise LocksConfigurationError(
            "the event logs hold no lease; write them with Locks(event_log=path) while the "
            "application runs"
        )
    if arguments.json:
        out(json.dumps([lease.as_json() for lease in leases], indent=2, ensure_ascii=False))
        return 0
    document = render_svg(leases) if output.suffix == ".svg" else render_html(leases)
    try:
        output.write_text(document, encoding="utf-8")
    except OSError as error:
        raise LocksConfigurationError(f"cannot write {str(output)!r}: {error}") from None
    keys = {lease.key for lease in leases}
    instances = {lease.instance for lease in leases}
    out(
        f"Wrote {output}: {len(keys)} keys, {len(leases)} leases, {len(instances)} instances, "
        f"{len(events)} events"
    )
    return 0
