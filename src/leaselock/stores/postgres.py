"""PostgresLockStore: locks in one PostgreSQL table, fencing tokens from one sequence.

Every method is ONE statement, so one round trip, and checks the owner in the statement that
writes. It runs over what an application already has: an asyncpg pool, or a SQLAlchemy
``AsyncEngine`` (asyncpg or psycopg 3); or it owns asyncpg connections, made by
:meth:`PostgresLockStore.from_url`. The SQL below is written once; a small executor per driver
family runs it.

Schema (``postgres_schema.sql`` beside this module, with the default names)::

    leaselock_locks(key text COLLATE "C" PRIMARY KEY, owner text NULL once released,
                    fencing_token bigint NOT NULL, expires_at timestamptz NOT NULL)
    leaselock_fencing_token_seq: bigint, 1 .. 2**53 - 1
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final, Protocol, final
from urllib.parse import urlsplit

from .._errors import LocksConfigurationError, LockStoreError
from .._redact import redact_secrets
from ._protocol import MAX_FENCING_TOKEN, Acquired, AcquireResult, NotAcquired, Renewal

if TYPE_CHECKING:
    import asyncpg
    from sqlalchemy.ext.asyncio import AsyncEngine
    from sqlalchemy.sql.elements import TextClause

__all__ = ["PostgresLockStore"]

_log = logging.getLogger("leaselock")

DEFAULT_TABLE: Final = "leaselock_locks"
DEFAULT_SEQUENCE: Final = "leaselock_fencing_token_seq"
DEFAULT_MIN_SIZE: Final = 1
DEFAULT_MAX_SIZE: Final = 10
RELISTEN_PAUSE_S: Final = 1.0
URL_SCHEMES: Final = ("postgresql", "postgres", "postgresql+asyncpg")
_SQLALCHEMY_DRIVERS: Final = ("asyncpg", "psycopg")
_NAME_PART: Final = r"[A-Za-z_][A-Za-z0-9_]{0,62}"
_QUALIFIED_NAME: Final = re.compile(rf"(?:{_NAME_PART}\.)?{_NAME_PART}")
_CHANNEL: Final = re.compile(r"[A-Za-z0-9_.:-]{1,63}")
_NUMBERED_PARAMETER: Final = re.compile(r"\$(\d+)")
_UNDEFINED_TABLE: Final = "42P01"
# "leaseloc" in ASCII: one advisory lock serializes every leaselock create_schema of a database
_SCHEMA_LOCK_KEY: Final = int.from_bytes(b"leaseloc", "big")

# --- SQL: {table} and {sequence} are quoted names, {sequence_name} and {channel} string literals

# $1 key, $2 owner, $3 ttl_ms (bigint) -> fencing_token: one row if taken, none if a live lock
# holds the key. Owner check and write are ONE statement: the row lock taken by ON CONFLICT makes
# exactly one of any concurrent callers win. A new key takes the INSERT path and the token drawn in
# VALUES; a released or expired row takes the UPDATE path, whose token is drawn in SET after the
# row lock, with the row's own token as its floor: a sequence that went back (restore, failover)
# cannot hand the key an old token. VALUES draws a number on every call, even when the UPDATE path
# runs or nothing is taken: that only burns sequence numbers. RETURNING gives the written row's
# token on both paths. Expiry is measured on the server's clock_timestamp(), never now(), which
# stands still for a whole transaction.
ACQUIRE_SQL: Final = """\
INSERT INTO {table} AS existing (key, owner, fencing_token, expires_at)
VALUES ($1, $2, nextval({sequence_name}),
        clock_timestamp() + CAST($3 AS bigint) * INTERVAL '1 millisecond')
ON CONFLICT (key) DO UPDATE
   SET owner = excluded.owner,
       fencing_token = greatest(nextval({sequence_name}), existing.fencing_token + 1),
       expires_at = clock_timestamp() + CAST($3 AS bigint) * INTERVAL '1 millisecond'
 WHERE existing.owner IS NULL OR existing.expires_at <= clock_timestamp()
