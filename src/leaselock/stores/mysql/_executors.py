"""How MySQLLockStore's statements reach the server: an asyncmy pool, or a SQLAlchemy engine.

Both run one ``%s``-parameter statement per call on a pooled connection and hand back what the
store reads: the rows of a SELECT, or the affected-row count and the insert id of a write; or
several statements in one transaction on one connection (:meth:`Executor.transaction`). Either
also hands the wake-ups connections they keep for themselves (:meth:`Executor.dial`): a named
lock lives with its session.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol, TypeVar, cast, final
from urllib.parse import urlsplit

from ..._errors import LocksConfigurationError

if TYPE_CHECKING:
    import asyncmy
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = [
    "Executor",
    "PoolExecutor",
    "Row",
    "Session",
    "Written",
    "executor_over",
    "safe_url",
]

_SQLALCHEMY_DRIVERS: Final = ("asyncmy",)
T = TypeVar("T")


class Row(Protocol):
    """A result row of either driver: read by position."""

    def __getitem__(self, index: int, /) -> Any: ...  # noqa: ANN401 -- a column of any type


class Written(NamedTuple):
    """What a write statement answered in its OK packet."""

    affected: int
    insert_id: int


class Session(Protocol):
    """Statements on the one connection of a transaction."""

    async def write(self, sql: str, args: Sequence[object]) -> Written: ...

    async def fetch(self, sql: str, args: Sequence[object]) -> Sequence[Row]: ...


class Executor(Protocol):
    """Runs the store's statements, each on its own, committed when it returns."""

    async def write(self, sql: str, args: Sequence[object]) -> Written: ...

    async def fetch(self, sql: str, args: Sequence[object]) -> Sequence[Row]: ...

    async def transaction(self, work: Callable[[Session], Awaitable[T]]) -> T:
        """Run ``work``'s statements in one transaction on one connection; commit after it.

        If ``work`` raises, nothing it wrote is kept (the transaction is rolled back).
        """
        ...

    async def dial(self) -> asyncmy.Connection:
        """Return a connection in autocommit for the caller alone, until :meth:`hang_up`.

        Opened as the pool opens its own (the same settings); outside the pool, or, over an
        application's asyncmy pool, one of the pool's, lent while the caller keeps it.
        """
        ...

    def hang_up(self, connection: asyncmy.Connection) -> None:
        """Close a connection :meth:`dial` gave (the server frees its named locks at once)."""
        ...

    @property
    def lendable(self) -> int | None:
        """How many connections :meth:`dial` may lend at once, or ``None`` for no bound."""
        ...

    async def close(self) -> None: ...


@final
class _CursorSession:
    """Statements on one asyncmy connection."""

    __slots__ = ("_connection",)

    def __init__(self, connection: asyncmy.Connection) -> None:
        self._connection = connection

    async def write(self, sql: str, args: Sequence[object]) -> Written:
        async with self._connection.cursor() as cursor:
            await cursor.execute(sql, args)
            affected = cursor.rowcount
            return Written(affected if isinstance(affected, int) else 0, cursor.lastrowid)

    async def fetch(self, sql: str, args: Sequence[object]) -> Sequence[Row]:
        async with self._connection.cursor() as cursor:
            await cursor.execute(sql, args)
            rows: Sequence[Row] = await cursor.fetchall()
            return rows


@final
class PoolExecutor:
    """Statements on an asyncmy pool: the application's, or the store's own (``from_url``).

    A pool made with ``autocommit=True`` runs each statement in one round trip. A connection not
    in autocommit (asyncmy's default) gets a COMMIT after each statement, SELECTs included, so no
    row lock outlives the call and no read sees an old snapshot: two round trips. A statement
    that fails leaves its transaction open, and asyncmy's pool discards such a connection.

    ``connect`` opens a connection as the pool does (``from_url`` knows how): the wake-ups'
    connections are then the store's own. Without it (an application's pool, whose settings
    asyncmy does not show) they are the pool's, lent: at most half of its ``maxsize``.
    """

    __slots__ = ("_connect", "_owned", "_pool")

    def __init__(
        self,
        pool: asyncmy.Pool,
        *,
        owned: bool,
        connect: Callable[[], Awaitable[asyncmy.Connection]] | None = None,
    ) -> None:
        self._pool = pool
        self._owned = owned
        self._connect = connect

    async def write(self, sql: str, args: Sequence[object]) -> Written:
        async with self._pool.acquire() as connection:
            written = await _CursorSession(connection).write(sql, args)
            if not connection.get_autocommit():
                await connection.commit()
        return written

    async def fetch(self, sql: str, args: Sequence[object]) -> Sequence[Row]:
        async with self._pool.acquire() as connection:
            rows = await _CursorSession(connection).fetch(sql, args)
            if not connection.get_autocommit():
                await connection.commit()
        return rows

    async def transaction(self, work: Callable[[Session], Awaitable[T]]) -> T:
        async with self._pool.acquire() as connection:
            await connection.begin()
            # if work fails, the connection goes back in its transaction, which the pool closes
            # (and the server rolls back) rather than reuse
            done = await work(_CursorSession(connection))
            await connection.commit()
        return done

    async def dial(self) -> asyncmy.Connection:
        if self._connect is not None:
            return await self._connect()
        connection = await self._pool.acquire()
        try:
            await _autocommit(connection)
        except BaseException:
            self.hang_up(connection)
            raise
        return connection

    def hang_up(self, connection: asyncmy.Connection) -> None:
        connection.close()
        if self._connect is None:
            # closed, the pool discards it (and opens another when it needs one)
            self._pool.release(connection)

    @property
    def lendable(self) -> int | None:
        # the application's statements keep the other half, so waiting never starves them
        return None if self._connect is not None else self._pool.maxsize // 2

    async def close(self) -> None:
        if self._owned:
            self._pool.close()
            await self._pool.wait_closed()


