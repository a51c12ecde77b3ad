"""Portal: an event loop on a thread of its own, for code that runs in threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar, final

__all__ = ["Portal"]

T = TypeVar("T")


@final
class Portal:
    """Runs coroutines on a private event loop thread and hands their results to the caller."""

    __slots__ = ("_loop", "_thread")

    def __init__(self, name: str) -> None:
        """Start the loop thread named ``name``."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The portal's event loop."""
        return self._loop

    def call(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on the portal's loop and block this thread until it ends.

        If this thread is interrupted while waiting (``KeyboardInterrupt``), ``work`` is cancelled
        and the interruption goes on.

        Raises:
            RuntimeError: called from the portal's own thread, where it would deadlock.
        """
        if threading.current_thread() is self._thread:
            work.close()
            raise RuntimeError(
                "A SyncLocks method was called on its own event-loop thread (from a callback or "
                "an event handler); use the async Locks there (sync_locks.locks)"
            )
        future = asyncio.run_coroutine_threadsafe(work, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def stop(self) -> None:
        """Stop the loop, join the thread and close the loop."""
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.run_until_complete(self._loop.shutdown_default_executor())
        self._loop.close()
