"""Every `leaselock` command on a store leaselock never used: one line, exit 2, nothing made.

In subprocesses, as an operator runs them. PostgreSQL gets a schema of its own per test (the
URL's ``search_path``) and MySQL a database of its own, so runs can share a server. Redis, a
Redis Cluster and etcd have no tables: there a reading command answers, and writes no key.
"""

from __future__ import annotations

import asyncio
import base64
import re
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

import leaselock
from helpers import leaselock_command, unique_key
from leaselock import Locks
from leaselock.stores import store_from_url

# every command that opens the store, each as an operator would type it
EVERY_STORE_COMMAND = [
    pytest.param(["locks"], id="locks"),
    pytest.param(["jobs"], id="jobs"),
    pytest.param(["watch"], id="watch"),
    pytest.param(["break", "orders:1"], id="break-asking"),
    pytest.param(["break", "orders:1", "--yes"], id="break"),
    pytest.param(["pause", "reports:*"], id="pause"),
    pytest.param(["resume", "reports:*"], id="resume"),
    pytest.param(["run", "feed:import", "--job", "steered_jobs:import_feed"], id="run"),
]


async def command(*arguments: str) -> tuple[int, str, str]:
    done = await asyncio.to_thread(leaselock_command, *arguments)
    return done.returncode, done.stdout, done.stderr


def assert_one_line_naming(error: str, *names: str) -> None:
    assert error.count("\n") == 1, error
    assert "Traceback" not in error
    assert re.search(r"do(es)? not exist", error)
    for name in names:
        assert name in error


# --- PostgreSQL and MySQL: an empty schema, left empty -----------------------------------------


@pytest.fixture
async def empty_postgres_schema(postgres_url: str) -> AsyncIterator[tuple[str, str]]:
    """A URL whose search_path is a new, empty schema; and that schema's name."""
    asyncpg = pytest.importorskip("asyncpg")
    schema = f"leaselock_cli_{uuid.uuid4().hex[:10]}"
    connection = await asyncpg.connect(postgres_url)
    try:
        await connection.execute(f"CREATE SCHEMA {schema}")
        separator = "&" if "?" in postgres_url else "?"
        yield f"{postgres_url}{separator}search_path={schema}", schema
    finally:
        await connection.execute(f"DROP SCHEMA {schema} CASCADE")
        await connection.close()


@pytest.mark.postgres
@pytest.mark.parametrize("arguments", EVERY_STORE_COMMAND)
async def test_a_command_on_a_postgres_schema_without_tables_names_them_and_creates_none(
    arguments: list[str], empty_postgres_schema: tuple[str, str], postgres_url: str
):
    import asyncpg  # noqa: PLC0415 -- the fixture skipped without it

    url, schema = empty_postgres_schema

    code, output, error = await command(*arguments, "--url", url)

    assert (code, output) == (2, "")
    assert_one_line_naming(error, '"leaselock_locks"')
    connection = await asyncpg.connect(postgres_url)
    try:
        made = await connection.fetch(
            "SELECT relname FROM pg_class WHERE relnamespace = $1::regnamespace", schema
        )
    finally:
        await connection.close()
    assert made == []


@pytest.fixture
async def empty_mysql_database(mysql_url: str) -> AsyncIterator[tuple[str, str]]:
    """The URL of a new, empty database on the server; and its name."""
    pytest.importorskip("asyncmy")
    database = f"leaselock_cli_{uuid.uuid4().hex[:10]}"
    await mysql_sql(mysql_url, f"CREATE DATABASE `{database}`")
    try:
        parts = urlsplit(mysql_url)
        yield urlunsplit(parts._replace(path=f"/{database}")), database
    finally:
        await mysql_sql(mysql_url, f"DROP DATABASE `{database}`")


async def mysql_sql(url: str, statement: str, *args: object) -> list[tuple[object, ...]]:
    """Run one statement on a connection of its own; return its rows."""
    import asyncmy  # noqa: PLC0415 -- optional, as the store's driver

    from leaselock.stores.mysql._arguments import connect_args  # noqa: PLC0415

    connection = await asyncmy.connect(**connect_args(url), autocommit=True)
    try:
        async with connection.cursor() as cursor:
            await cursor.execute(statement, args)
            return list(await cursor.fetchall())
    finally:
        connection.close()


@pytest.mark.mysql
@pytest.mark.parametrize("arguments", EVERY_STORE_COMMAND)
async def test_a_command_on_a_mysql_database_without_tables_names_them_and_creates_none(
    arguments: list[str], empty_mysql_database: tuple[str, str], mysql_url: str
):
    url, database = empty_mysql_database

    code, output, error = await command(*arguments, "--url", url)

    assert (code, output) == (2, "")
    assert_one_line_naming(
        error, "`leaselock_locks`", "`leaselock_locks_runs`", "`leaselock_locks_jobs`"
    )
    assert await mysql_tables(mysql_url, database) == []


async def mysql_tables(url: str, database: str) -> list[str]:
    """The tables of ``database``, by name."""
    rows = await mysql_sql(
        url,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
        "ORDER BY table_name",
        database,
    )
    return [str(row[0]) for row in rows]


