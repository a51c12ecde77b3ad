"""MySQLLockStore: the shipped contract suite, and what only MySQL and MariaDB can show.

Runs against LEASELOCK_TEST_MYSQL_URL, else a throwaway mariadbd/mysqld (tests/mysql_server.py).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import multiprocessing
import random
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest

from helpers import unique_key, until_real, wait_for_real
from leaselock import Locks, LocksConfigurationError, LockStoreError
from leaselock.stores import (
    Acquired,
    JobPause,
    LockStore,
    NotAcquired,
    OpenRun,
    Renewal,
    RunRecord,
    RunStart,
)
from leaselock.stores._common._capabilities import RunOutcome
from leaselock.stores._common._protocol import FollowingNothing
from leaselock.stores.mysql import RENEW_CHUNK, MySQLLockStore
from leaselock.stores.mysql._arguments import connect_args
from leaselock.stores.mysql._documents import successor
from leaselock.stores.mysql._wakeups import wakeup_name
from leaselock.testing.pytest import LockStoreContractTests
from process_worker import hold_on_mysql, wait_woken_on_mysql

asyncmy = pytest.importorskip("asyncmy")

pytestmark = pytest.mark.mysql

CALLERS: Mapping[str, int] = {"callers": 32}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "stores"
ALEMBIC_MIGRATIONS = (
    DOCS / "alembic_leaselock_locks_mysql.py",
    DOCS / "alembic_leaselock_runs_mysql.py",
    DOCS / "alembic_leaselock_jobs_mysql.py",
)
SUFFIXES = ("", "_runs", "_jobs")
HAS_ALEMBIC = importlib.util.find_spec("alembic") is not None
RUN_STARTED = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def sqlalchemy_url(url: str) -> str:
    return "mysql+asyncmy://" + url.partition("://")[2]


async def make_pool(url: str, **options: Any) -> Any:
    settings: dict[str, Any] = {"autocommit": True, "maxsize": 20, **options}
    return await asyncmy.create_pool(**connect_args(url), **settings)


def make_run(job: str, outcome: RunOutcome, *, at: int, token: int | None) -> RunRecord:
    """A run of ``job`` that started ``at`` minutes after a fixed time."""
    started = RUN_STARTED + timedelta(minutes=at)
    return RunRecord(
        job=job,
        instance=f"shop-{at}",
        fencing_token=token,
        started_at=started,
        ended_at=started + timedelta(seconds=2),
        outcome=outcome,
        error="ValueError: no stock" if outcome == "error" else None,
    )


class Scratch:
    """Fresh table names on the test server, dropped when the module ends."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.tables: list[str] = []

    def table(self, label: str) -> str:
        name = f"leaselock_test_{label.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        self.tables.append(name)
        return name

    def store(self, label: str, **options: Any) -> MySQLLockStore:
        return MySQLLockStore.from_url(self.url, table=self.table(label), **options)

    async def sql(self, statement: str, *args: object) -> list[Any]:
        """Run one statement on a connection of its own; return its rows."""
        connection = await asyncmy.connect(**connect_args(self.url), autocommit=True)
        try:
            async with connection.cursor() as cursor:
                await cursor.execute(statement, args)
                return list(await cursor.fetchall())
        finally:
            connection.close()

    async def named(self, statement: str, *args: object) -> list[dict[str, Any]]:
        """Run one statement on a connection of its own; return its rows by column name."""
        connection = await asyncmy.connect(**connect_args(self.url), autocommit=True)
        try:
            async with connection.cursor() as cursor:
                await cursor.execute(statement, args)
                names = [column[0] for column in cursor.description]
                return [dict(zip(names, row, strict=True)) for row in await cursor.fetchall()]
        finally:
            connection.close()

    async def drop_all(self) -> None:
        for table in self.tables:
            await self.sql(f"DROP TABLE IF EXISTS `{table}`, `{table}_runs`, `{table}_jobs`")


@pytest.fixture(scope="module")
def scratch(mysql_url: str) -> Iterator[Scratch]:
    made = Scratch(mysql_url)
    yield made
    asyncio.run(made.drop_all())


@pytest.fixture
async def store(scratch: Scratch) -> AsyncIterator[MySQLLockStore]:
    opened = scratch.store("store")
    await opened.open()
    yield opened
    await opened.aclose()


# --- the contract, over the application's pool and over its SQLAlchemy engine --------------


class MySQLContract(LockStoreContractTests):
    concurrent: ClassVar[Mapping[str, int]] = CALLERS
    table: ClassVar[str]

    @pytest.fixture(autouse=True)
    def _server(self, scratch: Scratch) -> None:
        self.url = scratch.url
        # one table per class: the class's cases share it (their keys are unique)
        if "table" not in type(self).__dict__:
            type(self).table = scratch.table(type(self).__name__.lower())


class TestMySQLContractAsyncmyPool(MySQLContract):
    """An application's asyncmy pool of 20 connections, 32 racing callers."""

    async def make_store(self) -> LockStore:
        pool = await make_pool(self.url)
        return MySQLLockStore(pool, table=self.table, own_pool=True)


class TestMySQLContractSQLAlchemy(MySQLContract):
    """A SQLAlchemy AsyncEngine (mysql+asyncmy) with a pool of 20."""

    def make_store(self) -> LockStore:
        from sqlalchemy.ext.asyncio import create_async_engine  # noqa: PLC0415

        engine = create_async_engine(sqlalchemy_url(self.url), pool_size=20)
        return MySQLLockStore(engine, table=self.table, own_pool=True)


# --- fencing tokens ------------------------------------------------------------------------


async def test_tokens_keep_growing_after_the_counter_was_set_back(
    store: MySQLLockStore, scratch: Scratch
) -> None:
    key = unique_key("set-back")
    for number in range(5):
        taken = await store.acquire(key, f"owner-{number}", 60_000)
        assert await store.release(key, f"owner-{number}")
    assert isinstance(taken, Acquired)
    await scratch.sql(f"ALTER TABLE {store._table} AUTO_INCREMENT = 1")

    after = await store.acquire(key, "after", 60_000)

    assert isinstance(after, Acquired)
    assert after.fencing_token > taken.fencing_token


async def test_a_freed_row_whose_token_was_raised_floors_the_next_token(
    store: MySQLLockStore, scratch: Scratch
) -> None:
    key = unique_key("raised")
    taken = await store.acquire(key, "holder", 300)
    assert isinstance(taken, Acquired)
    raised = taken.fencing_token + 1_000_000
    await scratch.sql(f"UPDATE {store._table} SET fencing_token = %s WHERE `key` = %s", raised, key)
    await wait_for_real(400)

    after = await store.acquire(key, "taker", 60_000)

    assert isinstance(after, Acquired)
    assert after.fencing_token > raised


