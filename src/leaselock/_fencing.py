"""Fenced writes: the resource refuses the late write of a holder that was paused past its lease.

A lock cannot stop a paused holder: from the store's expiry until the process runs again it still
believes it holds the lock. What stops its late write is the resource itself, keeping the highest
fencing token it has seen and refusing lower ones. Two ways to say it in one line:

- in SQL (SQLAlchemy Core), :func:`fenced_update` adds ``WHERE token_column <= :token`` and sets
  the column to the token, in the same statement::

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
from typing import TYPE_CHECKING, Any, final

from ._errors import LocksConfigurationError
from .stores._protocol import MAX_FENCING_TOKEN

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, Table, Update

__all__ = ["FencingGuard", "fenced_update"]


def _checked_token(token: object) -> int:
    if type(token) is not int or not 0 < token <= MAX_FENCING_TOKEN:
        raise LocksConfigurationError(
            f"token={token!r} is not a fencing token; pass lock.fencing_token (an int from 1 to "
            "2**53 - 1)"
        )
    return token


def fenced_update(
    table: Table,
    token_column: ColumnElement[Any],
    token: int,
    *where: ColumnElement[bool],
    **values: object,
) -> Update:
    """Return an UPDATE that writes only rows last written under ``token`` or a lower one.

    ``UPDATE table SET **values, token_column = token WHERE *where AND token_column <= token``.

    A row last written under a greater token is left alone: the statement's ``rowcount`` says
    how many rows the write reached. Equal tokens pass, so one run may write a row twice.

    Args:
        table: the SQLAlchemy ``Table`` to update.
        token_column: the column that keeps the highest token written to each row.
        token: the writer's ``lock.fencing_token``.
        *where: the rows to write (``products.c.id == product_id``).
        **values: the new values.

    Raises:
        LocksConfigurationError: ``token`` is not a fencing token, or ``token_column`` is
            also among ``values``.

    .. versionadded:: 0.1
    """
    from sqlalchemy import update  # noqa: PLC0415 -- SQLAlchemy stays an optional extra

    checked = _checked_token(token)
    name = getattr(token_column, "key", None)
    if name in values:
        raise LocksConfigurationError(
            f"{name}= is set by fenced_update from the token; leave it out of the values"
        )
    return (
        update(table)
        .where(*where, token_column <= checked)
        .values({**values, token_column: checked})
    )


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
        checked = _checked_token(token)
        with self._lock:
            if checked < self._highest.get(resource, 0):
                return False
            self._highest[resource] = checked
            return True

    def highest(self, resource: str) -> int | None:
        """Return the highest token admitted for ``resource``, or ``None``."""
        with self._lock:
            return self._highest.get(resource)
