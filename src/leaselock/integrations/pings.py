"""Pings to a dead-man's switch from job events: healthchecks.io, or any webhook.

Two senders, each attached to a ``Locks`` (or a ``SyncLocks``) with ``attach()``:

- :class:`HealthchecksPings` pings a healthchecks.io check for every run: ``/start`` when it
  starts, the check's own URL when it ends ``"ok"``, ``/fail`` (with the error) when it ends
  any other way. The check alerts when the pings stop coming, whatever stopped them.
- :class:`WebhookPings` POSTs chosen events (a missed tick, a run abandoned, a failing job...)
  as JSON to any URL: an alerting webhook, a chat.

A ping never blocks or fails a run: the event callback only queues it, and one daemon thread
per sender sends it with the standard library (``urllib.request``), each request bounded by
``timeout``. A ping that fails is logged at WARNING on the ``leaselock.pings`` logger, never
raised. Close the sender at shutdown (``with``, ``async with``, ``close()`` or
``await aclose()``) to send what is still queued::

    async with HealthchecksPings("https://hc-ping.com/<uuid>") as pings, locks:
        pings.attach(locks)
        ...   # run the application; the Locks closes first, its last run-ended is still sent

Logs never show a URL whole: credentials and the query are hidden, and path segments longer
than 12 characters (a check's UUID, a webhook's token) are cut to their first four.
"""

from __future__ import annotations

import abc
import base64
import difflib
import json
import logging
import math
import re
import threading
import urllib.error
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Final, Protocol, Self, final, get_args
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

from .._errors import LocksConfigurationError
from .._event_types import Event, EventType, RunEnded, RunStarted
from .._events import Events
from .._forks import process_generation
from .._redact import redact_secrets
from .._threads import run_sync_in_worker

__all__ = ["HealthchecksPings", "WebhookPings"]

_log = logging.getLogger("leaselock.pings")

_DEFAULT_WEBHOOK_EVENTS: Final[tuple[EventType, ...]] = (
    "job-missed",
    "run-abandoned",
    "job-failing",
    "job-overdue",
    "lock-lost",
)
_EVENT_TYPES: Final[frozenset[str]] = frozenset(get_args(EventType))
_USER_AGENT: Final = "leaselock-pings"
# healthchecks.io keeps the first 100 kB of a ping's body; more would only cost time to send
_MAX_BODY_BYTES: Final = 100_000
# a response is read (so the connection ends cleanly), never used: a little is enough
_MAX_RESPONSE_BYTES: Final = 4096
_SHOWN_SEGMENT: Final = 12
# run ids are uuid5 names in a namespace of their own, so the same run always gets the same id
_RUN_IDS: Final = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/leaselock/leaselock#run-id")
# healthchecks.io slugs: https://healthchecks.io/docs/http_api/ ("UUIDs and Slugs")
_SLUG: Final = re.compile(r"[a-z0-9_-]+")
# RFC 9110 field names; values must not break the request into more lines
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE_BREAK: Final = re.compile(r"[\r\n\0]")


class _HasEvents(Protocol):
    """What :meth:`attach` takes: a ``Locks`` or a ``SyncLocks``."""

    @property
    def events(self) -> Events:
        """The events hub to subscribe to."""
        ...


@dataclass(frozen=True, slots=True)
class _Ping:
    """One request to send: built on the worker thread, never on the event loop."""

    url: str
    body: bytes
    headers: Mapping[str, str]
    what: str  # names the ping in a log line: "start of reports:daily"