async def test_a_release_keeps_the_row_with_its_token_and_clears_the_owner(
    store: MySQLLockStore, scratch: Scratch
) -> None:
    key = unique_key("kept")
    taken = await store.acquire(key, "holder", 60_000)
    assert isinstance(taken, Acquired)

    assert await store.release(key, "holder")

    rows = await scratch.sql(
        f"SELECT owner, fencing_token FROM {store._table} WHERE `key` = %s", key
    )
    assert rows == [(None, taken.fencing_token)]


async def test_a_refused_acquire_leaves_the_row_as_it_was(
    store: MySQLLockStore, scratch: Scratch
) -> None:
    key = unique_key("busy")
    assert isinstance(await store.acquire(key, "holder", 60_000), Acquired)
    query = f"SELECT owner, fencing_token, expires_at FROM {store._table} WHERE `key` = %s"
    before = await scratch.sql(query, key)

    refused = await asyncio.gather(*(store.acquire(key, "holder", 90_000) for _ in range(10)))

    assert refused == [NotAcquired()] * 10
    assert await scratch.sql(query, key) == before


# --- MySQL's quirks ------------------------------------------------------------------------


async def test_sessions_in_different_time_zones_see_one_expiry(scratch: Scratch) -> None:
    # NOW(6) and TIMESTAMP columns read in the session's time_zone: east of UTC a lock would
    # look expired to a session west of it hours early. UTC_TIMESTAMP(6) is the same for both.
    table = scratch.table("zones")
    east = MySQLLockStore(
        await make_pool(scratch.url, init_command="SET time_zone = '+13:00'"),
        table=table,
        own_pool=True,
    )
    west = MySQLLockStore(
        await make_pool(scratch.url, init_command="SET time_zone = '-12:00'"),
        table=table,
        own_pool=True,
    )
    await east.open()
    await west.open()
    try:
        key = unique_key("zones")
        first = await east.acquire(key, "east", 600)
        assert isinstance(first, Acquired)
        info = await west.read_lock(key)
        assert info is not None
        assert info.owner == "east"
        assert info.expires_in_ms is not None
        assert 0 < info.expires_in_ms <= 600
        assert await west.acquire(key, "west", 60_000) == NotAcquired()

        await wait_for_real(700)

        second = await west.acquire(key, "west", 60_000)
        assert isinstance(second, Acquired)
        assert second.fencing_token > first.fencing_token
        assert not await east.renew(key, "east", 60_000)
    finally:
        await east.aclose()
        await west.aclose()


async def test_keys_differing_in_trailing_spaces_or_case_are_different_locks(
    store: MySQLLockStore,
) -> None:
    # a _bin collation of MariaDB (and MySQL 5.7) is PAD SPACE: 'job' = 'job '; _ci folds case
    base = unique_key("pad")
    keys = [base, base + " ", base + "  ", base.upper(), base + "\t"]

    taken = [await store.acquire(key, f"owner-{n}", 60_000) for n, key in enumerate(keys)]

    assert all(isinstance(result, Acquired) for result in taken)
    for n, key in enumerate(keys):
        info = await store.read_lock(key)
        assert info is not None
        assert (info.key, info.owner) == (key, f"owner-{n}")


# --- round trips and batches ---------------------------------------------------------------


async def test_renew_many_answers_each_lease_across_chunks_when_some_are_lost(
    store: MySQLLockStore,
) -> None:
    keys = [unique_key(f"many-{n}") for n in range(RENEW_CHUNK + 20)]
    for key in keys:
        assert isinstance(await store.acquire(key, "me", 60_000), Acquired)
    lost = set(keys[3 : RENEW_CHUNK + 20 : 97])
    for key in lost:
        assert await store.release(key, "me")

    answers = await store.renew_many([Renewal(key, "me", 60_000) for key in keys])

    assert list(answers) == [key not in lost for key in keys]


async def test_a_pool_not_in_autocommit_commits_each_call_and_reads_fresh_state(
    scratch: Scratch,
) -> None:
    # asyncmy's default is autocommit=False: without a COMMIT per call, the row lock of an
    # acquire would be held, and a read would see its transaction's old snapshot
    table = scratch.table("no-autocommit")
    manual = MySQLLockStore(
        await make_pool(scratch.url, autocommit=False), table=table, own_pool=True
    )
    other = MySQLLockStore.from_url(scratch.url, table=table)
    await manual.open()
    await other.open()
    try:
        key = unique_key("manual")
        assert isinstance(await manual.acquire(key, "holder", 60_000), Acquired)
        info = await manual.read_lock(key)
        assert info is not None
        assert info.live

        assert await asyncio.wait_for(other.release(key, "holder"), 5)

        info = await manual.read_lock(key)
        assert info is not None
        assert not info.live
    finally:
        await manual.aclose()
        await other.aclose()


async def test_a_statement_that_timed_out_on_a_row_lock_is_sent_again(scratch: Scratch) -> None:
    table = scratch.table("lock-wait")
    store = MySQLLockStore(
        await make_pool(scratch.url, init_command="SET SESSION innodb_lock_wait_timeout = 1"),
        table=table,
        own_pool=True,
    )
    await store.open()
    blocker = await asyncmy.connect(**connect_args(scratch.url), autocommit=False)
    try:
        key = unique_key("row-lock")
        assert isinstance(await store.acquire(key, "holder", 60_000), Acquired)
        async with blocker.cursor() as cursor:
            await cursor.execute(f"SELECT * FROM `{table}` WHERE `key` = %s FOR UPDATE", (key,))

        async def release_later() -> None:
            await wait_for_real(1300)  # past one lock wait timeout, within two
            await blocker.commit()

        renewed, _ = await asyncio.gather(store.renew(key, "holder", 60_000), release_later())

        assert renewed
    finally:
        blocker.close()
        await store.aclose()


# --- run records ---------------------------------------------------------------------------


async def test_concurrent_runs_of_one_job_leave_the_newest_run_and_the_newest_success(
    scratch: Scratch,
) -> None:
    # 48 runs on 20 connections, in shuffled order, several started in one millisecond (the
    # greater token is the newer) and one without a token: in whatever order InnoDB takes them
    # (deadlock victims sent again), the rows end as the newest run and the newest success
    store = MySQLLockStore(
        await make_pool(scratch.url), table=scratch.table("run-race"), own_pool=True
    )
    job = unique_key("run-race")
    runs = [
        make_run(job, "error" if n % 3 == 0 else "ok", at=n % 10, token=n or None)
        for n in range(48)
    ]
    random.Random(48).shuffle(runs)  # noqa: S311 -- an order that repeats, not a secret

    def newness(run: RunRecord) -> tuple[datetime, int]:
        return run.started_at, -1 if run.fencing_token is None else run.fencing_token

    try:
        await asyncio.gather(*(store.record_run(run) for run in runs))
        (record,) = await store.job_records([job])
    finally:
        await store.aclose()

    assert record.last_run == max(runs, key=newness)
    assert record.last_success == max((run for run in runs if run.outcome == "ok"), key=newness)
    assert record.last_run != record.last_success


