"""Fenced tables: an ORM commit under fenced(session, lock), against the same commit unfenced.

    .venv/bin/python benchmarks/bench_orm_fencing.py [--commits N] [--databases sqlite,asyncpg,...]

The commit is a small job's: a new AsyncSession reads a product by primary key, changes its
stock, adds a note row, and commits. The fenced run does it in ``fenced(session, lock)`` on
tables marked with ``fenced_table()`` (the product with a token column, the note by the fences
table alone), under a held lock; the unfenced run on the same tables left unmarked, in the same
process, in alternating rounds, so both see the same machine (each on an engine of its own: on
MySQL the first unfenced transaction after a fenced one on a connection clears the fence's
variables). It prints the median and p90 time of a commit, what fencing adds, and the statements
each transaction sends.

URLs: LEASELOCK_TEST_POSTGRES_URL (else postgresql://postgres@127.0.0.1:5432/test) and
LEASELOCK_TEST_MYSQL_URL (else mysql://root@127.0.0.1:3306/test); SQLite on a file in the
temporary directory. A database that cannot be reached is skipped, saying so.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from leaselock import Lock, Locks
from leaselock.integrations.sqlalchemy import fenced, fenced_table, unfenced

URLS = {
    "sqlite": "",
    "asyncpg": os.environ.get(
        "LEASELOCK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
    ),
    "psycopg": os.environ.get(
        "LEASELOCK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
    ),
    "asyncmy": os.environ.get("LEASELOCK_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
}
SCHEMES = {
    "sqlite": "sqlite+aiosqlite",
    "asyncpg": "postgresql+asyncpg",
    "psycopg": "postgresql+psycopg",
    "asyncmy": "mysql+asyncmy",
}
ROUNDS = 10


# the metadata, the product class, the note class
Shop = tuple[sa.MetaData, type[Any], type[Any]]


def shop(suffix: str, *, fence: bool) -> Shop:
    """A product and a note table named with ``suffix``; fenced if ``fence``."""

    class Model(DeclarativeBase):
        pass

    class Product(Model):
        __tablename__ = f"bench_products_{suffix}"
        id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
        in_stock: Mapped[int] = mapped_column()
        fencing_token: Mapped[int] = mapped_column(sa.BigInteger(), server_default="0")

    class Note(Model):
        __tablename__ = f"bench_notes_{suffix}"
        id: Mapped[int] = mapped_column(primary_key=True)
        body: Mapped[str] = mapped_column(sa.String(200))

    if fence:
        fenced_table(Product, token_column="fencing_token", fences=f"bench_fences_{suffix}")  # noqa: S106 -- a column's name
        fenced_table(Note, fences=f"bench_fences_{suffix}")
    return Model.metadata, Product, Note


def url_of(driver: str, directory: Path) -> str:
    if driver == "sqlite":
        return f"sqlite+aiosqlite:///{directory / 'shop.db'}"
    return SCHEMES[driver] + "://" + URLS[driver].split("://", 1)[1]


def counted(engine: AsyncEngine) -> list[int]:
    """A one-item list that counts the statements ``engine`` sends."""
    sent = [0]

    def count(*_: object) -> None:
        sent[0] += 1

    sa.event.listen(engine.sync_engine, "before_cursor_execute", count)
    return sent


@asynccontextmanager
async def shops(
    driver: str, directory: Path
) -> AsyncIterator[tuple[AsyncEngine, AsyncEngine, Shop, Shop]]:
    """The fenced shop and its unfenced twin on ``driver``, each with product 1; dropped after."""
    suffix = uuid.uuid4().hex[:8]
    fenced_shop, plain_shop = shop(f"f{suffix}", fence=True), shop(f"p{suffix}", fence=False)
    engine = create_async_engine(url_of(driver, directory))
    try:
        async with engine.begin() as connection:
            await connection.run_sync(fenced_shop[0].create_all)
            await connection.run_sync(plain_shop[0].create_all)
        async with AsyncSession(engine) as session, unfenced(session):
            session.add(fenced_shop[1](id=1, in_stock=0))
            session.add(plain_shop[1](id=1, in_stock=0))
            await session.commit()
        plain_engine = create_async_engine(url_of(driver, directory))
        try:
            yield engine, plain_engine, fenced_shop, plain_shop
        finally:
            await plain_engine.dispose()
    finally:
        async with engine.begin() as connection:
            await connection.run_sync(fenced_shop[0].drop_all)
            await connection.run_sync(plain_shop[0].drop_all)
            fences = f"bench_fences_f{suffix}"
            if engine.dialect.name == "postgresql":
                await connection.exec_driver_sql(
                    f"DROP FUNCTION IF EXISTS {fences}_check(), {fences}_stamp()"
                )
            elif engine.dialect.name == "mysql":
                await connection.exec_driver_sql(f"DROP PROCEDURE IF EXISTS {fences}_check")
        await engine.dispose()


async def bench(driver: str, commits: int, directory: Path, lock: Lock) -> None:
    """Print the fenced and the unfenced commit's times on ``driver``."""
    try:
        async with shops(driver, directory) as (engine, plain_engine, fenced_shop, plain_shop):

            def job(
                engine: AsyncEngine, tables: Shop, *, fence: bool
            ) -> Callable[[int], Awaitable[int]]:
                sent = counted(engine)

                async def commit(count: int) -> int:
                    before = sent[0]
                    async with AsyncSession(engine) as session:
                        if fence:
                            async with fenced(session, lock):
                                await write(session, tables, count)
                        else:
                            await write(session, tables, count)
                    return sent[0] - before

                return commit

            runs = {
                "unfenced": job(plain_engine, plain_shop, fence=False),
                "fenced": job(engine, fenced_shop, fence=True),
            }
            times: dict[str, list[float]] = {name: [] for name in runs}
            # warm up (connections, compiled statements), and count a commit's statements
            statements = {
                name: [await run(count) for count in range(20)][-1] for name, run in runs.items()
            }
            for _ in range(ROUNDS):
                for name, run in runs.items():
                    for count in range(max(1, commits // ROUNDS)):
                        started = time.perf_counter()
                        await run(count)
                        times[name].append(time.perf_counter() - started)
    except (OSError, sa.exc.DBAPIError) as unreachable:
        print(f"{driver:<8} skipped: {type(unreachable).__name__}: {unreachable}")
        return
    plain, fenced_ms = (_ms(times[name]) for name in ("unfenced", "fenced"))
    print(
        f"{driver:<8} unfenced {plain[0]:6.2f} ms (p90 {plain[1]:6.2f}, "
        f"{statements['unfenced']} statements)   fenced {fenced_ms[0]:6.2f} ms "
        f"(p90 {fenced_ms[1]:6.2f}, {statements['fenced']} statements)   "
        f"+{fenced_ms[0] - plain[0]:.2f} ms, x{fenced_ms[0] / plain[0]:.2f}"
    )


async def write(session: AsyncSession, tables: Shop, count: int) -> None:
    """The job: read the product, change its stock, leave a note, commit."""
    _, product, note = tables
    row = await session.get(product, 1)
    row.in_stock = count
    session.add(note(body=f"counted {count}"))
    await session.commit()


def _ms(seconds: list[float]) -> tuple[float, float]:
    ordered = sorted(seconds)
    return statistics.median(ordered) * 1000, ordered[int(len(ordered) * 0.9)] * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=1000, help="commits of each kind")
    parser.add_argument("--databases", default=",".join(URLS), help="of " + ",".join(URLS))
    arguments = parser.parse_args()
    unknown = set(arguments.databases.split(",")) - set(URLS)
    if unknown:
        parser.error(f"no database {', '.join(sorted(unknown))}; of {','.join(URLS)}")
    with tempfile.TemporaryDirectory() as directory:
        async with Locks(ttl="5m") as locks, locks.hold("bench:orm-fencing") as lock:
            for driver in arguments.databases.split(","):
                await bench(driver, arguments.commits, Path(directory), lock)


if __name__ == "__main__":
    asyncio.run(main())
