"""The public face of fenced tables and sessions; SQLAlchemy is imported only when called.

``import leaselock`` loads :mod:`leaselock.integrations.sqlalchemy` (for ``fenced_update``), and
must not load SQLAlchemy: the modules that need it, ``_ddl`` and ``_session``, are imported by
the functions below.
"""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any

from ..._errors import LocksConfigurationError

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

    from ._lock import HeldLock
    from ._session import Fence

__all__ = ["fenced", "fenced_sync", "fenced_table", "unfenced", "unfenced_sync"]


def fenced_table(
    table: Table | type[Any],
    *,
    token_column: str | None = None,
    fences: str = "leaselock_fences",
) -> Table:
    """Mark ``table`` fenced: the database refuses its writes that carry no current token.

    Every INSERT, UPDATE and DELETE on a fenced table must come from a transaction of a session
    in :func:`fenced` (or :func:`fenced_sync`), and is refused with
    :class:`~leaselock.StaleFencingTokenError` when the database has seen a greater token for
    the lock's key, or from one in :func:`unfenced` (an explicit opt-out); any other write is
    refused. The greatest token per key is kept in the fences table, which this adds to the
    table's metadata (``fences``, in the table's schema: ``key``, ``fencing_token``), so a fresh
    row's INSERT is refused as surely as an UPDATE.

    With ``token_column``, the name of an integer column of the table (declare it
    ``nullable=False, server_default="0"``), each row written is stamped with the writer's
    token, and a row stamped with a greater token refuses to change, as with
    :func:`fenced_update`; without, the table carries no column of leaselock's.

    The triggers come with the table: ``metadata.create_all()`` makes them after it (and the
    fences table before it), on PostgreSQL, MySQL/MariaDB and SQLite. Alembic's autogenerate
    makes the fences table but sees no trigger: copy the documented migration
    (``docs/stores/alembic_leaselock_fences.py``, ``..._mysql.py`` or ``..._sqlite.py``) and
    list the fenced tables in it.

    Args:
        table: a ``Table``, or an ORM class mapped to one.
        token_column: the column each write stamps with its token, or ``None``.
        fences: the name of the fences table; tables fenced by one key must share it.

    Returns:
        The fenced ``Table``.

    Raises:
        LocksConfigurationError: ``table`` is no table, ``token_column`` is not one of its
            integer columns, the table is fenced already with other settings, or SQLAlchemy
            is not installed.

    .. versionadded:: 0.3
    """
    _require_sqlalchemy()
    from ._ddl import fenced_table as mark  # noqa: PLC0415 -- SQLAlchemy stays optional

    return mark(table, token_column=token_column, fences=fences)


@asynccontextmanager
async def fenced(session: AsyncSession, lock: HeldLock) -> AsyncIterator[AsyncSession]:
    """Make the writes of ``session`` to fenced tables carry ``lock``'s fencing token.

    Every transaction the session is in while the block runs (the open one, and any it begins
    after a commit) tells the database the lock's key and token at its start, in one statement
    at most (PostgreSQL, MySQL/MariaDB; none on SQLite). The fenced tables' triggers admit a
    write whose token is at least the greatest the database has seen for the key, and record
    it; a lower one is refused, and the flush or commit that sent it raises
    :class:`~leaselock.StaleFencingTokenError` (the transaction is rolled back: every row keeps
    what the newer holder wrote)::

        async with locks.hold("inventory:reconcile") as lock, fenced(session, lock):
            product = await session.get(Product, product_id)
            product.in_stock = count
            await session.commit()   # StaleFencingTokenError if a newer holder wrote first

    Commit inside the block: the fence lasts to the end of the transaction it was given to.

    Raises:
        LocksConfigurationError: ``session`` is not an ``AsyncSession`` bound to PostgreSQL,
            MySQL/MariaDB or SQLite, ``lock`` is not a held lock, or SQLAlchemy is not
            installed.

    .. versionadded:: 0.3
    """
    _require_sqlalchemy()
    from ._session import checked_session, fence_of  # noqa: PLC0415 -- SQLAlchemy stays optional

    sync_session = checked_session(session, asynchronous=True)
    async with _told_async(session, sync_session, fence_of(lock)):
        yield session


@contextmanager
def fenced_sync(session: Session, lock: HeldLock) -> Iterator[Session]:
    """The blocking twin of :func:`fenced`, for a sync ``Session`` and a ``SyncLock``.

    ::

        with locks.hold("inventory:reconcile") as lock, fenced_sync(session, lock):
            session.get(Product, product_id).in_stock = count
            session.commit()

    Raises:
        LocksConfigurationError: ``session`` is not a sync ``Session`` bound to PostgreSQL,
            MySQL/MariaDB or SQLite, ``lock`` is not a held lock, or SQLAlchemy is not
            installed.

    .. versionadded:: 0.3
    """
    _require_sqlalchemy()
    from ._session import checked_session, fence_of  # noqa: PLC0415 -- SQLAlchemy stays optional

    sync_session = checked_session(session, asynchronous=False)
    with _told(sync_session, fence_of(lock)):
        yield session


@asynccontextmanager
async def unfenced(session: AsyncSession) -> AsyncIterator[AsyncSession]:
    """Let ``session`` write to fenced tables without a token: the explicit opt-out.

    For the writes no lock guards (a migration's data fix, an administrator's correction, a
    test's fixtures): they are neither checked nor stamped, and the fences keep their tokens.
    Everything else is as in :func:`fenced`.

    Raises:
        LocksConfigurationError: ``session`` is not an ``AsyncSession`` bound to PostgreSQL,
            MySQL/MariaDB or SQLite, or SQLAlchemy is not installed.

    .. versionadded:: 0.3
    """
    _require_sqlalchemy()
    from ._session import Fence, checked_session  # noqa: PLC0415 -- SQLAlchemy stays optional

    sync_session = checked_session(session, asynchronous=True)
    async with _told_async(session, sync_session, Fence("", 0)):
        yield session


@contextmanager
def unfenced_sync(session: Session) -> Iterator[Session]:
    """The blocking twin of :func:`unfenced`, for a sync ``Session``.

    Raises:
        LocksConfigurationError: ``session`` is not a sync ``Session`` bound to PostgreSQL,
            MySQL/MariaDB or SQLite, or SQLAlchemy is not installed.

    .. versionadded:: 0.3
    """
    _require_sqlalchemy()
    from ._session import Fence, checked_session  # noqa: PLC0415 -- SQLAlchemy stays optional

    sync_session = checked_session(session, asynchronous=False)
    with _told(sync_session, Fence("", 0)):
        yield session


@asynccontextmanager
async def _told_async(
    session: AsyncSession, sync_session: Session, fence: Fence
) -> AsyncIterator[None]:
    from ._session import bound, tell  # noqa: PLC0415 -- SQLAlchemy stays optional

    with bound(sync_session, fence) as told:
        # the transaction open before the block began without the fence: it gets it now
        connection = await session.connection()
        if connection.sync_connection not in told:
            await connection.run_sync(tell, fence)
        yield


@contextmanager
def _told(session: Session, fence: Fence) -> Iterator[None]:
    from ._session import bound, tell  # noqa: PLC0415 -- SQLAlchemy stays optional

    with bound(session, fence) as told:
        connection = session.connection()
        if connection not in told:
            tell(connection, fence)
        yield


def _require_sqlalchemy() -> None:
    if importlib.util.find_spec("sqlalchemy") is None:
        raise LocksConfigurationError(
            "leaselock.integrations.sqlalchemy needs SQLAlchemy: "
            "pip install 'leaselock[sqlalchemy]'"
        )
