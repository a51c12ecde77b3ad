"""Wake-ups: a waiter in this process wakes at once when a key of its store is released.

Several ``Locks`` in one process (even on different event loops, as ``SyncLocks`` runs one) may
share a store object; a release through any of them wakes a waiter of any of them. One release
frees the key for one taker, so it wakes one waiter: the one that has waited longest and still
waits. Waking all of them sent every one to the store, where all but one lost: at 64 waiters,
63 store calls for nothing per release.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import final

__all__ = ["WAKEUPS", "Hearing", "Wakeups"]

Wake = Callable[[], None]
StillWaiting = Callable[[], bool]


def _always() -> bool:
    return True


@final
class Hearing:
    """Whether the store tells this process of a key's releases by other processes yet."""

    __slots__ = ("from_store",)

    def __init__(self) -> None:
        """Hear only this process's releases, until the store's following is in place."""
        self.from_store = False


@final
class Wakeups:
    """Waiters by (store identity, key); thread-safe."""

    __slots__ = ("_guard", "_waiters")

    def __init__(self) -> None:
        """Start with no waiters."""
        self._guard = threading.Lock()
        # in the order the waiters came: the first is the one that has waited longest
        self._waiters: dict[
            tuple[int, str], dict[object, tuple[asyncio.AbstractEventLoop, Wake, StillWaiting]]
        ] = {}

    def add(
        self,
        store: object,
        key: str,
        token: object,
        wake: Wake,
        still_waiting: StillWaiting = _always,
    ) -> None:
        """Call ``wake()`` on the running loop when a release of ``key`` of ``store`` is its turn.

        A release wakes the earliest added waiter for which ``still_waiting()`` is true (read
        from the releasing thread: it must be safe to call from any thread).
        """
        loop = asyncio.get_running_loop()
        with self._guard:
            self._waiters.setdefault((id(store), key), {})[token] = (loop, wake, still_waiting)

    def remove(self, store: object, key: str, token: object) -> None:
        """Stop waking the waiter added with ``token``."""
        with self._guard:
            waiters = self._waiters.get((id(store), key))
            if waiters is None:
                return
            waiters.pop(token, None)
            if not waiters:
                del self._waiters[id(store), key]

    def notify(self, store: object, key: str) -> None:
        """Wake the longest waiting waiter on ``key`` of ``store`` that still waits, on its loop."""
        if (id(store), key) not in self._waiters:
            # most releases have no waiter here: a lock-free look first (a dict read is atomic)
            return
        with self._guard:
            waiters = list(self._waiters.get((id(store), key), {}).values())
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, wake, still_waiting in waiters:
            if still_waiting() and not loop.is_closed():
                if loop is running:
                    # the waiter's own loop: no wake-up byte through the loop's self-pipe
                    loop.call_soon(wake)
                else:
                    loop.call_soon_threadsafe(wake)
                return


WAKEUPS = Wakeups()
"""The wake-ups of this process."""
