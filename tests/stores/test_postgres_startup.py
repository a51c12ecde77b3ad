"""PostgresLockStore at start: every way it cannot start is a LockStoreError naming the fix."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import asyncpg
import pytest

from leaselock import LockError, Locks, LocksConfigurationError, LockStoreError
from leaselock.stores.postgres import PostgresLockStore
from servers import ServerUnavailable, password_postgres_server

pytest.importorskip("asyncpg")

pytestmark = pytest.mark.postgres

PASSWORD = "s3cret-p@ss"  # noqa: S105 -- a throwaway server's, made up here


@pytest.fixture(scope="module")
def password_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A throwaway server that checks passwords (the test servers may trust every login)."""
    try:
        with password_postgres_server(PASSWORD.replace("@", "")) as url:
            yield url
    except ServerUnavailable as unavailable:
        if request.config.getoption("--require-servers"):
            pytest.fail(f"--require-servers: no password-checking PostgreSQL: {unavailable}")
        pytest.skip(f"no password-checking PostgreSQL: {unavailable}")


def with_part(url: str, **parts: str) -> str:
    return urlsplit(url)._replace(**parts).geturl()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def failing_urls(postgres_url: str, password_url: str) -> dict[str, tuple[str, str]]:
    """URL and (what happened, the fix) of each way a start fails."""
    server = urlsplit(postgres_url)
    guarded = urlsplit(password_url)
    return {
        "server down": (
            with_part(postgres_url, netloc=f"{server.username}@127.0.0.1:{closed_port()}"),
            r"could not connect .*check that the server runs, and that the host and port",
        ),
        "unknown database": (
            with_part(postgres_url, path="/no_such_database"),
            r"the database does not exist .*createdb",
        ),
        "unknown role": (
            with_part(postgres_url, netloc=f"no_such_role@{server.hostname}:{server.port}"),
            r"the server refused the role .*CREATE ROLE",
        ),
        "wrong password": (
            with_part(password_url, netloc=f"postgres:wrong@{guarded.hostname}:{guarded.port}"),
            r"password authentication failed .*fix the password in the URL",
        ),
        "unknown host": (
            with_part(postgres_url, netloc="postgres@no-such-host.invalid:5432"),
            r"could not connect .*host and port",
        ),
        "TLS refused": (
            with_part(postgres_url, query="sslmode=require"),
            r"does not speak TLS .*sslmode=prefer",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "server down",
        "unknown database",
        "unknown role",
        "wrong password",
        "unknown host",
        "TLS refused",
    ],
)
async def test_a_store_that_cannot_start_says_what_and_how_to_fix_it(
    case: str, postgres_url: str, password_url: str
) -> None:
    url, expected = failing_urls(postgres_url, password_url)[case]
    store = PostgresLockStore.from_url(url, command_timeout="5s")
    with pytest.raises(LockStoreError, match=expected) as failure:
        async with Locks(store=store):
            pass
    assert isinstance(failure.value, LockError), "except LockError must catch it"
    message = str(failure.value)
    assert message.startswith("PostgresLockStore(postgresql://")
    assert "wrong" not in message.split("(", 1)[1].split(")", maxsplit=1)[0], (
        "the password must not show"
    )


async def test_the_right_password_starts(password_url: str) -> None:
    async with Locks(store=PostgresLockStore.from_url(password_url)) as locks:
        assert await locks.acquire("k") is not None


async def test_an_application_engine_that_cannot_connect_says_so_too(postgres_url: str) -> None:
    sqlalchemy_asyncio = pytest.importorskip("sqlalchemy.ext.asyncio")
    url = with_part(postgres_url, path="/no_such_database")
    engine = sqlalchemy_asyncio.create_async_engine(
        url.replace("postgresql://", "postgresql+asyncpg://")
    )
    try:
        with pytest.raises(LockStoreError, match=r"the database does not exist .*createdb"):
            async with Locks(store=PostgresLockStore(engine)):
                pass
    finally:
        await engine.dispose()


def test_an_unknown_sslmode_is_refused_when_the_store_is_made() -> None:
    with pytest.raises(LocksConfigurationError, match=r"sslmode='bogus'.*verify-full"):
        PostgresLockStore.from_url("postgresql://postgres@localhost/db?sslmode=bogus")


async def test_without_create_schema_a_missing_table_fails_at_start(postgres_url: str) -> None:
    store = PostgresLockStore.from_url(
        postgres_url,
        table="leaselock_never_made",
        sequence="leaselock_never_made_seq",
        create_schema=False,
    )
    with pytest.raises(
        LockStoreError, match=r"cannot start: .* do not exist, and create_schema=False"
    ):
        async with Locks(store=store):
            pass


async def test_without_create_schema_the_error_names_exactly_what_is_missing(
    postgres_url: str,
) -> None:
    # what an Alembic autogenerate from lock_tables() makes: the tables, not the sequence
    name = f"leaselock_{uuid.uuid4().hex[:8]}"
    names = {"table": name, "sequence": f"{name}_seq"}
    made = PostgresLockStore.from_url(postgres_url, **names)
    await made.create_schema()
    await made.aclose()
    connection = await asyncpg.connect(postgres_url)
    try:
        await connection.execute(f"DROP SEQUENCE {name}_seq")
        store = PostgresLockStore.from_url(postgres_url, **names, create_schema=False)
        with pytest.raises(LockStoreError) as refused:
            async with Locks(store=store):
                pass
        said = str(refused.value)
        assert f'cannot start: the sequence "{name}_seq" does not exist, and create_schema' in said
        assert f'the table "{name}"' not in said, "the tables that exist are not named"
    finally:
        for table in (f"{name}_line", f"{name}_jobs", f"{name}_runs", name):
            await connection.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
        await connection.close()
