"""Stores from a URL: what the ``leaselock`` command and the torture check are pointed at."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from urllib.parse import urlsplit

from ..._errors import LocksConfigurationError
from ._pool_arguments import check_flags
from ._protocol import LockStore

__all__ = ["URL_FORMS", "store_from_url"]

URL_FORMS = (
    "postgresql://user:password@host:5432/database, mysql://user:password@host:3306/database "
    "(mariadb:// too), redis://host:6379/0 (rediss:// for TLS), "
    "redis+sentinel://sentinel1:26379,sentinel2:26379,sentinel3:26379/<service>[/db] (Redis "
    "behind Sentinel; ?min_replicas=1 waits for a replica on any Redis URL), "
    "redis+cluster://node:6379 (any node of a Redis Cluster), etcd://host:2379 (several members: "
    "etcd://h1:2379,h2:2379; etcd+https:// for TLS), or sqlite:///path/to/locks.db"
)


def store_from_url(
    url: str,
    *,
    factory: str | None = None,
    prefix: str | None = None,
    create_schema: bool = True,
    read_only: bool = False,
) -> LockStore:
    """Return a shipped store for ``url``, or what ``factory`` (``"module:callable"``) makes of it.

    What the ``leaselock`` command is pointed at (``--url``, or ``LEASELOCK_URL``).

    Args:
        url: ``postgresql://`` (or ``postgres://``), ``mysql://`` (or ``mariadb://``),
            ``redis://``, ``rediss://``, ``unix://``, ``redis+sentinel://`` or
            ``rediss+sentinel://`` (the Sentinels of a Redis primary, and its service name),
            ``redis+cluster://`` or ``rediss+cluster://`` (any node of a Redis Cluster),
            ``etcd://`` (``etcd+https://`` for TLS), or ``sqlite:///path``.
        factory: a callable taking the URL and returning a store, as ``"package.module:name"``:
            your own store, checked the same way.
        prefix: the key prefix of a Redis, Redis Cluster or etcd store (default: the store's
            own).
        create_schema: whether a PostgreSQL, MySQL or SQLite store creates its tables (and
            SQLite its file) if missing. The ``leaselock`` command passes ``False``: a missing
            table is an error naming the fix, never a table made by a tool.
        read_only: the caller only reads (``leaselock locks``, ``jobs``, ``watch``): nothing
            is created whatever ``create_schema`` says, a SQLite file is opened read-only,
            and a PostgreSQL store prunes nothing. Redis and etcd reads write nothing
            anyway. Not passed to a ``factory``.

    Raises:
        LocksConfigurationError: the URL or the factory is unusable; the message says why.

    .. versionadded:: 0.2
    """
    check_flags(create_schema=create_schema, read_only=read_only)
    # a reader creates nothing
    create_schema = create_schema and not read_only
    if not isinstance(url, str) or not url:
        raise LocksConfigurationError(f"url={url!r}; pass a store URL: {URL_FORMS}")
    if factory is not None:
        return _from_factory(factory, url)
    scheme = urlsplit(url).scheme
    if scheme in ("postgresql", "postgres", "postgresql+asyncpg"):
        from ..postgres._store import (  # noqa: PLC0415 -- the driver is optional
            DEFAULT_PRUNE_AFTER,
            PostgresLockStore,
        )

        return PostgresLockStore.from_url(
            url,
            create_schema=create_schema,
            # a reader deletes nothing either: no pruning, however long a watch runs
            prune_after=None if read_only else DEFAULT_PRUNE_AFTER,
        )
    if scheme in (
        "redis",
        "rediss",
        "unix",
        "redis+sentinel",
        "rediss+sentinel",
        "redis+cluster",
        "rediss+cluster",
    ):
        return _redis_store(url, scheme, prefix)
    if scheme in ("mysql", "mariadb", "mysql+asyncmy", "mariadb+asyncmy"):
        from ..mysql import MySQLLockStore  # noqa: PLC0415 -- the driver is optional

        return MySQLLockStore.from_url(url, create_schema=create_schema)
    if scheme in ("etcd", "etcd+http", "etcd+https"):
        from ..etcd import EtcdLockStore  # noqa: PLC0415 -- the driver is optional

        return EtcdLockStore.from_url(url, **({} if prefix is None else {"prefix": prefix}))
    if scheme == "sqlite":
        from ..sqlite import SQLiteLockStore  # noqa: PLC0415 -- loads on first use

        path = url.removeprefix("sqlite://")
        if not path.startswith("/") or path == "/":
            raise LocksConfigurationError(
                f"url={url!r}: a SQLite URL names a file with three slashes before a relative "
                "path and four before an absolute one: sqlite:///locks.db, sqlite:////var/locks.db"
            )
        return SQLiteLockStore(path[1:], create_schema=create_schema, read_only=read_only)
    raise LocksConfigurationError(
        f"url={url!r} is not a store URL leaselock knows; pass {URL_FORMS}"
    )


def _redis_store(url: str, scheme: str, prefix: str | None) -> LockStore:
    """A Redis store for ``url``; ``+cluster``: a Redis Cluster; ``+sentinel``: its Sentinels."""
    if scheme.endswith("+cluster"):
        from ..redis_cluster import RedisClusterLockStore  # noqa: PLC0415 -- the driver is optional

        url = url.replace("+cluster", "", 1)
        if prefix is None:
            return RedisClusterLockStore.from_url(url)
        return RedisClusterLockStore.from_url(url, prefix=prefix)
    from ..redis import RedisLockStore  # noqa: PLC0415 -- the driver is optional

    if prefix is None:
        return RedisLockStore.from_url(url)
    return RedisLockStore.from_url(url, prefix=prefix)


def _from_factory(factory: str, url: str) -> LockStore:
    module_name, _, name = factory.partition(":")
    try:
        made: Callable[[str], LockStore] = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as error:
        raise LocksConfigurationError(
            f'factory={factory!r} cannot be loaded ({error}); pass "package.module:callable", '
            "a callable that takes the URL and returns your store, importable from here"
        ) from None
    return made(url)