async def test_record_run_is_one_statement_and_draws_no_warning(scratch: Scratch) -> None:
    # one connection, so the session's Questions counter sees every statement the store sends,
    # including the SHOW WARNINGS asyncmy would send after a statement that drew a warning
    pool = await make_pool(scratch.url, minsize=1, maxsize=1)
    store = MySQLLockStore(pool, table=scratch.table("run-trips"), own_pool=True)
    job = unique_key("run-trips")

    async def questions() -> int:
        async with pool.acquire() as connection, connection.cursor() as cursor:
            await cursor.execute("SHOW SESSION STATUS LIKE 'Questions'")
            (row,) = await cursor.fetchall()
        return int(row[1])

    sent = []
    try:
        await store.open()
        # new rows, both rows replaced, a late run refused
        for run in (
            make_run(job, "ok", at=1, token=1),
            make_run(job, "ok", at=2, token=2),
            make_run(job, "error", at=0, token=3),
        ):
            before = await questions()
            await store.record_run(run)
            sent.append(await questions() - before - 1)  # less the probe itself
        (record,) = await store.job_records([job])
    finally:
        await store.aclose()

    assert sent == [1, 1, 1]
    assert record.last_run == record.last_success == make_run(job, "ok", at=2, token=2)


async def test_a_store_without_create_schema_refuses_to_start_when_only_the_runs_table_is_missing(
    scratch: Scratch,
) -> None:
    # a schema made before run records: the lock table alone
    store = scratch.store("locks-only")
    await store.create_schema()
    await store.aclose()
    await scratch.sql(f"DROP TABLE `{store._table_name}_runs`")
    strict = MySQLLockStore.from_url(scratch.url, table=store._table_name, create_schema=False)

    with pytest.raises(LockStoreError, match=r"_runs` does not exist, and create_schema=False"):
        await strict.open()


async def test_create_schema_adds_the_runs_table_beside_a_lock_table_and_keeps_its_locks(
    scratch: Scratch,
) -> None:
    table = scratch.table("add-runs")
    old = MySQLLockStore.from_url(scratch.url, table=table)
    key = unique_key("kept")
    try:
        taken = await old.acquire(key, "holder", 60_000)
        await scratch.sql(f"DROP TABLE `{table}_runs`")
        await old.create_schema()
        job = unique_key("job")
        await old.record_run(make_run(job, "ok", at=1, token=4))
        records = await old.job_records([job])
        info = await old.read_lock(key)
    finally:
        await old.aclose()

    assert isinstance(taken, Acquired)
    assert info is not None
    assert (info.owner, info.fencing_token) == ("holder", taken.fencing_token)
    assert [record.last_run for record in records] == [make_run(job, "ok", at=1, token=4)]


async def test_a_job_longer_than_its_column_is_refused_not_cut_short(
    store: MySQLLockStore,
) -> None:
    with pytest.raises(LocksConfigurationError, match=r"at most 2000 .*shorter job"):
        await store.record_run(make_run("\u732b" * 700, "ok", at=1, token=1))


async def test_a_table_name_of_59_characters_keeps_its_runs_and_jobs_in_64_character_tables(
    scratch: Scratch,
) -> None:
    table = scratch.table("long")
    table += "x" * (59 - len(table))
    scratch.tables.append(table)
    store = MySQLLockStore.from_url(scratch.url, table=table)
    job = unique_key("long")
    try:
        await store.record_run(make_run(job, "error", at=1, token=None))
        (record,) = await store.job_records([job])
        await store.pause_jobs(JobPause(job, "long", "ops", RUN_STARTED))
        pauses = await store.job_pauses()
    finally:
        await store.aclose()

    assert record.last_run == make_run(job, "error", at=1, token=None)
    assert pauses == [JobPause(job, "long", "ops", RUN_STARTED)]
    for suffix in ("_runs", "_jobs"):
        assert await scratch.sql("SHOW TABLES LIKE %s", table + suffix) == [(table + suffix,)]


# --- job control: its documents in <table>_jobs ----------------------------------------------


@pytest.fixture(params=["pool", "engine"])
async def either_store(
    request: pytest.FixtureRequest, scratch: Scratch
) -> AsyncIterator[MySQLLockStore]:
    """The store over an asyncmy pool (rows count when changed) or an engine (when matched)."""
    table = scratch.table(f"documents-{request.param}")
    if request.param == "pool":
        opened = MySQLLockStore(await make_pool(scratch.url), table=table, own_pool=True)
    else:
        from sqlalchemy.ext.asyncio import create_async_engine  # noqa: PLC0415

        engine = create_async_engine(sqlalchemy_url(scratch.url), pool_size=20)
        opened = MySQLLockStore(engine, table=table, own_pool=True)
    await opened.open()
    yield opened
    await opened.aclose()


async def test_a_swap_writes_only_over_the_document_it_expects(
    either_store: MySQLLockStore,
) -> None:
    store = either_store
    name = "job:" + unique_key("swap")

    assert await store.swap_document(name, None, '{"v":1}')
    assert not await store.swap_document(name, None, '{"v":2}')  # the name has one
    assert not await store.swap_document(name, '{"v":2}', '{"v":3}')  # not the one it has
    assert await store.swap_document(name, '{"v":1}', '{"v":3}')
    assert not await store.swap_document(name, '{"v":1}', None)
    assert await store.read_documents([name, name + "-other", name]) == ['{"v":3}', None, '{"v":3}']
    assert await store.swap_document(name, '{"v":3}', None)
    assert not await store.swap_document(name, '{"v":3}', None)
    assert not await store.swap_document(name, '{"v":3}', '{"v":4}')
    assert await store.read_documents([name]) == [None]
    assert await store.read_documents([]) == []


async def test_a_swap_to_the_document_already_there_answers_whether_it_is_there(
    either_store: MySQLLockStore, scratch: Scratch
) -> None:
    # an UPDATE to the same text changes no row: a bare asyncmy pool counts 0 rows, an engine 1
    store = either_store
    name = "job:" + unique_key("same")
    rows = f"SELECT `document` FROM `{store._jobs_name}` WHERE `name` = %s"

    assert await store.swap_document(name, None, None)
    assert not await store.swap_document(name, "{}", "{}")
    assert await scratch.sql(rows, name) == []
    assert await store.swap_document(name, None, "{}")
    assert await store.swap_document(name, "{}", "{}")
    assert not await store.swap_document(name, None, None)
    assert not await store.swap_document(name, '{"v":1}', '{"v":1}')
    assert await scratch.sql(rows, name) == [(b"{}",)]


