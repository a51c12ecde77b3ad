"""Timelines: the leases told by events or readings, and their drawing.

Shared by ``leaselock timeline`` (from event logs) and the dashboard (live, from a store's
readings and a ``Locks``' events): one lease model with one set of rules (a holder that died is
drawn expired, never past its successor's start), one picture. It imports only the ground floor.
"""

from ._leases import Ended, Lease, end_by_the_next_token, leases_from, read_events
from ._svg import render_html, render_svg

__all__ = [
    "Ended",
    "Lease",
    "end_by_the_next_token",
    "leases_from",
    "read_events",
    "render_html",
    "render_svg",
]
