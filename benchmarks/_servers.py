"""What the benchmarks share: which servers they run on, and what they leave behind there.

Benchmarks run as scripts (``.venv/bin/python benchmarks/<name>.py``), so this module is
imported from their own directory.
"""

from __future__ import annotations

import argparse
import os

import asyncpg
import redis.asyncio

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def add_server_arguments(parser: argparse.ArgumentParser, *, postgres_default: bool = True) -> None:
    """Add --postgres-url and --redis-url, defaulting to the test suite's servers.

    ``postgres_default=False`` leaves --postgres-url unset unless given (the benchmark then
    starts a server of its own).
    """
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("LEASELOCK_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
        if postgres_default
        else None,
    )
    parser.add_argument(
        "--redis-url", default=os.environ.get("LEASELOCK_TEST_REDIS_URL", DEFAULT_REDIS_URL)
    )


async def drop_store_tables(url: str, table: str) -> None:
    """Drop what a PostgresLockStore made for ``table``: its tables, line function, sequence."""
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f'DROP FUNCTION IF EXISTS "{table}_line"')
        for suffix in ("", "_runs", "_jobs", "_line"):
            await admin.execute(f'DROP TABLE IF EXISTS "{table}{suffix}"')
        await admin.execute(f'DROP SEQUENCE IF EXISTS "{table}_seq"')
    finally:
        await admin.close()


async def delete_prefix(url: str, prefix: str) -> None:
    """Delete every Redis key under ``prefix``."""
    async with redis.asyncio.Redis.from_url(url) as admin:
        async for name in admin.scan_iter(match=f"{prefix}*", count=1000):
            await admin.delete(name)