async def test_racing_swaps_of_one_document_write_exactly_once_each_round(
    either_store: MySQLLockStore,
) -> None:
    store = either_store
    name = "job:" + unique_key("race")
    callers = range(CALLERS["callers"])

    inserted = await asyncio.gather(
        *(store.swap_document(name, None, f'{{"by":{n}}}') for n in callers)
    )
    (first,) = await store.read_documents([name])
    updated = await asyncio.gather(
        *(store.swap_document(name, first, f'{{"then":{n}}}') for n in callers)
    )
    (second,) = await store.read_documents([name])
    deleted = await asyncio.gather(*(store.swap_document(name, second, None) for _ in callers))

    assert (inserted.count(True), updated.count(True), deleted.count(True)) == (1, 1, 1)
    assert first == f'{{"by":{inserted.index(True)}}}'
    assert second == f'{{"then":{updated.index(True)}}}'
    assert await store.read_documents([name]) == [None]


async def test_documents_compare_byte_for_byte_never_through_a_collation(
    store: MySQLLockStore,
) -> None:
    # a _ci collation folds case and accents, a PAD SPACE one ignores trailing spaces
    base = "pause:" + unique_key("pad")
    names = [base, base + " ", base.upper(), base + "\t", base.replace("pad", "p\u00e1d")]
    for n, name in enumerate(names):
        assert await store.swap_document(name, None, f'{{"n":{n}}}')
    kept = '{"note":"caf\u00e9 \u2615"}'
    assert await store.swap_document(base, '{"n":0}', kept)

    near = ['{"note":"cafe \u2615"}', '{"NOTE":"CAF\u00c9 \u2615"}', kept + " ", kept[:-1]]
    for other in near:
        assert not await store.swap_document(base, other, '{"n":9}')
        assert not await store.swap_document(base, other, None)

    assert await store.read_documents(names) == [kept] + [f'{{"n":{n}}}' for n in range(1, 5)]
    under = await store.documents_under(base)
    assert under == {base: kept, base + " ": '{"n":1}', base + "\t": '{"n":3}'}


async def test_documents_are_utf8_json_in_the_jobs_table(
    store: MySQLLockStore, scratch: Scratch
) -> None:
    job = unique_key("reports:\u732b")
    await store.pause_jobs(JobPause(job, "caf\u00e9 \u2615", "ops", RUN_STARTED))

    ((name, document),) = await scratch.sql(
        f"SELECT `name`, `document` FROM `{store._jobs_name}` WHERE `name` = %s",
        f"pause:{job}".encode(),
    )

    assert name == f"pause:{job}".encode()
    assert json.loads(document.decode())["note"] == "caf\u00e9 \u2615"
    assert await store.job_pauses() == [JobPause(job, "caf\u00e9 \u2615", "ops", RUN_STARTED)]


async def test_documents_under_a_prefix_read_a_range_of_the_primary_key(
    store: MySQLLockStore, scratch: Scratch
) -> None:
    prefix = f"pause:{unique_key('range')}:"
    inside = [prefix, prefix + "a", prefix + "\u732b*", prefix + "\U0001f600"]
    outside = [prefix[:-1], prefix[:-1] + ";", prefix[:-2], "job:" + prefix[6:], "pausf:"]
    outside += [f"job:{unique_key('other')}" for _ in range(200)]
    for name in inside + outside:
        assert await store.swap_document(name, None, json.dumps(name))

    under = await store.documents_under(prefix)
    everything = await store.documents_under("")

    assert under == {name: json.dumps(name) for name in inside}
    assert everything == {name: json.dumps(name) for name in inside + outside}
    start = prefix.encode()
    (plan,) = await scratch.named(f"EXPLAIN {store._jobs_sql.under}", start, successor(start))
    assert (plan["type"], plan["key"]) == ("range", "PRIMARY"), plan


def test_the_successor_of_a_prefix_bounds_every_name_under_it() -> None:
    assert successor(b"job:") == b"job;"
    assert successor(b"a\xfe\xff\xff") == b"a\xff"
    assert successor(b"") is None
    assert successor(b"\xff\xff") is None


async def test_the_longest_pause_target_fits_and_a_longer_name_is_refused(
    store: MySQLLockStore,
) -> None:
    # a key of 500 four-byte characters with "*" after it: a prefix pause
    longest = JobPause("\U0001f600" * 500 + "*", "", "ops", RUN_STARTED)
    await store.pause_jobs(longest)

    assert await store.job_pauses() == [longest]
    with pytest.raises(LocksConfigurationError, match=r"at most 2007 .*shorter document name"):
        await store.swap_document("pause:" + longest.target + "x", None, "{}")


async def test_job_control_keeps_the_open_run_in_a_document_until_its_end(
    either_store: MySQLLockStore, scratch: Scratch
) -> None:
    store = either_store
    job = unique_key("nightly")
    opened = OpenRun("shop-1", None, RUN_STARTED)
    start = RunStart(job, opened, take_key=f"{job}:run", owner="owner-1", ttl_ms=60_000)

    answer = await store.start_run(start)
    assert isinstance(answer.taken, Acquired)
    (state,) = await store.job_states([job])
    kept = await scratch.sql(
        f"SELECT COUNT(*) FROM `{store._jobs_name}` WHERE `name` = %s", f"job:{job}"
    )
    run = RunRecord(job, "shop-1", answer.taken.fencing_token, RUN_STARTED, RUN_STARTED, "ok", None)
    assert not await store.end_run(run)

    assert state.open_run == OpenRun("shop-1", answer.taken.fencing_token, RUN_STARTED)
    assert kept == [(1,)]
    assert await store.job_states([job]) == []
    assert await store.read_documents([f"job:{job}"]) == [None]


