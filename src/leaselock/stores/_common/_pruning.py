"""Pruner: a store's housekeeping that deletes long-released rows now and then, in the background.

It runs on real time, like the server whose clock decides what is old: no lease depends on when
it runs, only how big the table grows. Every instance of a fleet runs one; their passes are
jittered and skip rows another pass holds, so they share the work instead of repeating it.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Final, final

from ..._durations import parse_duration
from ..._errors import LocksConfigurationError

__all__ = ["MIN_PRUNE_AFTER_MS", "PRUNE_TIMEOUT_S", "Pruner", "parse_prune_after"]

_log = logging.getLogger("leaselock")
_jitter = random.Random()  # noqa: S311 -- spreads the fleet's passes; it guards no secret

# one pass may take this long; past it, the next pass goes on where it stopped
PRUNE_TIMEOUT_S: Final = 30.0
MIN_PRUNE_AFTER_MS: Final = 1000


def parse_prune_after(value: object, *, name: str = "prune_after") -> int:
    """Return how long a lock must have been free before it is pruned, in milliseconds.

    Raises:
        LocksConfigurationError: not a duration, or under a second.
    """
    age_ms = parse_duration(value, name=name)
    if age_ms < MIN_PRUNE_AFTER_MS:
        raise LocksConfigurationError(
            f"{name}={value!r} is under a second; pass a duration such as '1h' (or "
            "prune_after=None to keep released locks for ever)"
        )
    return age_ms


@final
class Pruner:
    """Calls ``prune()`` about every ``every_s`` seconds (0.5x to 1.5x, at random) until stopped.

    A failed pass is logged and the next one comes as planned: pruning only keeps the table
    small, so a store that is away costs nothing more than a skipped pass.
    """

    __slots__ = ("_every_s", "_prune", "_store", "_task")

    def __init__(self, prune: Callable[[], Awaitable[int]], every_s: float, store: str) -> None:
        """Prepare; :meth:`start` begins the passes."""
        self._prune = prune
        self._every_s = every_s
        self._store = store
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin the passes on the running loop (once; later calls do nothing)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._passes(), name=f"leaselock pruner {self._store}"
            )

    async def stop(self) -> None:
        """Stop, cutting a pass in flight short (its deletions so far stand)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])

    async def _passes(self) -> None:
        while True:
            await asyncio.sleep(self._every_s * _jitter.uniform(0.5, 1.5))  # noqa: TID251 -- see the module
            try:
                async with asyncio.timeout(PRUNE_TIMEOUT_S):
                    pruned = await self._prune()
            except Exception as error:  # noqa: BLE001 -- housekeeping: report, try next time
                _log.info("%s could not prune released locks this time: %s", self._store, error)
                continue
            if pruned:
                _log.debug("%s pruned %d long-released locks", self._store, pruned)