class _PingSender(abc.ABC):
    """One bounded queue and one lazily started daemon thread that empties it.

    The event callback (:meth:`_on_event`) runs on the Locks' event loop and only queues;
    the worker thread builds and sends each ping.
    """

    __slots__ = (
        "_closed",
        "_cond",
        "_generation",
        "_max_queue",
        "_overflowing",
        "_queue",
        "_thread",
        "_timeout",
        "_types",
        "_unsubscribes",
    )

    def __init__(self, *, timeout: float, max_queue: int, types: tuple[EventType, ...]) -> None:
        self._timeout = _checked_timeout(timeout)
        self._max_queue = _checked_max_queue(max_queue)
        self._types = types
        self._cond = threading.Condition()
        self._queue: deque[Event] = deque()
        self._thread: threading.Thread | None = None
        self._generation = process_generation()
        self._closed = False
        self._overflowing = False
        self._unsubscribes: list[Callable[[], None]] = []

    def attach(self, locks: _HasEvents) -> Callable[[], None]:
        """Ping from the events of ``locks`` (a ``Locks`` or a ``SyncLocks``) from now on.

        Attach once per ``Locks``: attached twice, it pings twice. :meth:`close` detaches
        from every ``Locks`` it was attached to.

        Returns:
            A function that detaches from ``locks`` (calling it again does nothing).

        Raises:
            LocksConfigurationError: this sender is closed.
        """
        self._forget_parent_after_fork()
        with self._cond:
            if self._closed:
                raise LocksConfigurationError(
                    f"This {type(self).__name__} is closed; make a new one to attach to a Locks"
                )
            unsubscribe = locks.events.subscribe(self._on_event, *self._types)
            self._unsubscribes.append(unsubscribe)

        def detach() -> None:
            unsubscribe()
            with self._cond:
                if unsubscribe in self._unsubscribes:
                    self._unsubscribes.remove(unsubscribe)

        return detach

    def close(self, timeout: float = 5.0) -> None:
        """Detach, send what is queued, then stop the worker thread; wait ``timeout`` at most.

        Pings still queued after ``timeout`` seconds are dropped (logged at WARNING); a request
        in flight then ends by its own ``timeout``, and the thread with it, sending nothing
        more. Calling it again does nothing. It blocks: in a coroutine, use :meth:`aclose`.
        """
        self._forget_parent_after_fork()
        with self._cond:
            self._closed = True
            unsubscribes, self._unsubscribes = self._unsubscribes, []
            thread = self._thread
            self._cond.notify_all()
        for unsubscribe in unsubscribes:
            unsubscribe()
        if thread is threading.current_thread():
            return
        if thread is not None:
            thread.join(max(0.0, timeout))
            if not thread.is_alive():
                return
        with self._cond:
            left = len(self._queue)
            self._queue.clear()
        if left:
            _log.warning(
                "%s closed with %d ping(s) not sent within %s s: they are dropped. The endpoint "
                "is slow or unreachable; give close() a longer timeout to wait for them",
                type(self).__name__,
                left,
                timeout,
            )

    # the queue's drain time, as close() takes it: an asyncio.timeout() around aclose() could
    # not stop a close() already under way in its thread
    async def aclose(self, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        """:meth:`close` from a coroutine, in a worker thread so the event loop runs meanwhile.

        Cancelled, it still waits for :meth:`close` to end, then raises ``CancelledError``.
        """
        await run_sync_in_worker(lambda: self.close(timeout))

    def __enter__(self) -> Self:
        """Return the sender; it closes when the block ends."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the sender: send what is queued (5 s at most)."""
        self.close()

    async def __aenter__(self) -> Self:
        """Return the sender; it closes when the block ends."""
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the sender without blocking the event loop: send what is queued (5 s at most)."""
        await self.aclose()

    @abc.abstractmethod
    def _wants(self, event: Event) -> bool:
        """Whether ``event`` makes a ping: cheap, it runs on the event loop."""

    @abc.abstractmethod
    def _ping_for(self, event: Event) -> _Ping | None:
        """The request ``event`` makes (on the worker thread), or ``None``."""

    def _on_event(self, event: Event) -> None:
        # runs on the Locks' event loop: queue and return, so a slow or dead endpoint costs a
        # run nothing; sending is the worker thread's
        if not self._wants(event):
            return
        self._forget_parent_after_fork()
        overflowed = False
        with self._cond:
            if self._closed:
                return
            if len(self._queue) >= self._max_queue:
                # the oldest goes: the newest says most about how things stand now
                self._queue.popleft()
                overflowed = not self._overflowing
                self._overflowing = True
            self._queue.append(event)
            if self._thread is None:
                self._thread = self._start_worker()
            self._cond.notify()
        if overflowed:
            _log.warning(
                "%s: pings come faster than they are sent (max_queue=%d), so the oldest are "
                "dropped; logged once until the queue empties. The endpoint is slow or "
                "unreachable: check it, or raise max_queue or lower timeout",
                type(self).__name__,
                self._max_queue,
            )

    def _start_worker(self) -> threading.Thread | None:
        thread = threading.Thread(
            target=self._work, name=f"leaselock-pings-{type(self).__name__}", daemon=True
        )
        try:
            thread.start()
        except RuntimeError:
            # out of threads: the queue waits for the next event to try again; a run never
            # pays for a ping
            _log.warning("%s could not start its thread; pings wait in the queue", self)
            return None
        return thread

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                event = self._queue.popleft()
                if not self._queue:
                    self._overflowing = False
            self._send(event)

    def _send(self, event: Event) -> None:
        try:
            ping = self._ping_for(event)
        except Exception:  # noqa: BLE001 -- a ping must never end the thread
            _log.warning(
                "Could not build the ping for %s; it is skipped", event.type, exc_info=True
            )
            return
        if ping is None:
            return
        try:
            request = _request_for(ping)
            with urllib.request.urlopen(request, timeout=self._timeout) as response:  # noqa: S310
                response.read(_MAX_RESPONSE_BYTES)
        except urllib.error.HTTPError as error:
            error.close()
            _log_failure(ping, f"HTTP {error.code} {error.reason}")
        except urllib.error.URLError as error:
            _log_failure(ping, str(error.reason))
        except Exception as error:  # noqa: BLE001 -- a ping must never end the thread
            _log_failure(ping, f"{type(error).__name__}: {error}")

    def _forget_parent_after_fork(self) -> None:
        # a forked child has no worker thread, and its lock may have been held by one at the
        # fork; the parent's queued pings are the parent's to send: start afresh
        if self._generation == process_generation():
            return
        self._generation = process_generation()
        self._cond = threading.Condition()
        self._queue = deque()
        self._thread = None
        self._overflowing = False


@final
class HealthchecksPings(_PingSender):
    """Ping healthchecks.io checks for every run of a job, so a job that stops running alerts.

    For each run: ``<check>/start`` when it starts (``run-started``), ``<check>`` when it
    ends ``"ok"``, ``<check>/fail`` when it ends ``"error"``, ``"cancelled"`` or ``"lost"``
    (``run-ended``). Each is a POST whose body is the event's log line (with the error, for a
    failure) and the instance, and whose ``rid`` query parameter, a UUID derived from the job,
    the lock key and the fencing token, pairs a run's start with its end.

    Only runs on this instance ping (runs elsewhere ping from there): attach it to every
    instance's ``Locks``. A check's period and grace say when silence means trouble.

    Pings never block or fail a run; see the module's documentation.

    .. versionadded:: 0.1
    """

    __slots__ = ("_jobs", "_ping_url")

    def __init__(
        self,
        ping_url: str,
        *,
        jobs: Mapping[str, str] | None = None,
        timeout: float = 5.0,
        max_queue: int = 100,
    ) -> None:
        """Ping ``ping_url`` for every job, or each job in ``jobs`` at its own check.

        Args:
            ping_url: the check's ping URL, ``https://hc-ping.com/<uuid>`` (or a self-hosted
                one), without ``/start`` or ``/fail``. Every job pings it when ``jobs`` is
                not given.
            jobs: job key -> its check. When given, only these jobs ping. A check is a URL
                (``https://hc-ping.com/<uuid>``), or a slug joined to ``ping_url`` then given
                as ``https://hc-ping.com/<ping-key>``.
            timeout: seconds each request may take (connecting, and each wait for the server).
            max_queue: pings kept while the endpoint is slow; past it the oldest are dropped.

        Raises:
            LocksConfigurationError: a URL is not http(s) with a host, or names ``/start`` or
                ``/fail``; ``jobs`` is empty or a check is neither a URL nor a slug;
                ``timeout`` is not > 0; ``max_queue`` is not >= 1.
        """
        self._ping_url = _checked_check_url(ping_url, "ping_url")
        self._jobs = None if jobs is None else _checked_jobs(jobs, self._ping_url)
        super().__init__(timeout=timeout, max_queue=max_queue, types=("run-started", "run-ended"))

    def __repr__(self) -> str:
        """Show the check URL as logs do: without its secrets."""
        jobs = "" if self._jobs is None else f", jobs={sorted(self._jobs)!r}"
        return f"HealthchecksPings({_shown(urlunsplit(self._ping_url))!r}{jobs})"

    def _check_for(self, job: str) -> SplitResult | None:
        if self._jobs is None:
            return self._ping_url
        return self._jobs.get(job)

    def _wants(self, event: Event) -> bool:
        return isinstance(event, RunStarted | RunEnded) and self._check_for(event.job) is not None

    def _ping_for(self, event: Event) -> _Ping | None:
        if not isinstance(event, RunStarted | RunEnded):
            return None
        check = self._check_for(event.job)
        if check is None:
            return None
        if isinstance(event, RunStarted):
            suffix, what = "/start", "start"
        elif event.outcome == "ok":
            suffix, what = "", "success"
        else:
            suffix, what = "/fail", "fail"
        query = check.query
        if event.fencing_token is not None:
            # without a token two runs could share an id; healthchecks.io pairs them itself then
            rid = uuid.uuid5(_RUN_IDS, f"{event.job}\0{event.key}\0{event.fencing_token}")
            query = f"{query}&rid={rid}" if query else f"rid={rid}"
        url = urlunsplit(check._replace(path=check.path.rstrip("/") + suffix, query=query))
        lines = [event.message()]
        if event.instance is not None:
            lines.append(f"instance: {event.instance}")
        return _Ping(
            url=url,
            body=_capped(redact_secrets("\n".join(lines))),
            headers={"Content-Type": "text/plain; charset=utf-8", "User-Agent": _USER_AGENT},
            what=f"{what} of {event.job}",
        )


@final
class WebhookPings(_PingSender):
    """POST chosen events as JSON to a URL: an alerting webhook, a chat, a pager.

    The body is one JSON object: ``type``, ``key``, ``job`` (events of a job), ``fencing_token``,
    ``instance``, ``at`` (ISO 8601), ``message`` (the log line), then the event's
    ``log_fields()`` (``event``, ``token``, ``reason``...) where they add a name. Any answer
    but 2xx is logged as a failure; nothing is retried. Credentials in the URL
    (``https://user:password@host/...``) go as Basic auth, unless ``headers`` has an
    ``Authorization``.

    Pings never block or fail a run; see the module's documentation.

    .. versionadded:: 0.1
    """

    __slots__ = ("_headers", "_url")

    def __init__(
        self,
        url: str,
        *,
        events: Iterable[str] = _DEFAULT_WEBHOOK_EVENTS,
        timeout: float = 5.0,
        headers: Mapping[str, str] | None = None,
        max_queue: int = 100,
    ) -> None:
        """POST each event of ``events`` to ``url``.

        Args:
            url: the http(s) URL to POST to.
            events: the event types to send; by default the ones that need a person:
                ``job-missed``, ``run-abandoned``, ``job-failing``, ``job-overdue`` and
                ``lock-lost``.
            timeout: seconds each request may take (connecting, and each wait for the server).
            headers: extra request headers (an ``Authorization``, say); they win over the
                defaults (``Content-Type: application/json``, ``User-Agent``).
            max_queue: pings kept while the endpoint is slow; past it the oldest are dropped.

        Raises:
            LocksConfigurationError: ``url`` is not http(s) with a host; ``events`` is empty,
                a string, or names an unknown event type; a header would break the request;
                ``timeout`` is not > 0; ``max_queue`` is not >= 1.
        """
        self._url = urlunsplit(_checked_url(url, "url"))
        self._headers = {
            "Content-Type": "application/json",
            "User-Agent": _USER_AGENT,
            **_checked_headers(headers),
        }
        super().__init__(timeout=timeout, max_queue=max_queue, types=_checked_events(events))

    def __repr__(self) -> str:
        """Show the URL as logs do: without its secrets."""
        return f"WebhookPings({_shown(self._url)!r}, events={self._types!r})"

    def _wants(self, event: Event) -> bool:
        return event.type in self._types

    def _ping_for(self, event: Event) -> _Ping | None:
        payload: dict[str, object] = {"type": event.type, "key": event.key}
        job = getattr(event, "job", None)
        if job is not None:
            payload["job"] = job
        payload["fencing_token"] = event.fencing_token
        payload["instance"] = event.instance
        payload["at"] = event.at.isoformat()
        payload["message"] = redact_secrets(event.message())
        for name, value in event.log_fields().items():
            payload.setdefault(name, value)
        return _Ping(
            url=self._url,
            body=json.dumps(payload, default=_json_value).encode(),
            headers=self._headers,
            what=f"{event.type} of {job or event.key}",
        )


def _request_for(ping: _Ping) -> urllib.request.Request:
    parts = urlsplit(ping.url)
    headers = dict(ping.headers)
    if parts.username is not None or parts.password is not None:
        # urllib would take "user:password@host" for the host's name: the credentials go as
        # Basic auth, unless an Authorization header was given
        if not any(name.lower() == "authorization" for name in headers):
            pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    # the scheme was checked at construction: http or https, never file:// (S310)
    return urllib.request.Request(  # noqa: S310
        urlunsplit(parts), data=ping.body, headers=headers, method="POST"
    )


def _json_value(value: object) -> object:
    # log fields are str, int and None today; a datetime (or anything later) must not lose a
    # ping to a TypeError
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _capped(text: str) -> bytes:
    # cut on a character, not a byte: healthchecks.io keeps a body only if it reads as UTF-8
    return text.encode()[:_MAX_BODY_BYTES].decode(errors="ignore").encode()


def _log_failure(ping: _Ping, reason: str) -> None:
    _log.warning(
        "Could not send the %s ping to %s (%s); the job is unaffected, but the check may "
        "alert. Check the URL, and that it is reachable from this instance",
        ping.what,
        _shown(ping.url),
        redact_secrets(reason),
    )


def _shown(url: str) -> str:
    """``url`` as a log line may show it: no credentials, no query, long path segments cut."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<a malformed URL>"
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    if parts.username is not None or parts.password is not None:
        netloc = f"***@{netloc}"
    # a check's UUID or a webhook's token IS the credential: anyone who has it can ping
    path = "/".join(
        segment if len(segment) <= _SHOWN_SEGMENT else f"{segment[:4]}..."
        for segment in parts.path.split("/")
    )
    return urlunsplit((parts.scheme, netloc, path, "..." if parts.query else "", ""))


def _checked_url(url: object, name: str) -> SplitResult:
    if not isinstance(url, str):
        raise LocksConfigurationError(
            f"{name} is a {type(url).__name__}; pass the URL as a string, "
            "e.g. 'https://hc-ping.com/<uuid>'"
        )
    try:
        parts = urlsplit(url)
        _ = parts.port  # a port that is not a number raises here, not at the first ping
    except ValueError as error:
        raise LocksConfigurationError(
            f"{name}={_shown(url)!r} is not a valid URL ({error}); pass the full URL, "
            "e.g. 'https://hc-ping.com/<uuid>'"
        ) from error
    if parts.scheme not in ("http", "https") or not parts.hostname or re.search(r"\s", url):
        raise LocksConfigurationError(
            f"{name}={_shown(url)!r} is not an http:// or https:// URL with a host; pass the full "
            "URL, e.g. 'https://hc-ping.com/<uuid>'"
        )
    return parts._replace(fragment="")


def _checked_check_url(url: object, name: str) -> SplitResult:
    parts = _checked_url(url, name)
    last = parts.path.rstrip("/").rpartition("/")[2]
    if last in ("start", "fail"):
        raise LocksConfigurationError(
            f"{name}={_shown(urlunsplit(parts))!r} ends with /{last}; pass the check's own ping "
            "URL (https://hc-ping.com/<uuid>): /start and /fail are added for each run"
        )
    return parts


def _checked_jobs(jobs: object, ping_url: SplitResult) -> dict[str, SplitResult]:
    if not isinstance(jobs, Mapping):
        raise LocksConfigurationError(
            f"jobs is a {type(jobs).__name__}; pass a mapping of job key to its check, "
            "e.g. jobs={'reports:daily': 'https://hc-ping.com/<uuid>'}"
        )
    if not jobs:
        raise LocksConfigurationError(
            "jobs={} pings for no job; map each job key to its check, or leave jobs out so "
            "every job pings ping_url"
        )
    checked: dict[str, SplitResult] = {}
    for job, check in jobs.items():
        if not isinstance(job, str) or not job:
            raise LocksConfigurationError(
                f"jobs has the key {job!r}; its keys are job keys, as given to the job's "
                "decorator (key='reports:daily')"
            )
        if isinstance(check, str) and _SLUG.fullmatch(check):
            checked[job] = ping_url._replace(path=f"{ping_url.path.rstrip('/')}/{check}")
        elif isinstance(check, str) and "://" in check:
            checked[job] = _checked_check_url(check, f"jobs[{job!r}]")
        else:
            raise LocksConfigurationError(
                f"jobs[{job!r}]={_shown(str(check))!r} is neither a check URL nor a slug; pass "
                "'https://hc-ping.com/<uuid>', or a slug (a-z, 0-9, '-' and '_') joined to "
                "ping_url='https://hc-ping.com/<ping-key>'"
            )
    return checked


def _checked_events(events: object) -> tuple[EventType, ...]:
    if isinstance(events, str) or not isinstance(events, Iterable):
        raise LocksConfigurationError(
            f"events={events!r}; pass a collection of event types, e.g. "
            "events=('job-missed', 'job-failing')"
        )
    chosen: list[EventType] = []
    for name in events:
        if name not in _EVENT_TYPES:
            close = difflib.get_close_matches(str(name), _EVENT_TYPES, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise LocksConfigurationError(
                f"events names {name!r}, which is no event type; {hint}the types are "
                f"{', '.join(sorted(_EVENT_TYPES))}"
            )
        if name not in chosen:
            chosen.append(name)
    if not chosen:
        raise LocksConfigurationError(
            "events is empty, so nothing would be sent; name the event types to send, or leave "
            f"events out for the default: {', '.join(_DEFAULT_WEBHOOK_EVENTS)}"
        )
    return tuple(chosen)


def _checked_headers(headers: object) -> dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise LocksConfigurationError(
            f"headers is a {type(headers).__name__}; pass a mapping of header name to value, "
            "e.g. headers={'Authorization': 'Bearer <token>'}"
        )
    checked: dict[str, str] = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            raise LocksConfigurationError(
                f"headers has the name {name!r}, which is no HTTP header name; use letters, "
                "digits and '-', e.g. 'Authorization'"
            )
        if not isinstance(value, str) or _HEADER_VALUE_BREAK.search(value):
            # the value is not shown: it is often a token
            raise LocksConfigurationError(
                f"headers[{name!r}] is not a one-line string; pass the value as a str without "
                "line breaks"
            )
        checked[name] = value
    return checked


def _checked_timeout(timeout: object) -> float:
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise LocksConfigurationError(
            f"timeout={timeout!r}; pass the seconds each ping may take, a number > 0 (default 5.0)"
        )
    return float(timeout)


def _checked_max_queue(max_queue: object) -> int:
    if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
        raise LocksConfigurationError(
            f"max_queue={max_queue!r}; pass how many pings may wait while the endpoint is slow, "
            "an int >= 1 (default 100)"
        )
    return max_queue
