"""Fenced writes: the resource refuses the late write of a holder that was paused past its lease.

A lock cannot stop a paused holder: from the store's expiry until the process runs again it still
believes it holds the lock. What stops its late write is the resource itself, keeping the highest
fencing token it has seen and refusing lower ones. Two ways to say it in one line:

- in SQL (SQLAlchemy), :func:`leaselock.integrations.sqlalchemy.fenced_update` adds
  ``WHERE token_column <= :token`` and sets the column to the token, in the same statement::

      result = await session.execute(
          fenced_update(products, products.c.stock_fencing_token, lock.fencing_token,
                        products.c.id == product_id, in_stock=count)
      )
      if result.rowcount == 0: ...  # a newer holder wrote this row: the write was refused

- in a process of your own (an HTTP service that receives writes with tokens),
  :class:`FencingGuard` keeps the highest token per resource and answers whether a write may go.
"""

from __future__ import annotations

import threading
from typing import final

from ._errors import LocksConfigurationError
from .stores._common._protocol import MAX_FENCING_TOKEN

__all__ = ["FencingGuard", "checked_token"]


def checked_token(token: object) -> int:
    """Return ``token`` if it is a fencing token (an int in 1..2**53-1).

    Raises:
        LocksConfigurationError: it is not.
    """
    if type(token) is not int or not 0 < token <= MAX_FENCING_TOKEN:
        raise LocksConfigurationError(
            f"token={token!r} is not a fencing token; pass lock.fencing_token (an int from 1 to "
            "2**53 - 1)"
        )
    return token


@final
class FencingGuard:
    """The highest fencing token seen per resource, in this process; thread-safe.

    Put it in front of a resource that several lock holders write to::

        guard = FencingGuard()
        if not guard.admit("salmon-kibble-2kg", lock.fencing_token):
            raise StaleWrite(...)        # a newer holder already wrote: refuse this one

    .. versionadded:: 0.1
    """

    __slots__ = ("_highest", "_lock")

    def __init__(self) -> None:
        """Create a guard that has seen no token."""
        self._highest: dict[str, int] = {}
        self._lock = threading.Lock()

    def admit(self, resource: str, token: int) -> bool:
        """Record ``token`` for ``resource`` and return ``True``, unless a greater one was seen.

        Raises:
            LocksConfigurationError: ``token`` is not a fencing token.
        """
        checked = checked_token(token)
        with self._lock:
            if checked < self._highest.get(resource, 0):
                return False
            self._highest[resource] = checked
            return True

    def highest(self, resource: str) -> int | None:
        """Return the highest token admitted for ``resource``, or ``None``."""
        with self._lock:
            return self._highest.get(resource)
