"""Redis behind Sentinel, and min_replicas, as URLs say them: read without a server."""

from __future__ import annotations

import pytest

from leaselock import LocksConfigurationError
from leaselock.stores import RedisLockStore, store_from_url


def test_a_sentinel_url_names_the_sentinels_the_service_and_the_database() -> None:
    store = RedisLockStore.from_url(
        "redis+sentinel://:secret@10.0.0.1:26379,10.0.0.2:26380/mymaster/2?min_replicas=1"
    )
    shown = repr(store)
    assert "sentinel=10.0.0.1:26379,10.0.0.2:26380" in shown
    assert "service='mymaster'" in shown
    assert "db=2" in shown
    assert "secret" not in shown


def test_the_command_takes_sentinel_urls() -> None:
    store = store_from_url("rediss+sentinel://s1:26379,s2:26379,s3:26379/mymaster", prefix="x:")
    assert isinstance(store, RedisLockStore)
    assert "service='mymaster'" in repr(store)


def test_a_sentinel_without_a_port_is_on_26379() -> None:
    assert "sentinel=s1:26379" in repr(RedisLockStore.from_url("redis+sentinel://s1/svc"))


def test_min_replicas_in_a_plain_urls_query_is_the_stores_not_redis_pys() -> None:
    store = RedisLockStore.from_url("redis://127.0.0.1:6379/0?min_replicas=1&replica_timeout=1s")
    assert "port=6379" in repr(store)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://s1:26379", "the path is /<service>"),
        ("redis+sentinel://s1:26379/svc/db", "the path is /<service>"),
        ("redis+sentinel://s1:port/svc", "is not host:port"),
        ("redis+sentinel://s1:26379/svc?socket_timeout=1", "is not a parameter it takes"),
        ("redis+sentinel://s1:26379/svc?min_replicas=-1", "min_replicas="),
        ("redis+sentinel://s1:26379/svc?replica_timeout=0", "replica_timeout="),
        ("redis://127.0.0.1/0?replica_timeout=soon", "replica_timeout="),
    ],
)
def test_unusable_sentinel_and_replication_settings_are_refused_saying_why(
    url: str, says: str
) -> None:
    with pytest.raises(LocksConfigurationError, match=says):
        RedisLockStore.from_url(url)


def test_from_sentinel_refuses_what_is_not_a_list_of_addresses() -> None:
    with pytest.raises(LocksConfigurationError, match="host, port"):
        RedisLockStore.from_sentinel("s1:26379", "svc")  # type: ignore[arg-type]
    with pytest.raises(LocksConfigurationError, match="service_name"):
        RedisLockStore.from_sentinel([("s1", 26379)], "")
