"""How the dashboard writes values for people: escaped, times relative AND absolute.

Every value that came from a store or a request goes through :func:`esc` (and passwords
through :func:`~leaselock._redact.redact_secrets` where a message may carry a URL). A moment is
written twice: relative for a glance (``12 s left``, ``3 min ago``), absolute in UTC for the
record (``14:03:07 UTC``); the page's script keeps the relative one current between readings.
"""

from __future__ import annotations

import html
from datetime import datetime, timedelta
from typing import Final, Literal

from ..._redact import redact_secrets

__all__ = ["absolute", "esc", "moment", "relative", "said"]

MINUTE_S: Final = 60
HOUR_S: Final = 3600
DAY_S: Final = 86400


def esc(value: object) -> str:
    """Return ``value`` as text safe inside HTML, attribute values included."""
    return html.escape(str(value), quote=True)


def said(message: str) -> str:
    """Return a message (an error's, a store's) escaped and with its passwords redacted."""
    return esc(redact_secrets(message))


def relative(at: datetime, now: datetime, kind: Literal["ago", "left"]) -> str:
    """Return ``at`` as people read it next to ``now``: ``12 s left``, ``3 min ago``."""
    seconds = (at - now).total_seconds() if kind == "left" else (now - at).total_seconds()
    if kind == "left" and seconds <= 0:
        return "expiring"
    seconds = max(seconds, 0.0)
    if seconds < MINUTE_S:
        amount = f"{seconds:.0f} s" if seconds >= 10 or kind == "ago" else f"{seconds:.1f} s"  # noqa: PLR2004 -- tenths matter under ten seconds left
    elif seconds < HOUR_S:
        amount = f"{seconds / MINUTE_S:.0f} min"
    elif seconds < DAY_S:
        amount = f"{seconds / HOUR_S:.1f} h"
    else:
        amount = f"{seconds / DAY_S:.1f} days"
    return f"{amount} {kind}"


def absolute(at: datetime, now: datetime) -> str:
    """Return ``at`` in UTC: the time alone today, the date too otherwise."""
    if abs(now - at) < timedelta(hours=12):
        return at.strftime("%H:%M:%S UTC")
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def moment(at: datetime, now: datetime, kind: Literal["ago", "left"]) -> str:
    """Return ``at`` as HTML: relative (kept current by the script), then absolute."""
    epoch_ms = int(at.timestamp() * 1000)
    return (
        f'<time datetime="{esc(at.isoformat())}" data-at="{epoch_ms}" data-kind="{kind}">'
        f"{esc(relative(at, now, kind))}</time> "
        f'<span class="abs">{esc(absolute(at, now))}</span>'
    )
