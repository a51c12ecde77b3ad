"""Cancellations a driver swallowed, delivered where the call returns.

Python 3.11's :func:`asyncio.wait_for` returns the inner answer when a cancellation lands just
as it completes, and redis-py sends every command through it when a socket timeout is set: a
task cancelled at a random moment of a command ran on about once in 30 to 70 tries here (the
class of redis/redis-py#2028). Only the task's :meth:`asyncio.Task.cancelling` count still tells.
A loop that stops only when cancelled then never stops, and ``asyncio.run`` hangs at exit
waiting for it. The Redis stores' background loops await their commands through
:func:`delivered`. Calls made for the application are left alone: a bare ``CancelledError``
would escape an anyio cancel scope, which knows its own cancellations by their message, and
such a scope cancels again until it is left; the engine's own bound
(``StoreCallBounds.until``) counts a cancelled call as timed out however it ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["delivered"]

T = TypeVar("T")


async def delivered(call: Awaitable[T]) -> T:
    """Await ``call``; raise :class:`asyncio.CancelledError` if it swallowed a cancellation.

    A cancellation the call delivered itself passes through unchanged, as does any answer or
    error of a call that was not cancelled meanwhile.

    Raises:
        asyncio.CancelledError: the task was cancelled while ``call`` ran, and ``call``
            answered or failed instead of raising it.
    """
    task = asyncio.current_task()
    if task is None:
        return await call
    requested = task.cancelling()
    try:
        answer = await call
    except Exception as error:
        if task.cancelling() > requested:
            raise asyncio.CancelledError from error
        raise
    if task.cancelling() > requested:
        raise asyncio.CancelledError
    return answer
