"""RedisSubscription: one channel, on a connection of its own, kept through breaks.

Real server throughout, behind a proxy where the network has to fail; a fake server only where
Redis itself cannot be made to answer wrongly.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import pytest
import redis.asyncio

from helpers import Partition, unique_key, until_real, wait_for_real, yield_once
from leaselock.stores.redis import _subscription as _redis_subscription
from leaselock.stores.redis._subscription import RedisSubscription
from redis_connections import (
    ThenClose,
    connections_named,
    endpoint_to,
    fake_redis,
    message_on,
    subscribe_confirmed,
)

pytestmark = pytest.mark.redis

LOGGER = "leaselock.stores.redis"
UNHEARD = "nothing is heard meanwhile. Fix: let the test subscribe"


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Try again every 0.1 s, and give an attempt 0.5 s, so breaks heal within a test."""
    monkeypatch.setattr(_redis_subscription, "RESUBSCRIBE_PAUSE_S", 0.1)
    monkeypatch.setattr(_redis_subscription, "SUBSCRIBE_TIMEOUT_S", 0.5)


@asynccontextmanager
async def subscription_to(
    url: str,
    channel: str,
    on_message: Callable[[str], None],
    *,
    alive_s: float = 5.0,
    **options: object,
) -> AsyncIterator[tuple[RedisSubscription, str]]:
    """Yield a subscription of ``channel`` (not yet started) and its connections' client name."""
    name = f"leaselock-subscription-{uuid.uuid4().hex[:8]}"
    endpoint = endpoint_to(url, name, **options)
    subscription = RedisSubscription(
        lambda: endpoint,
        channel,
        on_message,
        alive_s=alive_s,
        heard_as="the test subscription",
        unheard=UNHEARD,
    )
    try:
        yield subscription, name
    finally:
        await subscription.aclose()


async def subscribers(url: str, channel: str) -> int:
    """How many connections the server has subscribed to ``channel``."""
    async with redis.asyncio.Redis.from_url(url) as admin:
        [(_, count)] = await admin.pubsub_numsub(channel)
        return int(count)


def proxied(url: str, partition: Partition) -> str:
    return f"redis://127.0.0.1:{partition.port}{urlsplit(url).path}"


def messages(caplog: pytest.LogCaptureFixture, level: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelname == level]


@pytest.mark.parametrize("decode_responses", [False, True], ids=["bytes", "decoded"])
@pytest.mark.parametrize("protocol", [2, 3], ids=["RESP2", "RESP3"])
async def test_each_message_is_handed_over_whole_in_order_and_decoded(
    redis_url: str, protocol: int, decode_responses: bool
):
    channel = unique_key("channel \N{SNOWMAN}")
    heard: list[str] = []
    async with (
        subscription_to(
            redis_url, channel, heard.append, protocol=protocol, decode_responses=decode_responses
        ) as (subscription, _),
        redis.asyncio.Redis.from_url(redis_url) as publisher,
    ):
        await subscription.subscribed()
        assert await subscribers(redis_url, channel) == 1
        sent = [f"message {n} \N{SNOWMAN}" for n in range(200)] + ["x" * 3_000_000]
        for message in sent:
            await publisher.publish(channel, message)
        await until_real(lambda: len(heard) == len(sent), within_s=10)
    assert heard == sent


async def test_a_callback_that_raises_is_logged_and_later_messages_still_arrive(
    redis_url: str, caplog: pytest.LogCaptureFixture
):
    channel = unique_key("channel")
    heard: list[str] = []

    def on_message(message: str) -> None:
        if message == "bad":
            raise RuntimeError("a broken callback")
        heard.append(message)

    async with (
        subscription_to(redis_url, channel, on_message) as (subscription, _),
        redis.asyncio.Redis.from_url(redis_url) as publisher,
    ):
        await subscription.subscribed()
        for message in ("first", "bad", "after"):
            await publisher.publish(channel, message)
        await until_real(lambda: len(heard) == 2)
    assert heard == ["first", "after"]
    [failure] = messages(caplog, "ERROR")
    assert "A message callback of the test subscription failed" in failure


