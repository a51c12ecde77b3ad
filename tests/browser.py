"""Debian's chromium, headless and off the network, driven by the DevTools protocol over a pipe.

No Playwright (it downloads its own browser) and no WebSocket client: ``--remote-debugging-pipe``
speaks the protocol as NUL-terminated JSON on the browser's file descriptors 3 (commands in) and
4 (answers and events out). The browser reaches nothing but 127.0.0.1: every other host name
resolves to nothing, and its background services (updates, sync, safe browsing) are off.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

# the flags that keep a headless chromium to itself and to this machine's 127.0.0.1
QUIET_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-sync",
    "--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider",
    "--metrics-recording-only",
    "--password-store=basic",
    "--use-mock-keychain",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--window-size=1280,860",
)
ANSWER_TIMEOUT_S = 30.0
PHONE_WIDTH = 700


def chromium_or_skip(config: pytest.Config) -> str:
    """The machine's chromium; skip without one, or fail with ``--require-servers``."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        unavailable = "no chromium on PATH (Debian: apt-get install chromium)"
        if config.getoption("--require-servers"):
            pytest.fail(f"--require-servers: {unavailable}")
        pytest.skip(unavailable)
    return found


class Browser:
    """One headless chromium, and the DevTools protocol to it."""

    def __init__(self, process: asyncio.subprocess.Process, commands: int, answers: int) -> None:
        self._process = process
        self._commands = commands
        self._answers = answers
        self._next_id = 0
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._events: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def launched(cls, chromium: str, profile: Path) -> AsyncIterator[Browser]:
        """Start chromium with a profile of its own; close it at the end of the block."""
        to_browser, commands = os.pipe()
        answers, from_browser = os.pipe()
        # bash puts the two pipe ends on the descriptors the protocol expects, 3 and 4 (dash
        # cannot: it takes no descriptor number over 9)
        process = await asyncio.create_subprocess_exec(
            "/bin/bash",
            "-c",
            f'exec "$@" 3<&{to_browser} 4>&{from_browser}',
            "sh",
            chromium,
            *QUIET_FLAGS,
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            "about:blank",
            pass_fds=(to_browser, from_browser),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        os.close(to_browser)
        os.close(from_browser)
        browser = cls(process, commands, answers)
        browser._reader = asyncio.get_running_loop().create_task(browser._read())
        try:
            yield browser
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(browser.call("Browser.close"), 5)
            await browser._close()

    async def _close(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._process.wait(), 5)
        if self._process.returncode is None:
            self._process.kill()
            await self._process.wait()
        if self._reader is not None:
            self._reader.cancel()
        os.close(self._commands)
        os.close(self._answers)

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 26)  # a screenshot is one long message
        pipe = os.fdopen(os.dup(self._answers), "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        try:
            while True:
                try:
                    raw = await reader.readuntil(b"\0")
                except asyncio.IncompleteReadError:
                    return
                message = json.loads(raw[:-1])
                if "id" in message and message["id"] in self._waiting:
                    self._waiting.pop(message["id"]).set_result(message)
                elif "method" in message:
                    self._queue(message["method"], message.get("sessionId")).put_nowait(message)
        finally:
            transport.close()

    def _queue(self, method: str, session: str | None) -> asyncio.Queue[dict[str, Any]]:
        return self._events.setdefault(f"{session}:{method}", asyncio.Queue())

    async def call(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        """Send one protocol command; return its result.

        Raises:
            AssertionError: the browser answered with an error.
        """
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        answer = asyncio.get_running_loop().create_future()
        self._waiting[self._next_id] = answer
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        result = await asyncio.wait_for(answer, ANSWER_TIMEOUT_S)
        assert "error" not in result, f"{method}: {result['error']}"
        return dict(result.get("result", {}))

    async def event(self, method: str, session: str | None) -> dict[str, Any]:
        """Wait for the next event ``method`` of ``session``."""
        return await asyncio.wait_for(self._queue(method, session).get(), ANSWER_TIMEOUT_S)

    def forget(self, method: str, session: str | None) -> None:
        """Drop the events ``method`` of ``session`` heard so far: wait for the next one."""
        waiting = self._queue(method, session)
        while not waiting.empty():
            waiting.get_nowait()

    async def new_page(self) -> Tab:
        """Open a tab."""
        target = await self.call("Target.createTarget", {"url": "about:blank"})
        attached = await self.call(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        tab = Tab(self, attached["sessionId"])
        await tab.call("Page.enable")
        await tab.call("Runtime.enable")
        return tab


class Tab:
    """One tab of the browser."""

    def __init__(self, browser: Browser, session: str) -> None:
        self._browser = browser
        self._session = session

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a protocol command to this tab."""
        return await self._browser.call(method, params, self._session)

    async def goto(self, url: str) -> None:
        """Load ``url`` and wait for its load event."""
        self.will_load()
        await self.call("Page.navigate", {"url": url})
        await self.loaded()

    def will_load(self) -> None:
        """Forget the pages loaded so far: :meth:`loaded` waits for the next one."""
        self._browser.forget("Page.loadEventFired", self._session)

    async def loaded(self) -> None:
        """Wait for the next page of this tab to load (after a link or a form)."""
        await self._browser.event("Page.loadEventFired", self._session)

    async def evaluate(self, expression: str) -> Any:
        """Run ``expression`` in the page (awaiting it if it is a promise); return its value.

        Raises:
            AssertionError: it threw.
        """
        answer = await self.call(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True},
        )
        assert "exceptionDetails" not in answer, answer["exceptionDetails"]
        return answer["result"].get("value")

    async def wait_for(self, selector: str) -> None:
        """Wait until an element matches ``selector``: the page's own DOM changes, no polling."""
        await self.evaluate(
            "new Promise((found) => {"
            f"  const look = () => document.querySelector({json.dumps(selector)});"
            "  if (look()) return found(true);"
            "  new MutationObserver((_, watching) => {"
            "    if (look()) { watching.disconnect(); found(true); }"
            "  }).observe(document, {childList: true, subtree: true});"
            "})"
        )

    async def click_and_load(self, selector: str) -> None:
        """Click the element ``selector`` (a link, a button) and wait for the page it loads."""
        self.will_load()
        await self.evaluate(f"document.querySelector({json.dumps(selector)}).click()")
        await self.loaded()

    async def fill(self, selector: str, value: str) -> None:
        """Type ``value`` into the field ``selector``."""
        await self.evaluate(
            f"document.querySelector({json.dumps(selector)}).value = {json.dumps(value)}"
        )

    async def emulate(self, *, width: int, height: int, dark: bool) -> None:
        """Show pages as a screen of ``width`` x ``height`` CSS pixels would, dark or light."""
        await self.call(
            "Emulation.setDeviceMetricsOverride",
            {
                "width": width,
                "height": height,
                "deviceScaleFactor": 2 if width < PHONE_WIDTH else 1,
                "mobile": width < PHONE_WIDTH,
            },
        )
        scheme = "dark" if dark else "light"
        await self.call(
            "Emulation.setEmulatedMedia",
            {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
        )

    async def screenshot(self, path: Path) -> Path:
        """Save what the tab shows as a PNG at ``path``."""
        shot = await self.call("Page.captureScreenshot", {"format": "png"})
        await asyncio.to_thread(_write, path, base64.b64decode(shot["data"]))
        return path


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
