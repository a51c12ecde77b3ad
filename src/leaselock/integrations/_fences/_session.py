"""A session's transactions carry a lock's fencing token to the fenced tables' triggers.

:func:`bound` makes every transaction a session begins while it lasts tell the database the
fence (the lock's key and token, or 0 for ``unfenced()``), at the transaction's start: one
statement on PostgreSQL (``set_config(..., true)``: it ends with the transaction) and MySQL (user
variables), none on SQLite (a Python function the triggers call reads it). The fence must not
outlive its transaction. PostgreSQL ends it with the transaction; leaselock forgets it at the
commit or rollback (or when the connection returns to the pool), which ends the SQLite function's
answers. MySQL's variables outlive all that: the connection is marked, and its next transaction
clears them before its first statement, unless that statement gives it a fence of its own (one
statement more, for the first transaction without a fence after one with).

A refusal of a stale write, which the triggers raise, becomes
:class:`~leaselock.StaleFencingTokenError` at the flush or commit that made it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from ..._errors import LocksConfigurationError, StaleFencingTokenError
from ..._fencing import checked_token
from ._ddl import STALE_REFUSAL

if TYPE_CHECKING:
    from sqlalchemy.engine import ExceptionContext
    from sqlalchemy.pool import ConnectionPoolEntry, PoolResetState

__all__ = ["Fence", "bound", "checked_session", "fence_of", "tell"]

# where a connection keeps the fence of its transaction (its pool entry's info)
_FENCE = "leaselock.fence"
_FUNCTION = "leaselock.fence_function"
_STALE = re.compile(re.escape(STALE_REFUSAL) + r"\d+ is stale, newer (\d+)")
_DIALECTS = ("postgresql", "mysql", "mariadb", "sqlite")
_NO_VARIABLES = ("postgresql", "sqlite")

_POSTGRES_FENCE = sa.text(
    "SELECT set_config('leaselock.fence_key', :key, true), "
    "set_config('leaselock.fence_token', :token, true)"
)
_MYSQL_SET_START = "SET @leaselock_fence_key = "
_MYSQL_FENCE = sa.text(_MYSQL_SET_START + ":key, @leaselock_fence_token = :token")
_MYSQL_CLEAR = "SET @leaselock_fence_key = NULL, @leaselock_fence_token = NULL"
# a connection whose MySQL variables still hold the fence of a transaction that ended
_LEFT_OVER = "leaselock.fence_left_over"


@dataclass
class Fence:
    """The fence of one transaction: the lock's key and token (0: ``unfenced()``)."""

    key: str
    token: int
    # told in MySQL's user variables, which outlive the transaction
    in_variables: bool = False
    # the newer token a SQLite trigger found, handed over by leaselock_fence('newer', n)
    newer: int | None = None


def fence_of(lock: object) -> Fence:
    """The fence of a held ``lock``.

    Raises:
        LocksConfigurationError: ``lock`` is not a lock, or it is not held.
    """
    key = getattr(lock, "key", None)
    held = getattr(lock, "held", None)
    if not isinstance(key, str) or not isinstance(held, bool):
        raise LocksConfigurationError(
            f"{lock!r} is not a lock; pass the Lock that locks.acquire() or locks.hold() gave "
            "(or a SyncLock to fenced_sync)"
        )
    if not held:
        raise LocksConfigurationError(
            f"the lock on {key!r} is not held (released, or lost); fence the session inside "
            "the block that holds it, and take the lock again to write after a loss"
        )
    return Fence(key, checked_token(getattr(lock, "fencing_token", None)))


def checked_session(session: object, *, asynchronous: bool) -> Session:
    """The ORM ``Session`` behind ``session``, bound to a database whose fences leaselock makes.

    Raises:
        LocksConfigurationError: ``session`` is not the kind of session asked for, it has no
            bind, or its database is none of PostgreSQL, MySQL/MariaDB and SQLite.
    """
    if asynchronous:
        if isinstance(session, Session):
            raise LocksConfigurationError(
                "fenced() takes an AsyncSession; for a sync Session use fenced_sync(session, lock)"
            )
        if not isinstance(session, AsyncSession):
            raise LocksConfigurationError(
                f"{session!r} is not a SQLAlchemy AsyncSession; pass the session the job writes "
                "with"
            )
        sync_session = session.sync_session
    else:
        if isinstance(session, AsyncSession):
            raise LocksConfigurationError(
                "fenced_sync() takes a sync Session; for an AsyncSession use "
                "`async with fenced(session, lock)`"
            )
        if not isinstance(session, Session):
            raise LocksConfigurationError(
                f"{session!r} is not a SQLAlchemy Session; pass the session the job writes with"
            )
        sync_session = session
    try:
        bind = sync_session.get_bind()
    except sa.exc.UnboundExecutionError:
        bind = None
    engine = getattr(bind, "engine", None)
    if not isinstance(engine, sa.Engine):
        raise LocksConfigurationError(
            "the session has no bind; make it with Session(engine) (or async_sessionmaker(engine))"
        )
    if engine.dialect.name not in _DIALECTS:
        raise LocksConfigurationError(
            f"fenced sessions work on PostgreSQL, MySQL/MariaDB and SQLite, not "
            f"{engine.dialect.name}; fence writes there with fenced_update()"
        )
    _watch(engine)
    return sync_session


