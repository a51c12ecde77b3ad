"""How PostgresLockStore's SQL reaches the server: one executor per driver family.

An asyncpg pool or a SQLAlchemy ``AsyncEngine`` of the application, or the store's own asyncpg
connections; and the connection that listens for the releases of followed keys.
The drivers are imported on first use, never with this module.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Final, Protocol, final
from urllib.parse import parse_qs, urlsplit

from ..._errors import LocksConfigurationError, LockStoreError
from ._listening import ListeningSession, asyncpg_session, psycopg_session

if TYPE_CHECKING:
    import asyncpg
    from sqlalchemy.ext.asyncio import AsyncEngine
    from sqlalchemy.sql.elements import TextClause

__all__ = [
    "ConnectionsExecutor",
    "Executor",
    "Row",
    "executor_over",
    "refused_statement",
    "safe_url",
]


_SQLALCHEMY_DRIVERS: Final = ("asyncpg", "psycopg")
_NUMBERED_PARAMETER: Final = re.compile(r"\$(\d+)")

# --- executors: how the SQL reaches the server, per driver family ------------------------------


class Row(Protocol):
    """A result row of any of the drivers: read by position."""

    def __getitem__(self, index: int, /) -> Any: ...  # noqa: ANN401 -- a column of any type


class Executor(Protocol):
    """Runs the store's statements; ``$n`` parameters, autocommit, one round trip each."""

    async def fetchrow(self, sql: str, args: tuple[object, ...]) -> Row | None: ...

    async def fetch(self, sql: str, args: tuple[object, ...]) -> Sequence[Row]: ...

    async def run_transaction(self, statements: Sequence[str]) -> None: ...

    async def warm(self, statements: Sequence[tuple[str, tuple[object, ...]]]) -> None:
        """Run ``statements``, which must change nothing, on each connection of the store's own.

        On the connections kept now, and on each opened later before it serves a call: what a
        statement's first run on a connection costs (its parse, a PL/pgSQL function's compile,
        2 to 3 ms for a release) is paid there, not by the call. An application's pool or
        engine is left as it is.
        """

    def listening(
        self, on_notify: Callable[[str], None], on_lost: Callable[[], None]
    ) -> AbstractAsyncContextManager[ListeningSession]: ...

    async def close(self) -> None: ...


@final
class _AsyncpgPoolExecutor:
    """Statements on an application's asyncpg pool; prepared once per connection by asyncpg."""

    __slots__ = ("_owned", "_pool")

    def __init__(self, pool: asyncpg.Pool[Any], *, owned: bool) -> None:
        self._pool = pool
        self._owned = owned

    async def fetchrow(self, sql: str, args: tuple[object, ...]) -> Row | None:
        return await self._pool.fetchrow(sql, *args)

    async def fetch(self, sql: str, args: tuple[object, ...]) -> Sequence[Row]:
        return await self._pool.fetch(sql, *args)

    async def run_transaction(self, statements: Sequence[str]) -> None:
        async with self._pool.acquire() as connection, connection.transaction():
            for statement in statements:
                await connection.execute(statement)

    async def warm(self, statements: Sequence[tuple[str, tuple[object, ...]]]) -> None:
        """Nothing: the pool's connections are the application's, and come and go with it."""

    @asynccontextmanager
    async def listening(
        self, on_notify: Callable[[str], None], on_lost: Callable[[], None]
    ) -> AsyncIterator[ListeningSession]:
        # the listener is one of the application's connections while it listens
        async with (
            self._pool.acquire() as connection,
            asyncpg_session(connection, on_notify, on_lost) as session,
        ):
            yield session

    async def close(self) -> None:
        if self._owned:
            await self._pool.close()


