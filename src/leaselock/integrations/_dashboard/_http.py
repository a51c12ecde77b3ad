"""The little HTTP the dashboard needs, over plain ASGI: requests in, pages and streams out.

No framework: the dashboard must mount in any ASGI application (FastAPI, Starlette, Django's
ASGI, a bare server) and add nothing to leaselock's dependencies. Every response carries the
same security headers: a page that runs only its own script and style, is never framed, never
cached, and never sniffed as another type.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import Any, Final, TypeAlias, final
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "MAX_FORM_BYTES",
    "Receive",
    "Request",
    "Scope",
    "Send",
    "Stream",
    "read_form",
    "send_page",
    "send_redirect",
    "setting_cookies",
]

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]

# a form is a few fields (a key, a note, a token): anything larger is not ours
MAX_FORM_BYTES: Final = 16 * 1024

SECURITY_HEADERS: Final = (
    (
        b"content-security-policy",
        (
            b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        ),
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
)


@final
@dataclass(frozen=True, slots=True)
class Request:
    """What the dashboard reads of one HTTP request.

    Attributes:
        method: ``GET``, ``POST``...
        path: the path under the dashboard's mount point, starting with ``/``.
        root: the mount point (``""`` at the root, ``"/admin/locks"`` mounted there).
        query: the query string's fields (the first value of each).
        cookies: the request's cookies.
        headers: the request's headers, names lower-cased (the last value of each).
        https: whether the request came over HTTPS (its cookies are then ``Secure``).
        client: the client's address, for the audit log.
    """

    method: str
    path: str
    root: str
    query: Mapping[str, str]
    cookies: Mapping[str, str]
    headers: Mapping[str, str]
    https: bool
    client: str

    @classmethod
    def of(cls, scope: Scope) -> Request:
        """Read the request of an ASGI ``http`` scope."""
        root = str(scope.get("root_path") or "").rstrip("/")
        path = str(scope.get("path") or "/")
        # Starlette's Mount keeps the full path and sets root_path; other servers strip it
        if root and path.startswith(root + "/"):
            path = path[len(root) :]
        elif root and path == root:
            path = "/"
        headers = {
            bytes(name).decode("latin-1").lower(): bytes(value).decode("latin-1")
            for name, value in scope.get("headers") or ()
        }
        query_string = bytes(scope.get("query_string") or b"").decode("latin-1")
        client = scope.get("client")
        return cls(
            method=str(scope.get("method") or "GET").upper(),
            path=path or "/",
            root=root,
            query={name: values[0] for name, values in parse_qs(query_string).items()},
            cookies=_cookies(headers.get("cookie", "")),
            headers=headers,
            https=scope.get("scheme") in ("https", "wss"),
            client=f"{client[0]}" if client else "unknown",
        )

    def url(self, path: str) -> str:
        """Return ``path`` (``/jobs``) as a URL path under the mount point."""
        return f"{self.root}{path}"

    def same_origin(self) -> bool:
        """Whether the request's ``Origin`` (when sent) is this host: a check beside CSRF's."""
        origin = self.headers.get("origin")
        if origin is None or origin == "null":
            # browsers send Origin with every POST; "null" (a sandboxed frame) is refused
            return origin is None
        return urlsplit(origin).netloc == self.headers.get("host", "")


def _cookies(header: str) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return {}
    return {name: morsel.value for name, morsel in jar.items()}


async def read_form(receive: Receive) -> dict[str, str] | None:
    """Read an ``application/x-www-form-urlencoded`` body; ``None`` when it is too large."""
    body = b""
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        more = bool(message.get("more_body"))
        if len(body) > MAX_FORM_BYTES:
            return None
    fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {name: values[0] for name, values in fields.items()}


def _headers(
    content_type: bytes, cookies: Iterable[str], extra: Iterable[tuple[bytes, bytes]] = ()
) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", content_type), *SECURITY_HEADERS, *extra]
    headers += [(b"set-cookie", cookie.encode("latin-1")) for cookie in cookies]
    return headers


async def send_page(
    send: Send,
    body: str,
    *,
    status: int = 200,
    content_type: bytes = b"text/html; charset=utf-8",
    cookies: Iterable[str] = (),
) -> None:
    """Send a whole response: a page, a style sheet, a script."""
    encoded = body.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": _headers(
                content_type, cookies, [(b"content-length", str(len(encoded)).encode())]
            ),
        }
    )
    await send({"type": "http.response.body", "body": encoded})


async def send_redirect(send: Send, location: str, *, cookies: Iterable[str] = ()) -> None:
    """Answer ``303 See Other`` to ``location``: after a form, the browser GETs the page."""
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": _headers(
                b"text/plain; charset=utf-8",
                cookies,
                [(b"location", location.encode("latin-1")), (b"content-length", b"0")],
            ),
        }
    )
    await send({"type": "http.response.body", "body": b""})


def setting_cookies(send: Send, cookies: list[str]) -> Send:
    """Return ``send`` adding a ``Set-Cookie`` for each of ``cookies`` to the response's start.

    The list is read when the response starts: a handler may still add to it.
    """

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start" and cookies:
            headers = list(message.get("headers", []))
            headers += [(b"set-cookie", cookie.encode("latin-1")) for cookie in cookies]
            message = {**message, "headers": headers}
        await send(message)

    return sending


@final
class Stream:
    """A server-sent events response: ``event: <name>`` and ``data:`` lines, as they come."""

    __slots__ = ("_send",)

    def __init__(self, send: Send) -> None:
        """Write to ``send``; :meth:`start` first."""
        self._send = send

    async def start(self) -> None:
        """Send the headers of an event stream."""
        await self._send(
            {
                "type": "http.response.start",
                "status": 200,
                # a proxy that buffers (nginx) would hold the events back: tell it not to
                "headers": _headers(
                    b"text/event-stream; charset=utf-8", (), [(b"x-accel-buffering", b"no")]
                ),
            }
        )

    async def event(self, name: str, data: object) -> None:
        """Send one event whose data is ``data`` as JSON (one line: no ``data:`` splitting)."""
        payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        chunk = f"event: {name}\ndata: {payload}\n\n"
        await self._send({"type": "http.response.body", "body": chunk.encode(), "more_body": True})

    async def comment(self) -> None:
        """Send a comment line: keeps proxies from closing a quiet stream."""
        await self._send(
            {"type": "http.response.body", "body": b": still here\n\n", "more_body": True}
        )

    async def end(self) -> None:
        """End the response."""
        await self._send({"type": "http.response.body", "body": b""})
