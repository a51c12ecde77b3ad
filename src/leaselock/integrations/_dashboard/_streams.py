"""A page's live stream: its live part pushed as server-sent events at every change.

The page was drawn from the snapshot's version when it loaded; its stream pushes the part again
each time the snapshot changes (a reading, an event of this process, an action), and a comment
every 15 s while nothing does, so that proxies keep a quiet stream open. The page counts as open
(for the shared reader's pace) for exactly as long as its stream is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Final

from ..._clock import Clock
from ._http import Receive, Send, Stream
from ._watch import Page, Watch

__all__ = ["HEARTBEAT_MS", "serve_stream"]

HEARTBEAT_MS: Final = 15_000


async def serve_stream(
    watch: Watch,
    clock: Clock,
    kind: Page,
    *,
    draw: Callable[[], str],
    receive: Receive,
    send: Send,
) -> None:
    """Push ``draw()`` at every change of ``watch`` until the client goes away."""
    stream = Stream(send)
    await stream.start()
    gone = asyncio.Event()

    async def until_disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()

    listening = asyncio.get_running_loop().create_task(until_disconnected())
    try:
        async with watch.viewing(kind):
            await _push(watch, clock, stream, draw, gone)
    finally:
        listening.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listening
    with contextlib.suppress(OSError, RuntimeError):
        await stream.end()


async def _push(
    watch: Watch, clock: Clock, stream: Stream, draw: Callable[[], str], gone: asyncio.Event
) -> None:
    # the page was drawn from this version: push what changes from here
    version = watch.snapshot.version
    while not gone.is_set():
        beat = asyncio.Event()
        timer = clock.call_at(clock.now_ms() + HEARTBEAT_MS, _setter(beat))
        changed = asyncio.ensure_future(watch.wait_change(version))
        waits = {changed, asyncio.ensure_future(gone.wait()), asyncio.ensure_future(beat.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            for waiting in waits:
                waiting.cancel()
        if gone.is_set():
            return
        if changed.done() and not changed.cancelled():
            version = changed.result()
            await stream.event("part", {"html": draw(), "version": version})
        else:
            await stream.comment()


def _setter(event: asyncio.Event) -> Callable[[], Awaitable[None]]:
    async def set_it() -> None:
        event.set()

    return set_it
