"""``leaselock timeline``: who held what, drawn from event logs, as one self-contained SVG or HTML.

Each ``Locks(event_log=...)`` writes its events as JSON lines; the timeline merges any number of
those files by time and draws a lane per key and a bar per lease: coloured by instance, the
fencing token on it, and its end marked: released, handed back (a graceful shutdown or an idle
owner), lost (and how), or not recorded at all (the process died: the bar fades out over the
ttl it had left, until the lease expired or the next holder took the key).
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final
from xml.sax.saxutils import escape, quoteattr

from .._errors import LocksConfigurationError
from ._operate import out

__all__ = ["Lease", "add_timeline_command", "leases_from", "read_events", "render_svg"]

PALETTE: Final = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#b07aa1",
    "#76b7b2",
    "#edc948",
    "#9c755f",
    "#ff9da7",
)
LOST_COLOUR: Final = "#d62728"
LABEL_WIDTH: Final = 300
PLOT_WIDTH: Final = 1000
LANE_HEIGHT: Final = 30
BAR_HEIGHT: Final = 18
TOP: Final = 50
MIN_TOKEN_WIDTH: Final = 26
TICKS: Final = 10
LEGEND_HEIGHT: Final = 70


def add_timeline_command(commands: Any) -> None:  # noqa: ANN401 -- argparse's subparsers action is untyped
    """Add ``timeline`` to the command's subcommands."""
    timeline = commands.add_parser(
        "timeline",
        help="draw who held which lock when, from event logs, as SVG or HTML",
        description=(
            "Merge the JSON Lines event logs that Locks(event_log=...) wrote and draw a lane per "
            "key and a bar per lease, coloured by instance, with its token and how it ended."
        ),
    )
    timeline.add_argument("logs", nargs="+", metavar="EVENT_LOG", type=Path)
    timeline.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("leaselock-timeline.html"),
        help="the file to write: .svg, or .html (default leaselock-timeline.html)",
    )
    timeline.set_defaults(run=_run_timeline)


def _run_timeline(arguments: argparse.Namespace) -> int:
    output: Path = arguments.output
    if output.suffix not in {".svg", ".html"}:
        raise LocksConfigurationError(f"--output {str(output)!r}; name a .svg or a .html file")
    events = read_events(arguments.logs)
    leases = leases_from(events)
    if not leases:
        raise LocksConfigurationError(
            "the event logs hold no lease; write them with Locks(event_log=path) while the "
            "application runs"
        )
    svg = render_svg(leases)
    document = svg if output.suffix == ".svg" else _html(svg, leases)
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


# --- the model ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Lease:
    """One lease as the event logs tell it: who held which key, from when to when.

    ``ended`` says how: ``released``, ``handed-back``, ``lost: <how>``, or ``unrecorded``.
    """

    key: str
    owner: str
    instance: str
    token: int | None
    start: datetime
    ttl: timedelta
    end: datetime | None = None
    ended: str = "unrecorded"
    fades_until: datetime | None = None
    marks: list[str] = field(default_factory=list)