@contextmanager
def bound(session: Session, fence: Fence) -> Iterator[set[sa.Connection]]:
    """Tell the database ``fence`` in every transaction ``session`` begins in this block.

    Yields the connections told so far: the caller tells the one of a transaction that began
    before the block (:func:`tell`), unless it is among them.
    """
    told: set[sa.Connection] = set()

    def on_begin(_session: Session, _transaction: object, connection: sa.Connection) -> None:
        tell(connection, fence)
        told.add(connection)

    event.listen(session, "after_begin", on_begin)
    try:
        yield told
    finally:
        event.remove(session, "after_begin", on_begin)


def tell(connection: sa.Connection, fence: Fence) -> None:
    """Give the database ``fence`` for the transaction of ``connection``: one statement at most.

    The engine of ``connection`` is watched from then on, so the fence ends with the transaction.
    """
    # a session's other binds (the engine of its fenced tables need not be the session's own)
    # begin transactions that are told too: unwatched, their fence would outlive them
    _watch(connection.engine)
    name = connection.dialect.name
    if name == "postgresql":
        connection.execute(_POSTGRES_FENCE, {"key": fence.key, "token": str(fence.token)})
    elif name == "sqlite":
        if not connection.info.get(_FUNCTION):
            _register_function(connection.connection.dbapi_connection, connection.info)
    else:
        connection.execute(_MYSQL_FENCE, {"key": fence.key, "token": fence.token})
    connection.info[_FENCE] = Fence(fence.key, fence.token, in_variables=name not in _NO_VARIABLES)


def _watch(engine: sa.Engine) -> None:
    """Translate the engine's refusals, and end fences with their transactions; once."""
    if not event.contains(engine, "handle_error", _translate):
        event.listen(engine, "handle_error", _translate)
        event.listen(engine, "commit", _ended)
        event.listen(engine, "rollback", _ended)
        # a connection can go back to the pool in a transaction, rolled back by the pool itself
        event.listen(engine, "reset", _returned)
        if engine.dialect.name == "sqlite":
            # on every new connection, so a write outside fenced() is refused by name, not for a
            # missing function (connections opened before fenced() first ran get it when fenced)
            event.listen(engine, "connect", _connected)
        elif engine.dialect.name not in _NO_VARIABLES:
            event.listen(engine, "before_cursor_execute", _clear_left_over)


def _translate(context: ExceptionContext) -> None:
    """Raise a stale write's refusal as StaleFencingTokenError."""
    connection = context.connection
    fence = None if connection is None else connection.info.get(_FENCE)
    if fence is None or fence.token == 0:
        return
    said = str(context.original_exception)
    if STALE_REFUSAL not in said:
        return
    found = _STALE.search(said)
    newer = int(found.group(1)) if found else fence.newer
    if newer is None:
        return
    raise StaleFencingTokenError(fence.key, fence.token, newer) from context.original_exception


def _ended(connection: sa.Connection) -> None:
    _forget(connection.info)


def _returned(
    _dbapi_connection: object, entry: ConnectionPoolEntry, _state: PoolResetState
) -> None:
    _forget(entry.info)


def _forget(info: dict[Any, Any]) -> None:
    fence = info.pop(_FENCE, None)
    if fence is not None and fence.in_variables:
        info[_LEFT_OVER] = True


def _clear_left_over(
    connection: sa.Connection,
    cursor: Any,  # noqa: ANN401 -- the driver's own cursor
    statement: str,
    *_: object,
) -> None:
    """Clear a fence left in MySQL's variables, unless ``statement`` gives the transaction one."""
    if connection.info.pop(_LEFT_OVER, False) and not statement.startswith(_MYSQL_SET_START):
        cursor.execute(_MYSQL_CLEAR)


def _connected(dbapi_connection: object, entry: ConnectionPoolEntry) -> None:
    _register_function(dbapi_connection, entry.info)


def _register_function(dbapi_connection: Any, info: dict[Any, Any]) -> None:  # noqa: ANN401 -- the driver's own connection
    """Give the SQLite connection ``leaselock_fence(what[, newer])``, which its triggers call.

    ``'key'`` and ``'token'`` answer the transaction's fence (NULL without one);
    ``'newer', n`` hands the session the newer token a trigger found, and answers ``n``.
    """

    def leaselock_fence(what: str, newer: int | None = None) -> object:
        fence: Fence | None = info.get(_FENCE)
        if fence is None:
            return None
        if what == "key":
            return fence.key
        if what == "token":
            return fence.token
        fence.newer = newer
        return newer

    dbapi_connection.create_function("leaselock_fence", -1, leaselock_fence)
    info[_FUNCTION] = True