async def test_a_connection_the_server_killed_is_subscribed_again_and_hears_what_follows(
    redis_url: str, caplog: pytest.LogCaptureFixture, quick_retries: None
):
    channel = unique_key("channel")
    heard: list[str] = []
    caplog.set_level(logging.INFO, LOGGER)
    async with (
        subscription_to(redis_url, channel, heard.append) as (subscription, name),
        redis.asyncio.Redis.from_url(redis_url) as admin,
    ):
        await subscription.subscribed()
        for kill in range(3):
            # past the pause: a subscription that broke at once would count as an outage
            await wait_for_real(150)
            [before] = [c["id"] for c in await admin.client_list() if c.get("name") == name]
            await admin.client_kill_filter(_id=before)
            await until_real(lambda old=before: _subscribed_anew(admin, name, channel, old))
            await admin.publish(channel, f"after kill {kill}")
            await until_real(lambda n=kill: len(heard) == n + 1)
    assert heard == [f"after kill {kill}" for kill in range(3)]
    lost = [m for m in messages(caplog, "INFO") if "was lost" in m]
    assert len(lost) == 3
    assert messages(caplog, "WARNING") == []


async def _subscribed_anew(admin: redis.asyncio.Redis, name: str, channel: str, old: str) -> bool:
    ids = [c["id"] for c in await admin.client_list() if c.get("name") == name]
    [(_, count)] = await admin.pubsub_numsub(channel)
    return ids != [] and old not in ids and count == 1


async def test_a_server_gone_silent_is_a_warning_once_and_its_return_is_heard(
    redis_url: str, caplog: pytest.LogCaptureFixture, quick_retries: None
):
    channel = unique_key("channel")
    heard: list[str] = []
    caplog.set_level(logging.DEBUG, LOGGER)
    target = urlsplit(redis_url)
    async with (
        Partition(target.hostname or "127.0.0.1", target.port or 0) as partition,
        subscription_to(proxied(redis_url, partition), channel, heard.append) as (
            subscription,
            _,
        ),
        redis.asyncio.Redis.from_url(redis_url) as publisher,
    ):
        await subscription.subscribed()
        await wait_for_real(150)
        # as a restart that takes a while: every connection closed, new ones hang
        partition.cut()
        partition.reset()
        await until_real(lambda: len(messages(caplog, "DEBUG")) >= 2, within_s=10)
        await publisher.publish(channel, "while away")
        partition.heal()
        await until_real(lambda: _count(caplog, "is back") == 1, within_s=10)
        await publisher.publish(channel, "after")
        await until_real(lambda: heard == ["after"])
    [warning] = messages(caplog, "WARNING")
    assert "the test subscription could not subscribe (no confirmation within 0.5 s)" in warning
    assert UNHEARD in warning
    assert "Trying again every 0.1 s" in warning


