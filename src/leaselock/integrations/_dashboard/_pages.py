"""The three pages around their live part: a filter, the part itself, and what it can show."""

from __future__ import annotations

from typing import Final
from urllib.parse import urlencode

from ._layout import Frame, frame
from ._text import esc
from ._watch import Page

__all__ = ["HEADINGS", "page"]

HEADINGS: Final[dict[Page, str]] = {"locks": "Locks", "jobs": "Jobs", "timeline": "Timeline"}

_ABOUT: Final[dict[Page, str]] = {
    "locks": (
        "Every live lock of the store, by key: who holds it, its fencing token, and the time "
        "left before it expires unless renewed (on the store's clock). Read once a second while "
        "this page is open; this application's own locks show the moment they change."
    ),
    "jobs": (
        "Every job with run records, and the jobs this application registers: where it runs, "
        "how it last ran, and what an operator should know. Recent runs are the runs this "
        "dashboard has seen (the store keeps each job's last run and last success). Owners "
        "are read every 2 s, runs and pauses every 6 s while this page is open alone; what "
        "you do here shows at once."
    ),
    "timeline": (
        "Who held which lock in the last minutes, drawn as <code>leaselock timeline</code> "
        "draws event logs: a bar per lease, coloured by instance, with its token. A lease told "
        "by the store's readings starts when a reading first sees it and is held up to the "
        "last reading that found it renewed; one whose holder died (SIGKILL) is drawn "
        "<b>? expired</b> from there to its expiry, never over its successor. A lock taken and "
        "freed between two readings is not seen, and a release cannot be told from a break. "
        "This application's own leases are drawn from its events, exactly."
    ),
}


def page(context: Frame, kind: Page, prefix: str, live: str, *, given_locks: bool) -> str:
    """Return the whole page ``kind``: its filter, its live part, and what it can show."""
    stream = f"{context.root}/events?{urlencode({'page': kind, 'prefix': prefix})}"
    filter_form = ""
    if kind in ("locks", "timeline"):
        filter_form = (
            '<form class="filter" method="get"><label>Key prefix <input name="prefix" '
            f'value="{esc(prefix)}" placeholder="orders:"></label><button>Filter</button></form>'
        )
    about = _ABOUT[kind]
    if kind == "timeline" and not given_locks:
        about = about.replace(
            " This application's own leases are drawn from its events, exactly.",
            " Mounted in an application (given its Locks), it draws that application's own "
            "leases from its events, exactly.",
        )
    body = (
        f'{filter_form}<section id="live" data-stream="{esc(stream)}" aria-live="polite">'
        f'{live}</section><p class="note">{about} <span id="conn"></span></p>'
    )
    return frame(context, kind, HEADINGS[kind], body)