@final
class _SQLAlchemyExecutor:
    """Statements on a SQLAlchemy ``AsyncEngine`` (``mysql+asyncmy``): autocommit connections."""

    __slots__ = ("_autocommit", "_engine", "_owned")

    def __init__(self, engine: AsyncEngine, *, owned: bool) -> None:
        self._engine = engine
        self._owned = owned
        # no BEGIN/COMMIT around a single statement
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")

    async def write(self, sql: str, args: Sequence[object]) -> Written:
        async with self._autocommit.connect() as connection:
            result = await connection.exec_driver_sql(sql, tuple(args))
            return Written(int(result.rowcount), int(result.lastrowid or 0))

    async def fetch(self, sql: str, args: Sequence[object]) -> Sequence[Row]:
        async with self._autocommit.connect() as connection:
            result = await connection.exec_driver_sql(sql, tuple(args))
            return result.all()

    async def transaction(self, work: Callable[[Session], Awaitable[T]]) -> T:
        # the transaction is the server's own (START TRANSACTION ... COMMIT), so it holds
        # whatever isolation level the application set on its engine
        async with self._autocommit.connect() as connection:
            await connection.exec_driver_sql("START TRANSACTION")
            try:
                done = await work(_ConnectionSession(connection))
            except Exception:
                with contextlib.suppress(Exception):  # a lost connection rolled it back
                    await connection.exec_driver_sql("ROLLBACK")
                raise
            await connection.exec_driver_sql("COMMIT")
            return done

    async def dial(self) -> asyncmy.Connection:
        # the engine's settings (connect_args: TLS...) apply; detached, the pool forgets it
        raw = await self._engine.raw_connection()
        connection = cast("asyncmy.Connection", raw.driver_connection)
        raw.detach()
        try:
            await _autocommit(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def hang_up(self, connection: asyncmy.Connection) -> None:
        connection.close()

    @property
    def lendable(self) -> int | None:
        # detached connections are outside the engine's pool
        return None

    async def close(self) -> None:
        if self._owned:
            await self._engine.dispose()


@final
class _ConnectionSession:
    """Statements on one SQLAlchemy connection."""

    __slots__ = ("_connection",)

    def __init__(self, connection: AsyncConnection) -> None:
        self._connection = connection

    async def write(self, sql: str, args: Sequence[object]) -> Written:
        result = await self._connection.exec_driver_sql(sql, tuple(args))
        return Written(int(result.rowcount), int(result.lastrowid or 0))

    async def fetch(self, sql: str, args: Sequence[object]) -> Sequence[Row]:
        result = await self._connection.exec_driver_sql(sql, tuple(args))
        return result.all()


async def _autocommit(connection: asyncmy.Connection) -> None:
    """Put ``connection`` in autocommit, now and whenever it connects again."""
    # asyncmy leaves autocommit() untyped
    autocommit: Callable[[bool], Awaitable[None]] = connection.autocommit
    await autocommit(True)  # noqa: FBT003 -- asyncmy's signature


def executor_over(pool: object, *, owned: bool) -> tuple[Executor, str]:
    """Return the executor for an application's asyncmy pool or engine, and how to show it.

    Raises:
        LocksConfigurationError: ``pool`` is neither, or an engine of another database or driver.
    """
    try:
        import asyncmy  # noqa: PLC0415 -- the driver stays optional
    except ImportError:
        pass
    else:
        if isinstance(pool, asyncmy.Pool):
            # where an asyncmy pool connects is private to it: the pool is named as what it is
            return PoolExecutor(pool, owned=owned), "asyncmy pool"
    try:
        from sqlalchemy.ext.asyncio import AsyncEngine  # noqa: PLC0415 -- optional, too
    except ImportError:
        AsyncEngine = None  # type: ignore[assignment,misc] # noqa: N806 -- so the check below fails
    if AsyncEngine is not None and isinstance(pool, AsyncEngine):
        dialect = pool.dialect
        if dialect.name not in ("mysql", "mariadb") or dialect.driver not in _SQLALCHEMY_DRIVERS:
            raise LocksConfigurationError(
                f"MySQLLockStore got an AsyncEngine on {dialect.name}+{dialect.driver}; use a "
                "MySQL or MariaDB engine with the asyncmy driver "
                "(create_async_engine('mysql+asyncmy://user:password@host:3306/database'))"
            )
        url = pool.url.set(password=None).render_as_string(hide_password=True)
        return _SQLAlchemyExecutor(pool, owned=owned), safe_url(url)
    if isinstance(pool, str):
        hint = "for a URL, use MySQLLockStore.from_url(url)"
    elif type(pool).__module__.startswith("sqlalchemy"):
        hint = (
            "for SQLAlchemy pass an AsyncEngine (create_async_engine('mysql+asyncmy://...')) and "
            "install the extras: pip install 'leaselock[mysql,sqlalchemy]'"
        )
    else:
        hint = (
            "pass an asyncmy Pool (await asyncmy.create_pool(...), pip install "
            "'leaselock[mysql]') or a SQLAlchemy AsyncEngine on mysql+asyncmy, or use from_url(url)"
        )
    raise LocksConfigurationError(
        f"MySQLLockStore got {type(pool).__name__} {pool!r}, not a pool it can use; {hint}"
    )


def safe_url(url: str) -> str:
    """Return ``url`` as scheme://user@host:port/database: no password, no query."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{user}{parts.hostname or ''}{port}{parts.path}"
