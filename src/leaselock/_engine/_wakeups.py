"""Wake-ups: waiters in this process wake at once when a key of their store is released.

Several ``Locks`` in one process (even on different event loops, as ``SyncLocks`` runs one) may
share a store object; a release through any of them wakes waiters of all of them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import final

__all__ = ["WAKEUPS", "Wakeups"]

Wake = Callable[[], None]


@final
class Wakeups:
    """Waiters by (store identity, key); thread-safe."""

    __slots__ = ("_guard", "_waiters")

    def __init__(self) -> None:
        """Start with no waiters."""
        self._guard = threading.Lock()
        self._waiters: dict[
            tuple[int, str], dict[object, tuple[asyncio.AbstractEventLoop, Wake]]
        ] = {}

    def add(self, store: object, key: str, token: object, wake: Wake) -> None:
        """Call ``wake()`` on the running loop whenever ``key`` of ``store`` is released."""
        loop = asyncio.get_running_loop()
        with self._guard:
            self._waiters.setdefault((id(store), key), {})[token] = (loop, wake)

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
        """Wake every waiter on ``key`` of ``store``, each on its own loop."""
        if (id(store), key) not in self._waiters:
            # most releases have no waiter here: a lock-free look first (a dict read is atomic)
            return
        with self._guard:
            waiters = list(self._waiters.get((id(store), key), {}).values())
        for loop, wake in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(wake)


WAKEUPS = Wakeups()
"""The wake-ups of this process."""