def _count(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(1 for r in caplog.records if text in r.getMessage())


async def heard_once_published(url: str, channel: str, heard: list[str]) -> None:
    """Publish on ``channel`` until ``heard`` has the message: the subscription is back.

    Connections the proxy held during a cut reach the server once it heals, subscribe and
    close: until the one kept is subscribed, the server may count those instead.
    """

    async def published_and_heard() -> bool:
        await publisher.publish(channel, "back")
        await wait_for_real(20)
        return "back" in heard

    async with redis.asyncio.Redis.from_url(url) as publisher:
        await until_real(published_and_heard, within_s=10)


async def test_the_first_attempt_is_bounded_and_a_failure_is_not_raised(
    redis_url: str, caplog: pytest.LogCaptureFixture, quick_retries: None
):
    channel = unique_key("channel")
    heard: list[str] = []
    target = urlsplit(redis_url)
    async with (
        Partition(target.hostname or "127.0.0.1", target.port or 0) as partition,
        subscription_to(proxied(redis_url, partition), channel, heard.append) as (
            subscription,
            _,
        ),
    ):
        partition.cut()
        async with asyncio.timeout(5):
            await asyncio.gather(*(subscription.subscribed() for _ in range(3)))
        [warning] = messages(caplog, "WARNING")
        assert "no confirmation within" in warning
        partition.heal()
        await heard_once_published(redis_url, channel, heard)


@pytest.mark.parametrize("close_cancelled", [False, True], ids=["closed", "close cancelled"])
async def test_closing_during_the_first_attempt_lets_its_waiters_go_and_stops_the_subscription(
    redis_url: str, close_cancelled: bool
):
    target = urlsplit(redis_url)
    async with Partition(target.hostname or "127.0.0.1", target.port or 0) as partition:
        subscription_context = subscription_to(
            proxied(redis_url, partition), unique_key("c"), print
        )
        async with subscription_context as (subscription, _):
            partition.cut()
            waiting = asyncio.create_task(subscription.subscribed())
            await wait_for_real(100)
            assert not waiting.done()
            closing = asyncio.create_task(subscription.aclose())
            if close_cancelled:
                # the caller of aclose gives up while the subscription stops
                await yield_once()
                closing.cancel()
            async with asyncio.timeout(2):
                await asyncio.wait([closing])
                await waiting
            assert [t for t in asyncio.all_tasks() if "test subscription" in t.get_name()] == []
        partition.heal()


async def test_a_subscription_closed_before_it_started_opens_nothing(redis_url: str):
    async with subscription_to(redis_url, unique_key("c"), print) as (subscription, name):
        await subscription.aclose()
        await subscription.subscribed()
        assert [t for t in asyncio.all_tasks() if "test subscription" in t.get_name()] == []
        assert connections_named(redis_url, name) == 0


async def test_closing_unsubscribes_and_closes_the_connection(redis_url: str):
    channel = unique_key("channel")
    async with subscription_to(redis_url, channel, print) as (subscription, name):
        await subscription.subscribed()
        assert connections_named(redis_url, name) == 1
        await subscription.aclose()
        assert [t for t in asyncio.all_tasks() if "test subscription" in t.get_name()] == []
        await until_real(lambda: connections_named(redis_url, name) == 0)
        assert await subscribers(redis_url, channel) == 0


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (b"@not a reply\r\n", "not a Redis reply"),
        (b"-LOADING Redis is loading the dataset in memory\r\n", "loading the dataset"),
        (
            b"-NOPERM this user has no permissions to access one of the channels\r\n",
            "no permissions",
        ),
    ],
    ids=["not a reply", "loading", "refused"],
)
async def test_a_subscribe_answered_wrongly_is_tried_again_on_a_new_connection(
    answer: bytes, said: str, caplog: pytest.LogCaptureFixture, quick_retries: None
):
    heard: list[str] = []

    def serve(command: list[bytes], connection: int) -> bytes:
        """Answer every command OK; SUBSCRIBE with ``answer`` at first, then confirm and send."""
        if command[0] != b"SUBSCRIBE":
            return b"+OK\r\n"
        if connection == 1:
            return answer
        return subscribe_confirmed(command[1]) + message_on(command[1], b"heard")

    async with (
        fake_redis(serve) as server,
        subscription_to(server.url, "c", heard.append, protocol=2) as (subscription, _),
    ):
        await subscription.subscribed()
        await until_real(lambda: heard == ["heard"], within_s=5)
    assert server.opened == 2
    [warning] = messages(caplog, "WARNING")
    assert "could not subscribe" in warning
    assert said in warning


