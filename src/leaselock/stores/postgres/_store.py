"""PostgresLockStore: locks in one PostgreSQL table, fencing tokens from one sequence.

Every method is ONE statement, so one round trip, and checks the owner in the statement that
writes. It runs over what an application already has: an asyncpg pool, or a SQLAlchemy
``AsyncEngine`` (asyncpg or psycopg 3); or it owns asyncpg connections, made by
:meth:`PostgresLockStore.from_url`. The SQL is written once (``_postgres_sql``); a small
executor per driver family (``_postgres_executors``) runs it.

Schema (``postgres_schema.sql`` beside this module, with the default names)::

    leaselock_locks(key text COLLATE "C" PRIMARY KEY, owner text NULL once released,
                    fencing_token bigint NOT NULL, expires_at timestamptz NOT NULL)
    leaselock_fencing_token_seq: bigint, 1 .. 2**53 - 1
    leaselock_locks_runs(job, kind "last" | "success", instance, fencing_token,
                         started_at_ms, ended_at_ms, outcome, error), PRIMARY KEY (job, kind)
    leaselock_locks_line(key, owner, arrived, expires_at, ticket, channel),
                         PRIMARY KEY (key, owner): the waiting lines (``_postgres_line``),
                         each step one call of the function leaselock_locks_line(...)
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final, final

from ..._durations import Duration, parse_ttl
from ..._errors import LocksConfigurationError, LockStoreError
from ..._redact import redact_secrets
from .._common._capabilities import (
    RUN_ROW_COLUMNS,
    JobRecord,
    LockInfo,
    RunRecord,
    epoch_ms,
    from_epoch_ms,
    job_records_from_rows,
    run_from_row,
    run_row,
)
from .._common._job_control import (
    JobPause,
    JobState,
    RunStart,
    RunStartAnswer,
    open_run_from_json,
    open_run_json,
    pause_from_json,
    pause_json,
    tick_run_from_json,
)
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
    Grant,
    NotAcquired,
    ReleaseFollower,
    Renewal,
    WaitingLine,
)
from .._common._pruning import Pruner, parse_prune_after
from ._errors import check_sslmode, open_failure, sqlstate
from ._executors import (
    ConnectionsExecutor,
    Executor,
    Row,
    executor_over,
    refused_statement,
    safe_url,
)
from ._follower import PostgresReleaseFollower
from ._line import PostgresWaitingLine, line_channel
from ._line_sql import LINE_FUNCTION_MARK
from ._replication import REPLICATION_SQL, replication_from_row, say_replication
from ._sql import (
    SCHEMA_EXISTS_SQL,
    STORE_TIME_SQL,
    checked_channel,
    quoted_name,
    statements,
)

if TYPE_CHECKING:
    import asyncpg
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["RENEW_CHUNK", "PostgresLockStore"]

RENEW_CHUNK: Final = 10_000
"""The most leases one statement renews. Every batch is planned as index lookups
(``RENEW_MANY_SQL``), so this bounds only a statement's time, spent on one server process: a
bigger batch goes in statements of this many, sent at once on separate connections, which a
server runs side by side on its cores. On PostgreSQL 15 with 2 cores and 200,000 keys, 10,000
leases took about 0.1 s in one statement, and 50,000 no longer in 5 statements than in one
(less in most runs: benchmarks/bench_postgres_renew_batches.py)."""

DEFAULT_TABLE: Final = "leaselock_locks"
DEFAULT_SEQUENCE: Final = "leaselock_fencing_token_seq"
DEFAULT_PRUNE_AFTER: Final = "1h"
# rows deleted per pruning statement, and statements per pass: a pass stays short
PRUNE_BATCH: Final = 1000
PRUNE_BATCHES: Final = 10
URL_SCHEMES: Final = ("postgresql", "postgres", "postgresql+asyncpg")
_UNDEFINED_TABLE: Final = "42P01"
_UNDEFINED_FUNCTION: Final = "42883"

_log = logging.getLogger("leaselock.stores.postgres")


# --- the store ------------------------------------------------------------------------------


@final
class PostgresLockStore:
    """Locks in a PostgreSQL table: one row per key, fencing tokens from a sequence.

    The contract, as PostgreSQL keeps it: acquire, renew and release are each ONE statement that
    checks the owner and the expiry where it writes; expiry is measured on the server's
    ``clock_timestamp()``; a released lock keeps its row (owner NULL) and the row's token is the
    floor of the key's next token (``greatest(nextval(seq), row.token + 1)``), so tokens of a key
    grow even after the sequence went back (a restore); and tokens are drawn in the band of the
    server's timeline, ``(timeline - 1) * 2**40`` and up, so those drawn after a promotion are
    above every token the old primary handed out, whatever its standby had received. The
    store says at open, once, when its server streams to standbys asynchronously (a failover
    can then lose the latest grants: two holders for at most one ttl; fencing still holds).
    Renewals of many leases go in one statement (:meth:`renew_many`), and a release NOTIFYs
    the processes that wait on its key (:meth:`follow_releases`), so waiters elsewhere wake at
    once and nobody else hears of it. Waiters stand in the key's line at the server
    (:meth:`wait_in_line`): a release hands the key to the first of them, of any process, in
    the same transaction.

    Build it over what the application has: ``PostgresLockStore(pool)`` with an asyncpg pool,
    ``PostgresLockStore(engine)`` with a SQLAlchemy ``AsyncEngine`` (``postgresql+asyncpg`` or
    ``postgresql+psycopg``), or :meth:`from_url`, which owns its pool. A pool or engine passed in
    is never closed by the store (unless ``own_pool=True``).

    Args:
        pool: an asyncpg ``Pool`` or a SQLAlchemy ``AsyncEngine``.
        table: the lock table, optionally schema-qualified; used as written (quoted).
        sequence: the token sequence, optionally schema-qualified.
        channel: the start of each key's LISTEN/NOTIFY channel (``<channel>:<hash of key>``),
            at most 46 characters; default ``"<table>_released"``.
        create_schema: at open, create the table and sequence if either is missing (no DDL
            runs when both exist). Pass ``False`` where migrations own the schema.
        notify_releases: NOTIFY on release and LISTEN in :meth:`follow_releases`. Pass
            ``False`` behind a transaction-pooling PgBouncer, where LISTEN cannot work.
        own_pool: close the pool (``Pool.close()``) or dispose the engine when the last user
            closes the store; for a pool made for this store alone.
        prune_after: delete, in the background, locks free (released or expired) for this
            long, so the table stays the size of the keys in use (:meth:`prune`); ``None``
            keeps every key's row for ever. At least a second.

    Raises:
        LocksConfigurationError: ``pool`` is neither, a name is not valid, or its driver is
            missing.

    .. versionadded:: 0.1
    """

    __slots__ = (
        "_create_schema_at_open",
        "_executor",
        "_lines",
        "_loop",
        "_make_executor",
        "_notify_channel",
        "_opening",
        "_pruner",
        "_replication_said",
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
        prune_after: Duration | None = DEFAULT_PRUNE_AFTER,
    ) -> None:
        """Build a store over an application's asyncpg pool or SQLAlchemy ``AsyncEngine``."""
        check_flags(create_schema=create_schema, notify_releases=notify_releases, own_pool=own_pool)
        executor, where = executor_over(pool, owned=own_pool)
        self._configure(
            given_pool(executor, owned=own_pool, store=lambda: repr(self)),
            where=where,
            table=table,
            sequence=sequence,
            channel=channel,
            create_schema=create_schema,
            notify_releases=notify_releases,
            prune_after=prune_after,
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
        command_timeout: Duration = "10s",
        prune_after: Duration | None = DEFAULT_PRUNE_AFTER,
    ) -> PostgresLockStore:
        """Build a store that owns its connections to ``url``, made on the loop that opens it.

        Each connection runs a release and renewals of the key ``""`` for the owner ``""`` as
        it opens (they change nothing), so that its first real release does not pay the line
        function's compile (2 to 3 ms); a server or role that refuses writes skips them.

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
            command_timeout: how long a connection attempt or a statement may take before it
                fails; a server that stops answering then fails calls instead of hanging them
                (renewals are retried until the holder's deadline; shutdown goes on). Keep it
                under a third of your ttl.
            prune_after: as for the constructor.

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
        check_sslmode(dsn)
        timeout_s = parse_ttl(command_timeout, name="command_timeout") / 1000
        check_pool_size(min_size, max_size)
        check_flags(create_schema=create_schema, notify_releases=notify_releases)

        async def connect() -> asyncpg.Connection:
            return await asyncpg.connect(dsn, timeout=timeout_s, command_timeout=timeout_s)

        async def make_executor() -> Executor:
            executor = ConnectionsExecutor(
                connect, refused_statement, min_size=min_size, max_size=max_size
            )
            try:
                await executor.fill()
            except BaseException:
                await executor.close()
                raise
            return executor

        store = object.__new__(cls)
        store._configure(
            made_pool(make_executor),
            where=safe_url(url),
            table=table,
            sequence=sequence,
            channel=channel,
            create_schema=create_schema,
            notify_releases=notify_releases,
            prune_after=prune_after,
        )
        return store

    def _configure(
        self,
        opener: Opener[Executor],
        *,
        where: str,
        table: str,
        sequence: str,
        channel: str | None,
        create_schema: bool,
        notify_releases: bool,
        prune_after: Duration | None,
    ) -> None:
        quoted_table = quoted_name(table, "table")
        quoted_sequence = quoted_name(sequence, "sequence")
        checked = checked_channel(channel, table)
        quoted_runs = quoted_name(f"{table}_runs", "table (with _runs appended)")
        quoted_jobs = quoted_name(f"{table}_jobs", "table (with _jobs appended)")
        quoted_line = quoted_name(f"{table}_line", "table (with _line appended)")
        self._notify_channel = checked if notify_releases else None
        self._sql = statements(
            quoted_table,
            quoted_sequence,
            quoted_runs,
            quoted_jobs,
            quoted_line,
            channel=self._notify_channel,
        )
        # whether the schema has the waiting lines (their table and function): known at open
        self._lines = False
        self._make_executor = opener
        self._create_schema_at_open = create_schema
        self._where = where
        self._table_name = table
        self._executor: Executor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Task[Executor] | None = None
        self._users = 0
        self._replication_said = False
        self._pruner: Pruner | None = None
        if prune_after is not None:
            age_ms = parse_prune_after(prune_after)
            # a pass every half of the age: a row goes at most 1.75x the age after it was freed
            older_than = timedelta(milliseconds=age_ms)
            self._pruner = Pruner(
                functools.partial(self.prune, older_than), age_ms / 2000, repr(self)
            )

    # --- the contract ---------------------------------------------------------------------

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        """Take ``key`` if no live lock holds it; the token is greater than any it had."""
        row = await self._fetchrow(self._sql.acquire, (key, owner, ttl_ms))
        if row is None or row[0] is None:
            return NotAcquired(holder=None if row is None else row[1])
        return Acquired(self._token(row[0]))

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Move the expiry to ``ttl_ms`` from now if ``owner`` holds a live lock on ``key``."""
        return await self._fetchrow(self._sql.renew, (key, owner, ttl_ms)) is not None

    async def release(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` holds a live lock on it; the row and its token stay.

        Where a waiter stands in the key's line (:meth:`wait_in_line`), the first live one
        holds the key as the release commits, and its process is told. A release that frees
        the key is committed without waiting for the WAL flush: a server crash may undo one
        acknowledged in its last ~600 ms, and the lock then expires at its ttl instead; a
        release that hands the key over waits for it, as an acquisition does.
        """
        if await self._has_lines():
            step = ("release", key, owner, None, None, None, None)
            return await self._fetchrow(self._sql.lines.step, step) is not None
        return await self._fetchrow(self._sql.release, (key, owner)) is not None

    async def renew_many(self, renewals: Sequence[Renewal]) -> Sequence[bool]:
        """Renew each lease as :meth:`renew` would; answers in order.

        One statement up to :data:`RENEW_CHUNK` leases (one statement per that many beyond,
        sent at once), each renewal one lookup of the key's index whatever the batch's size.
        """
        if not renewals:
            return []
        chunks = [renewals[i : i + RENEW_CHUNK] for i in range(0, len(renewals), RENEW_CHUNK)]
        answered = await asyncio.gather(*(self._renew_chunk(chunk) for chunk in chunks))
        return [renewed for answers in answered for renewed in answers]

    async def _renew_chunk(self, renewals: Sequence[Renewal]) -> list[bool]:
        # in the index's order (collation "C" is Python's): each lookup lands near the last,
        # a quarter to a third faster than in random order (10,000 keys of 200,000)
        ordered = sorted(renewals)
        keys = [renewal.key for renewal in ordered]
        owners = [renewal.owner for renewal in ordered]
        ttls_ms = [renewal.ttl_ms for renewal in ordered]
        rows = await self._fetch(self._sql.renew_many, (keys, owners, ttls_ms))
        renewed = {(row[0], row[1]) for row in rows}
        return [(renewal.key, renewal.owner) in renewed for renewal in renewals]

    @asynccontextmanager
    async def follow_releases(
        self, on_release: Callable[[str], None]
    ) -> AsyncIterator[ReleaseFollower]:
        """Call ``on_release(key)`` on this loop for releases of the keys followed, while entered.

        A release NOTIFYs only when some process follows its key, on that key's own channel, so
        releases nobody waits for cost nothing more and a process hears only the keys it waits
        on. One listening connection per entered context, opened at the first key followed;
        if it is lost, it listens again (waiters poll meanwhile). With
        ``notify_releases=False`` it follows nothing.
        """
        if self._notify_channel is None:
            yield FollowingNothing()
            return
        executor = await self._ready()
        follower = PostgresReleaseFollower(
            executor.listening, self._notify_channel, self._sql.interest, on_release, repr(self)
        )
        try:
            yield follower
        finally:
            await follower.aclose()

    @asynccontextmanager
    async def wait_in_line(
        self, on_grant: Callable[[Grant], None]
    ) -> AsyncIterator[WaitingLine | None]:
        """Wait in keys' lines while entered; ``on_grant`` hears each grant on this loop.

        The lines are rows of ``<table>_line``; a release hands its key to the first live
        place in the same transaction and NOTIFYs that waiter's process on the line's own
        channel. One listening connection per entered context, opened at the first queue
        call; if it is lost, the next queue call listens again, and a grant that went unheard
        meanwhile is the answer of the waiter's next queue call (every second).

        Yields ``None`` (waiters then retry) where the schema has no lines (made by an earlier
        leaselock, with ``create_schema=False``) or with ``notify_releases=False``, where
        nothing can LISTEN.
        """
        executor = await self._ready()
        if self._notify_channel is None or not self._lines:
            yield None
            return
        line = PostgresWaitingLine(
            executor.listening,
            functools.partial(self._fetchrow, self._sql.lines.step),
            token=self._token,
            channel=line_channel(self._notify_channel),
            on_grant=on_grant,
            store=repr(self),
        )
        try:
            yield line
        finally:
            await line.aclose()

    # --- run records and inspection --------------------------------------------------------

    async def record_run(self, run: RunRecord) -> None:
        """Keep ``run`` as its job's last run, and its last success if it went well; one trip."""
        await self._fetch(self._sql.record_run, _run_arguments(run))

    async def start_run(self, start: RunStart) -> RunStartAnswer:
        """Start a run unless paused or its tick ran, taking its lock if asked: ONE statement.

        One round trip; two at a job's first start, whose first statement only makes the job's
        row: the row's lock is what decides between racing starts.
        """
        opened = start.open_run
        arguments = (
            start.job,
            start.take_key,
            start.owner,
            start.ttl_ms,
            open_run_json(opened, None),
            opened.fencing_token,
            start.ignore_pause,
            epoch_ms(opened.started_at),
            start.when_busy,
            None if start.tick is None else epoch_ms(start.tick),
        )
        row = await self._fetchrow(self._sql.jobs.start_run, arguments)
        while row is not None and row[7]:
            # the job had no row to lock: the statement made it and did nothing else
            row = await self._fetchrow(self._sql.jobs.start_run, arguments)
        if row is None:
            raise LockStoreError(f"{self!r}.start_run got no row; check the jobs table")
        token, holder, target, pause, open_run, failures, ran = (row[i] for i in range(7))
        last = [row[i] for i in range(8, 17)]
        answer = RunStartAnswer(
            None,
            None if target is None else pause_from_json(str(target), str(pause)),
            open_run_from_json(open_run),
            None if last[0] is None else run_from_row(last),
            int(failures),
            tick_run_from_json(ran),
        )
        if answer.pause is not None or answer.tick_ran is not None or start.take_key is None:
            return answer
        taken = NotAcquired(holder) if token is None else Acquired(self._token(token))
        return replace(answer, taken=taken)

    async def end_run(self, run: RunRecord) -> bool:
        """Record ``run``, close it if it is the open run, and count it: one statement."""
        row = await self._fetchrow(self._sql.jobs.end_run, _run_arguments(run))
        return row is not None and bool(row[0])

    async def note_missed(self, job: str, missed_at: datetime) -> None:
        """Record that the tick of ``missed_at`` of ``job`` was never started."""
        await self._fetch(self._sql.jobs.note_missed, (job, epoch_ms(missed_at)))

    async def pause_jobs(self, pause: JobPause) -> None:
        """Keep ``pause``, replacing any pause of its target."""
        await self._fetch(self._sql.jobs.pause, (pause.target, pause_json(pause)))

    async def resume_jobs(self, target: str) -> JobPause | None:
        """Remove the pause of ``target``; return it, or ``None``."""
        row = await self._fetchrow(self._sql.jobs.resume, (target,))
        return None if row is None or row[0] is None else pause_from_json(target, row[0])

    async def job_pauses(self) -> list[JobPause]:
        """Return every pause kept, by target."""
        rows = await self._fetch(self._sql.jobs.pauses, ())
        return [pause_from_json(row[0], row[1]) for row in rows]

    async def job_states(self, jobs: Sequence[str] | None = None) -> list[JobState]:
        """Return the states of ``jobs`` (every job when ``None``), by job."""
        wanted = None if jobs is None else sorted(set(jobs))
        rows = await self._fetch(self._sql.jobs.states, (wanted,))
        return [
            JobState(
                row[0],
                open_run_from_json(row[1]),
                int(row[2]),
                None if row[3] is None else from_epoch_ms(int(row[3])),
                tick_run_from_json(row[4]),
            )
            for row in rows
        ]

    async def job_records(self, jobs: Sequence[str] | None = None) -> list[JobRecord]:
        """Return the records of ``jobs`` (every job when ``None``) that have one, by job key."""
        if jobs is None:
            rows = await self._fetch(self._sql.all_runs, ())
        else:
            rows = await self._fetch(self._sql.job_runs, (sorted(set(jobs)),))
        return job_records_from_rows(
            [row[column] for column in range(RUN_ROW_COLUMNS)] for row in rows
        )

    async def store_time_ms(self) -> int:
        """Return the server's wall clock now (``clock_timestamp()``), in epoch milliseconds.

        The clock its expiries are measured on; one round trip.
        """
        rows = await self._fetch(STORE_TIME_SQL, ())
        return int(rows[0][0])

    async def read_lock(self, key: str) -> LockInfo | None:
        """Return ``key``'s lock (live, or released with its last token), or ``None``."""
        row = await self._fetchrow(self._sql.read_lock, (key,))
        return None if row is None else self._lock_info(row)

    async def list_locks(self, prefix: str = "", limit: int = 1000) -> list[LockInfo]:
        """Return up to ``limit`` locks whose key starts with ``prefix``, by key."""
        rows = await self._fetch(self._sql.list_locks, (prefix, limit))
        return [self._lock_info(row) for row in rows]

    async def break_lock(self, key: str) -> LockInfo | None:
        """Free ``key`` whoever holds it; return what held it, if any.

        As at a release, the first live waiter in the key's line holds it next, or the
        freeing is announced to the key's followers.
        """
        if not await self._has_lines():
            row = await self._fetchrow(self._sql.break_lock, (key,))
            return None if row is None else self._lock_info(row)
        row = await self._fetchrow(
            self._sql.lines.step, ("break", key, None, None, None, None, None)
        )
        if row is None:
            return None
        token, owner, ms_left = row[0], row[1], row[2]
        return LockInfo(key, str(owner), self._token(token), int(ms_left))

    def _lock_info(self, row: Row) -> LockInfo:
        key, owner, token, ms_left = row[0], row[1], row[2], row[3]
        return LockInfo(
            key=str(key),
            owner=None if owner is None else str(owner),
            fencing_token=self._token(token),
            expires_in_ms=None if ms_left is None else int(ms_left),
        )

    # --- schema and lifecycle -------------------------------------------------------------

    async def create_schema(self) -> None:
        """Create the table and the sequence if missing; safe when processes race to do it.

        Raises:
            LockStoreError: the server refused (e.g. the role may not create tables).
        """
        await self._create_schema(await self._ready(create_missing=True))

    async def _create_schema(self, executor: Executor) -> None:
        try:
            await executor.run_transaction(self._sql.schema)
            self._lines = True
        except Exception as error:
            raise LockStoreError(
                f"{self!r} could not create its tables and sequence: {type(error).__name__}: "
                f"{error}. Grant the role CREATE on the schema, or create them once with "
                "leaselock/stores/postgres/postgres_schema.sql or the Alembic migration in the "
                "docs, and pass create_schema=False"
            ) from error

    async def open(self) -> None:
        """Open the pool (if the store owns one) and create the schema if asked; counted.

        From the first open, prunes long-released locks in the background (``prune_after``).
        """
        await self._ready()
        self._users += 1
        if self._pruner is not None:
            self._pruner.start()

    async def aclose(self) -> None:
        """Undo one :meth:`open`; the last one closes what the store owns."""
        self._users = max(0, self._users - 1)
        if self._users:
            return
        if self._pruner is not None:
            await self._pruner.stop()
        executor, self._executor, self._opening, self._loop = self._executor, None, None, None
        if executor is not None:
            await executor.close()
            self._make_executor.after_close()

    async def _ready(self, *, create_missing: bool = False) -> Executor:
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
            create = create_missing or self._create_schema_at_open
            opening = self._opening = loop.create_task(self._open_resources(loop, create))
            opening.add_done_callback(_retrieve_error)
        try:
            return await asyncio.shield(opening)
        finally:
            if opening.done() and self._opening is opening:
                self._opening = None

    async def _open_resources(self, loop: asyncio.AbstractEventLoop, create: bool) -> Executor:
        try:
            executor = await self._make_executor.make()
        except (LockStoreError, LocksConfigurationError):
            raise
        except Exception as error:
            raise open_failure(repr(self), error) from error
        try:
            # an engine or a pool given to the store connects here, at its first statement
            await self._ensure_schema(executor, create=create)
            await self._say_replication(executor)
            await executor.warm(self._warm_ups())
        except LockStoreError:
            await executor.close()
            raise
        except Exception as error:
            await executor.close()
            raise open_failure(repr(self), error) from error
        except BaseException:
            await executor.close()
            raise
        self._executor, self._loop = executor, loop
        return executor

    # --- housekeeping ---------------------------------------------------------------------

    async def prune(self, older_than: Duration = DEFAULT_PRUNE_AFTER) -> int:
        """Delete locks free for longer than ``older_than``; return how many were deleted.

        Only rows whose token the sequence has passed go: the key's next token is still
        greater than every token it had, drawn from the sequence alone. In statements of
        :data:`PRUNE_BATCH` rows, at most :data:`PRUNE_BATCHES` of them per call; a bigger
        backlog goes at the next call. The store calls this in the background every
        ``prune_after / 2`` (jittered) while open, unless ``prune_after=None``.

        Raises:
            LocksConfigurationError: ``older_than`` is not a duration of a second or more.
            LockStoreError: the server failed.
        """
        age_ms = parse_prune_after(older_than, name="older_than")
        pruned = 0
        for _ in range(PRUNE_BATCHES):
            row = await self._fetchrow(self._sql.prune, (age_ms, PRUNE_BATCH))
            deleted = 0 if row is None else int(row[0])
            pruned += deleted
            if deleted < PRUNE_BATCH:
                break
        if self._lines:
            await self._fetchrow(self._sql.lines.prune, (age_ms, PRUNE_BATCH))
        return pruned

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

    def _warm_ups(self) -> tuple[tuple[str, tuple[object, ...]], ...]:
        """A release and renewals of the key ``""`` for the owner ``""``: they change nothing.

        No owner of leaselock's is ``""`` (owner ids are ``<32 hex>@<label>``), so they match
        no row, whatever holds the key.

        A step-down's release on a connection that never ran one paid 2 to 3 ms more (the line
        function's compile, the statement's parse): the release an election's standby waits for.
        """
        if self._lines:
            release: tuple[str, tuple[object, ...]] = (
                self._sql.lines.step,
                ("release", "", "", None, None, None, None),
            )
        else:
            release = (self._sql.release, ("", ""))
        return (
            release,
            (self._sql.renew, ("", "", 1)),
            (self._sql.renew_many, ([], [], [])),
        )

    async def _has_lines(self) -> bool:
        """Whether the schema has the waiting lines; opens the store first if needed."""
        if self._executor is None or self._loop is not asyncio.get_running_loop():
            await self._ready()
        return self._lines

    async def _ensure_schema(self, executor: Executor, *, create: bool) -> None:
        names = (
            self._sql.table,
            self._sql.sequence,
            self._sql.runs,
            self._sql.jobs_table,
            self._sql.lines.table,
            self._sql.lines.signature,
        )
        exists = await executor.fetchrow(SCHEMA_EXISTS_SQL, (*names, LINE_FUNCTION_MARK))
        found = [False] * 7 if exists is None else [bool(exists[i]) for i in range(7)]
        missing = [
            f"the {what} {name}"
            for what, name, there in zip(
                ("table", "sequence", "run records table", "jobs table"),
                names[:4],
                found[:4],
                strict=True,
            )
            if not there
        ]
        tables, lines, current, ticks = not missing, found[4], found[5], found[6]
        # a line function of an earlier leaselock draws its grants' tokens without the
        # timeline's band: it is replaced, or not used
        self._lines = tables and lines and current
        if self._lines and ticks:
            return
        if create:
            try:
                await self._create_schema(executor)
            except LockStoreError as error:
                if not tables:
                    raise
                if not ticks:
                    raise self._without_ticks(f"could not add it: {error.__cause__}") from error
                # a schema of an earlier leaselock, and a role that may not add to it: it
                # keeps working as before
                self._say_no_lines(str(error), outdated=lines)
            return
        # fail at start, not with a warning at every tick
        if not tables:
            raise LockStoreError(
                f"{self!r} cannot start: {_listed(missing)} "
                f"{'does' if len(missing) == 1 else 'do'} not exist, and create_schema=False. "
                "Create them (run leaselock/stores/postgres/postgres_schema.sql, apply the "
                "Alembic migrations from the docs, or call await store.create_schema()), or pass "
                "create_schema=True"
            )
        if not ticks:
            raise self._without_ticks("create_schema=False")
        self._say_no_lines("create_schema=False", outdated=lines)

    def _without_ticks(self, why: str) -> LockStoreError:
        """The error of a jobs table an earlier leaselock made, without the column last_tick."""
        return LockStoreError(
            f"{self!r} cannot start: the jobs table {self._sql.jobs_table} has no column "
            f"last_tick, where this leaselock keeps the last tick each job started for (an "
            f"earlier leaselock made the table), and {why}. Add it: apply the Alembic migration "
            "alembic_leaselock_ticks.py from the docs, run "
            "leaselock/stores/postgres/postgres_schema.sql, or call await store.create_schema() "
            "as the table's owner"
        )

    async def _say_replication(self, executor: Executor) -> None:
        """Say once, at the first open, when a failover could lose the latest grants."""
        if self._replication_said:
            return
        self._replication_said = True
        try:
            row = await executor.fetchrow(REPLICATION_SQL, (self._sql.sequence,))
        except Exception as error:  # noqa: BLE001 -- a server without these views opens as before
            _log.debug("%s could not read its server's standbys: %s", self, error)
            return
        if row is not None:
            say_replication(repr(self), replication_from_row(row))

    def _say_no_lines(self, why: str, *, outdated: bool) -> None:
        if outdated:
            _log.info(
                "%s has no waiting lines: the function %s is of an earlier leaselock (%s), "
                "whose grants' tokens may repeat the old primary's after a failover. Waiters "
                "retry instead of being handed the key at a release. To get them, apply the "
                "Alembic migration alembic_leaselock_tokens.py from the docs, run "
                "leaselock/stores/postgres/postgres_schema.sql, or call await "
                "store.create_schema() as the function's owner",
                self,
                self._sql.lines.signature,
                why,
            )
            return
        _log.info(
            "%s has no waiting lines: the table %s or its function is missing (%s). Waiters "
            "retry instead of being handed the key at a release. To get them, run "
            "leaselock/stores/postgres/postgres_schema.sql, apply the Alembic migrations "
            "alembic_leaselock_line.py and alembic_leaselock_tokens.py from the docs, or call "
            "await store.create_schema() as a role that may create tables",
            self,
            self._sql.lines.table,
            why,
        )

    def _explained(self, error: Exception) -> Exception:
        """Return the error to raise: a missing table becomes a message naming the fix."""
        if sqlstate(error) not in {_UNDEFINED_TABLE, _UNDEFINED_FUNCTION}:
            return error
        return LockStoreError(
            f"{self!r}: the table {self._sql.table}, the sequence {self._sql.sequence}, the "
            f"table {self._sql.runs}, or the line table {self._sql.lines.table} or its function "
            f"does not exist ({error}). Create them: pass "
            "create_schema=True, call await store.create_schema(), run "
            "leaselock/stores/postgres/postgres_schema.sql, or apply the Alembic migrations from "
            "the docs"
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


def _run_arguments(run: RunRecord) -> tuple[object, ...]:
    row = run_row(run)
    return (
        row["job"],
        row["instance"],
        row["fencing_token"],
        row["started_at_ms"],
        row["ended_at_ms"],
        row["outcome"],
        row["error"],
        row["trigger"],
        row["detected_by"],
    )


def _retrieve_error(task: asyncio.Task[Executor]) -> None:
    """Mark an opening's error as seen: its callers may all have left (cancelled) meanwhile."""
    if not task.cancelled():
        task.exception()


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


def _listed(things: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(filter(None, [", ".join(things[:-1]), things[-1]]))