@pytest.mark.mysql
@pytest.mark.parametrize("arguments", EVERY_STORE_COMMAND)
async def test_a_command_on_a_mysql_schema_without_the_jobs_table_names_it_and_creates_it_not(
    arguments: list[str], empty_mysql_database: tuple[str, str], mysql_url: str
):
    # the schema of a leaselock before job control on MySQL: the lock and run records tables
    url, database = empty_mysql_database
    store = store_from_url(url)
    async with Locks(store=store, instance="shop-3002"):
        pass
    await mysql_sql(mysql_url, f"DROP TABLE `{database}`.`leaselock_locks_jobs`")

    code, output, error = await command(*arguments, "--url", url)

    assert (code, output) == (2, "")
    assert_one_line_naming(error, "`leaselock_locks_jobs` does not exist")
    assert "`leaselock_locks`," not in error
    assert "`leaselock_locks_runs`" not in error
    assert "docs/stores/alembic_leaselock_jobs_mysql.py" in error
    assert await mysql_tables(mysql_url, database) == ["leaselock_locks", "leaselock_locks_runs"]


# --- Redis and etcd: no tables, and a read writes no key ----------------------------------------


async def redis_keys(url: str, prefix: str, *, cluster: bool = False) -> set[str]:
    import redis.asyncio  # noqa: PLC0415 -- optional, as the store's driver
    from redis.asyncio.cluster import RedisCluster  # noqa: PLC0415

    # a cluster client scans every master
    client = RedisCluster.from_url(url) if cluster else redis.asyncio.Redis.from_url(url)
    try:
        return {name.decode() async for name in client.scan_iter(match=f"{prefix}*")}
    finally:
        await client.aclose()


async def etcd_keys(url: str, prefix: str) -> set[str]:
    start = prefix.encode()
    end = start[:-1] + bytes([start[-1] + 1])
    async with httpx.AsyncClient(trust_env=False) as client:
        answer = await client.post(
            f"{url}/v3/kv/range",
            json={
                "key": base64.b64encode(start).decode(),
                "range_end": base64.b64encode(end).decode(),
                "keys_only": True,
            },
        )
    answer.raise_for_status()
    return {base64.b64decode(kv["key"]).decode() for kv in answer.json().get("kvs", [])}


class KeyValueStore:
    """A Redis, Redis Cluster or etcd server under a fresh prefix: the command's URL, its keys."""

    def __init__(self, url: str, prefix: str, keys: Callable[[], Awaitable[set[str]]]) -> None:
        self.url = url
        self.prefix = prefix
        self.keys = keys
        self.arguments = ["--url", url, "--redis-prefix", prefix]


@pytest.fixture(
    params=[
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis_cluster", marks=pytest.mark.redis_cluster),
        pytest.param("etcd", marks=pytest.mark.etcd),
    ]
)
def key_value_store(request: pytest.FixtureRequest) -> KeyValueStore:
    url: str = request.getfixturevalue(f"{request.param}_url")
    run_id = uuid.uuid4().hex[:10]
    if request.param == "redis":
        prefix = f"cli-{run_id}:"
        return KeyValueStore(url, prefix, lambda: redis_keys(url, prefix))
    if request.param == "redis_cluster":
        prefix = f"cli-{run_id}:"
        return KeyValueStore(
            url.replace("redis://", "redis+cluster://", 1),
            prefix,
            lambda: redis_keys(url, prefix, cluster=True),
        )
    prefix = f"cli-{run_id}/"
    return KeyValueStore(
        url.replace("http://", "etcd://", 1), prefix, lambda: etcd_keys(url, prefix)
    )


async def watch_once(*arguments: str) -> int:
    """Run `leaselock watch` until it has read the store once, then stop it with Ctrl-C."""
    watcher = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "leaselock",
        "watch",
        *arguments,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert watcher.stdout is not None
    try:
        first = await asyncio.wait_for(watcher.stdout.readline(), 20)
        assert first.startswith(b"Watching"), first
    finally:
        watcher.send_signal(signal.SIGINT)
    return await asyncio.wait_for(watcher.wait(), 20)


async def test_reading_commands_on_a_fresh_prefix_answer_and_write_no_key(
    key_value_store: KeyValueStore,
):
    locks_code, listed, _ = await command("locks", *key_value_store.arguments)
    jobs_code, jobs, _ = await command("jobs", *key_value_store.arguments)
    watch_code = await watch_once(*key_value_store.arguments)

    assert (locks_code, jobs_code, watch_code) == (0, 0, 0)
    assert listed == "No locks.\n"
    assert jobs == "No job has run records in this store yet.\n"
    assert await key_value_store.keys() == set()


async def test_reading_commands_on_a_used_prefix_write_no_key(key_value_store: KeyValueStore):
    key = unique_key("feed:poll")

    @leaselock.without_overlapping(key=key)
    async def poll() -> None:
        return None

    store = store_from_url(key_value_store.url, prefix=key_value_store.prefix)
    async with Locks(store=store, instance="shop-3002", ttl="30s") as holder:
        holder.register(poll)
        await poll()
        assert await holder.acquire(f"{key}:held") is not None
        before = await key_value_store.keys()

        locks_code, _, _ = await command("locks", *key_value_store.arguments)
        jobs_code, _, _ = await command("jobs", *key_value_store.arguments)
        watch_code = await watch_once(*key_value_store.arguments)

        assert (locks_code, jobs_code, watch_code) == (0, 0, 0)
        assert before
        assert await key_value_store.keys() == before
