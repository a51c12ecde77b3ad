"""MySQLLockStore: locks in one InnoDB table of MySQL 8 or MariaDB 10.6+, tokens from its counter.

Acquire, renew and release are each ONE statement, so one round trip, and check the owner in the
statement that writes. It runs over what an application already has: an asyncmy pool, or a
SQLAlchemy ``AsyncEngine`` on ``mysql+asyncmy``; or it owns an asyncmy pool, made by
:meth:`MySQLLockStore.from_url`. The SQL is written once (``_mysql_sql``); a small executor per
driver family (``_mysql_executors``) runs it.

Schema (the default names)::

    leaselock_locks(key VARBINARY(2000) PRIMARY KEY, owner VARBINARY(2000) NULL once released,
                    fencing_token BIGINT AUTO_INCREMENT (the counter), expires_at DATETIME(6) UTC)
    leaselock_locks_runs(job, kind "last" | "success", instance, fencing_token, started_at_ms,
                         ended_at_ms, outcome, error, trigger, detected_by;
                         PRIMARY KEY (job, kind))   -- run records (``_mysql_runs``)
    leaselock_locks_jobs(name VARBINARY PRIMARY KEY, document MEDIUMBLOB)
                         -- pauses and job states, UTF-8 JSON (``_mysql_documents``)
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import TYPE_CHECKING, Final, TypeVar, final

from ..._durations import Duration, parse_ttl
from ..._errors import LocksConfigurationError, LockStoreError
from ..._forks import process_generation
from ..._redact import redact_secrets
from .._common._capabilities import JobRecord, LockInfo, RunRecord
from .._common._job_documents import JobControlOnDocuments
from .._common._openers import Opener, given_pool, made_pool
from .._common._pool_arguments import (
    DEFAULT_MAX_SIZE,
    DEFAULT_MIN_SIZE,
    check_flags,
    check_pool_size,
)
from .._common._protocol import (
    MAX_FENCING_TOKEN,
    Acquired,
    AcquireResult,
    FollowingNothing,
    NotAcquired,
    ReleaseFollower,
    Renewal,
)
from ._arguments import (
    DEFAULT_FOLLOWER_CONNECTIONS,
    check_follower_connections,
    check_length,
    connect_args,
)
from ._documents import (
    CREATE_JOBS_SQL,
    MAX_DOCUMENT_BYTES,
    MAX_DOCUMENT_NAME_BYTES,
    DocumentStatements,
    successor,
)
from ._errors import DUPLICATE_ENTRY, NO_SUCH_TABLE, RETRIED_ERRORS, mysql_errno, open_failure
from ._executors import Executor, PoolExecutor, Row, Session, Written, executor_over, safe_url
from ._runs import CREATE_RUNS_SQL, RunStatements, records_from_rows
from ._sql import (
    CREATE_TABLE_SQL,
    MAX_KEY_BYTES,
    MAX_OWNER_BYTES,
    SERVER_SQL,
    STORE_TIME_SQL,
    Statements,
    checked_table,
    renew_many_sql,
    statements,
)
from ._wakeups import Beacon, Lines, MySQLReleaseFollower

if TYPE_CHECKING:
    import asyncmy
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["RENEW_CHUNK", "MySQLLockStore"]

T = TypeVar("T")

RENEW_CHUNK: Final = 500
"""Leases renewed per statement; the chunks of a bigger batch are sent at once."""

DEFAULT_TABLE: Final = "leaselock_locks"
# how often a statement InnoDB rolled back (deadlock victim, lock wait timeout) is sent again
ATTEMPTS: Final = 5
# the Alembic migrations in docs/stores/ that make the lock, runs and jobs tables, in order
_MIGRATIONS: Final = (
    "alembic_leaselock_locks_mysql.py",
    "alembic_leaselock_runs_mysql.py",
    "alembic_leaselock_jobs_mysql.py",
)


@final
class MySQLLockStore(JobControlOnDocuments):
    """Locks in a MySQL or MariaDB table: one row per key, fencing tokens from its counter.

    The contract, as InnoDB keeps it: acquire, renew and release are each ONE statement that
    checks the owner and the expiry where it writes; expiry is measured on the server's clock
    (``UTC_TIMESTAMP(6)``: microseconds, whatever a session's ``time_zone``); a released lock
    keeps its row (owner NULL). Tokens come from the table's ``AUTO_INCREMENT`` counter, and the
    key's row is the floor of its next token (``GREATEST(drawn, row.token + 1)``), so tokens of
    a key grow however it was freed, and even if the counter went back. Renewals of many leases
    go in one statement (:meth:`renew_many`). Each job's last run and last success are kept in
    ``<table>_runs`` (:meth:`record_run`: one statement). Job control (pauses, open runs,
    overlap policies) is :class:`~leaselock.stores._common._job_documents.JobControlOnDocuments`
    over the locks, the run records and small documents kept in ``<table>_jobs``.

    Releases wake waiters in other processes (:meth:`follow_releases`) through named locks,
    as MySQL has no LISTEN/NOTIFY: the store holds ``GET_LOCK`` of each key its process has
    held for 2 ms on one connection of its own, and lets go of it after the key's release
    (or when the process ends); a process waiting on a key blocks in ``GET_LOCK`` of its name
    on a connection per key, so it wakes when the holder lets go. These statements go in the
    background: acquire and release stay one round trip each, and wait for none of them. A
    key whose name is not held (held for less than 2 ms, or by a store with
    ``notify_releases=False``) is read again by its followers, after pauses from 5 ms up to
    a second. Wake-ups are hints: a woken waiter tries the key, and the table decides.

    Build it over what the application has: ``MySQLLockStore(pool)`` with an asyncmy pool
    (``autocommit=True`` for one round trip a call), ``MySQLLockStore(engine)`` with a
    SQLAlchemy ``AsyncEngine`` on ``mysql+asyncmy``, or :meth:`from_url`, which owns its pool.
    A pool or engine passed in is never closed by the store (unless ``own_pool=True``).

    Args:
        pool: an asyncmy ``Pool`` or a SQLAlchemy ``AsyncEngine``.
        table: the lock table, optionally qualified by its database (``"locks.leaselock_locks"``);
            used as written (quoted). The run records go in ``<table>_runs`` beside it, the
            pauses and job states in ``<table>_jobs``.
        create_schema: at open, create the lock table, the runs table and the jobs table where
            missing (no DDL runs when all three exist). Pass ``False`` where migrations own the
            schema.
        own_pool: close the pool or dispose the engine when the last user closes the store;
            for a pool made for this store alone.
        notify_releases: hold named locks for the keys held, and wait on them in
            :meth:`follow_releases`, so waiters in other processes wake at a release. Its
            connections are opened as the pool opens its own (the same settings), outside
            it: one for the store's process while it holds keys, and one per key it waits on.
            Pass ``False`` where no process waits on another's keys, or connections are
            scarce: waiters in other processes then find a release by retrying (their
            backoff caps at a second).
        follower_connections: keys at most whose releases the store follows at once, each
            on a connection of its own; waiters on further keys find a release by retrying.
            Size the server's ``max_connections`` for it: each process may use this many,
            plus one, beside its pool.

    Raises:
        LocksConfigurationError: ``pool`` is neither, ``table`` is not a valid name, the
            driver is missing, or ``follower_connections`` is not a whole number of at least 1.

    .. versionadded:: 0.3
    """

    __slots__ = (
        "_beacon",
        "_create_schema_at_open",
        "_executor",
        "_follower_connections",
        "_followers",
        "_generation",
        "_jobs_name",
        "_jobs_sql",
        "_lines",
        "_loop",
        "_make_executor",
        "_namespace",
        "_notify_releases",
        "_opening",
        "_runs_name",
        "_runs_sql",
        "_schema",
        "_sql",
        "_table",
        "_table_name",
        "_users",
        "_where",
    )

    def __init__(
        self,
        pool: asyncmy.Pool | AsyncEngine,
        *,
        table: str = DEFAULT_TABLE,
        create_schema: bool = True,
        own_pool: bool = False,
        notify_releases: bool = True,
        follower_connections: int = DEFAULT_FOLLOWER_CONNECTIONS,
    ) -> None:
        """Build a store over an application's asyncmy pool or SQLAlchemy ``AsyncEngine``."""
        check_flags(create_schema=create_schema, own_pool=own_pool, notify_releases=notify_releases)
        check_follower_connections(follower_connections)
        executor, where = executor_over(pool, owned=own_pool)
        self._configure(
            given_pool(executor, owned=own_pool, store=lambda: repr(self)),
            where=where,
            table=table,
            create_schema=create_schema,
            notify_releases=notify_releases,
            follower_connections=follower_connections,
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        table: str = DEFAULT_TABLE,
        min_size: int = DEFAULT_MIN_SIZE,
        max_size: int = DEFAULT_MAX_SIZE,
        create_schema: bool = True,
        connect_timeout: Duration = "10s",
        notify_releases: bool = True,
        follower_connections: int = DEFAULT_FOLLOWER_CONNECTIONS,
    ) -> MySQLLockStore:
        """Build a store that owns an asyncmy pool to ``url``, made on the loop that opens it.

        Its connections are in autocommit, in ``utf8mb4``: one round trip a call.

        Args:
            url: ``mysql://user:password@host:3306/database`` (also ``mariadb://``,
                ``mysql+asyncmy://``). For TLS or other driver options, build an asyncmy pool
                and pass it to the constructor.
            table: as for the constructor.
            min_size: connections opened at :meth:`open`; more are opened as calls need them.
            max_size: connections at most; callers beyond wait for one.
            create_schema: as for the constructor.
            connect_timeout: how long opening a connection may take before it fails (whole
                seconds, at least one).
            notify_releases: as for the constructor.
            follower_connections: as for the constructor.

        Raises:
            LocksConfigurationError: asyncmy is missing, or an argument is wrong.

        .. versionadded:: 0.3
        """
        try:
            import asyncmy  # noqa: PLC0415 -- the driver stays optional
        except ImportError:
            raise LocksConfigurationError(
                "MySQLLockStore.from_url needs asyncmy: pip install 'leaselock[mysql]'"
            ) from None
        arguments = connect_args(url)
        timeout_s = max(1, math.ceil(parse_ttl(connect_timeout, name="connect_timeout") / 1000))
        check_pool_size(min_size, max_size)
        check_flags(create_schema=create_schema, notify_releases=notify_releases)
        check_follower_connections(follower_connections)

        settings = {
            "autocommit": True,
            "charset": "utf8mb4",
            "connect_timeout": timeout_s,
            **arguments,
        }

        async def connect() -> asyncmy.Connection:
            return await asyncmy.connect(**settings)

        async def make_executor() -> Executor:
            pool = await asyncmy.create_pool(minsize=min_size, maxsize=max_size, **settings)
            return PoolExecutor(pool, owned=True, connect=connect)

        store = object.__new__(cls)
        store._configure(
            made_pool(make_executor),
            where=safe_url(url),
            table=table,
            create_schema=create_schema,
            notify_releases=notify_releases,
            follower_connections=follower_connections,
        )
        return store

    def _configure(
        self,
        opener: Opener[Executor],
        *,
        where: str,
        table: str,
        create_schema: bool,
        notify_releases: bool,
        follower_connections: int,
    ) -> None:
        names = checked_table(table)
        self._table, self._schema, self._table_name = names.locks, names.schema, names.locks_name
        self._runs_name = names.runs_name
        self._runs_sql = RunStatements.of(names.runs)
        self._jobs_name = names.jobs_name
        self._jobs_sql = DocumentStatements.of(names.jobs)
        self._make_executor = opener
        self._create_schema_at_open = create_schema
        self._where = where
        self._sql: Statements | None = None
        self._executor: Executor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Task[tuple[Executor, Statements]] | None = None
        self._users = 0
        self._notify_releases = notify_releases
        self._follower_connections = follower_connections
        # the wake-ups (_mysql_wakeups), made at open: the database is the server's to say
        self._namespace = ""
        self._lines: Lines | None = None
        self._beacon: Beacon | None = None
        self._followers: set[MySQLReleaseFollower] = set()
        self._generation = process_generation()

    # --- the contract ---------------------------------------------------------------------

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        """Take ``key`` if no live lock holds it; the token is greater than any it had.

        A refusal names no holder (``NotAcquired(holder=None)``): the statement that decides
        answers with a number only, and asking who holds the key would cost a second round
        trip on every refused attempt of every waiter.

        Raises:
            LocksConfigurationError: ``key`` or ``owner`` is longer than the table's columns
                (2,000 bytes in UTF-8).
        """
        check_length(key, "key", MAX_KEY_BYTES)
        check_length(owner, "owner", MAX_OWNER_BYTES)
        sql = await self._statements()
        written = await self._write(sql.acquire, (key, owner, ttl_ms, owner, ttl_ms))
        if written.insert_id == 0:
            return NotAcquired()
        acquired = Acquired(self._token(written.insert_id))
        if self._beacon is not None:
            self._beacon.took(key, owner, ttl_ms)
        return acquired

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Move the expiry to ``ttl_ms`` from now if ``owner`` holds a live lock on ``key``."""
        sql = await self._statements()
        renewed = (await self._write(sql.renew, (ttl_ms, key, owner))).insert_id != 0
        if self._beacon is not None:
            self._beacon_renewed(self._beacon, key, owner, ttl_ms, renewed=renewed)
        return renewed

    async def release(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` holds a live lock on it; the row and its token stay.

        Its waiters in other processes are woken after it returns (:meth:`follow_releases`).
        """
        sql = await self._statements()
        try:
            if self._beacon is not None:
                # a key held under the beacon's delay takes no name while it is being released
                self._beacon.releasing(key, owner)
            return (await self._write(sql.release, (key, owner))).insert_id != 0
        finally:
            # freed, or not held, or unknown (the statement failed): waiters look either way
            if self._beacon is not None:
                self._beacon.gave_up(key, owner)

    async def renew_many(self, renewals: Sequence[Renewal]) -> Sequence[bool]:
        """Renew each lease as :meth:`renew` would; answers in order.

        One statement per :data:`RENEW_CHUNK` leases, the chunks sent at once. A statement
        answers how many leases it renewed, not which: when that is every lease of the chunk
        (the usual case) each answer is ``True``; else the chunk's leases are renewed one by
        one, at once, and each answers for itself (a lease renewed twice only moves its
        expiry to a moment later).
        """
        if not renewals:
            return []
        chunks = [renewals[i : i + RENEW_CHUNK] for i in range(0, len(renewals), RENEW_CHUNK)]
        answered = await asyncio.gather(*(self._renew_chunk(chunk) for chunk in chunks))
        answers = [renewed for answers in answered for renewed in answers]
        beacon = self._beacon
        if beacon is not None and beacon.holds_any:
            for renewal, renewed in zip(renewals, answers, strict=True):
                self._beacon_renewed(beacon, *renewal, renewed=renewed)
        return answers

    @staticmethod
    def _beacon_renewed(
        beacon: Beacon, key: str, owner: str, ttl_ms: int, *, renewed: bool
    ) -> None:
        if renewed:
            beacon.renewed(key, owner, ttl_ms)
        else:
            beacon.gave_up(key, owner)

    async def _renew_chunk(self, renewals: Sequence[Renewal]) -> list[bool]:
        sql = await self._statements()
        args: list[object] = []
        for renewal in renewals:
            args += (renewal.key, renewal.owner, renewal.ttl_ms)
        args += (renewal.key for renewal in renewals)
        for renewal in renewals:
            args += (renewal.key, renewal.owner)
        written = await self._write(renew_many_sql(sql.table, len(renewals)), args)
        if written.affected == len(renewals):
            return [True] * len(renewals)
        return list(
            await asyncio.gather(
                *(self.renew(key, owner, ttl_ms) for key, owner, ttl_ms in renewals)
            )
        )

    # --- run records ----------------------------------------------------------------------

    async def record_run(self, run: RunRecord) -> None:
        """Keep ``run`` as its job's last run, and its last success if it went well; one trip.

        Each is kept unless the run kept there started later, or in the same millisecond with a
        greater token. Concurrent calls for one job leave each row one whole run: InnoDB locks
        the rows the statement writes (a deadlock's victim is sent again, as every statement).

        Raises:
            LocksConfigurationError: the job, the instance or the error is longer than its
                column (2,000, 2,000 and 65,535 bytes in UTF-8).
        """
        sql, args = self._runs_sql.record(run)
        await self._write(sql, args)

    async def job_records(self, jobs: Sequence[str] | None = None) -> list[JobRecord]:
        """Return the records of ``jobs`` (every job when ``None``) that have one, by job key."""
        if jobs is None:
            rows = await self._fetch(self._runs_sql.all_runs, ())
        else:
            wanted = sorted(set(jobs))
            if not wanted:
                return []
            rows = await self._fetch(self._runs_sql.job_runs(len(wanted)), wanted)
        return records_from_rows(rows)

    # --- job documents (job control: JobControlOnDocuments) ------------------------------

    async def read_documents(self, names: Sequence[str]) -> list[str | None]:
        """Return the document of each name in ``names``, in order; ``None`` where there is none.

        One statement (none for no names).
        """
        if not names:
            return []
        wanted = sorted({name.encode() for name in names})
        rows = await self._fetch(self._jobs_sql.read(len(wanted)), wanted)
        found = {bytes(row[0]): _text(row[1]) for row in rows}
        return [found.get(name.encode()) for name in names]

    async def documents_under(self, prefix: str) -> dict[str, str]:
        """Return every document whose name starts with ``prefix``, by name; one statement.

        A range of the primary key, from ``prefix`` to the first name past every name that
        starts with it: the scan reads those rows only.
        """
        start = prefix.encode()
        end = successor(start)
        if end is None:
            rows = await self._fetch(self._jobs_sql.from_prefix, (start,))
        else:
            rows = await self._fetch(self._jobs_sql.under, (start, end))
        return {_text(row[0]): _text(row[1]) for row in rows}

    async def swap_document(self, name: str, expected: str | None, document: str | None) -> bool:
        """Make ``document`` the one under ``name`` (``None``: remove it) if ``expected`` is.

        One statement that writes only where the row holds ``expected``, byte for byte: an
        INSERT for a name without one (a duplicate key answers ``False``), an UPDATE naming
        ``expected`` in its WHERE, or a DELETE likewise. When ``document`` is ``expected``
        there is nothing to write: one read answers whether ``name`` holds it.

        Raises:
            LocksConfigurationError: ``name`` or ``document`` is longer than its column
                (2,007 bytes and 16 MiB in UTF-8).
        """
        check_length(name, "document name", MAX_DOCUMENT_NAME_BYTES)
        if document is not None:
            check_length(document, "document", MAX_DOCUMENT_BYTES)
        if document == expected:
            # an UPDATE to the same text changes no row, and may count none: read instead
            return await self.read_documents([name]) == [expected]
        key = name.encode()
        if expected is None:
            assert document is not None  # noqa: S101 -- document differs from expected
            try:
                await self._write(self._jobs_sql.insert, (key, document.encode()))
            except Exception as error:
                if mysql_errno(error) == DUPLICATE_ENTRY:
                    return False
                raise
            return True
        if document is None:
            written = await self._write(self._jobs_sql.delete, (key, expected.encode()))
        else:
            args = (document.encode(), key, expected.encode())
            written = await self._write(self._jobs_sql.update, args)
        return written.affected > 0

    # --- inspection -----------------------------------------------------------------------

    async def store_time_ms(self) -> int:
        """Return the server's wall clock now (``UTC_TIMESTAMP(6)``), in epoch milliseconds.

        The clock its expiries are measured on, read whatever the session's time zone; one
        round trip.
        """
        rows = await self._fetch(STORE_TIME_SQL, ())
        return int(rows[0][0])

    async def read_lock(self, key: str) -> LockInfo | None:
        """Return ``key``'s lock (live, or released with its last token), or ``None``."""
        sql = await self._statements()
        rows = await self._fetch(sql.read_lock, (key,))
        return self._lock_info(rows[0]) if rows else None

    async def list_locks(self, prefix: str = "", limit: int = 1000) -> list[LockInfo]:
        """Return up to ``limit`` locks whose key starts with ``prefix``, by key (bytewise)."""
        sql = await self._statements()
        encoded = len(prefix.encode())
        rows = await self._fetch(sql.list_locks, (prefix, encoded, prefix, limit))
        return [self._lock_info(row) for row in rows]

    async def break_lock(self, key: str) -> LockInfo | None:
        """Free ``key`` whoever holds it; return what held it, or ``None`` if it was not live.

        Reads the live lock, then frees that very lock (same owner, same token) in one
        statement: two round trips. If the key changed hands in between (another caller broke
        it, and someone took it), it reads and frees again in one transaction that holds the
        key's row lock from the read to the write (``SELECT ... FOR UPDATE``), so nobody comes
        between them however many callers break and take the key at once: four round trips.
        """
        sql = await self._statements()
        if self._beacon is not None:
            # whoever held it, this process does not from now on
            self._beacon.gave_up(key, None)
        rows = await self._fetch(sql.break_read, (key,))
        if not rows:
            return None
        freed = await self._write(sql.break_write, (key, rows[0][0], rows[0][1]))
        if freed.insert_id != 0:
            return self._broken(key, rows[0])

        async def under_row_lock(session: Session) -> LockInfo | None:
            rows = await session.fetch(sql.break_read_locked, (key,))
            if not rows:
                return None
            freed = await session.write(sql.break_write, (key, rows[0][0], rows[0][1]))
            # the row is locked: only the lock's own expiry, between the two, stops the write
            return self._broken(key, rows[0]) if freed.insert_id != 0 else None

        return await self._transaction(under_row_lock)

    def _broken(self, key: str, row: Row) -> LockInfo:
        """The lock a row of ``break_read`` shows (owner, token, ms left), now freed."""
        return LockInfo(
            key=key,
            owner=_text(row[0]),
            fencing_token=self._token(row[1]),
            expires_in_ms=int(row[2]),
        )

    def _lock_info(self, row: Row) -> LockInfo:
        key, owner, token, ms_left = row[0], row[1], row[2], row[3]
        return LockInfo(
            key=_text(key),
            owner=None if owner is None else _text(owner),
            fencing_token=self._token(token),
            expires_in_ms=None if ms_left is None else int(ms_left),
        )

    # --- schema and lifecycle -------------------------------------------------------------

    async def create_schema(self) -> None:
        """Create the lock, runs and jobs tables where missing; safe when processes race.

        Raises:
            LockStoreError: the server refused (e.g. the user may not create tables).
        """
        executor, _ = await self._ready(create_missing=True)
        # a table may have gone since the store opened; CREATE ... IF NOT EXISTS on a table
        # that exists draws a warning that asyncmy fetches in a round trip of its own and logs
        rows = await self._fetch(SERVER_SQL, self._server_args())
        await self._create_tables(executor, missing=_missing(rows[0]))

    async def _create_tables(self, executor: Executor, *, missing: Sequence[bool]) -> None:
        wanted = [
            sql
            for sql, absent in zip(
                (
                    CREATE_TABLE_SQL.format(table=self._table),
                    CREATE_RUNS_SQL.format(runs=self._runs_sql.runs),
                    CREATE_JOBS_SQL.format(jobs=self._jobs_sql.jobs),
                ),
                missing,
                strict=True,
            )
            if absent
        ]
        try:
            for sql in wanted:
                await executor.write(sql, ())
        except Exception as error:
            raise LockStoreError(
                f"{self!r} could not create its tables: {type(error).__name__}: {error}. "
                "GRANT the user CREATE on the database, or create the tables once with the "
                f"Alembic migrations in the docs ({_migrations(missing)}), and pass "
                "create_schema=False"
            ) from error

    def _server_args(self) -> tuple[object, ...]:
        names = (self._table_name, self._runs_name, self._jobs_name)
        return tuple(arg for name in names for arg in (self._schema, name))

    def _tables(self) -> tuple[str, str, str]:
        """The lock, runs and jobs tables, quoted as the SQL names them."""
        return (self._table, self._runs_sql.runs, self._jobs_sql.jobs)

    async def open(self) -> None:
        """Open the pool (if the store owns one) and create the tables if asked; counted."""
        await self._ready()
        self._users += 1

    async def aclose(self) -> None:
        """Undo one :meth:`open`; the last one closes what the store owns.

        The wake-ups' connections close with it, followers still entered included.
        """
        self._users = max(0, self._users - 1)
        if self._users:
            return
        executor, self._executor, self._opening, self._loop = self._executor, None, None, None
        self._sql = None
        await self._close_wakeups()
        if executor is not None:
            await executor.close()
            self._make_executor.after_close()

    async def _close_wakeups(self) -> None:
        beacon, self._beacon, self._lines = self._beacon, None, None
        followers = list(self._followers)
        self._followers.clear()
        if self._generation != process_generation():
            # a forked child: the tasks, sockets and loop registrations are the parent's
            return
        for follower in followers:
            await follower.aclose()
        if beacon is not None:
            await beacon.aclose()

    @asynccontextmanager
    async def follow_releases(
        self, on_release: Callable[[str], None]
    ) -> AsyncIterator[ReleaseFollower]:
        """Call ``on_release(key)`` on this loop for releases of the keys followed, while entered.

        Each key followed waits on a connection of its own (up to ``follower_connections``
        keys of the store at once, opened at the first follower of a key, closed after its
        last), blocked in ``GET_LOCK`` of the key's name: a release by a store with
        ``notify_releases`` wakes it at once; a release of a key whose name was not held
        (held under 2 ms, or by a store without it) is heard at the next read of the key's
        row, 5 ms to 1 s later. A lost connection is opened again (waiters retry meanwhile).
        With ``notify_releases=False`` it follows nothing.
        """
        if not self._notify_releases:
            yield FollowingNothing()
            return
        _, sql = await self._ready()
        lines = self._lines
        assert lines is not None  # noqa: S101 -- made at open with notify_releases
        follower = MySQLReleaseFollower(lines, self._namespace, sql.table, on_release, repr(self))
        self._followers.add(follower)
        try:
            yield follower
        finally:
            if follower in self._followers:
                self._followers.discard(follower)
                await follower.aclose()

    async def _ready(self, *, create_missing: bool = False) -> tuple[Executor, Statements]:
        loop = asyncio.get_running_loop()
        if self._executor is not None and self._sql is not None:
            if self._loop is loop:
                return self._executor, self._sql
            raise LockStoreError(
                f"{self!r} was opened on another event loop; use it on the loop that opened "
                "it, or aclose() it there before using it here"
            )
        opening = self._opening
        if opening is None or opening.get_loop() is not loop:
            # one opening for every caller that comes meanwhile: never two pools
            create = create_missing or self._create_schema_at_open
            opening = self._opening = loop.create_task(self._open_resources(loop, create))
            opening.add_done_callback(_retrieve_error)
        try:
            return await asyncio.shield(opening)
        finally:
            if opening.done() and self._opening is opening:
                self._opening = None

    async def _open_resources(
        self, loop: asyncio.AbstractEventLoop, create: bool
    ) -> tuple[Executor, Statements]:
        try:
            executor = await self._make_executor.make()
        except (LockStoreError, LocksConfigurationError):
            raise
        except Exception as error:
            raise open_failure(repr(self), error) from error
        try:
            # a pool or an engine given to the store connects here, at its first statement
            sql = await self._check_server(executor, create=create)
        except LockStoreError:
            await executor.close()
            raise
        except Exception as error:
            await executor.close()
            raise open_failure(repr(self), error) from error
        except BaseException:
            await executor.close()
            raise
        self._executor, self._sql, self._loop = executor, sql, loop
        if self._notify_releases:
            self._lines = Lines(executor, self._follower_connections)
            if self._lines.beacon:
                self._beacon = Beacon(self._lines, self._namespace, repr(self))
        return executor, sql

    async def _check_server(self, executor: Executor, *, create: bool) -> Statements:
        rows = await executor.fetch(SERVER_SQL, self._server_args())
        version, database = _text(rows[0][0]), rows[0][1]
        # named locks are one namespace per server: the database tells stores apart
        self._namespace = f"{self._schema or _text(database)}.{self._table_name}"
        missing = _missing(rows[0])
        if self._schema is None and database is None:
            raise LockStoreError(
                f"{self!r} cannot start: its connections have no database, and the table "
                f"{self._table} names none. Put the database at the end of the URL "
                "(mysql://host:3306/locks), or qualify the table (table='locks.leaselock_locks')"
            )
        if any(missing):
            if not create:
                # fail at start, not with a warning at every tick
                tables = zip(self._tables(), missing, strict=True)
                absent = [table for table, gone in tables if gone]
                one = len(absent) == 1
                raise LockStoreError(
                    f"{self!r} cannot start: {_listed(absent)} {'does' if one else 'do'} not "
                    f"exist, and create_schema=False. Create {'it' if one else 'them'}: apply "
                    f"the Alembic {'migration' if one else 'migrations'} in the docs "
                    f"({_migrations(missing)}), or call await store.create_schema() once as a "
                    "user that may CREATE tables; or pass create_schema=True"
                )
            await self._create_tables(executor, missing=missing)
        return statements(self._table, version)

    # --- plumbing -------------------------------------------------------------------------

    async def _statements(self) -> Statements:
        if self._sql is None or self._loop is not asyncio.get_running_loop():
            _, sql = await self._ready()
            return sql
        return self._sql

    async def _write(self, sql: str, args: Sequence[object]) -> Written:
        executor = self._executor
        if executor is None or self._loop is not asyncio.get_running_loop():
            executor, _ = await self._ready()
        attempt = 1
        while True:
            try:
                return await executor.write(sql, args)
            except Exception as error:
                # InnoDB rolled the statement back whole: sending it again is a new attempt
                # (bounded, and the engine bounds the call's time too)
                if mysql_errno(error) in RETRIED_ERRORS and attempt < ATTEMPTS:
                    attempt += 1
                    continue
                raise self._explained(error) from error

    async def _transaction(self, work: Callable[[Session], Awaitable[T]]) -> T:
        executor = self._executor
        if executor is None or self._loop is not asyncio.get_running_loop():
            executor, _ = await self._ready()
        attempt = 1
        while True:
            try:
                return await executor.transaction(work)
            except Exception as error:
                # rolled back whole, as a statement in _write
                if mysql_errno(error) in RETRIED_ERRORS and attempt < ATTEMPTS:
                    attempt += 1
                    continue
                raise self._explained(error) from error

    async def _fetch(self, sql: str, args: Sequence[object]) -> Sequence[Row]:
        executor = self._executor
        if executor is None or self._loop is not asyncio.get_running_loop():
            executor, _ = await self._ready()
        try:
            return await executor.fetch(sql, args)
        except Exception as error:
            raise self._explained(error) from error

    def _explained(self, error: Exception) -> Exception:
        """Return the error to raise: a missing table becomes a message naming the fix."""
        if mysql_errno(error) != NO_SUCH_TABLE:
            return error
        return LockStoreError(
            f"{self!r}: the table {_listed(self._tables(), 'or')} does not exist ({error}). "
            "Create them: pass create_schema=True, call await store.create_schema(), or apply "
            f"the Alembic migrations from the docs ({_migrations((True, True, True))})"
        )

    def _token(self, value: object) -> int:
        """Return the token as an int in 1..2**53-1, whatever numeric type the driver used."""
        if isinstance(value, int | Decimal) and not isinstance(value, bool):
            token = int(value)
            if token == value and 0 < token <= MAX_FENCING_TOKEN:
                return token
        raise LockStoreError(
            f"{self!r} read fencing token {value!r} ({type(value).__name__}) from its table; "
            "tokens are BIGINTs in 1..2**53-1: check the column type and the table's "
            "AUTO_INCREMENT"
        )

    def __repr__(self) -> str:
        """Show where the locks live (host, port, database, table); never a password."""
        return redact_secrets(f"MySQLLockStore({self._where}, table={self._table_name!r})")


def _missing(row: Row) -> tuple[bool, bool, bool]:
    """Which of the lock, runs and jobs tables a row of ``SERVER_SQL`` found missing."""
    return (not row[2], not row[3], not row[4])


def _listed(names: Sequence[str], last: str = "and") -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(names) < 2:  # noqa: PLR2004 -- one name, or none
        return "".join(names)
    return f"{', '.join(names[:-1])} {last} {names[-1]}"


def _migrations(missing: Sequence[bool]) -> str:
    """The migrations that make the tables ``missing`` marks, in the order to apply them."""
    files = [
        f"docs/stores/{migration}"
        for migration, absent in zip(_MIGRATIONS, missing, strict=True)
        if absent
    ]
    return ", then ".join(files)


def _text(value: object) -> str:
    """Return a column the server sent as bytes (VARBINARY) or str as str."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode()
    return str(value)


def _retrieve_error(task: asyncio.Task[tuple[Executor, Statements]]) -> None:
    """Mark an opening's error as seen: its callers may all have left (cancelled) meanwhile."""
    if not task.cancelled():
        task.exception()