async def test_a_server_that_drops_each_connection_at_once_is_not_asked_again_at_once(
    caplog: pytest.LogCaptureFixture, quick_retries: None
):

    def serve(command: list[bytes], _: int) -> bytes | ThenClose:
        """Confirm the SUBSCRIBE, then close the connection."""
        if command[0] != b"SUBSCRIBE":
            return b"+OK\r\n"
        return ThenClose(subscribe_confirmed(command[1]))

    async with (
        fake_redis(serve) as server,
        subscription_to(server.url, "c", print, protocol=2) as (subscription, _),
    ):
        await subscription.subscribed()
        await wait_for_real(1000)
    # a pause of 0.1 s after each: at most about ten in a second, not hundreds
    assert 2 <= server.opened <= 12
    # and it is an outage, said once
    [warning] = messages(caplog, "WARNING")
    assert "could not subscribe (closed by the server)" in warning


async def test_a_subscription_that_had_lasted_is_subscribed_again_without_a_pause(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(_redis_subscription, "RESUBSCRIBE_PAUSE_S", 2.0)
    channel = unique_key("channel")
    async with (
        subscription_to(redis_url, channel, print) as (subscription, name),
        redis.asyncio.Redis.from_url(redis_url) as admin,
    ):
        await subscription.subscribed()
        await wait_for_real(2100)
        [before] = [c["id"] for c in await admin.client_list() if c.get("name") == name]
        await admin.client_kill_filter(_id=before)
        # well within the 2 s pause a subscription that broke at once would wait
        await until_real(lambda: _subscribed_anew(admin, name, channel, before), within_s=1.5)


async def test_a_message_that_cannot_be_decoded_is_logged_and_those_after_it_arrive(
    redis_url: str, caplog: pytest.LogCaptureFixture
):
    channel = unique_key("channel")
    heard: list[str] = []
    async with (
        subscription_to(redis_url, channel, heard.append) as (subscription, _),
        redis.asyncio.Redis.from_url(redis_url) as publisher,
    ):
        await subscription.subscribed()
        for message in (b"before", b"\xff\xfe not utf-8", b"after"):
            await publisher.publish(channel, message)
        await until_real(lambda: len(heard) == 2)
    assert heard == ["before", "after"]
    [warning] = messages(caplog, "WARNING")
    assert "cannot decode" in warning


async def test_a_quiet_connection_answers_its_pings_and_is_kept(
    redis_url: str, caplog: pytest.LogCaptureFixture, quick_retries: None
):
    caplog.set_level(logging.DEBUG, LOGGER)
    channel = unique_key("channel")
    async with (
        subscription_to(redis_url, channel, print, alive_s=0.1) as (subscription, name),
        redis.asyncio.Redis.from_url(redis_url) as admin,
    ):
        await subscription.subscribed()
        [before] = [c for c in await admin.client_list() if c.get("name") == name]
        await wait_for_real(1000)
        [after] = [c for c in await admin.client_list() if c.get("name") == name]
    assert before["cmd"] == "subscribe"
    # the same connection, and the last thing it asked the server was a PING
    assert (after["id"], after["cmd"]) == (before["id"], "ping")
    assert messages(caplog, "INFO") == []


async def test_a_connection_silenced_by_a_partition_is_replaced_once_the_network_heals(
    redis_url: str, caplog: pytest.LogCaptureFixture, quick_retries: None
):
    caplog.set_level(logging.INFO, LOGGER)
    channel = unique_key("channel")
    heard: list[str] = []
    target = urlsplit(redis_url)
    async with (
        Partition(target.hostname or "127.0.0.1", target.port or 0) as partition,
        subscription_to(proxied(redis_url, partition), channel, heard.append, alive_s=0.2) as (
            subscription,
            _,
        ),
    ):
        await subscription.subscribed()
        await wait_for_real(150)
        # no reset, no close: the bytes stop, both ways, and only silence tells
        partition.cut()
        await until_real(lambda: _count(caplog, "not even an answer to a PING") == 1, within_s=5)
        partition.heal()
        await heard_once_published(redis_url, channel, heard)
    [lost] = [m for m in messages(caplog, "INFO") if "was lost" in m]
    assert "nothing heard for" in lost
