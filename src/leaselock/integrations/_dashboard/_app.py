"""Dashboard: the ASGI application: routes, who may see what, and the live streams.

Routes, under wherever it is mounted: ``/`` (locks), ``/jobs``, ``/timeline``, their live
streams ``/events?page=...``, ``/confirm`` and ``/act`` (an action's two steps), ``/login`` and
``/logout`` (token mode), and ``/static/*``. Every failure a person can cause or meet is one
line on a page (a refusal, the store unreachable, a table missing), never a traceback.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Sequence
from datetime import timedelta
from typing import Final, cast, final

from ..._clock import Clock, SystemClock, utc_now
from ..._durations import Duration, parse_ttl
from ..._errors import LockError, LocksConfigurationError
from ..._event_types import Event
from ..._jobs import JobsReader, JobStatus
from ..._locks import Locks
from ..._redact import redact_secrets
from ...stores._common._urls import store_from_url
from ._actions import ACTIONS, Action, Actions
from ._assets import SCRIPT, STYLE
from ._auth import Authenticate, Guard, Session
from ._history import History
from ._http import (
    Receive,
    Request,
    Scope,
    Send,
    read_form,
    send_page,
    send_redirect,
    setting_cookies,
)
from ._layout import Frame, confirm_page, message_page
from ._live import Viewer, jobs_part, locks_part, timeline_part
from ._pages import page
from ._signin import sign_in, sign_out
from ._streams import serve_stream
from ._watch import Page, Watch, jobs_reader

__all__ = ["Dashboard"]

PAGES: Final[dict[str, Page]] = {"/": "locks", "/jobs": "jobs", "/timeline": "timeline"}
ASSETS: Final[dict[str, tuple[str, bytes]]] = {
    "/static/dashboard.css": (STYLE, b"text/css; charset=utf-8"),
    "/static/dashboard.js": (SCRIPT, b"text/javascript; charset=utf-8"),
}
HEARD: Final = (
    "lock-acquired",
    "lock-released",
    "lock-lost",
    "lock-handed-back",
    "run-ended",
)


@final
class Dashboard:
    """The operator's dashboard, an ASGI application.

    See :func:`leaselock.integrations.dashboard.dashboard`, which makes one.
    """

    __slots__ = (
        "_actions",
        "_clock",
        "_given",
        "_guard",
        "_history",
        "_opening",
        "_own",
        "_redis_prefix",
        "_title",
        "_unsubscribe",
        "_url",
        "_watch",
    )

    def __init__(
        self,
        source: Locks | str,
        *,
        token: str | None = None,
        authenticate: Authenticate | None = None,
        secret: str | bytes | None = None,
        redis_prefix: str | None = None,
        title: str = "leaselock",
        window: Duration = "5m",
        clock: Clock | None = None,
    ) -> None:
        """Check the arguments; nothing touches the store before a page opens."""
        if not isinstance(source, Locks | str) or not source:
            raise LocksConfigurationError(
                f"dashboard({source!r}); pass the application's Locks, or a store URL"
            )
        self._guard = Guard(token=token, authenticate=authenticate, secret=secret)
        self._given = source if isinstance(source, Locks) else None
        self._url = source if isinstance(source, str) else None
        self._redis_prefix = redis_prefix
        self._title = title
        self._own: Locks | None = None
        self._opening = asyncio.Lock()
        given = self._given
        self._clock = clock or (given.clock if given is not None else SystemClock())
        self._watch = Watch(self._locks, self._clock)
        self._history = History(
            timedelta(milliseconds=parse_ttl(window, name="window")),
            None if given is None else given.instance,
        )
        self._watch.listen(self._history.observe)
        self._actions = Actions(self._locks, self._watch, self._statuses, self._runnable)
        self._unsubscribe = None if given is None else given.events.subscribe(self._heard, *HEARD)

    @property
    def mode(self) -> str:
        """``read-only``, ``token`` or ``host``: who may act here."""
        return self._guard.mode

    @property
    def reads(self) -> int:
        """How many store reads the dashboard made to watch (its actions aside)."""
        return self._watch.reads

    async def aclose(self) -> None:
        """Stop reading and listening, and close the store this dashboard opened (given a URL)."""
        self._watch.close()
        if self._unsubscribe is not None:
            self._unsubscribe()
        await self._actions.aclose()
        if self._own is not None:
            own, self._own = self._own, None
            await own.aclose()

    # --- the store ---------------------------------------------------------------------------

    async def _locks(self) -> Locks:
        if self._given is not None:
            if not self._given.started:
                raise LocksConfigurationError(
                    "the Locks given to the dashboard is not started; mount the dashboard in "
                    "the application whose lifespan starts it (locks_lifespan)"
                )
            return self._given
        async with self._opening:
            if self._own is None:
                assert self._url is not None  # noqa: S101 -- a dashboard has one or the other
                store = store_from_url(
                    self._url,
                    prefix=self._redis_prefix,
                    create_schema=False,
                    read_only=not self._guard.may_act,
                )
                own = Locks(
                    store=store,
                    allow_in_memory_storage=True,
                    instance=f"leaselock-dashboard@{socket.gethostname()}:{os.getpid()}",
                )
                await own.start()
                self._own = own
            return self._own

    def _reader(self) -> JobsReader | None:
        locks = self._given if self._given is not None else self._own
        if locks is None or not locks.started:
            return None
        return jobs_reader(locks)

    def _statuses(self) -> Sequence[JobStatus]:
        reader = self._reader()
        if reader is None:
            return []
        snapshot = self._watch.snapshot
        return reader.statuses(
            snapshot.records, snapshot.states, snapshot.pauses, snapshot.held(), utc_now()
        )

    def _runnable(self) -> frozenset[str]:
        reader = self._reader()
        return (
            frozenset() if reader is None or self._given is None else frozenset(reader.registered())
        )

    def _heard(self, event: Event) -> None:
        self._history.heard(event)
        self._watch.heard(event)

    def _store(self) -> str:
        locks = self._given or self._own
        return redact_secrets(repr(locks.store) if locks is not None else str(self._url))

    # --- ASGI ------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection: ``lifespan`` (served alone) or ``http``."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        request = Request.of(scope)
        try:
            await self._route(request, scope, receive, send)
        except LockError as error:
            # the store unreachable, a table missing: one line, no traceback
            frame = self._frame(request, None, None)
            await send_page(
                send, message_page(frame, "The store did not answer", str(error)), status=503
            )

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _route(self, request: Request, scope: Scope, receive: Receive, send: Send) -> None:
        path = request.path
        if path in ASSETS:
            body, content_type = ASSETS[path]
            await send_page(send, body, content_type=content_type)
            return
        if path == "/login":
            await self._login(request, receive, send)
            return
        operator = await self._guard.operator(request, scope)
        if operator is None and self._guard.mode == "token":
            await send_redirect(send, request.url("/login"))
            return
        if operator is None and self._guard.mode == "host":
            line = "The application did not let you in: sign in to it first."
            frame = self._frame(request, None, None)
            await send_page(send, message_page(frame, "Not signed in", line), status=403)
            return
        session = self._guard.session(request)
        cookies: list[str] = []
        if self._guard.mode == "host" and session is None:
            # host mode: a session holds nothing but the nonce of its forms' CSRF token
            session = self._guard.new_session()
            cookies.append(self._guard.cookie(request, session))
        if self._guard.flash(request) is not None:
            cookies.append(self._guard.flash_cookie(request, None))
        await self._signed_in(request, operator, session, receive, setting_cookies(send, cookies))

    async def _signed_in(
        self,
        request: Request,
        operator: str | None,
        session: Session | None,
        receive: Receive,
        send: Send,
    ) -> None:
        path, method = request.path, request.method
        if path in PAGES and method == "GET":
            await self._page(request, PAGES[path], operator, session, send)
        elif path == "/events" and method == "GET":
            await self._stream(request, operator, receive, send)
        elif path == "/confirm" and method == "GET":
            await self._confirm(request, operator, session, send)
        elif path == "/act" and method == "POST":
            await self._act(request, operator, receive, send)
        elif path == "/logout" and method == "POST":
            await self._logout(request, receive, send)
        else:
            frame = self._frame(request, operator, session)
            line = f"No page at {request.url(path)}."
            await send_page(send, message_page(frame, "Not found", line), status=404)

    def _frame(self, request: Request, operator: str | None, session: Session | None) -> Frame:
        csrf = None if session is None else self._guard.csrf_token(session)
        return Frame(
            request.root, self._title, self._store(), self._guard.mode, operator, csrf,
            self._guard.flash(request),
        )  # fmt: skip

    def _viewer(self, request: Request, operator: str | None) -> Viewer:
        may_act = self._guard.may_act and operator is not None
        return Viewer(request.root, may_act, self._runnable() if may_act else frozenset())

    # --- pages and streams -------------------------------------------------------------------

    def _live(self, kind: Page, viewer: Viewer, prefix: str) -> str:
        snapshot, now = self._watch.snapshot, utc_now()
        if kind == "locks":
            return locks_part(snapshot, viewer, prefix, now)
        if kind == "timeline":
            return timeline_part(snapshot, self._history, prefix, now)
        notices = list(self._actions.notices)
        return jobs_part(
            snapshot,
            self._statuses(),
            history=self._history,
            viewer=viewer,
            notices=notices,
            now=now,
        )

    async def _page(
        self,
        request: Request,
        kind: Page,
        operator: str | None,
        session: Session | None,
        send: Send,
    ) -> None:
        await self._watch.ready(kind)
        prefix = request.query.get("prefix", "")
        live = self._live(kind, self._viewer(request, operator), prefix)
        frame = self._frame(request, operator, session)
        html = page(frame, kind, prefix, live, given_locks=self._given is not None)
        await send_page(send, html)

    async def _stream(
        self, request: Request, operator: str | None, receive: Receive, send: Send
    ) -> None:
        kind = cast("Page", request.query.get("page", "locks"))
        if kind not in PAGES.values():
            kind = "locks"
        prefix = request.query.get("prefix", "")
        viewer = self._viewer(request, operator)
        await serve_stream(
            self._watch,
            self._clock,
            kind,
            draw=lambda: self._live(kind, viewer, prefix),
            receive=receive,
            send=send,
        )

    # --- actions -----------------------------------------------------------------------------

    async def _confirm(
        self, request: Request, operator: str | None, session: Session | None, send: Send
    ) -> None:
        frame = self._frame(request, operator, session)
        action, target = request.query.get("action", ""), request.query.get("target", "")
        refused = self._refusal(operator, action, target)
        if refused is not None:
            await send_page(send, message_page(frame, "Not allowed", refused), status=403)
            return
        proposal = await self._actions.propose(cast("Action", action), target)
        back = request.url(proposal.back)
        if proposal.refusal is not None:
            await send_page(
                send, message_page(frame, proposal.heading, proposal.refusal, back=back)
            )
            return
        fields = {"action": action, "target": target}
        html = confirm_page(
            frame, heading=proposal.heading, explain=proposal.explain, fields=fields,
            inputs=proposal.inputs, confirm=proposal.confirm, back=back,
        )  # fmt: skip
        await send_page(send, html)

    def _refusal(self, operator: str | None, action: str, target: str) -> str | None:
        if not self._guard.may_act:
            return (
                "This dashboard is read-only: no token is configured. Give it one "
                "(dashboard(..., token=...), or leaselock serve --token-file FILE) to act here."
            )
        if operator is None:
            return "Sign in to act."
        if action not in ACTIONS or not target:
            return "Choose an action (break, pause, resume, run) and what it acts on."
        return None

    async def _act(
        self, request: Request, operator: str | None, receive: Receive, send: Send
    ) -> None:
        fields = await read_form(receive) or {}
        frame = self._frame(request, operator, self._guard.session(request))
        if not self._guard.csrf_ok(request, fields.get("csrf")):
            self._guard.refused(request, "an action without a valid CSRF token")
            line = (
                "This form is not from this dashboard's page (or its session ended): reload the "
                "page and try again."
            )
            await send_page(send, message_page(frame, "Not allowed", line), status=403)
            return
        action, target = fields.get("action", ""), fields.get("target", "")
        refused = self._refusal(operator, action, target)
        if refused is not None or operator is None:
            self._guard.refused(request, f"{action} {target!r}: {refused}")
            await send_page(send, message_page(frame, "Not allowed", refused or ""), status=403)
            return
        try:
            outcome = await self._actions.carry_out(
                cast("Action", action), target, fields, operator, request.client
            )
        except LockError as error:
            await send_page(
                send,
                message_page(frame, "Not done", str(error), back=request.url("/jobs")),
                status=400,
            )
            return
        flash = self._guard.flash_cookie(request, outcome.said)
        await send_redirect(send, request.url(outcome.back), cookies=[flash])

    # --- signing in --------------------------------------------------------------------------

    async def _login(self, request: Request, receive: Receive, send: Send) -> None:
        frame = Frame(request.root, self._title, self._store(), self._guard.mode, None, None)
        await sign_in(self._guard, frame, request, receive, send)

    async def _logout(self, request: Request, receive: Receive, send: Send) -> None:
        await sign_out(self._guard, self._frame(request, None, None), request, receive, send)
