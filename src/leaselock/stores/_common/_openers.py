"""How a SQL store gets its pool: the application's, handed in, or its own, made at open."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar, final

from ..._errors import LocksConfigurationError

__all__ = ["Opener", "given_pool", "made_pool"]

E = TypeVar("E")


@final
@dataclass(frozen=True, slots=True)
class Opener(Generic[E]):
    """How a store gets its executor at open, and what follows once it closed it."""

    make: Callable[[], Awaitable[E]]
    after_close: Callable[[], None]


def given_pool(executor: E, *, owned: bool, store: Callable[[], str]) -> Opener[E]:
    """The application's pool, handed out at every open.

    A store that owns it (``own_pool=True``) closes it at its last close, and cannot open
    again: ``make`` then raises :class:`LocksConfigurationError`, naming ``store()`` and the fix.
    """
    spent = False

    async def make() -> E:
        if spent:
            raise LocksConfigurationError(
                f"{store()} closed the pool it was given (own_pool=True) and cannot open "
                "again; build a new store with a new pool"
            )
        return executor

    def after_close() -> None:
        nonlocal spent
        spent = owned

    return Opener(make, after_close)


def made_pool(make: Callable[[], Awaitable[E]]) -> Opener[E]:
    """A pool the store makes at each open (``from_url``), on the loop that opens it."""
    return Opener(make, lambda: None)
