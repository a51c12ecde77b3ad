"""The shop's database: a SQLite file by default, PostgreSQL with ``DATABASE_URL``.

Several processes write to one SQLite file (the demo's three instances, and leaselock's locks in
the same file), so every transaction starts with ``BEGIN IMMEDIATE``: it waits for the file's
write lock up front, where a deferred transaction that read first could fail at once with
"database is locked" when it tries to write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from alembic import command
from alembic.config import Config
from sqlalchemy import URL, Connection, event, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

ALEMBIC_INI: Final = Path(__file__).resolve().parent.parent / "alembic.ini"

ASYNC_DRIVERS: Final = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}
SCHEME_ALIASES: Final = {
    "sqlite": "sqlite",
    "sqlite+aiosqlite": "sqlite",
    "postgres": "postgresql",
    "postgresql": "postgresql",
    "postgresql+asyncpg": "postgresql",
}

# how long a SQLite transaction waits for another process's write lock before it fails
SQLITE_BUSY_TIMEOUT_S: Final = 5.0


def async_database_url(url: str) -> URL:
    """Return ``url`` with the async driver the shop uses (aiosqlite, asyncpg).

    Raises:
        ValueError: not a SQLite file or PostgreSQL URL; the message shows both forms.
    """
    forms = "sqlite:///path/to/shop.db or postgresql://user:password@host:5432/database"
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ValueError(f"not a database URL; use {forms}") from None
    family = SCHEME_ALIASES.get(parsed.drivername)
    if family is None:
        raise ValueError(f"the shop runs on SQLite or PostgreSQL, not {parsed.drivername}; {forms}")
    if family == "sqlite" and parsed.database in {None, "", ":memory:"}:
        raise ValueError(
            "an in-memory SQLite database is private to one connection, so instances would "
            "not share orders or locks; name a file: sqlite:///shop.db"
        )
    return parsed.set(drivername=ASYNC_DRIVERS[family])


def sqlite_file(url: str) -> Path | None:
    """Return the file of a SQLite database URL, or ``None`` for PostgreSQL."""
    parsed = async_database_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database is None:
        return None
    return Path(parsed.database).resolve()


def create_engine(url: str) -> AsyncEngine:
    """Return an async engine on ``url`` (see :func:`async_database_url`)."""
    parsed = async_database_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_async_engine(parsed)
    engine = create_async_engine(parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
    event.listen(engine.sync_engine, "connect", _leave_transactions_to_sqlalchemy)
    event.listen(engine.sync_engine, "begin", _begin_immediate)
    return engine


def _leave_transactions_to_sqlalchemy(dbapi_connection: Any, _record: object) -> None:  # noqa: ANN401 -- the driver's connection, untyped
    # the driver's own implicit BEGIN would be deferred; _begin_immediate emits the one we want
    dbapi_connection.isolation_level = None


def _begin_immediate(connection: Connection) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")


async def migrate(engine: AsyncEngine) -> None:
    """Bring the database to the latest Alembic revision (``alembic upgrade head``)."""
    async with engine.begin() as connection:
        await connection.run_sync(_upgrade_to_head)


def _upgrade_to_head(connection: Connection) -> None:
    config = Config(str(ALEMBIC_INI))
    # migrations/env.py runs on this connection instead of opening its own
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def not_the_sqlite_lock_stores(
    _item: object, name: str | None, type_: str, _reflected: bool, _compare_to: object
) -> bool:
    """Alembic's ``include_object`` on SQLite: leave out leaselock's tables.

    SQLiteLockStore makes its own tables in the shop's file when it opens it; the lock table
    in the shop's metadata (``lock_tables``) is PostgreSQL's.
    """
    return not (type_ == "table" and name is not None and name.startswith("leaselock_locks"))