def read_events(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Read every JSON line of ``paths``, sorted by ``at``.

    Raises:
        LocksConfigurationError: a file is missing or a line is not an event.
    """
    events = []
    for path in paths:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as error:
            raise LocksConfigurationError(
                f"cannot read the event log {str(path)!r}: {error}"
            ) from None
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
                event["at"] = datetime.fromisoformat(event["at"])
            except (ValueError, KeyError, TypeError):
                raise LocksConfigurationError(
                    f'{path}:{number} is not a leaselock event (a JSON object with "at"): '
                    "pass files that Locks(event_log=...) wrote"
                ) from None
            events.append(event)
    events.sort(key=lambda event: event["at"])
    return events


def leases_from(events: Sequence[dict[str, Any]]) -> list[Lease]:
    """Turn time-sorted events into leases, each with how it ended.

    A lease with no recorded end ends at its instance's last event (its last sign of life) and
    fades until its ttl ran out or the next holder took the key, whichever came first.
    """
    open_leases: dict[tuple[str, str], Lease] = {}
    closed: list[Lease] = []
    last_seen: dict[str, datetime] = {}
    for event in events:
        kind, key, owner = event.get("type"), event.get("key"), event.get("owner")
        instance = str(event.get("instance") or owner or "?")
        last_seen[instance] = event["at"]
        if not isinstance(key, str) or not isinstance(owner, str):
            continue
        if kind == "lock-acquired":
            open_leases[key, owner] = Lease(
                key=key,
                owner=owner,
                instance=instance,
                token=event.get("fencing_token"),
                start=event["at"],
                ttl=timedelta(milliseconds=int(event.get("ttl_ms") or 0)),
            )
            continue
        ending = _ending(event)
        if ending is None:
            continue
        lease = open_leases.pop((key, owner), None)
        if lease is None:
            # the hand-back of a lease already released (an idle owner): mark that one
            lease = next((c for c in reversed(closed) if (c.key, c.owner) == (key, owner)), None)
            if lease is not None and ending == "handed-back":
                lease.ended = ending
            continue
        lease.end, lease.ended = event["at"], ending
        closed.append(lease)
    for lease in open_leases.values():
        lease.end = last_seen.get(lease.instance, lease.start)
        lease.fades_until = lease.end + lease.ttl
        closed.append(lease)
    _cut_fades_at_the_next_holder(closed)
    return sorted(closed, key=lambda lease: (lease.key, lease.start))


def _ending(event: dict[str, Any]) -> str | None:
    kind = event.get("type")
    if kind == "lock-released":
        return "released"
    if kind == "lock-handed-back":
        return "handed-back"
    if kind == "lock-lost":
        return f"lost: {event.get('detected_by')}"
    return None


def _cut_fades_at_the_next_holder(leases: list[Lease]) -> None:
    by_key: dict[str, list[Lease]] = {}
    for lease in leases:
        by_key.setdefault(lease.key, []).append(lease)
    for same_key in by_key.values():
        same_key.sort(key=lambda lease: lease.start)
        for lease, following in itertools.pairwise(same_key):
            if lease.fades_until is not None and following.start < lease.fades_until:
                lease.fades_until = max(following.start, lease.end or following.start)


# --- drawing -----------------------------------------------------------------------------------


def render_svg(leases: Sequence[Lease]) -> str:
    """Draw ``leases`` as one SVG document: a lane per key, a bar per lease."""
    keys = sorted({lease.key for lease in leases})
    instances = sorted({lease.instance for lease in leases})
    colours = {name: PALETTE[index % len(PALETTE)] for index, name in enumerate(instances)}
    start = min(lease.start for lease in leases)
    finish = max(lease.fades_until or lease.end or lease.start for lease in leases)
    span_s = max((finish - start).total_seconds(), 0.001)

    def x(moment: datetime) -> float:
        return LABEL_WIDTH + (moment - start).total_seconds() / span_s * PLOT_WIDTH

    height = TOP + len(keys) * LANE_HEIGHT + LEGEND_HEIGHT
    width = LABEL_WIDTH + PLOT_WIDTH + 60
    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">'
        ),
        (
            '<defs><linearGradient id="fade" x1="0" x2="1"><stop offset="0" '
            'stop-color="#999" stop-opacity="0.6"/><stop offset="1" stop-color="#999" '
            'stop-opacity="0"/></linearGradient></defs>'
        ),
        (
            f'<text x="{LABEL_WIDTH}" y="18" font-size="14" font-weight="bold">Who held which lock '
            f"when ({escape(start.strftime('%Y-%m-%d %H:%M:%S'))} UTC, {span_s:.1f} s)</text>"
        ),
    ]
    parts += _axis(span_s, len(keys))
    for lane, key in enumerate(keys):
        top = TOP + lane * LANE_HEIGHT
        parts.append(
            f'<g class="lane" data-key={quoteattr(key)}>'
            f'<rect x="0" y="{top}" width="{width}" height="{LANE_HEIGHT}" '
            f'fill="{"#f6f6f6" if lane % 2 else "#ffffff"}"/>'
            f'<text class="key" x="8" y="{top + LANE_HEIGHT / 2 + 4}">{escape(key)}</text>'
        )
        for lease in (lease for lease in leases if lease.key == key):
            parts += _bar(lease, x, top, colours[lease.instance])
        parts.append("</g>")
    parts += _legend(instances, colours, TOP + len(keys) * LANE_HEIGHT + 16)
    parts.append("</svg>")
    return "\n".join(parts)


def _axis(span_s: float, lanes: int) -> list[str]:
    bottom = TOP + lanes * LANE_HEIGHT
    parts = []
    for tick in range(TICKS + 1):
        seconds = span_s * tick / TICKS
        left = LABEL_WIDTH + PLOT_WIDTH * tick / TICKS
        parts.append(
            f'<line class="tick" x1="{left:.1f}" y1="{TOP - 6}" x2="{left:.1f}" y2="{bottom}" '
            'stroke="#ddd"/>'
            f'<text x="{left:.1f}" y="{TOP - 10}" text-anchor="middle" fill="#555">'
            f"+{seconds:.1f} s</text>"
        )
    return parts


def _bar(lease: Lease, x: Any, top: float, colour: str) -> list[str]:  # noqa: ANN401 -- the scale
    left = x(lease.start)
    right = max(x(lease.end or lease.start), left + 1.5)
    y = top + (LANE_HEIGHT - BAR_HEIGHT) / 2
    token = "-" if lease.token is None else str(lease.token)
    until = "" if lease.end is None else lease.end.strftime("%H:%M:%S.%f")[:-3]
    title = (
        f"{lease.key}: {lease.instance}, fencing token {token}, "
        f"{lease.start.strftime('%H:%M:%S.%f')[:-3]} to {until}, {lease.ended}"
    )
    lost = lease.ended.startswith("lost")
    parts = [
        (
            f'<rect class="lease" data-key={quoteattr(lease.key)} '
            f"data-instance={quoteattr(lease.instance)} data-token={quoteattr(token)} "
            f'data-ended={quoteattr(lease.ended)} x="{left:.1f}" y="{y:.1f}" '
            f'width="{right - left:.1f}" height="{BAR_HEIGHT}" rx="3" fill="{colour}" '
            f'stroke="{LOST_COLOUR if lost else "none"}" stroke-width="2">'
            f"<title>{escape(title)}</title></rect>"
        )
    ]
    if lease.fades_until is not None and lease.fades_until > (lease.end or lease.start):
        fade_right = x(lease.fades_until)
        parts.append(
            f'<rect class="fade" x="{right:.1f}" y="{y:.1f}" width="{fade_right - right:.1f}" '
            f'height="{BAR_HEIGHT}" fill="url(#fade)" stroke="{colour}" '
            'stroke-dasharray="4 3"><title>no end recorded: the process stopped answering; '
            "the lease ran out over its ttl</title></rect>"
            f'<text class="mark unrecorded" x="{(right + fade_right) / 2:.1f}" y="{y + 13:.1f}" '
            f'text-anchor="middle" fill="{LOST_COLOUR}" font-weight="bold">? expired</text>'
        )
    if right - left >= MIN_TOKEN_WIDTH:
        parts.append(
            f'<text class="token" x="{(left + right) / 2:.1f}" y="{y + 13:.1f}" '
            f'text-anchor="middle" fill="#fff">{escape(token)}</text>'
        )
    if lost:
        parts.append(
            f'<text class="mark lost" x="{right + 2:.1f}" y="{y + 14:.1f}" fill="{LOST_COLOUR}" '
            f'font-weight="bold">\u2715 {escape(lease.ended.removeprefix("lost: "))}</text>'
        )
    elif lease.ended == "handed-back":
        parts.append(
            f'<text class="mark handed-back" x="{right + 2:.1f}" y="{y + 14:.1f}" '
            'fill="#333" font-weight="bold">\u21a9</text>'
        )
    return parts


def _legend(instances: Sequence[str], colours: dict[str, str], top: float) -> list[str]:
    parts = [f'<g class="legend" transform="translate({LABEL_WIDTH},{top})">']
    left = 0
    for name in instances:
        parts.append(
            f'<rect x="{left}" y="0" width="14" height="14" fill="{colours[name]}"/>'
            f'<text x="{left + 18}" y="12">{escape(name)}</text>'
        )
        left += 30 + 7 * len(name)
    parts.append(
        '<text x="0" y="36" fill="#333">\u21a9 handed back (graceful shutdown, idle owner)   '
        f'<tspan fill="{LOST_COLOUR}">\u2715 lost (renewal refused, deadline, max_run)   '
        "? expired: no end recorded, the process died and its lease ran out</tspan></text>"
    )
    parts.append("</g>")
    return parts


def _html(svg: str, leases: Sequence[Lease]) -> str:
    keys = len({lease.key for lease in leases})
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>leaselock timeline</title>"
        "<style>body{font-family:sans-serif;margin:24px;color:#222}"
        "rect.lease:hover{opacity:.8}</style></head><body>"
        f"<h1>leaselock timeline</h1><p>{len(leases)} leases on {keys} keys; hover a bar for "
        "its holder, token and times.</p>\n"
        f"{svg}\n</body></html>\n"
    )
