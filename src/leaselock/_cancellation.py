"""Cancellations a driver swallowed, delivered where a store call returns.

A driver may catch a task's cancellation inside a call and answer as if nothing had happened:
redis-py 8.1's asyncio client does so now and then (a task cancelled at a random moment of an
``eval`` ran on, about once in 30 to 70 tries here). The task's :meth:`asyncio.Task.cancelling`
count still tells that it was cancelled. Without this, a loop that stops only when cancelled
never stops (``asyncio.run`` then hangs at exit, waiting for it), and a bound that cancels a
late store call would take its late answer instead of timing out. Every store call the engine,
the operator layer and the Redis stores await goes through :func:`delivered`.
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