@final
class ConnectionsExecutor:
    """Statements on the store's own asyncpg connections (:meth:`PostgresLockStore.from_url`).

    Up to ``max_size`` connections, handed out from a list: asyncpg's ``Pool`` spends a task and
    a reset per call, which cost a third of a round trip on a local server. That is safe here
    because the store's statements leave no session state: each is one autocommit statement, and
    the one transaction (the schema's) is rolled back by asyncpg on any error. A connection that
    failed other than by the server refusing a statement (cancelled mid-statement, broken) is
    closed, never reused; the next caller opens a new one.

    A connection being opened is not the caller's to cancel: a caller that gives up (its
    deadline, its own cancellation) leaves the opening to finish, and what it opens joins the
    pool. Cancelling asyncpg mid-handshake would waste the work and leak an exception asyncpg
    never retrieves ("Future exception was never retrieved ... connection_lost()").
    """

    __slots__ = (
        "_closed",
        "_connect",
        "_idle",
        "_max_size",
        "_min_size",
        "_opening",
        "_refused",
        "_size",
        "_waiters",
        "_warm_ups",
    )

    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        refused: Callable[[BaseException], bool],
        *,
        min_size: int,
        max_size: int,
    ) -> None:
        self._connect = connect
        self._refused = refused
        self._min_size = min_size
        self._max_size = max_size
        self._idle: list[asyncpg.Connection] = []
        # a waiter gets a connection, or None: a slot is free, open a connection yourself
        self._waiters: deque[asyncio.Future[asyncpg.Connection | None]] = deque()
        self._size = 0  # connections open, or being opened
        self._opening: set[asyncio.Future[asyncpg.Connection]] = set()
        self._closed = False
        self._warm_ups: tuple[tuple[str, tuple[object, ...]], ...] = ()

    async def fill(self) -> None:
        """Open ``min_size`` connections, so the first calls find them ready."""
        connections = await asyncio.gather(*(self._take() for _ in range(self._min_size)))
        for connection in connections:
            self._give_back(connection, healthy=True)

    async def fetchrow(self, sql: str, args: tuple[object, ...]) -> Row | None:
        connection = self._idle_connection() or await self._take()
        try:
            row = await connection.fetchrow(sql, *args)
        except BaseException as error:
            self._give_back(connection, healthy=self._refused(error))
            raise
        self._give_back(connection, healthy=True)
        return row

    async def fetch(self, sql: str, args: tuple[object, ...]) -> Sequence[Row]:
        connection = self._idle_connection() or await self._take()
        try:
            rows = await connection.fetch(sql, *args)
        except BaseException as error:
            self._give_back(connection, healthy=self._refused(error))
            raise
        self._give_back(connection, healthy=True)
        return rows

    async def run_transaction(self, statements: Sequence[str]) -> None:
        connection = self._idle_connection() or await self._take()
        try:
            async with connection.transaction():
                for statement in statements:
                    await connection.execute(statement)
        except BaseException as error:
            self._give_back(connection, healthy=self._refused(error))
            raise
        self._give_back(connection, healthy=True)

    @asynccontextmanager
    async def listening(
        self, on_notify: Callable[[str], None], on_lost: Callable[[], None]
    ) -> AsyncIterator[ListeningSession]:
        # a connection beside the pool: all max_size (even a pool of 1) stay free for statements
        listener = await self._open(pooled=False)
        try:
            async with asyncpg_session(listener, on_notify, on_lost) as session:
                yield session
        finally:
            await listener.close()

    async def warm(self, statements: Sequence[tuple[str, tuple[object, ...]]]) -> None:
        """Run ``statements`` on the idle connections now, and on every one opened from now on.

        A connection is out of the pool while it warms. A statement the server refuses ends
        that connection's warm-up and nothing else; a connection that failed otherwise is
        closed, and the error raised.
        """
        self._warm_ups = tuple(statements)
        idle, self._idle = self._idle, []
        warmed = await asyncio.gather(
            *(self._warmed(connection) for connection in idle), return_exceptions=True
        )
        for outcome in warmed:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _warmed(self, connection: asyncpg.Connection) -> None:
        try:
            await self._warm_up(connection)
        except BaseException as error:
            self._give_back(connection, healthy=self._refused(error))
            raise
        self._give_back(connection, healthy=True)

    async def _warm_up(self, connection: asyncpg.Connection) -> None:
        for sql, args in self._warm_ups:
            try:
                await connection.fetchrow(sql, *args)
            except Exception as error:
                if not self._refused(error):
                    raise
                # a server or a role that takes no writes (a read-only replica, an operator's
                # role) refuses them: its calls are served cold, as they were before warm-ups
                return

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        self._size -= len(idle)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(LockStoreError("the store was closed while waiting"))
        await asyncio.gather(*(connection.close() for connection in idle))
        # openings left by their callers end within the connect timeout, closed as they land
        await asyncio.gather(*self._opening, return_exceptions=True)

    def _idle_connection(self) -> asyncpg.Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if not connection.is_closed():
                return connection
            # the server ended it while it was idle (restart, failover, idle timeout)
            self._size -= 1
        return None

    async def _take(self) -> asyncpg.Connection:
        while True:
            if self._closed:
                raise LockStoreError("the store is closed; open() it again")
            idle = self._idle_connection()
            if idle is not None:
                return idle
            if self._size < self._max_size:
                self._size += 1
                return await self._open()
            waiter: asyncio.Future[asyncpg.Connection | None] = (
                asyncio.get_running_loop().create_future()
            )
            self._waiters.append(waiter)
            try:
                connection = await waiter
            except asyncio.CancelledError:
                # it may have been handed something just before the cancellation: pass it on
                if waiter.done() and not waiter.cancelled():
                    handed = waiter.result()
                    if handed is None:
                        self._pass_slot_on()
                    else:
                        self._give_back(handed, healthy=True)
                raise
            if connection is not None:
                return connection

    async def _open(self, *, pooled: bool = True) -> asyncpg.Connection:
        """Open a connection in the slot just taken (freed if it fails), or beside the pool."""
        opening = asyncio.ensure_future(self._connect_warmed() if pooled else self._connect())
        try:
            return await asyncio.shield(opening)
        except asyncio.CancelledError:
            if not opening.cancelled():
                # the caller gave up, not the opening: what it opens is pooled, or closed
                self._opening.add(opening)
                opening.add_done_callback(self._opened_for_nobody if pooled else self._discard)
                raise
            if pooled:
                self._free_slot()
            raise
        except BaseException:
            if pooled:
                self._free_slot()
            raise

    async def _connect_warmed(self) -> asyncpg.Connection:
        connection = await self._connect()
        try:
            await self._warm_up(connection)
        except BaseException:
            connection.terminate()
            raise
        return connection

    def _opened_for_nobody(self, opening: asyncio.Future[asyncpg.Connection]) -> None:
        """Pool what an opening opened after its caller gave up; free its slot if it failed."""
        self._opening.discard(opening)
        if opening.cancelled() or opening.exception() is not None:
            self._free_slot()
            return
        self._give_back(opening.result(), healthy=True)

    def _discard(self, opening: asyncio.Future[asyncpg.Connection]) -> None:
        """Close what an opening beside the pool opened after its caller gave up."""
        self._opening.discard(opening)
        if not opening.cancelled() and opening.exception() is None:
            opening.result().terminate()

    def _free_slot(self) -> None:
        self._size -= 1
        self._pass_slot_on()

    def _give_back(self, connection: asyncpg.Connection, *, healthy: bool) -> None:
        if not healthy or self._closed or connection.is_closed():
            if not connection.is_closed():
                connection.terminate()
            self._free_slot()
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return
        self._idle.append(connection)

    def _pass_slot_on(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


@final
class _SQLAlchemyExecutor:
    """Statements on a SQLAlchemy ``AsyncEngine``: autocommit connections from its pool."""

    __slots__ = ("_autocommit", "_engine", "_owned", "_texts")

    def __init__(self, engine: AsyncEngine, *, owned: bool) -> None:
        self._engine = engine
        self._owned = owned
        # no BEGIN/COMMIT around a single statement: one round trip, as on asyncpg
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._texts: dict[str, TextClause] = {}

    def _text(self, sql: str) -> TextClause:
        clause = self._texts.get(sql)
        if clause is None:
            from sqlalchemy import text  # noqa: PLC0415 -- the driver stays optional

            # $n -> :pn, the bind style every SQLAlchemy dialect translates for its driver
            clause = self._texts[sql] = text(_NUMBERED_PARAMETER.sub(r":p\1", sql))
        return clause

    async def fetchrow(self, sql: str, args: tuple[object, ...]) -> Row | None:
        async with self._autocommit.connect() as connection:
            result = await connection.execute(self._text(sql), _bind(args))
            return result.first()

    async def fetch(self, sql: str, args: tuple[object, ...]) -> Sequence[Row]:
        async with self._autocommit.connect() as connection:
            result = await connection.execute(self._text(sql), _bind(args))
            return result.all()

    async def run_transaction(self, statements: Sequence[str]) -> None:
        async with self._engine.begin() as connection:
            for statement in statements:
                await connection.exec_driver_sql(statement)

    async def warm(self, statements: Sequence[tuple[str, tuple[object, ...]]]) -> None:
        """Nothing: the engine's connections are the application's, and come and go with it."""

    @asynccontextmanager
    async def listening(
        self, on_notify: Callable[[str], None], on_lost: Callable[[], None]
    ) -> AsyncIterator[ListeningSession]:
        async with self._autocommit.connect() as connection:
            driver_connection: Any = (await connection.get_raw_connection()).driver_connection
            session = (
                asyncpg_session if self._engine.dialect.driver == "asyncpg" else psycopg_session
            )
            try:
                async with session(driver_connection, on_notify, on_lost) as listening:
                    yield listening
            finally:
                # this session listened: the application's pool gets a fresh one instead
                await connection.invalidate()

    async def close(self) -> None:
        if self._owned:
            await self._engine.dispose()


def _bind(args: tuple[object, ...]) -> dict[str, object]:
    return {f"p{number}": value for number, value in enumerate(args, 1)}


def refused_statement(error: BaseException) -> bool:
    """Tell whether the server refused a statement on a connection that is still fine to use.

    Connection exceptions (SQLSTATE class 08) and operator intervention (57: shutdown,
    pg_terminate_backend, a cancelled statement) leave a session not worth reusing; so do
    errors that are not the server's (cancellation of the caller, a broken socket).
    """
    state = getattr(error, "sqlstate", None)
    return isinstance(state, str) and not state.startswith(("08", "57"))


def executor_over(pool: object, *, owned: bool) -> tuple[Executor, str]:
    """Return the executor for an application's pool or engine, and how to show it."""
    try:
        import asyncpg  # noqa: PLC0415 -- the driver stays optional
    except ImportError:
        pass
    else:
        if isinstance(pool, asyncpg.Pool):
            # where an asyncpg pool connects is private to it: the pool is named as what it is
            return _AsyncpgPoolExecutor(pool, owned=owned), "asyncpg pool"
    try:
        from sqlalchemy.ext.asyncio import AsyncEngine  # noqa: PLC0415 -- optional, too
    except ImportError:
        AsyncEngine = None  # type: ignore[assignment,misc] # noqa: N806 -- so the check below fails
    if AsyncEngine is not None and isinstance(pool, AsyncEngine):
        dialect = pool.dialect
        if dialect.name != "postgresql" or dialect.driver not in _SQLALCHEMY_DRIVERS:
            raise LocksConfigurationError(
                f"PostgresLockStore got an AsyncEngine on {dialect.name}+{dialect.driver}; "
                "use a PostgreSQL engine with the asyncpg or psycopg driver "
                "(create_async_engine('postgresql+asyncpg://...' or 'postgresql+psycopg://...'))"
            )
        url = pool.url.set(password=None).render_as_string(hide_password=True)
        return _SQLAlchemyExecutor(pool, owned=owned), safe_url(url)
    if isinstance(pool, str):
        hint = "for a URL, use PostgresLockStore.from_url(url)"
    elif type(pool).__module__.startswith("sqlalchemy"):
        hint = (
            "for SQLAlchemy pass an AsyncEngine (create_async_engine) and install the extra: "
            "pip install 'leaselock[sqlalchemy]'"
        )
    else:
        hint = (
            "pass an asyncpg Pool (pip install 'leaselock[postgres]') or a SQLAlchemy "
            "AsyncEngine (pip install 'leaselock[sqlalchemy]'), or use from_url(url)"
        )
    raise LocksConfigurationError(
        f"PostgresLockStore got {type(pool).__name__} {pool!r}, not a pool it can use; {hint}"
    )


def safe_url(url: str) -> str:
    """Return ``url`` as scheme://user@host:port/database: no password, no other option.

    Every host of a multi-host URL is kept (``db1:5432,db2:5432``, or the ``host`` and
    ``port`` options), so a log names each server a failover may move the store to.
    """
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    hosts = parts.netloc.rpartition("@")[2]
    options = parse_qs(parts.query)
    listed = "&".join(
        f"{name}={options[name][-1]}" for name in ("host", "port") if options.get(name)
    )
    return f"{parts.scheme}://{user}{hosts}{parts.path}{'?' * bool(listed)}{listed}"
