"""The operator's dashboard: a live window on the locks and jobs of a store, and a hand on them.

An ASGI application, server-rendered, with a little script and no build step; it needs nothing
beyond leaselock (``leaselock serve`` needs an ASGI server: ``pip install
'leaselock[dashboard]'``). Mount it in the application, given its ``Locks``::

    app.mount("/admin/locks", dashboard(locks, token=os.environ["DASHBOARD_TOKEN"]))

or serve it on its own, given a store URL: ``leaselock serve --url URL`` (127.0.0.1:8787).

Pages: the live locks (holder, token, time left), the jobs (owner, last run and last
success, paused, failing, missed ticks, recent runs), and a live timeline of the last
minutes. Actions: break a lock, pause or resume a job or a prefix, run a job now; each confirmed
first, CSRF-protected, and an ``operator-acted`` event naming who asked. Without a token (or
``authenticate``) it is read-only. Watching costs the store at most one round trip a second per
open page, however many locks and jobs it has: every page reads through one shared reader.
"""

from __future__ import annotations

from .._clock import Clock
from .._durations import Duration
from .._locks import Locks
from ._dashboard import Authenticate, Dashboard

__all__ = ["Authenticate", "Dashboard", "dashboard"]


def dashboard(
    source: Locks | str,
    *,
    token: str | None = None,
    authenticate: Authenticate | None = None,
    secret: str | bytes | None = None,
    redis_prefix: str | None = None,
    title: str = "leaselock",
    window: Duration = "5m",
    clock: Clock | None = None,
) -> Dashboard:
    """Return the operator's dashboard of ``source``, an ASGI application to mount or serve.

    Args:
        source: the application's started ``Locks`` (its own locks and runs then show the
            moment they change, and its registered jobs can be run from the page), or a store
            URL (``postgresql://...``, ``redis://...``, ``sqlite:///...``: the dashboard opens
            the store itself, creating no table, read-only without a token).
        token: the secret operators sign in with (at least 16 characters). Without it, and
            without ``authenticate``, the dashboard is read-only: anyone who reaches it sees,
            nobody acts.
        authenticate: the application's own check instead of a token: an async function
            given the request's ASGI scope, returning the operator's name (``None``: refused).
        secret: the key that signs sessions with ``authenticate`` (default: random per
            process; pass one when several processes serve one address). A token signs its own.
        redis_prefix: the key prefix of a Redis store given by URL (default ``"leaselock:"``).
        title: the name at the top of every page.
        window: how far back the timeline reaches.
        clock: paces the store reads (default: the ``Locks``' clock, else the system's).

    Raises:
        LocksConfigurationError: an argument is wrong; the message says how to fix it.

    .. versionadded:: 0.3
    """
    return Dashboard(
        source,
        token=token,
        authenticate=authenticate,
        secret=secret,
        redis_prefix=redis_prefix,
        title=title,
        window=window,
        clock=clock,
    )
