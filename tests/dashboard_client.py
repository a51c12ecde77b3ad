"""Drive the dashboard as a browser would, in process: sign in, read pages, follow a live stream."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlencode

import httpx

from leaselock.integrations.dashboard import Dashboard

BASE = "http://dashboard.test"
ORIGIN = {"origin": BASE}
TOKEN = "correct-horse-battery-staple"  # noqa: S105 -- the tests' own token


def client(app: Dashboard) -> httpx.AsyncClient:
    """An HTTP client that calls ``app`` in process."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)


def csrf_of(page: str) -> str:
    """The CSRF token of the first form of ``page``."""
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, "the page has no form with a CSRF token"
    return found.group(1)


def origin_of(http: httpx.AsyncClient) -> dict[str, str]:
    """The ``Origin`` header a browser sends with a form of the client's site."""
    return {"origin": str(http.base_url).rstrip("/")}


async def sign_in(
    http: httpx.AsyncClient, name: str = "alice", token: str = TOKEN, *, root: str = ""
) -> httpx.Response:
    """Sign in with ``token`` as ``name``, as the sign-in form under ``root`` does."""
    form = await http.get(f"{root}/login")
    return await http.post(
        f"{root}/login",
        data={"csrf": csrf_of(form.text), "token": token, "name": name},
        headers=origin_of(http),
    )


async def act(
    http: httpx.AsyncClient, action: str, target: str, *, root: str = "", **fields: str
) -> httpx.Response:
    """Open the confirmation of ``action`` on ``target``, then confirm it with its form."""
    confirmation = await http.get(f"{root}/confirm", params={"action": action, "target": target})
    assert confirmation.status_code == 200, confirmation.text
    data = {"csrf": csrf_of(confirmation.text), "action": action, "target": target, **fields}
    return await http.post(f"{root}/act", data=data, headers=origin_of(http))


class Stream:
    """The server-sent events of one open ``/events`` stream, parsed as they come."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.parts: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._buffer = ""

    async def send(self, message: Mapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            return
        self._buffer += message.get("body", b"").decode()
        while "\n\n" in self._buffer:
            chunk, self._buffer = self._buffer.split("\n\n", 1)
            lines = dict(line.split(": ", 1) for line in chunk.splitlines() if ": " in line)
            if lines.get("event") == "part":
                self.parts.put_nowait(json.loads(lines["data"]))

    async def next_part(self) -> dict[str, Any]:
        """The next live part pushed: ``{"html": ..., "version": ...}``."""
        return await self.parts.get()

    async def latest(self) -> dict[str, Any]:
        """The last part pushed so far (waiting for one if none is waiting): what shows now."""
        part = await self.parts.get()
        while not self.parts.empty():
            part = self.parts.get_nowait()
        return part


@asynccontextmanager
async def live_stream(
    app: Dashboard, page: str, cookies: httpx.Cookies | None = None, prefix: str = ""
) -> AsyncIterator[Stream]:
    """Open ``/events?page=<page>`` on ``app`` for the block; disconnect at its end."""
    stream = Stream()
    gone = asyncio.Event()
    sent_request = False

    async def receive() -> dict[str, Any]:
        nonlocal sent_request
        if not sent_request:
            sent_request = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    jar = "; ".join(f"{name}={value}" for name, value in (cookies or httpx.Cookies()).items())
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/events",
        "root_path": "",
        "query_string": urlencode({"page": page, "prefix": prefix}).encode(),
        "headers": [(b"host", b"dashboard.test"), (b"cookie", jar.encode())],
        "scheme": "http",
        "client": ("127.0.0.1", 50000),
    }
    serving = asyncio.get_running_loop().create_task(app(scope, receive, stream.send))
    try:
        yield stream
    finally:
        gone.set()
        await serving
