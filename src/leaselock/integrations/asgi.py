"""ASGI lifespan glue (FastAPI, Starlette): start the Locks with the app, close it after.

Three lines without this module::

    @asynccontextmanager
    async def lifespan(app):
        async with locks:
            yield

With it, and with a lifespan of your own that runs inside::

    app = FastAPI(lifespan=locks_lifespan(locks, inner=start_scheduler))
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

from .._locks import Locks

__all__ = ["locks_lifespan"]

App = TypeVar("App")
Lifespan = Callable[[App], AbstractAsyncContextManager[Any]]


def locks_lifespan(locks: Locks, *, inner: Lifespan[App] | None = None) -> Lifespan[App]:
    """Return an ASGI lifespan that runs ``locks`` for the application's life.

    The ``Locks`` starts before ``inner`` (so what ``inner`` starts, a scheduler for instance,
    runs under it) and closes after ``inner`` ends: runs in progress finish, leases are handed
    back, elections step down. ``app.state.locks`` is set where the app has a ``state``.

    .. versionadded:: 0.1
    """

    @asynccontextmanager
    async def lifespan(app: App) -> AsyncIterator[Any]:
        async with locks:
            state = getattr(app, "state", None)
            if state is not None:
                state.locks = locks
            if inner is None:
                yield None
                return
            async with inner(app) as inner_state:
                yield inner_state

    return lifespan
