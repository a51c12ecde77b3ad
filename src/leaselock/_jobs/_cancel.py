"""Cancel on loss: a job asked for it is cancelled when its run's lock is lost."""

from __future__ import annotations

import asyncio
from typing import final

from .._errors import LockLostError
from ._runs import JobRun

__all__ = ["CancelOnLoss"]


@final
class CancelOnLoss:
    """Cancels the task running a job when the run's lock is lost, from whichever thread."""

    __slots__ = ("_cancelled", "_lock", "_remove", "_task")

    def __init__(self, run: JobRun) -> None:
        task = asyncio.current_task()
        assert task is not None  # noqa: S101 -- an async job runs in a task
        self._task = task
        self._lock = run.lock
        self._cancelled = False
        loop = asyncio.get_running_loop()

        def cancel(reason: LockLostError) -> None:
            self._cancelled = True
            # the loss is seen on the Locks' loop; the run may be on another
            loop.call_soon_threadsafe(task.cancel, str(reason))

        self._remove = run.lock.signal.add_callback(cancel)

    def raise_the_loss_instead(self, cancelled: asyncio.CancelledError) -> None:
        """If the only cancellation was ours, raise the loss it stands for.

        Raises:
            LockLostError: the run's lock was lost, and nothing else cancelled the task.
        """
        if self._cancelled and self._task.uncancel() == 0:
            reason = self._lock.signal.reason
            if reason is not None:
                raise reason from cancelled

    def stop(self) -> None:
        """Stop watching the signal (the run is over)."""
        self._remove()
