"""The fenced shop of the ORM fencing tests, and the job each process of its story runs.

A shop's products (fenced with a token column) and its notes (fenced by the fences table alone),
named with a suffix so runs can share a server. :func:`reconcile` is one OS process of the
user's story: it takes the key, fences its session, changes the rows, says ``ready``, and
commits when the test writes ``commit`` on its stdin (the test pauses it in between).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from leaselock import Locks, StaleFencingTokenError
from leaselock.integrations.sqlalchemy import fenced, fenced_table, unfenced
from leaselock.stores import SQLiteLockStore
from process_worker import answer, input_line

DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "asyncpg": "postgresql+asyncpg",
    "psycopg": "postgresql+psycopg",
    "asyncmy": "mysql+asyncmy",
}


@dataclass(frozen=True)
class Shop:
    """The fenced tables of one test, and their ORM classes."""

    metadata: sa.MetaData
    # a product (id, in_stock, fencing_token: the token its last write carried), a note (id,
    # body): classes made per test, so typed loosely
    product: type[Any]
    note: type[Any]
    fences: str


def shop(suffix: str) -> Shop:
    """The shop's tables named with ``suffix``, fenced, in a metadata of their own."""

    class Model(DeclarativeBase):
        pass

    class FencedProduct(Model):
        __tablename__ = f"products_{suffix}"
        id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
        in_stock: Mapped[int] = mapped_column()
        fencing_token: Mapped[int] = mapped_column(sa.BigInteger(), server_default="0")

    class FencedNote(Model):
        __tablename__ = f"notes_{suffix}"
        id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
        body: Mapped[str] = mapped_column(sa.String(200))

    fences = f"fences_{suffix}"
    fenced_table(FencedProduct, token_column="fencing_token", fences=fences)  # noqa: S106 -- a column
    fenced_table(FencedNote, fences=fences)
    return Shop(Model.metadata, FencedProduct, FencedNote, fences)


def database_url(driver: str, server_url: str) -> str:
    """``server_url`` (``postgresql://...``, ``mysql://...``, a SQLite path) for ``driver``."""
    if driver == "sqlite":
        return f"sqlite+aiosqlite:///{server_url}"
    return DRIVERS[driver] + "://" + server_url.split("://", 1)[1]


@asynccontextmanager
async def opened_shop(url: str) -> AsyncIterator[tuple[Shop, AsyncEngine]]:
    """A new shop on ``url`` with one product (id 1, 10 in stock); dropped at the end."""
    made = shop(uuid.uuid4().hex[:8])
    engine = create_async_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(made.metadata.create_all)
        async with AsyncSession(engine) as session, unfenced(session):
            session.add(made.product(id=1, in_stock=10))
            await session.commit()
        yield made, engine
    finally:
        async with engine.begin() as connection:
            await connection.run_sync(made.metadata.drop_all)
            if engine.dialect.name == "postgresql":
                await connection.exec_driver_sql(
                    f"DROP FUNCTION IF EXISTS {made.fences}_check(), {made.fences}_stamp()"
                )
            elif engine.dialect.name == "mysql":
                await connection.exec_driver_sql(f"DROP PROCEDURE IF EXISTS {made.fences}_check")
        await engine.dispose()


def reconcile(url: str, suffix: str, locks_file: str, key: str, count: int) -> None:
    """Count ``count`` into product 1 and leave a note, under ``key``: one process's job.

    Answers ``held TOKEN``, ``ready`` (the rows changed, not yet flushed: the test may pause
    it here), then, once ``commit`` arrives on stdin, ``committed`` or ``stale TOKEN NEWER``.
    """
    asyncio.run(_reconcile(url, suffix, locks_file, key, count))


async def _reconcile(url: str, suffix: str, locks_file: str, key: str, count: int) -> None:
    made = shop(suffix)
    engine = create_async_engine(url)
    # ttl 1 s: the paused process's lease ends a second after its last renewal
    async with (
        Locks(store=SQLiteLockStore(locks_file), ttl="1s") as locks,
        locks.hold(key, wait="60s") as lock,
    ):
        answer(f"held {lock.fencing_token}")
        try:
            async with AsyncSession(engine, autoflush=False) as session, fenced(session, lock):
                product = await session.get(made.product, 1)
                assert product is not None
                product.in_stock = count
                session.add(made.note(id=count, body=f"counted {count}"))
                answer("ready")
                assert await asyncio.to_thread(input_line) == "commit"
                await session.commit()
            answer("committed")
        except StaleFencingTokenError as stale:
            answer(f"stale {stale.fencing_token} {stale.newer_token}")
    await engine.dispose()