RETURNING existing.fencing_token"""

# $1 key, $2 owner, $3 ttl_ms (bigint) -> one row if owner held a live lock (now renewed), else none
RENEW_SQL: Final = """\
UPDATE {table}
   SET expires_at = clock_timestamp() + CAST($3 AS bigint) * INTERVAL '1 millisecond'
 WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()
RETURNING true"""

# $1 keys text[], $2 owners text[], $3 ttl_ms bigint[] (one element per renewal)
# -> (key, owner) of every renewal that held a live lock, now renewed
RENEW_MANY_SQL: Final = """\
UPDATE {table} AS held
   SET expires_at = clock_timestamp() + renewal.ttl_ms * INTERVAL '1 millisecond'
  FROM unnest(CAST($1 AS text[]), CAST($2 AS text[]), CAST($3 AS bigint[]))
       AS renewal (key, owner, ttl_ms)
 WHERE held.key = renewal.key AND held.owner = renewal.owner
   AND held.expires_at > clock_timestamp()
RETURNING held.key, held.owner"""

# $1 key, $2 owner -> one row if owner held a live lock (now released), else none.
# The row stays, owner NULL: its token is the floor of the key's next one. The NOTIFY rides in the
# same statement (one round trip) and is delivered at its commit, after the row is free.
RELEASE_AND_NOTIFY_SQL: Final = """\
WITH released AS (
    UPDATE {table}
       SET owner = NULL, expires_at = clock_timestamp()
     WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()
    RETURNING key
)
SELECT pg_notify({channel}, key) FROM released"""

# $1 key, $2 owner -> one row if owner held a live lock (now released), else none; no NOTIFY
RELEASE_SQL: Final = """\
UPDATE {table}
   SET owner = NULL, expires_at = clock_timestamp()
 WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()
RETURNING true"""

# $1 table, $2 sequence (quoted names, as text) -> one row: whether both exist. Needs no DDL
# privilege, so a role without CREATE can open a store on a schema made by a migration.
SCHEMA_EXISTS_SQL: Final = """\
SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL"""

# no input, no output; in one transaction: the lock keeps two processes creating the schema at
# once from colliding on the catalog (CREATE ... IF NOT EXISTS alone races into unique_violation)
SCHEMA_LOCK_SQL: Final = f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK_KEY})"

# no input, no output. Tokens stay below 2**53: exact in a JSON number.
CREATE_SEQUENCE_SQL: Final = """\
CREATE SEQUENCE IF NOT EXISTS {sequence}
    AS bigint MINVALUE 1 MAXVALUE 9007199254740991 NO CYCLE"""

# no input, no output. COLLATE "C": keys compare byte for byte, never by a locale's rules.
CREATE_TABLE_SQL: Final = """\
CREATE TABLE IF NOT EXISTS {table} (
    key text COLLATE "C" PRIMARY KEY,
    owner text,
    fencing_token bigint NOT NULL CHECK (fencing_token > 0),
    expires_at timestamptz NOT NULL
)"""


@dataclass(frozen=True, slots=True)
class _Statements:
    """The SQL of one store, with its names filled in."""

    acquire: str
    renew: str
    renew_many: str
    release: str
    schema: tuple[str, ...]
    table: str
    sequence: str


def _statements(table: str, sequence: str, channel: str | None) -> _Statements:
    names = {
        "table": table,
        "sequence": sequence,
        "sequence_name": _literal(sequence),
        "channel": _literal(channel or ""),
    }
    release = RELEASE_SQL if channel is None else RELEASE_AND_NOTIFY_SQL
    return _Statements(
        acquire=ACQUIRE_SQL.format_map(names),
        renew=RENEW_SQL.format_map(names),
        renew_many=RENEW_MANY_SQL.format_map(names),
        release=release.format_map(names),
        schema=(
            SCHEMA_LOCK_SQL,
            CREATE_SEQUENCE_SQL.format_map(names),
            CREATE_TABLE_SQL.format_map(names),
        ),
        table=table,
        sequence=sequence,
    )


def _quoted_name(value: object, argument: str) -> str:
    """Return ``value`` as a quoted, optionally schema-qualified, PostgreSQL name."""
    if not isinstance(value, str) or not _QUALIFIED_NAME.fullmatch(value):
        raise LocksConfigurationError(
            f"{argument}={value!r} is not a name PostgresLockStore accepts: use letters, digits "
            "and underscores, starting with a letter or underscore, at most 63 characters, "
            'optionally schema-qualified ("locks.leaselock_locks"); it is used as written (quoted)'
        )
    return ".".join(f'"{part}"' for part in value.split("."))


def _literal(text: str) -> str:
    """Return ``text`` as a SQL string literal (names and channels are validated already)."""
    return "'" + text.replace("'", "''") + "'"


def _checked_channel(channel: object, table: str) -> str:
    name = f"{table}_released" if channel is None else channel
    if not isinstance(name, str) or not _CHANNEL.fullmatch(name):
        raise LocksConfigurationError(
            f"channel={name!r} is not a usable LISTEN/NOTIFY channel: use 1 to 63 letters, "
            "digits, '_', '.', ':' or '-'"
            + ("; the default is derived from the table name, so pass channel=" * (channel is None))
        )
    return name


# --- executors: how the SQL reaches the server, per driver family ------------------------------


class Row(Protocol):
    """A result row of any of the drivers: read by position."""

    def __getitem__(self, index: int, /) -> Any: ...  # noqa: ANN401 -- a column of any type


class _Executor(Protocol):
    """Runs the store's statements; ``$n`` parameters, autocommit, one round trip each."""

    async def fetchrow(self, sql: str, args: tuple[object, ...]) -> Row | None: ...

    async def fetch(self, sql: str, args: tuple[object, ...]) -> Sequence[Row]: ...

    async def run_transaction(self, statements: Sequence[str]) -> None: ...

    def listen(
        self, channel: str, on_key: Callable[[str], None], on_lost: Callable[[], None]
    ) -> AbstractAsyncContextManager[None]: ...

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

    @asynccontextmanager
    async def listen(
        self, channel: str, on_key: Callable[[str], None], on_lost: Callable[[], None]
    ) -> AsyncIterator[None]:
        # the listener is one of the application's connections while it listens
        async with (
            self._pool.acquire() as connection,
            _asyncpg_listening(connection, channel, on_key, on_lost),
        ):
            yield

    async def close(self) -> None:
        if self._owned:
            await self._pool.close()


