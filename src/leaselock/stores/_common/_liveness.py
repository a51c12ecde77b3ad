"""The one keep-alive of every listening connection: ask it when quiet, cut it when silent.

A connection that only listens (PostgreSQL's LISTEN, a Redis subscription) shows no sign when it
goes half-open: a partition, or a load balancer or NAT that forgot an idle flow, leaves it
looking connected while nothing it should carry arrives, for good. So a connection that has
heard nothing for ``quiet_s`` is asked something its server must answer (``SELECT 1``, a
PING), and one that does not answer within as long again is cut; its owner then replaces it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

__all__ = ["Answering", "kept_alive"]


class Answering(Protocol):
    """A listening connection that can be asked whether its server still answers."""

    @property
    def heard_at(self) -> float:
        """When, on the loop's clock, the connection last heard anything from its server."""

    def asking(self) -> AbstractAsyncContextManager[object]:
        """Held around a question: a connection that runs one command at a time lends its turn."""

    async def ask(self) -> None:
        """Send something the server must answer; return once an answer arrived.

        Raises:
            Exception: the connection broke; it is cut as a silent one is.
        """

    def cut(self, silent_s: float) -> None:
        """Give the connection up: nothing was heard for ``silent_s``, an answer included."""


async def _keep_alive(connection: Answering, quiet_s: float) -> None:
    loop = asyncio.get_running_loop()
    while True:
        # the pace of a liveness check, not lock timing: no lease depends on it
        await asyncio.sleep(connection.heard_at + quiet_s - loop.time())  # noqa: TID251
        async with connection.asking():
            # a command that ran while the question waited for its turn was heard
            if loop.time() < connection.heard_at + quiet_s:
                continue
            try:
                async with asyncio.timeout(quiet_s):
                    await connection.ask()
            except Exception:  # noqa: BLE001 -- no answer, or a broken connection: both silent
                connection.cut(loop.time() - connection.heard_at)
                return


@asynccontextmanager
async def kept_alive(connection: Answering, quiet_s: float, *, name: str) -> AsyncIterator[None]:
    """Keep ``connection`` asked while entered; it is cut once, at most, if it falls silent.

    After a cut the keep-alive stops: the owner replaces the connection and keeps the new one
    alive in a context of its own. ``name`` names the task, for whoever lists the loop's tasks.
    """
    keeping = asyncio.get_running_loop().create_task(
        _keep_alive(connection, quiet_s), name=f"leaselock keep-alive of {name}"
    )
    try:
        yield
    finally:
        keeping.cancel()
        await asyncio.wait([keeping])
