"""Threads and event loops: the one bridge between code in threads and the engine's loop.

``SyncLocks`` and sync jobs (and sync hooks and ``with_lock`` functions) all cross here, under
one cancellation rule, both ways:

- A thread waiting for a coroutine on a loop (:func:`call_in_loop`, :meth:`Portal.call`, a
  context manager from :meth:`Portal.wrap_async_context_manager`) cancels that coroutine when it
  stops waiting (``KeyboardInterrupt``, or any exception raised in it), then re-raises. A context
  manager entered for a thread is always exited, even when its task is cancelled.
- A coroutine running sync code in a worker thread (:func:`run_sync_in_worker`) cannot stop
  that code: cancelled meanwhile, it waits for the code to end, then raises ``CancelledError``.
  Whatever lock the code runs under is kept until it returns.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from types import TracebackType
from typing import Any, TypeVar, final

__all__ = [
    "Portal",
    "await_on_loop",
    "call_in_loop",
    "run_sync_in_worker",
    "running_loop",
    "start_on_loop",
]

T = TypeVar("T")
_ExcInfo = tuple[type[BaseException] | None, BaseException | None, TracebackType | None]


def running_loop() -> asyncio.AbstractEventLoop | None:
    """Return the event loop running in this thread, or ``None``."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def call_in_loop(loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` on ``loop`` and block this thread until it ends; return its result.

    Callers check first that this thread runs no event loop (it would freeze it, or deadlock if
    it is ``loop``), and say what to do instead.
    """
    if running_loop() is loop:
        work.close()
        msg = "call_in_loop() on the loop's own thread would wait for itself for ever"
        raise RuntimeError(msg)
    future = asyncio.run_coroutine_threadsafe(work, loop)
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise


def start_on_loop(
    loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, T]
) -> concurrent.futures.Future[T]:
    """Start ``work`` on ``loop`` from any thread; the future tells when and how it ended."""
    return asyncio.run_coroutine_threadsafe(work, loop)


async def await_on_loop(loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` on ``loop`` and await it from this thread's loop (it may be ``loop``)."""
    if running_loop() is loop:
        return await work
    return await asyncio.wrap_future(start_on_loop(loop, work))


async def run_sync_in_worker(fn: Callable[[], T]) -> T:
    """Run ``fn`` in a worker thread with this context; wait for it even through cancellation."""
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(None, contextvars.copy_context().run, fn)
    cancelled = False
    while not future.done():
        try:
            # asyncio.wait never cancels what it waits for: the thread's work keeps its lock
            await asyncio.wait([future])
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return future.result()


@final
class Portal:
    """An event loop on a thread of its own, for code that runs in threads."""

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
        """Run ``work`` on the portal's loop and block this thread until it ends."""
        return call_in_loop(self._loop, work)

    @contextmanager
    def wrap_async_context_manager(self, manager: AbstractAsyncContextManager[T]) -> Iterator[T]:
        """Enter ``manager`` on the portal's loop for a ``with`` block in this thread.

        Entering and exiting run in ONE task, so what ``__aenter__`` sets in its context (a
        contextvar) is there for ``__aexit__``; the block's exception reaches ``__aexit__``.
        """
        entered: concurrent.futures.Future[tuple[T, asyncio.Future[_ExcInfo]]]
        entered = concurrent.futures.Future()
        done = asyncio.run_coroutine_threadsafe(_hold_open(manager, entered), self._loop)
        try:
            value, leave = entered.result()
        except BaseException:
            done.cancel()
            raise
        try:
            yield value
        except BaseException as error:
            self._loop.call_soon_threadsafe(
                _resolve, leave, (type(error), error, error.__traceback__)
            )
            if not done.result():
                raise
        else:
            self._loop.call_soon_threadsafe(_resolve, leave, (None, None, None))
            done.result()

    def stop(self) -> None:
        """Stop the loop, join the thread and close the loop."""
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.run_until_complete(self._loop.shutdown_default_executor())
        self._loop.close()


async def _hold_open(
    manager: AbstractAsyncContextManager[T],
    entered: concurrent.futures.Future[tuple[T, asyncio.Future[_ExcInfo]]],
) -> bool | None:
    """Enter ``manager``, hand its value to the thread, wait for the thread's block, exit."""
    try:
        value = await manager.__aenter__()
    except BaseException as error:
        entered.set_exception(error)
        raise
    leave: asyncio.Future[_ExcInfo] = asyncio.get_running_loop().create_future()
    entered.set_result((value, leave))
    try:
        exc_info = await leave
    except asyncio.CancelledError as cancelled:
        # the thread stopped waiting: exit anyway, or a lock would stay held and renewed
        await manager.__aexit__(type(cancelled), cancelled, cancelled.__traceback__)
        raise
    return await manager.__aexit__(*exc_info)


def _resolve(future: asyncio.Future[_ExcInfo], exc_info: _ExcInfo) -> None:
    if not future.done():
        future.set_result(exc_info)
