"""Fixtures of the shop's tests: a fresh database per test, on each backend, and a cluster on it.

``backend`` runs a test on SQLite (locks in the same file, on a manual clock), PostgreSQL (a new
database on the test server) and Redis (locks in Redis, orders in SQLite); ``database_backend``
on the first two only, for tests that take no lock. The servers come from the repository's root
conftest (``postgres_url``, ``redis_url``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shop_harness import Backend, BackendName, Cluster, fresh_database

ALL_BACKENDS = (
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("redis", id="redis", marks=pytest.mark.redis),
)


async def _backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    name: BackendName = request.param
    postgres_url = request.getfixturevalue("postgres_url") if name == "postgres" else None
    redis_url = request.getfixturevalue("redis_url") if name == "redis" else None
    async with fresh_database(
        name,
        sqlite_path=str(tmp_path / "shop.db"),
        postgres_url=postgres_url,
        redis_url=redis_url,
    ) as backend:
        yield backend


@pytest.fixture(params=ALL_BACKENDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """A fresh, seeded shop database and a lock store: SQLite, PostgreSQL or Redis."""
    async for made in _backend(request, tmp_path):
        yield made


@pytest.fixture(params=ALL_BACKENDS[:2])
async def database_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Backend]:
    """A fresh, seeded shop database on SQLite or PostgreSQL (locks in it)."""
    async for made in _backend(request, tmp_path):
        yield made


@pytest.fixture
async def cluster(backend: Backend) -> AsyncIterator[Cluster]:
    """Instances of the shop on ``backend``, stopped at the end of the test."""
    made = Cluster(backend)
    try:
        yield made
    finally:
        await made.aclose()


@pytest.fixture
async def plain_cluster(database_backend: Backend) -> AsyncIterator[Cluster]:
    """Instances of the shop on ``database_backend``, stopped at the end of the test."""
    made = Cluster(database_backend)
    try:
        yield made
    finally:
        await made.aclose()


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """The captured logs of leaselock (DEBUG: the skip lines) and of the shop."""
    # one level for both: each set_level also sets the level of caplog's one handler
    for logger in ("leaselock", "shop"):
        caplog.set_level(logging.DEBUG, logger=logger)
    return caplog
