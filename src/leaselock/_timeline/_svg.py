"""The picture of ``leaselock timeline``: leases drawn as one self-contained SVG or HTML file.

A lane per key and a bar per lease: coloured by instance, its fencing token on it, and its end
marked: ``↩`` handed back, ``✕`` lost (and how), or, for a lease whose holder died without a
recorded end, a dashed ``? expired`` tail from its holder's last sign of life to when it was
over at the latest. No script: a browser, or any SVG viewer, shows it as written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Final
from xml.sax.saxutils import escape, quoteattr

if TYPE_CHECKING:
    from ._leases import Lease

__all__ = ["render_html", "render_svg"]

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
LEGEND_HEIGHT: Final = 84

EXPIRED_MARK_WIDTH: Final = 64

Scale = Callable[[datetime], float]


def render_svg(leases: Sequence[Lease], span: tuple[datetime, datetime] | None = None) -> str:
    """Draw ``leases`` as one SVG document: a lane per key, a bar per lease.

    ``span`` is the stretch of time drawn (a live timeline's last minutes): what lies outside
    is cut at its edges. By default, from the first start to the last end.
    """
    keys = sorted({lease.key for lease in leases})
    instances = sorted({lease.instance for lease in leases})
    colours = {name: PALETTE[index % len(PALETTE)] for index, name in enumerate(instances)}
    if span is None:
        start = min(lease.start for lease in leases)
        finish = max(lease.end for lease in leases)
    else:
        start, finish = span
    span_s = max((finish - start).total_seconds(), 0.001)

    def x(moment: datetime) -> float:
        share = min(max((moment - start).total_seconds() / span_s, 0.0), 1.0)
        return LABEL_WIDTH + share * PLOT_WIDTH

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


def _bar(lease: Lease, x: Scale, top: float, colour: str) -> list[str]:
    left = x(lease.start)
    # a lease of a few milliseconds still shows: 1.5 px at least
    right = max(x(lease.held_until), left + 1.5)
    y = top + (LANE_HEIGHT - BAR_HEIGHT) / 2
    token = "" if lease.token is None else str(lease.token)
    how = lease.ended if lease.detected_by is None else f"{lease.ended} ({lease.detected_by})"
    ticks = "".join(f", tick {tick.isoformat(timespec='seconds')}" for tick in lease.ticks[-3:])
    title = (
        f"{lease.key}: {lease.instance}, fencing token {token or 'unknown'}, "
        f"{_clock(lease.start)} to "
        f"{_clock(lease.end)}, {how}{ticks}"
    )
    parts = [
        (
            f'<rect class="lease" data-key={quoteattr(lease.key)} '
            f"data-instance={quoteattr(lease.instance)} data-token={quoteattr(token)} "
            f"data-ended={quoteattr(lease.ended)} "
            f"data-detected-by={quoteattr(lease.detected_by or '')} "
            f'x="{left:.1f}" y="{y:.1f}" width="{right - left:.1f}" height="{BAR_HEIGHT}" '
            f'rx="3" fill="{colour}" '
            f'stroke="{LOST_COLOUR if lease.ended == "lost" else "none"}" stroke-width="2">'
            f"<title>{escape(title)}</title></rect>"
        )
    ]
    if lease.ended == "expired":
        parts += _expired_tail(lease, right, x(lease.end), y, colour)
    if token and right - left >= MIN_TOKEN_WIDTH:
        parts.append(
            f'<text class="token" x="{(left + right) / 2:.1f}" y="{y + 13:.1f}" '
            f'text-anchor="middle" fill="#fff">{escape(token)}</text>'
        )
    if lease.ended == "lost":
        parts.append(
            f'<text class="mark lost" x="{right + 2:.1f}" y="{y + 14:.1f}" fill="{LOST_COLOUR}" '
            f'font-weight="bold">\u2715 {escape(lease.detected_by or "")}</text>'
        )
    elif lease.ended == "handed-back":
        parts.append(
            f'<text class="mark handed-back" x="{right + 2:.1f}" y="{y + 14:.1f}" '
            'fill="#333" font-weight="bold">\u21a9</text>'
        )
    return parts


def _expired_tail(lease: Lease, left: float, right: float, y: float, colour: str) -> list[str]:
    """Draw the dashed tail of a lease with no recorded end, from ``left`` to ``right``.

    From its holder's last sign of life to ``ttl`` later, or to the next token of its key,
    whichever came first: when it expired is not known, only that it had by then.
    """
    parts = [
        (
            f'<rect class="fade" x="{left:.1f}" y="{y:.1f}" width="{max(right - left, 0):.1f}" '
            f'height="{BAR_HEIGHT}" fill="url(#fade)" stroke="{colour}" stroke-dasharray="4 3">'
            f"<title>{escape(lease.key)}, fencing token {lease.token}: no end recorded. Its "
            f"holder was last heard at {_clock(lease.held_until)}; the lease expired by "
            f"{_clock(lease.end)}</title></rect>"
        )
    ]
    # the mark only where it fits: spilling over the next holder's bar would read as its own
    if right - left >= EXPIRED_MARK_WIDTH:
        parts.append(
            f'<text class="mark expired" x="{(left + right) / 2:.1f}" y="{y + 13:.1f}" '
            f'text-anchor="middle" fill="{LOST_COLOUR}" font-weight="bold">? expired</text>'
        )
    return parts


def _clock(moment: datetime) -> str:
    return moment.strftime("%H:%M:%S.%f")[:-3]


def _legend(instances: Sequence[str], colours: dict[str, str], top: float) -> list[str]:
    parts = [f'<g class="legend" transform="translate({LABEL_WIDTH},{top})">']
    left = 0
    for name in instances:
        parts.append(
            f'<rect x="{left}" y="0" width="14" height="14" fill="{colours[name]}"/>'
            f'<text x="{left + 18}" y="12">{escape(name)}</text>'
        )
        left += 30 + 7 * len(name)
    # two lines: one would run past the drawing's right edge
    parts.append(
        '<text x="0" y="36" fill="#333">\u21a9 handed back (graceful shutdown, idle owner)   '
        f'<tspan fill="{LOST_COLOUR}">\u2715 lost (renewal refused, deadline, max_run)</tspan>'
        f'</text><text class="legend-expired" x="0" y="54" fill="{LOST_COLOUR}">? expired: no end '
        "recorded (the process died): held until its last sign of life, over a ttl later at "
        "the latest</text>"
    )
    parts.append("</g>")
    return parts


def render_html(leases: Sequence[Lease]) -> str:
    """Draw ``leases`` as one HTML page around their SVG."""
    keys = len({lease.key for lease in leases})
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>leaselock timeline</title>"
        "<style>body{font-family:sans-serif;margin:24px;color:#222}"
        "rect.lease:hover{opacity:.8}</style></head><body>"
        f"<h1>leaselock timeline</h1><p>{len(leases)} leases on {keys} keys; hover a bar for "
        "its holder, token and times.</p>\n"
        f"{render_svg(leases)}\n</body></html>\n"
    )