@final
class _ConnectionsExecutor:
    """Statements on the store's own asyncpg connections (:meth:`PostgresLockStore.from_url`).

    Up to ``max_size`` connections, handed out from a list: asyncpg's ``Pool`` spends a task and
    a reset per call, which cost a third of a round trip on a local server. That is safe here
    because the store's statements leave no session state: each is one autocommit statement, and
    the one transaction (the schema's) is rolled back by asyncpg on any error. A connection that
    failed other than by the server refusing a statement (cancelled mid-statement, broken) is
    closed, never reused; the next caller opens a new one.
    """

    __slots__ = (
        "_closed",
        "_connect",
        "_idle",
        "_max_size",
        "_min_size",
        "_refused",
        "_size",
        "_waiters",
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
        self._closed = False

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
    async def listen(
        self, channel: str, on_key: Callable[[str], None], on_lost: Callable[[], None]
    ) -> AsyncIterator[None]:
        # a connection beside the pool: all max_size (even a pool of 1) stay free for statements
        listener = await self._connect()
        try:
            async with _asyncpg_listening(listener, channel, on_key, on_lost):
                yield
        finally:
            await listener.close()

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        self._size -= len(idle)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(LockStoreError("the store was closed while waiting"))
        await asyncio.gather(*(connection.close() for connection in idle))

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
                try:
                    return await self._connect()
                except BaseException:
                    self._size -= 1
                    self._pass_slot_on()
                    raise
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

    def _give_back(self, connection: asyncpg.Connection, *, healthy: bool) -> None:
        if not healthy or self._closed or connection.is_closed():
            self._size -= 1
            if not connection.is_closed():
                connection.terminate()
            self._pass_slot_on()
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


@asynccontextmanager
async def _asyncpg_listening(
    connection: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy[Any],
    channel: str,
    on_key: Callable[[str], None],
    on_lost: Callable[[], None],
) -> AsyncIterator[None]:
    def deliver(_connection: object, _pid: int, _channel: str, payload: object) -> None:
        on_key(str(payload))

    def terminated(_connection: object) -> None:
        on_lost()

    connection.add_termination_listener(terminated)
    await connection.add_listener(channel, deliver)
    try:
        yield
    finally:
        connection.remove_termination_listener(terminated)
        if not connection.is_closed():
            try:
                await connection.remove_listener(channel, deliver)
            except Exception:  # noqa: BLE001 -- a session that may still listen is not reused
                connection.terminate()


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

    @asynccontextmanager
    async def listen(
        self, channel: str, on_key: Callable[[str], None], on_lost: Callable[[], None]
    ) -> AsyncIterator[None]:
        async with self._autocommit.connect() as connection:
            driver_connection: Any = (await connection.get_raw_connection()).driver_connection
            try:
                if self._engine.dialect.driver == "asyncpg":
                    async with _asyncpg_listening(driver_connection, channel, on_key, on_lost):
                        yield
                else:
                    async with _psycopg_listening(driver_connection, channel, on_key, on_lost):
                        yield
            finally:
                # this session listened: the application's pool gets a fresh one instead
                await connection.invalidate()

    async def close(self) -> None:
        if self._owned:
            await self._engine.dispose()


def _bind(args: tuple[object, ...]) -> dict[str, object]:
    return {f"p{number}": value for number, value in enumerate(args, 1)}


@asynccontextmanager
async def _psycopg_listening(
    connection: Any,  # noqa: ANN401 -- a psycopg.AsyncConnection, typed loosely by SQLAlchemy
    channel: str,
    on_key: Callable[[str], None],
    on_lost: Callable[[], None],
) -> AsyncIterator[None]:
    loop = asyncio.get_running_loop()
    await connection.execute(f'LISTEN "{channel}"')

    async def pump() -> None:
        try:
            async for notification in connection.notifies():
                # on the loop, apart: a failing callback must not stop the listening
                loop.call_soon(on_key, notification.payload)
        except Exception:  # noqa: BLE001 -- the connection is gone; the watcher listens anew
            on_lost()

    task = loop.create_task(pump())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.wait([task])


# --- the store ------------------------------------------------------------------------------


@final
class PostgresLockStore:
    """Locks in a PostgreSQL table: one row per key, fencing tokens from a sequence.

    The contract, as PostgreSQL keeps it: acquire, renew and release are each ONE statement that
    checks the owner and the expiry where it writes; expiry is measured on the server's
    ``clock_timestamp()``; a released lock keeps its row (owner NULL) and the row's token is the
    floor of the key's next token (``greatest(nextval(seq), row.token + 1)``), so tokens of a key
    grow even after the sequence went back (a restore, a failover to a lagging replica).
    Renewals of many leases go in one statement (:meth:`renew_many`), and a release NOTIFYs
    every process that listens (:meth:`watch_releases`), so waiters elsewhere wake at once.

    Build it over what the application has: ``PostgresLockStore(pool)`` with an asyncpg pool,
    ``PostgresLockStore(engine)`` with a SQLAlchemy ``AsyncEngine`` (``postgresql+asyncpg`` or
    ``postgresql+psycopg``), or :meth:`from_url`, which owns its pool. A pool or engine passed in
    is never closed by the store (unless ``own_pool=True``).

    Args:
        pool: an asyncpg ``Pool`` or a SQLAlchemy ``AsyncEngine``.
        table: the lock table, optionally schema-qualified; used as written (quoted).
        sequence: the token sequence, optionally schema-qualified.
        channel: the LISTEN/NOTIFY channel of releases; default ``"<table>_released"``.
        create_schema: at open, create the table and sequence if either is missing (no DDL
            runs when both exist). Pass ``False`` where migrations own the schema.
        notify_releases: NOTIFY on release and LISTEN in :meth:`watch_releases`. Pass
            ``False`` behind a transaction-pooling PgBouncer, where LISTEN cannot work.
        own_pool: close the pool (``Pool.close()``) or dispose the engine when the last user
            closes the store; for a pool made for this store alone.

    Raises:
        LocksConfigurationError: ``pool`` is neither, a name is not valid, or its driver is
            missing.

    .. versionadded:: 0.1
    """

    __slots__ = (
        "_create_schema_at_open",
        "_executor",
        "_loop",
        "_make_executor",
        "_notify_channel",
        "_opening",
        "_sql",
        "_table_name",
        "_users",
        "_where",
    )

    def __init__(
        self,
        pool: asyncpg.Pool[Any] | AsyncEngine,
        *,
        table: str = DEFAULT_TABLE,
        sequence: str = DEFAULT_SEQUENCE,
        channel: str | None = None,
        create_schema: bool = True,
        notify_releases: bool = True,
        own_pool: bool = False,
    ) -> None:
        """Build a store over an application's asyncpg pool or SQLAlchemy ``AsyncEngine``."""
        _check_flags(
            create_schema=create_schema, notify_releases=notify_releases, own_pool=own_pool
        )
        executor, where = _executor_over(pool, owned=own_pool)
        spent = False

        async def make_executor() -> _Executor:
            if spent:
                raise LocksConfigurationError(
                    f"{self!r} closed the pool it was given (own_pool=True) and cannot open "
                    "again; build a new store with a new pool"
                )
            return executor

        def after_close() -> None:
            nonlocal spent
            spent = own_pool

        self._configure(
            _Opener(make_executor, after_close),
            where=where,
            table=table,
            sequence=sequence,
            channel=channel,
            create_schema=create_schema,
            notify_releases=notify_releases,
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        table: str = DEFAULT_TABLE,
        sequence: str = DEFAULT_SEQUENCE,
        channel: str | None = None,
        min_size: int = DEFAULT_MIN_SIZE,
        max_size: int = DEFAULT_MAX_SIZE,
        create_schema: bool = True,
        notify_releases: bool = True,
    ) -> PostgresLockStore:
        """Build a store that owns its connections to ``url``, made on the loop that opens it.

        Args:
            url: ``postgresql://user:password@host:port/database`` (also ``postgres://`` and
                ``postgresql+asyncpg://``); libpq query options such as ``sslmode`` pass through.
            table: as for the constructor.
            sequence: as for the constructor.
            channel: as for the constructor.
            min_size: connections opened at :meth:`open`; more are opened as calls need them.
            max_size: connections for statements, at most; callers beyond wait for one.
                Release notifications use one more, beside them.
            create_schema: as for the constructor.
            notify_releases: as for the constructor.

        Raises:
            LocksConfigurationError: asyncpg is missing, or an argument is wrong.

        .. versionadded:: 0.1
        """
        try:
            import asyncpg  # noqa: PLC0415 -- the driver stays optional
        except ImportError:
            raise LocksConfigurationError(
                "PostgresLockStore.from_url needs asyncpg: pip install 'leaselock[postgres]'"
            ) from None
        dsn = _asyncpg_dsn(url)
        _check_pool_size(min_size, max_size)
        _check_flags(create_schema=create_schema, notify_releases=notify_releases)

        async def connect() -> asyncpg.Connection:
            return await asyncpg.connect(dsn)

        async def make_executor() -> _Executor:
            executor = _ConnectionsExecutor(
                connect, _refused_statement, min_size=min_size, max_size=max_size
            )
            try:
                await executor.fill()
            except BaseException:
                await executor.close()
                raise
            return executor

        store = object.__new__(cls)
        store._configure(
            _Opener(make_executor, lambda: None),
            where=_safe_url(url),
            table=table,
            sequence=sequence,
            channel=channel,
            create_schema=create_schema,
            notify_releases=notify_releases,
        )
        return store

    def _configure(
        self,
        opener: _Opener,
        *,
        where: str,
        table: str,
        sequence: str,
        channel: str | None,
        create_schema: bool,
        notify_releases: bool,
    ) -> None:
        quoted_table = _quoted_name(table, "table")
        quoted_sequence = _quoted_name(sequence, "sequence")
        checked_channel = _checked_channel(channel, table)
        self._notify_channel = checked_channel if notify_releases else None
        self._sql = _statements(quoted_table, quoted_sequence, self._notify_channel)
        self._make_executor = opener
        self._create_schema_at_open = create_schema
        self._where = where
        self._table_name = table
        self._executor: _Executor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Task[_Executor] | None = None
        self._users = 0

    # --- the contract ---------------------------------------------------------------------

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        """Take ``key`` if no live lock holds it; the token is greater than any it had."""
        row = await self._fetchrow(self._sql.acquire, (key, owner, ttl_ms))
        if row is None:
            return NotAcquired()
        return Acquired(self._token(row[0]))

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Move the expiry to ``ttl_ms`` from now if ``owner`` holds a live lock on ``key``."""
        return await self._fetchrow(self._sql.renew, (key, owner, ttl_ms)) is not None

    async def release(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` holds a live lock on it; the row and its token stay."""
        return await self._fetchrow(self._sql.release, (key, owner)) is not None

    async def renew_many(self, renewals: Sequence[Renewal]) -> Sequence[bool]:
        """Renew each lease as :meth:`renew` would, in one statement; answers in order."""
        if not renewals:
            return []
        keys = [renewal.key for renewal in renewals]
        owners = [renewal.owner for renewal in renewals]
        ttls_ms = [renewal.ttl_ms for renewal in renewals]
        rows = await self._fetch(self._sql.renew_many, (keys, owners, ttls_ms))
        renewed = {(row[0], row[1]) for row in rows}
        return [(renewal.key, renewal.owner) in renewed for renewal in renewals]

    @asynccontextmanager
    async def watch_releases(self, on_release: Callable[[str], None]) -> AsyncIterator[None]:
        """Call ``on_release(key)`` on this loop for every release of this table, anywhere.

        Holds one connection that LISTENs while entered; if it is lost, it listens again
        (waiters poll meanwhile). With ``notify_releases=False`` it listens to nothing.
        """
        if self._notify_channel is None:
            yield
            return
        watcher = _ReleaseWatcher(await self._ready(), self._notify_channel, on_release, repr(self))
        await watcher.start()
        try:
            yield
        finally:
            await watcher.stop()

    # --- schema and lifecycle -------------------------------------------------------------

    async def create_schema(self) -> None:
        """Create the table and the sequence if missing; safe when processes race to do it.

        Raises:
            LockStoreError: the server refused (e.g. the role may not create tables).
        """
        await self._create_schema(await self._ready())

    async def _create_schema(self, executor: _Executor) -> None:
        try:
            await executor.run_transaction(self._sql.schema)
        except Exception as error:
            raise LockStoreError(
                f"{self!r} could not create its table and sequence: {type(error).__name__}: "
                f"{error}. Grant the role CREATE on the schema, or create them once with "
                "leaselock/stores/postgres_schema.sql or the Alembic migration in the docs, "
                "and pass create_schema=False"
            ) from error

    async def open(self) -> None:
        """Open the pool (if the store owns one) and create the schema if asked; counted."""
        await self._ready()
        self._users += 1

    async def aclose(self) -> None:
        """Undo one :meth:`open`; the last one closes what the store owns."""
        self._users = max(0, self._users - 1)
        if self._users:
            return
        executor, self._executor, self._opening, self._loop = self._executor, None, None, None
        if executor is not None:
            await executor.close()
            self._make_executor.after_close()

    async def _ready(self) -> _Executor:
        loop = asyncio.get_running_loop()
        if self._executor is not None:
            if self._loop is loop:
                return self._executor
            raise LockStoreError(
                f"{self!r} was opened on another event loop; use it on the loop that opened "
                "it, or aclose() it there before using it here"
            )
        opening = self._opening
        if opening is None or opening.get_loop() is not loop:
            # one opening for every caller that comes meanwhile: never two pools
            opening = self._opening = loop.create_task(self._open_resources(loop))
            opening.add_done_callback(_retrieve_error)
        try:
            return await asyncio.shield(opening)
        finally:
            if opening.done() and self._opening is opening:
                self._opening = None

    async def _open_resources(self, loop: asyncio.AbstractEventLoop) -> _Executor:
        executor = await self._make_executor.make()
        try:
            if self._create_schema_at_open:
                exists = await executor.fetchrow(
                    SCHEMA_EXISTS_SQL, (self._sql.table, self._sql.sequence)
                )
                if exists is None or not exists[0]:
                    await self._create_schema(executor)
        except BaseException:
            await executor.close()
            raise
        self._executor, self._loop = executor, loop
        return executor

    # --- plumbing -------------------------------------------------------------------------

    async def _fetchrow(self, sql: str, args: tuple[object, ...]) -> Row | None:
        executor = self._executor
        if executor is None or self._loop is not asyncio.get_running_loop():
            executor = await self._ready()
        try:
            return await executor.fetchrow(sql, args)
        except Exception as error:
            raise self._explained(error) from error

    async def _fetch(self, sql: str, args: tuple[object, ...]) -> Sequence[Row]:
        executor = self._executor
        if executor is None or self._loop is not asyncio.get_running_loop():
            executor = await self._ready()
        try:
            return await executor.fetch(sql, args)
        except Exception as error:
            raise self._explained(error) from error

    def _explained(self, error: Exception) -> Exception:
        """Return the error to raise: a missing table becomes a message naming the fix."""
        if _sqlstate(error) != _UNDEFINED_TABLE:
            return error
        return LockStoreError(
            f"{self!r}: the table {self._sql.table} or the sequence {self._sql.sequence} does "
            f"not exist ({error}). Create them: pass create_schema=True, call "
            "await store.create_schema(), run leaselock/stores/postgres_schema.sql, or apply "
            "the Alembic migration from the docs"
        )

    def _token(self, value: object) -> int:
        """Return the token as an int: a driver's text or Decimal bigint must never leak out."""
        if type(value) is int:
            return value
        if isinstance(value, str | Decimal):
            try:
                token = int(value)
            except ValueError:
                pass
            else:
                if token == Decimal(value) and 0 < token <= MAX_FENCING_TOKEN:
                    return token
        raise LockStoreError(
            f"{self!r} read fencing token {value!r} ({type(value).__name__}) from its table; "
            "tokens are bigints in 1..2**53-1: check the column type and the driver's codecs"
        )

    def __repr__(self) -> str:
        """Show where the locks live (host, port, database, table); never a password."""
        return redact_secrets(f"PostgresLockStore({self._where}, table={self._table_name!r})")


@final
@dataclass(frozen=True, slots=True)
class _Opener:
    """How a store gets its executor, and what happens once it closed it."""

    make: Callable[[], Awaitable[_Executor]]
    after_close: Callable[[], None]


@final
class _ReleaseWatcher:
    """Keeps one LISTEN going while a ``watch_releases`` block runs; listens again if lost."""

    __slots__ = ("_channel", "_executor", "_on_release", "_store", "_task")

    def __init__(
        self, executor: _Executor, channel: str, on_release: Callable[[str], None], store: str
    ) -> None:
        self._executor = executor
        self._channel = channel
        self._on_release = on_release
        self._store = store
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Listen; raise what the first LISTEN raised."""
        loop = asyncio.get_running_loop()
        listening: asyncio.Future[None] = loop.create_future()
        self._task = loop.create_task(self._listen(listening))
        try:
            await listening
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop listening and give the connection back."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])

    async def _listen(self, listening: asyncio.Future[None]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            lost: asyncio.Future[None] = loop.create_future()

            def on_lost(lost: asyncio.Future[None] = lost) -> None:
                if not lost.done():
                    lost.set_result(None)

            reason = "its connection closed"
            try:
                async with self._executor.listen(self._channel, self._on_release, on_lost):
                    if listening.done():
                        _log.info("Listening for releases on %s again", self._store)
                    else:
                        listening.set_result(None)
                    await lost
            except Exception as error:  # noqa: BLE001 -- any failure: report, listen again
                if not listening.done():
                    listening.set_exception(error)
                    return
                reason = f"{type(error).__name__}: {error}"
            _log.warning(
                "Lost the release notifications of %s (%s); waiters poll until they are back. "
                "Listening again in %.0f s",
                self._store,
                reason,
                RELISTEN_PAUSE_S,
            )
            # the pause of a reconnect loop, not lock timing: no lease depends on it
            await asyncio.sleep(RELISTEN_PAUSE_S)  # noqa: TID251


def _refused_statement(error: BaseException) -> bool:
    """Tell whether the server refused a statement on a connection that is still fine to use.

    Connection exceptions (SQLSTATE class 08) and operator intervention (57: shutdown,
    pg_terminate_backend, a cancelled statement) leave a session not worth reusing; so do
    errors that are not the server's (cancellation of the caller, a broken socket).
    """
    state = getattr(error, "sqlstate", None)
    return isinstance(state, str) and not state.startswith(("08", "57"))


def _retrieve_error(task: asyncio.Task[_Executor]) -> None:
    """Mark an opening's error as seen: its callers may all have left (cancelled) meanwhile."""
    if not task.cancelled():
        task.exception()


def _sqlstate(error: BaseException) -> str | None:
    """Return the SQLSTATE of a driver error, through SQLAlchemy's wrapping if any."""
    seen: BaseException | None = error
    for _ in range(4):
        if seen is None:
            return None
        state = getattr(seen, "sqlstate", None)
        if isinstance(state, str):
            return state
        seen = getattr(seen, "orig", None) or seen.__cause__
    return None


def _executor_over(pool: object, *, owned: bool) -> tuple[_Executor, str]:
    """Return the executor for an application's pool or engine, and how to show it."""
    try:
        import asyncpg  # noqa: PLC0415 -- the driver stays optional
    except ImportError:
        pass
    else:
        if isinstance(pool, asyncpg.Pool):
            return _AsyncpgPoolExecutor(pool, owned=owned), _describe_pool(pool)
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
        return _SQLAlchemyExecutor(pool, owned=owned), _safe_url(url)
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


def _describe_pool(pool: asyncpg.Pool[Any]) -> str:
    """Say where an asyncpg pool connects, from what it was built with (asyncpg keeps no API)."""
    args = getattr(pool, "_connect_args", ())
    kwargs = getattr(pool, "_connect_kwargs", {})
    if args and isinstance(args[0], str):
        return _safe_url(args[0])
    if isinstance(kwargs, dict):
        parts = [
            f"{name}={kwargs[name]!r}" for name in ("host", "port", "database") if name in kwargs
        ]
        if parts:
            return "asyncpg pool " + " ".join(parts)
    return "asyncpg pool"


def _safe_url(url: str) -> str:
    """Return ``url`` as scheme://user@host:port/database: no password, no query."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{user}{parts.hostname or ''}{port}{parts.path}"


def _asyncpg_dsn(url: object) -> str:
    if not isinstance(url, str):
        raise LocksConfigurationError(
            f"url={url!r} is not a str; pass 'postgresql://user:password@host:5432/database'"
        )
    scheme, separator, rest = url.partition("://")
    if not separator or scheme not in URL_SCHEMES:
        hint = (
            "; for psycopg build create_async_engine(url) and pass PostgresLockStore(engine)"
            if scheme.startswith("postgresql+")
            else ""
        )
        raise LocksConfigurationError(
            f"url={redact_secrets(url)!r} is not a PostgreSQL URL PostgresLockStore.from_url "
            f"accepts; use postgresql://, postgres:// or postgresql+asyncpg://{hint}"
        )
    return f"postgresql://{rest}"


def _check_pool_size(min_size: object, max_size: object) -> None:
    if (
        type(min_size) is not int
        or type(max_size) is not int
        or not 0 <= min_size <= max_size
        or max_size < 1
    ):
        raise LocksConfigurationError(
            f"min_size={min_size!r}, max_size={max_size!r}; pass ints with "
            f"0 <= min_size <= max_size and max_size >= 1 (defaults {DEFAULT_MIN_SIZE} and "
            f"{DEFAULT_MAX_SIZE})"
        )


def _check_flags(**flags: object) -> None:
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise LocksConfigurationError(f"{name}={value!r}; pass True or False")