async def test_break_lock_frees_a_key_that_changed_hands_between_its_read_and_write(
    either_store: MySQLLockStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = either_store
    key = unique_key("handed")
    assert isinstance(await store.acquire(key, "first", 60_000), Acquired)
    assert store._sql is not None
    break_write, write = store._sql.break_write, store._write
    breaks: list[object] = []

    async def hand_over_first(self: MySQLLockStore, sql: str, args: Sequence[object]) -> Any:
        if self is store and sql == break_write:
            breaks.append(args[1])  # the owner it read, as the server sent it
            if len(breaks) == 1:  # between the read and the write: first freed, second takes it
                assert await store.release(key, "first")
                assert isinstance(await store.acquire(key, "second", 60_000), Acquired)
        return await write(sql, args) if self is store else await original(self, sql, args)

    # on the class: the store keeps no instance dict (__slots__) to patch one store's method in
    original = MySQLLockStore._write
    monkeypatch.setattr(MySQLLockStore, "_write", hand_over_first)

    broken = await store.break_lock(key)
    taken = await store.acquire(key, "third", 60_000)

    assert breaks == [b"first"]  # the second break ran under the row lock, not through _write
    assert broken is not None
    assert broken.owner == "second"
    assert not await store.renew(key, "second", 60_000)
    assert isinstance(taken, Acquired)
    assert taken.fencing_token > broken.fencing_token


async def test_racing_breaks_and_acquires_of_one_key_never_fail(
    either_store: MySQLLockStore,
) -> None:
    store = either_store
    key = unique_key("storm")

    async def break_and_take(n: int) -> int:
        while True:
            await store.break_lock(key)
            taken = await store.acquire(key, f"owner-{n}", 60_000)
            if isinstance(taken, Acquired):
                return taken.fencing_token

    tokens = await asyncio.gather(*(break_and_take(n) for n in range(CALLERS["callers"])))

    assert len(set(tokens)) == len(tokens)


# --- schema --------------------------------------------------------------------------------


async def test_create_schema_is_idempotent_and_from_many_pools_at_once(scratch: Scratch) -> None:
    table = scratch.table("race")
    stores = [
        MySQLLockStore.from_url(scratch.url, table=table, create_schema=False, min_size=0)
        for _ in range(8)
    ]
    try:
        await asyncio.gather(*(created.create_schema() for created in stores))
        await stores[0].create_schema()
        result = await stores[1].acquire(unique_key("race"), "owner", 60_000)
    finally:
        await asyncio.gather(*(created.aclose() for created in stores))
    assert isinstance(result, Acquired)


async def test_a_missing_table_with_create_schema_off_fails_at_start_naming_the_fix(
    scratch: Scratch,
) -> None:
    missing = scratch.store("missing", create_schema=False)
    table = missing._table_name

    with pytest.raises(LockStoreError) as raised:
        await missing.open()

    assert (
        f"`{table}`, `{table}_runs` and `{table}_jobs` do not exist, and create_schema=False. "
        "Create them: apply the Alembic migrations in the docs "
        "(docs/stores/alembic_leaselock_locks_mysql.py, "
        "then docs/stores/alembic_leaselock_runs_mysql.py, "
        "then docs/stores/alembic_leaselock_jobs_mysql.py), "
        "or call await store.create_schema()"
    ) in str(raised.value)
    assert await scratch.sql("SHOW TABLES LIKE %s", f"{table}%") == []


async def test_a_schema_without_the_jobs_table_and_create_schema_off_names_it_alone(
    scratch: Scratch,
) -> None:
    # a schema of an earlier leaselock: the lock and runs tables, no jobs table
    table = scratch.table("no-jobs")
    made = MySQLLockStore.from_url(scratch.url, table=table)
    await made.create_schema()
    await made.aclose()
    await scratch.sql(f"DROP TABLE `{table}_jobs`")
    strict = MySQLLockStore.from_url(scratch.url, table=table, create_schema=False)

    with pytest.raises(LockStoreError) as raised:
        await strict.open()

    message = str(raised.value)
    assert (
        f"cannot start: `{table}_jobs` does not exist, and create_schema=False. Create it: "
        "apply the Alembic migration in the docs (docs/stores/alembic_leaselock_jobs_mysql.py), "
        "or call await store.create_schema() once as a user that may CREATE tables; "
        "or pass create_schema=True"
    ) in message
    assert "_runs" not in message
    assert "alembic_leaselock_locks_mysql" not in message
    assert await scratch.sql("SHOW TABLES LIKE %s", f"{table}_jobs") == []


async def test_create_schema_adds_the_jobs_table_to_an_earlier_schema_and_keeps_its_rows(
    scratch: Scratch,
) -> None:
    table = scratch.table("add-jobs")
    old = MySQLLockStore.from_url(scratch.url, table=table)
    key, job = unique_key("kept"), unique_key("job")
    try:
        taken = await old.acquire(key, "holder", 60_000)
        await old.record_run(make_run(job, "ok", at=1, token=4))
        await scratch.sql(f"DROP TABLE `{table}_jobs`")
        await old.create_schema()
        await old.pause_jobs(JobPause(job, "added", "ops", RUN_STARTED))
        pauses = await old.job_pauses()
        records = await old.job_records([job])
        info = await old.read_lock(key)
    finally:
        await old.aclose()

    assert isinstance(taken, Acquired)
    assert info is not None
    assert (info.owner, info.fencing_token) == ("holder", taken.fencing_token)
    assert [record.last_run for record in records] == [make_run(job, "ok", at=1, token=4)]
    assert pauses == [JobPause(job, "added", "ops", RUN_STARTED)]


async def test_a_store_that_creates_its_schema_at_open_adds_only_the_missing_jobs_table(
    scratch: Scratch,
) -> None:
    table = scratch.table("open-adds")
    made = MySQLLockStore.from_url(scratch.url, table=table)
    await made.create_schema()
    await made.aclose()
    await scratch.sql(f"DROP TABLE `{table}_jobs`")
    key = unique_key("kept")
    await scratch.sql(
        f"INSERT INTO `{table}` (`key`, `owner`, `fencing_token`, `expires_at`) "
        "VALUES (%s, 'holder', 7, UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE)",
        key,
    )
    reopened = MySQLLockStore.from_url(scratch.url, table=table)
    try:
        await reopened.open()
        info = await reopened.read_lock(key)
        states = await reopened.job_states()
    finally:
        await reopened.aclose()

    assert info is not None
    assert (info.owner, info.fencing_token) == ("holder", 7)
    assert states == []
    assert await scratch.sql("SHOW TABLES LIKE %s", f"{table}_jobs") == [(f"{table}_jobs",)]


async def test_a_table_dropped_after_start_is_reported_with_the_ways_to_create_it(
    scratch: Scratch,
) -> None:
    store = scratch.store("dropped")
    await store.open()
    try:
        await scratch.sql(f"DROP TABLE {store._table}")
        with pytest.raises(LockStoreError, match=r"does not exist .*create_schema=True"):
            await store.acquire(unique_key("dropped"), "owner", 60_000)
    finally:
        await store.aclose()


async def test_a_jobs_table_dropped_after_start_is_reported_with_the_ways_to_create_it(
    scratch: Scratch,
) -> None:
    store = scratch.store("jobs-dropped")
    await store.open()
    table = store._table_name
    try:
        await scratch.sql(f"DROP TABLE `{table}_jobs`")
        with pytest.raises(LockStoreError, match=r"_jobs` does not exist .*create_schema=True"):
            await store.swap_document("job:" + unique_key("gone"), None, "{}")
        with pytest.raises(LockStoreError) as raised:
            await store.job_pauses()
    finally:
        await store.aclose()

    message = str(raised.value)
    assert f"`{table}`, `{table}_runs` or `{table}_jobs` does not exist" in message
    assert f"{table}_jobs' doesn't exist" in message
    assert "docs/stores/alembic_leaselock_jobs_mysql.py" in message


def load_migration(path: Path, table: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    migration.__dict__.update(TABLE=table)
    return migration


async def migrate(url: str, migration: ModuleType, step: str) -> None:
    from alembic.migration import MigrationContext  # noqa: PLC0415
    from alembic.operations import Operations  # noqa: PLC0415
    from sqlalchemy.ext.asyncio import create_async_engine  # noqa: PLC0415

    def in_context(connection: Any) -> None:
        with Operations.context(MigrationContext.configure(connection)):
            getattr(migration, step)()

    engine = create_async_engine(sqlalchemy_url(url))
    try:
        async with engine.begin() as connection:
            await connection.run_sync(in_context)
    finally:
        await engine.dispose()


@pytest.mark.skipif(not HAS_ALEMBIC, reason="alembic is not installed")
async def test_the_alembic_migrations_make_the_tables_create_schema_makes(
    scratch: Scratch,
) -> None:
    by_store = scratch.store("by-store")
    await by_store.create_schema()
    await by_store.aclose()
    table = scratch.table("alembic")
    locks, runs, jobs = (load_migration(path, table) for path in ALEMBIC_MIGRATIONS)
    assert runs.down_revision == locks.revision
    assert jobs.down_revision == runs.revision

    for migration in (locks, runs, jobs, locks, runs, jobs):  # the second pass adopts them
        await migrate(scratch.url, migration, "upgrade")

    async def definition(name: str, made_for: str) -> str:
        (row,) = await scratch.sql(f"SHOW CREATE TABLE `{name}`")
        return str(row[1]).replace(f"`{made_for}", "`T")

    for suffix in SUFFIXES:
        assert await definition(table + suffix, table) == await definition(
            by_store._table_name + suffix, by_store._table_name
        )
    migrated = MySQLLockStore.from_url(scratch.url, table=table, create_schema=False)
    try:
        assert isinstance(await migrated.acquire(unique_key("alembic"), "o", 60_000), Acquired)
        await migrated.record_run(make_run(unique_key("alembic job"), "ok", at=1, token=1))
        await migrated.pause_jobs(JobPause(unique_key("alembic job"), "", "ops", RUN_STARTED))
    finally:
        await migrated.aclose()
    await migrate(scratch.url, jobs, "downgrade")
    assert await scratch.sql("SHOW TABLES LIKE %s", f"{table}_jobs") == []
    assert await scratch.sql("SHOW TABLES LIKE %s", f"{table}_runs") != []
    await migrate(scratch.url, runs, "downgrade")
    assert await scratch.sql("SHOW TABLES LIKE %s", f"{table}_runs") == []
    assert await scratch.sql("SHOW TABLES LIKE %s", table) != []
    await migrate(scratch.url, locks, "downgrade")
    assert await scratch.sql("SHOW TABLES LIKE %s", table) == []


# --- release wake-ups across processes (named locks) ---------------------------------------


def wakeup_name_of(store: MySQLLockStore, key: str) -> str:
    return wakeup_name(store._namespace, key)


async def name_holder(scratch: Scratch, name: str) -> int | None:
    """The connection id holding the named lock ``name``, or None."""
    holder: int | None = (await scratch.sql("SELECT IS_USED_LOCK(%s)", name))[0][0]
    return holder


async def waiting_on(scratch: Scratch, name: str) -> list[int]:
    """The connections blocked in GET_LOCK of ``name``."""
    rows = await scratch.sql(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE STATE = 'User lock' AND INFO LIKE %s",
        f"%{name}%",
    )
    return [row[0] for row in rows]


async def gone(scratch: Scratch, connection_id: int) -> bool:
    rows = await scratch.sql(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s", connection_id
    )
    return rows[0][0] == 0


def spawned(target: Any, *args: object) -> Any:
    process = multiprocessing.get_context("spawn").Process(target=target, args=args)
    process.start()
    return process


async def ended(process: Any) -> None:
    if process.is_alive():
        process.kill()
    await asyncio.to_thread(process.join, 30)


@pytest.fixture
async def holder_and_waiter(
    scratch: Scratch,
) -> AsyncIterator[tuple[MySQLLockStore, MySQLLockStore]]:
    """Two stores on one table, as two processes would have."""
    table = scratch.table("wakeups")
    holder = MySQLLockStore.from_url(scratch.url, table=table)
    waiter = MySQLLockStore.from_url(scratch.url, table=table)
    await holder.open()
    await waiter.open()
    yield holder, waiter
    await waiter.aclose()
    await holder.aclose()


async def test_a_waiter_in_another_process_is_woken_by_the_release_not_by_a_retry(
    scratch: Scratch, tmp_path: Path
) -> None:
    table, key = scratch.table("woken"), unique_key("woken")
    record = tmp_path / "waiter.txt"
    store = MySQLLockStore.from_url(scratch.url, table=table)
    async with Locks(store=store) as locks:
        lock = await locks.acquire(key)
        assert lock is not None
        name = wakeup_name_of(store, key)
        # its retries a minute apart: only the wake-up can hand it the key within its wait
        process = spawned(wait_woken_on_mysql, scratch.url, table, key, str(record))
        try:
            await until_real(lambda: waiting_on(scratch, name), within_s=30)
            await lock.release()
            await asyncio.to_thread(process.join, 30)
        finally:
            await ended(process)

    assert record.read_text().startswith("held ")


async def test_a_killed_holder_wakes_its_waiters_who_still_wait_for_its_ttl(
    scratch: Scratch, tmp_path: Path, holder_and_waiter: tuple[MySQLLockStore, MySQLLockStore]
) -> None:
    _, store = holder_and_waiter
    key, record = unique_key("killed"), tmp_path / "holder.txt"
    name = wakeup_name_of(store, key)
    process = spawned(hold_on_mysql, scratch.url, store._table_name, key, 4000, str(record))
    try:
        await until_real(lambda: record.exists() and record.read_text() != "", within_s=30)
        token = int(record.read_text().split()[1])
        await until_real(lambda: name_holder(scratch, name))
        heard: asyncio.Queue[str] = asyncio.Queue()
        async with store.follow_releases(heard.put_nowait) as follower, follower.following(key):
            await until_real(lambda: waiting_on(scratch, name))
            process.kill()
            # the holder's connection ended: GET_LOCK returns, and the follower tells
            assert await asyncio.wait_for(heard.get(), 10) == key
    finally:
        await ended(process)

    # the lease outlives its holder until its ttl: the wake-up is a hint, the table decides
    held = await store.read_lock(key)
    assert held is not None
    assert held.expires_in_ms is not None
    assert held.expires_in_ms > 0
    expires_at_ms = await store.store_time_ms() + held.expires_in_ms
    assert isinstance(await store.acquire(key, "too-soon", 60_000), NotAcquired)
    async with Locks(store=store) as locks:
        lock = await locks.acquire(key, wait="10s")
        taken_at_ms = await store.store_time_ms()
        assert lock is not None
        assert lock.fencing_token > token
        assert taken_at_ms >= expires_at_ms - 5  # the two clock reads are round trips apart
        await lock.release()


async def test_unfollowing_a_key_or_closing_the_store_closes_its_connections(
    scratch: Scratch, holder_and_waiter: tuple[MySQLLockStore, MySQLLockStore]
) -> None:
    holder, waiter = holder_and_waiter
    keys = [unique_key("closing"), unique_key("closing")]
    names = [wakeup_name_of(holder, key) for key in keys]
    for key, name in zip(keys, names, strict=True):
        assert isinstance(await holder.acquire(key, "holder", 60_000), Acquired)
        await until_real(lambda name=name: name_holder(scratch, name))

    async with waiter.follow_releases(lambda _key: None) as follower:
        async with follower.following(keys[0]):
            await until_real(lambda: waiting_on(scratch, names[0]))
            (first,) = await waiting_on(scratch, names[0])
        await until_real(lambda: gone(scratch, first))

        async with follower.following(keys[1]):
            await until_real(lambda: waiting_on(scratch, names[1]))
            (second,) = await waiting_on(scratch, names[1])
            # closed while a follower is blocked in GET_LOCK: that ends, and so does aclose
            await asyncio.wait_for(waiter.aclose(), 10)
            await until_real(lambda: gone(scratch, second))

    # the holder's names go with its connection, released or not
    beacon = await name_holder(scratch, names[0])
    assert beacon is not None
    await asyncio.wait_for(holder.aclose(), 10)
    await until_real(lambda: gone(scratch, beacon))
    assert [await name_holder(scratch, name) for name in names] == [None, None]
    await holder.open()
    await waiter.open()


async def test_keys_past_follower_connections_are_found_by_retrying(
    scratch: Scratch, caplog: pytest.LogCaptureFixture
) -> None:
    table = scratch.table("capped")
    holder = MySQLLockStore.from_url(scratch.url, table=table)
    capped = MySQLLockStore.from_url(scratch.url, table=table, follower_connections=1)
    first, second = unique_key("followed"), unique_key("past-cap")
    await holder.open()
    try:
        for key in (first, second):
            assert isinstance(await holder.acquire(key, "holder", 60_000), Acquired)
        async with Locks(store=capped) as locks:
            with caplog.at_level(logging.WARNING, logger="leaselock.stores.mysql"):
                waits = [
                    asyncio.create_task(locks.acquire(key, wait="20s")) for key in (first, second)
                ]
                await until_real(lambda: waiting_on(scratch, wakeup_name_of(capped, first)))
                await until_real(lambda: "raise follower_connections" in caplog.text)
            assert await waiting_on(scratch, wakeup_name_of(capped, second)) == []

            # past the cap, the engine's retries find the release
            assert await holder.release(second, "holder")
            got_second = await asyncio.wait_for(waits[1], 10)
            assert got_second is not None
            assert await holder.release(first, "holder")
            got_first = await asyncio.wait_for(waits[0], 10)
            assert got_first is not None
            await got_first.release()
            await got_second.release()
    finally:
        await holder.aclose()


async def test_a_killed_wakeup_connection_or_query_is_recovered_and_releases_still_heard(
    scratch: Scratch, holder_and_waiter: tuple[MySQLLockStore, MySQLLockStore]
) -> None:
    holder, waiter = holder_and_waiter
    key = unique_key("killed-connection")
    name = wakeup_name_of(holder, key)
    assert isinstance(await holder.acquire(key, "holder", 60_000), Acquired)
    await until_real(lambda: name_holder(scratch, name))
    beacon = await name_holder(scratch, name)
    heard: asyncio.Queue[str] = asyncio.Queue()

    async with waiter.follow_releases(heard.put_nowait) as follower, follower.following(key):
        await until_real(lambda: waiting_on(scratch, name))
        # the beacon's connection ends (as at a server restart): its names go, which wakes
        # the follower; the beacon notices, connects again and takes its names back
        await scratch.sql(f"KILL {beacon}")
        assert await asyncio.wait_for(heard.get(), 10) == key

        async def taken_again() -> bool:
            return await name_holder(scratch, name) not in (None, beacon)

        await until_real(taken_again, within_s=20)
        await until_real(lambda: waiting_on(scratch, name))

        # a follower's wait cut short, then its connection: it waits again each time
        (following,) = await waiting_on(scratch, name)
        await scratch.sql(f"KILL QUERY {following}")
        await until_real(lambda: waiting_on(scratch, name))
        (following,) = await waiting_on(scratch, name)
        await scratch.sql(f"KILL {following}")
        await until_real(lambda: gone(scratch, following))
        await until_real(lambda: waiting_on(scratch, name))

        while not heard.empty():  # a cut wait may have been told as a release
            heard.get_nowait()
        assert await holder.release(key, "holder")
        assert await asyncio.wait_for(heard.get(), 10) == key


async def test_a_release_of_a_key_whose_name_was_not_held_is_heard_at_the_next_read(
    holder_and_waiter: tuple[MySQLLockStore, MySQLLockStore],
) -> None:
    holder, waiter = holder_and_waiter
    key = unique_key("short-hold")
    heard: asyncio.Queue[str] = asyncio.Queue()
    async with waiter.follow_releases(heard.put_nowait) as follower, follower.following(key):
        # held and released at once: the beacon never takes the name
        assert isinstance(await holder.acquire(key, "holder", 60_000), Acquired)
        assert await holder.release(key, "holder")
        assert await asyncio.wait_for(heard.get(), 10) == key
        assert heard.empty()


class SlowReleases:
    """An executor whose release statements answer ``delay_ms`` late: a slow round trip."""

    def __init__(self, inner: Any, release_sql: str, delay_ms: int) -> None:
        self._inner = inner
        self._release_sql = release_sql
        self._delay_ms = delay_ms

    async def write(self, sql: str, args: Sequence[object]) -> Any:
        written = await self._inner.write(sql, args)
        if sql == self._release_sql:
            await wait_for_real(self._delay_ms)
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def test_a_key_released_at_once_takes_no_name_however_long_its_release_takes(
    holder_and_waiter: tuple[MySQLLockStore, MySQLLockStore],
) -> None:
    holder, waiter = holder_and_waiter
    key = unique_key("slow-release")
    assert holder._sql is not None
    holder._executor = SlowReleases(holder._executor, holder._sql.release, delay_ms=200)
    heard: asyncio.Queue[str] = asyncio.Queue()
    async with waiter.follow_releases(heard.put_nowait) as follower, follower.following(key):
        assert isinstance(await holder.acquire(key, "holder", 60_000), Acquired)
        # its release starts within the beacon's delay: the name is never taken, nor its
        # connection opened, while the release's answer is on its way (200 ms)
        assert await holder.release(key, "holder")
        assert holder._beacon is not None
        assert holder._beacon._connection is None
        assert await asyncio.wait_for(heard.get(), 10) == key


async def test_without_notify_releases_nothing_is_held_or_followed(scratch: Scratch) -> None:
    table, key = scratch.table("quiet"), unique_key("quiet")
    store = MySQLLockStore.from_url(scratch.url, table=table, notify_releases=False)
    async with Locks(store=store) as locks:
        lock = await locks.acquire(key)
        assert lock is not None
        async with store.follow_releases(lambda _key: None) as follower:
            assert isinstance(follower, FollowingNothing)
        assert store._beacon is None
        assert await name_holder(scratch, wakeup_name_of(store, key)) is None
        await lock.release()


async def test_an_application_pool_lends_the_wakeups_under_half_its_connections(
    scratch: Scratch,
) -> None:
    table = scratch.table("lent")
    tiny = MySQLLockStore(await make_pool(scratch.url, maxsize=1), table=table, own_pool=True)
    small = MySQLLockStore(await make_pool(scratch.url, maxsize=6), table=table, own_pool=True)
    await tiny.open()
    await small.open()
    try:
        # a pool of one keeps it for the statements: no beacon, no follower
        assert tiny._beacon is None
        assert tiny._lines is not None
        assert tiny._lines.slots == 0
        # of six: the beacon's and two followers'
        assert small._beacon is not None
        assert small._lines is not None
        assert small._lines.slots == 2
        key = unique_key("lent")
        assert isinstance(await tiny.acquire(key, "owner", 60_000), Acquired)
        assert await tiny.release(key, "owner")
    finally:
        await tiny.aclose()
        await small.aclose()


def test_a_wakeup_name_fits_64_characters_and_tells_tables_apart() -> None:
    long_key = "\u732b" * 500
    names = {wakeup_name("test.a", long_key), wakeup_name("test.b", long_key)}
    assert len(names) == 2
    assert all(len(name) == 64 and name.startswith("leaselock:") for name in names)


# --- errors --------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_an_unreachable_server_fails_the_start_with_a_lock_store_error_naming_the_fix() -> (
    None
):
    store = MySQLLockStore.from_url(f"mysql://root@127.0.0.1:{closed_port()}/test")

    with pytest.raises(LockStoreError, match=r"cannot start: could not connect .*host and port"):
        async with Locks(store=store):
            pass


async def test_an_unreachable_engine_fails_the_first_call_with_a_lock_store_error() -> None:
    from sqlalchemy.ext.asyncio import create_async_engine  # noqa: PLC0415

    engine = create_async_engine(f"mysql+asyncmy://root@127.0.0.1:{closed_port()}/test")
    store = MySQLLockStore(engine, own_pool=True)

    with pytest.raises(LockStoreError, match=r"cannot start: could not connect"):
        await store.acquire(unique_key("nowhere"), "owner", 60_000)


async def test_an_unknown_database_is_named_in_the_error(scratch: Scratch) -> None:
    url = scratch.url.rpartition("/")[0] + f"/no_such_db_{uuid.uuid4().hex[:8]}"
    store = MySQLLockStore.from_url(url)

    with pytest.raises(LockStoreError, match=r"the database does not exist .*CREATE DATABASE"):
        await store.open()


# --- arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["", "1table", "locks;drop", "a.b.c", "t-1", "x" * 65, "x" * 60, "db.x" + "x" * 59, 5]
)
def test_a_bad_table_name_is_refused(name: object) -> None:
    with pytest.raises(LocksConfigurationError, match=r"is not a name MySQLLockStore accepts"):
        MySQLLockStore.from_url("mysql://localhost/db", table=name)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        ("postgresql://localhost/db", "mysql://user:password@host:3306/database"),
        ("mysql+aiomysql://localhost/db", "mysql://user:password@host:3306/database"),
        ("mysql://localhost/db?ssl=true", "build an asyncmy pool"),
        ("mysql://localhost:99999/db", "not a number from 1 to 65535"),
        (b"mysql://localhost/db", "is not a str"),
    ],
)
def test_from_url_refuses_other_urls_naming_what_works(url: object, hint: str) -> None:
    with pytest.raises(LocksConfigurationError, match=hint):
        MySQLLockStore.from_url(url)  # type: ignore[arg-type]


