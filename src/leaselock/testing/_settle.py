"""Settling the event loop: let every other task run until it waits on something."""

from __future__ import annotations

import asyncio
from typing import Final

__all__ = ["wait_all_tasks_blocked"]

# an upper bound, not a count to rely on: a task that yields for ever must not hang the caller
_MAX_PASSES: Final = 500


async def wait_all_tasks_blocked() -> None:
    """Return once every other task of this loop waits on a future that is not done.

    Nothing else is ready to run then: no task step, and (where the loop shows it) no callback
    in its ready queue. No time passes on any clock. A task that never stops yielding (``await
    asyncio.sleep(0)`` in a loop) cannot be outwaited; after a bounded number of passes this
    returns anyway. A task waiting on a thread counts as blocked: the thread's answer arrives
    when it arrives.

    .. versionadded:: 0.2
    """
    me = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for _ in range(_MAX_PASSES):
        await asyncio.sleep(0)  # noqa: TID251 -- a zero sleep yields one loop pass; no time passes
        # the stdlib loops keep their ready callbacks here; other loops are judged by tasks alone
        if getattr(loop, "_ready", None):
            continue
        if all(_blocked(task) for task in asyncio.all_tasks(loop) if task is not me):
            return


def _blocked(task: asyncio.Task[object]) -> bool:
    # a task waiting on an unfinished future has nothing to do until that future is done; one
    # that was just created or woken has no such future (anyio and trio read it the same way)
    waiting_on = getattr(task, "_fut_waiter", None)
    return waiting_on is not None and not waiting_on.done()