@pytest.mark.parametrize("scheme", ["mysql", "mariadb", "mysql+asyncmy"])
async def test_from_url_accepts_the_mysql_schemes(scratch: Scratch, scheme: str) -> None:
    url = scheme + "://" + scratch.url.partition("://")[2]
    store = MySQLLockStore.from_url(url, table=scratch.table("scheme"))
    try:
        assert isinstance(await store.acquire(unique_key(scheme), "owner", 60_000), Acquired)
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_size": 3, "max_size": 2}, "0 <= min_size <= max_size"),
        ({"max_size": 0}, "max_size >= 1"),
        ({"create_schema": "yes"}, "create_schema='yes'; pass True or False"),
        ({"connect_timeout": -1}, "connect_timeout"),
        ({"notify_releases": "no"}, "notify_releases='no'; pass True or False"),
        ({"follower_connections": 0}, "follower_connections=0; pass a whole number of at least 1"),
        ({"follower_connections": True}, "follower_connections=True; pass a whole number"),
        ({"follower_connections": 2.5}, "To follow no key, pass notify_releases=False"),
    ],
)
def test_bad_pool_options_are_refused_naming_what_works(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(LocksConfigurationError, match=message):
        MySQLLockStore.from_url("mysql://localhost/db", **options)


async def test_bad_wakeup_options_over_a_pool_are_refused_naming_what_works(
    scratch: Scratch,
) -> None:
    pool = await make_pool(scratch.url)
    try:
        with pytest.raises(LocksConfigurationError, match=r"follower_connections=-1; pass"):
            MySQLLockStore(pool, follower_connections=-1)
        with pytest.raises(LocksConfigurationError, match=r"notify_releases=1; pass True"):
            MySQLLockStore(pool, notify_releases=1)  # type: ignore[arg-type]
    finally:
        pool.close()
        await pool.wait_closed()


def test_something_that_is_not_a_pool_is_refused_naming_what_works() -> None:
    with pytest.raises(LocksConfigurationError, match=r"use MySQLLockStore.from_url\(url\)"):
        MySQLLockStore("mysql://localhost/db")  # type: ignore[arg-type]
    with pytest.raises(LocksConfigurationError, match=r"pass an asyncmy Pool"):
        MySQLLockStore(object())  # type: ignore[arg-type]


def test_an_engine_of_another_database_is_refused_naming_the_url_to_use() -> None:
    from sqlalchemy.ext.asyncio import create_async_engine  # noqa: PLC0415

    engine = create_async_engine("postgresql+asyncpg://localhost/db")
    with pytest.raises(LocksConfigurationError, match=r"mysql\+asyncmy://"):
        MySQLLockStore(engine)


def test_a_missing_asyncmy_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "asyncmy", None)

    with pytest.raises(LocksConfigurationError, match=r"pip install 'leaselock\[mysql\]'"):
        MySQLLockStore.from_url("mysql://localhost/db")


async def test_a_key_longer_than_the_column_is_refused_not_cut_short(
    store: MySQLLockStore,
) -> None:
    with pytest.raises(LocksConfigurationError, match=r"at most 2000 .*shorter key"):
        await store.acquire("\u732b" * 700, "owner", 60_000)


def test_from_url_repr_names_the_server_and_table_but_never_the_password() -> None:
    store = MySQLLockStore.from_url("mysql://app:s3cret@db.internal:3307/locks", table="t")

    assert repr(store) == "MySQLLockStore(mysql://app@db.internal:3307/locks, table='t')"
