"""EtcdLockStore: the contract suite on a real etcd, and what only the etcd store does."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import logging
import math
import random
import socket
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from functools import reduce
from typing import Any, ClassVar

import httpx
import pytest

from etcd_server import ETCD_URL_ENV, etcd_server
from helpers import unique_key, wait_for_real
from leaselock import Locks, LocksConfigurationError, LockStoreError
from leaselock._keys import MAX_KEY_LENGTH
from leaselock.stores import (
    Acquired,
    JobPause,
    JobRecord,
    JobState,
    LockStore,
    NotAcquired,
    OpenRun,
    Renewal,
    RunOutcome,
    RunRecord,
    RunStart,
)
from leaselock.stores._common._capabilities import run_from_json, with_run
from leaselock.stores._common._protocol import MAX_FENCING_TOKEN
from leaselock.stores.etcd import EtcdLockStore
from leaselock.stores.etcd import _store as etcd_module
from leaselock.stores.etcd._runs import run_value
from leaselock.testing.pytest import LockStoreContractTests
from servers import ServerUnavailable

LOGGER = "leaselock.stores.etcd"
ONE_MINUTE_MS = 60_000
# the shortest lease a default etcd grants (1.5 election timeouts, rounded up to seconds)
SHORT_TTL_MS = 2_000
# every key this module writes, deleted at its end
RUN_PREFIX = f"leaselock-test-{uuid.uuid4().hex[:12]}/"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def prefix_end(prefix: str) -> str:
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return base64.b64encode(bytes(raw)).decode()


@pytest.fixture(scope="module")
def run_prefix(etcd_url: str) -> Iterator[str]:
    """The prefix of every key this module writes; deleted at its end, for shared servers."""
    yield RUN_PREFIX
    with httpx.Client(trust_env=False) as client:
        client.post(
            f"{etcd_url}/v3/kv/deleterange",
            json={"key": b64(RUN_PREFIX), "range_end": prefix_end(RUN_PREFIX)},
        )


@pytest.fixture
def prefix(run_prefix: str) -> str:
    """A key prefix of this test's own."""
    return f"{run_prefix}{uuid.uuid4().hex[:8]}/"


@contextlib.asynccontextmanager
async def opened(store: EtcdLockStore) -> AsyncIterator[EtcdLockStore]:
    await store.open()
    try:
        yield store
    finally:
        await store.aclose()


@contextlib.asynccontextmanager
async def hooked(
    url: str, prefix: str, hooks: Mapping[str, list[Any]]
) -> AsyncIterator[EtcdLockStore]:
    """An opened store whose gateway calls pass through httpx ``hooks`` (sent, answered)."""
    async with (
        httpx.AsyncClient(trust_env=False, event_hooks=hooks) as client,
        opened(EtcdLockStore(url, client=client, prefix=prefix)) as store,
    ):
        yield store


async def lock_kvs(url: str, prefix: str) -> list[dict[str, Any]]:
    """Every lock key under ``prefix``, as etcd keeps it (lease, revisions)."""
    return await kvs_under(url, prefix + "locks/")


async def kvs_under(url: str, start: str) -> list[dict[str, Any]]:
    """Every key that starts with ``start``, as etcd keeps it (value, lease, revisions)."""
    async with httpx.AsyncClient(trust_env=False) as client:
        answer = await client.post(
            f"{url}/v3/kv/range", json={"key": b64(start), "range_end": prefix_end(start)}
        )
    kvs: list[dict[str, Any]] = answer.json().get("kvs", [])
    return kvs


def dead_url() -> str:
    """A client URL of 127.0.0.1 where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --- the contract ---------------------------------------------------------------------------


@pytest.mark.etcd
class TestEtcdContract(LockStoreContractTests):
    """32 racing callers through one store's httpx client.

    etcd leases last whole seconds and expire within about 500 ms after their time: a 6 s
    lease is gone by 6.5 s, half a second inside the ttl*7/6 that the expiry cases allow, so a
    loaded CI machine has room; 4 s leaves 160 ms, and 3 s none.
    """

    concurrent: ClassVar[Mapping[str, int]] = {"callers": 32}
    ttl = "6s"

    @pytest.fixture(autouse=True)
    def _server(self, etcd_url: str, run_prefix: str) -> None:
        self.url = etcd_url
        self.prefix = run_prefix

    def make_store(self) -> LockStore:
        return EtcdLockStore(self.url, prefix=f"{self.prefix}{uuid.uuid4().hex[:8]}/")


# --- construction ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"endpoints": "ftp://etcd:2379"}, r"pass an etcd client URL http\(s\)://host:port"),
        ({"endpoints": "http://etcd:2379/v3"}, "no path"),
        ({"endpoints": "http://root:secret@etcd:2379"}, "no user"),
        ({"endpoints": []}, "or a list of them"),
        ({"endpoints": 2379}, "or a list of them"),
        ({"prefix": "app"}, 'ends with "/"'),
        ({"prefix": "app/locks/"}, 'no "locks", "runs" or "jobs" segment'),
        ({"prefix": "app/runs/"}, 'no "locks", "runs" or "jobs" segment'),
        ({"prefix": "jobs/app/"}, 'no "locks", "runs" or "jobs" segment'),
        ({"prefix": "x" * 100 + "/"}, "at most 100 characters"),
        ({"client": object()}, "not an httpx.AsyncClient"),
        ({"timeout": -1}, "timeout="),
    ],
)
def test_unusable_arguments_are_refused_with_the_fix(arguments: dict[str, Any], named: str) -> None:
    with pytest.raises(LocksConfigurationError, match=named) as refused:
        EtcdLockStore(**arguments)
    assert "secret" not in str(refused.value)


def test_from_url_takes_several_members_and_tls() -> None:
    plain = EtcdLockStore.from_url("etcd://etcd-1:2379,etcd-2:2379")
    assert repr(plain) == (
        "EtcdLockStore(http://etcd-1:2379, http://etcd-2:2379, prefix='leaselock/')"
    )
    secure = EtcdLockStore.from_url("etcd+https://etcd:2379", prefix="app/")
    assert repr(secure) == "EtcdLockStore(https://etcd:2379, prefix='app/')"


@pytest.mark.parametrize(
    "url", ["redis://etcd:2379", "etcd://", "etcd://etcd:2379/path", "etcd://u:p@etcd:2379"]
)
def test_from_url_refuses_what_is_not_an_etcd_url(url: str) -> None:
    with pytest.raises(LocksConfigurationError, match=r"pass etcd://host:2379"):
        EtcdLockStore.from_url(url)


def test_a_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(etcd_module, "_HAVE_DRIVER", False)
    with pytest.raises(LocksConfigurationError, match=r"pip install 'leaselock\[etcd\]'"):
        EtcdLockStore()


# --- tokens and leases ----------------------------------------------------------------------


@pytest.mark.etcd
async def test_the_token_is_the_keys_create_revision(etcd_url: str, prefix: str) -> None:
    async with opened(EtcdLockStore(etcd_url, prefix=prefix)) as store:
        first = await store.acquire("a", "owner-a", ONE_MINUTE_MS)
        second = await store.acquire("b", "owner-b", ONE_MINUTE_MS)
    assert isinstance(first, Acquired)
    assert isinstance(second, Acquired)
    kvs = {base64.b64decode(kv["key"]).decode(): kv for kv in await lock_kvs(etcd_url, prefix)}
    assert int(kvs[prefix + "locks/a"]["create_revision"]) == first.fencing_token
    assert int(kvs[prefix + "locks/b"]["create_revision"]) == second.fencing_token
    assert second.fencing_token > first.fencing_token


@pytest.mark.etcd
async def test_discard_prefix_deletes_every_key_of_its_prefix_and_no_other(
    etcd_url: str, prefix: str
) -> None:
    neighbour = prefix[:-1] + "-neighbour/"
    async with (
        opened(EtcdLockStore(etcd_url, prefix=prefix)) as store,
        opened(EtcdLockStore(etcd_url, prefix=neighbour)) as other,
    ):
        for n in range(3):
            assert isinstance(await store.acquire(f"k{n}", "me", ONE_MINUTE_MS), Acquired)
        assert isinstance(await other.acquire("k0", "me", ONE_MINUTE_MS), Acquired)
        assert await store.discard_prefix() == 3
        assert await kvs_under(etcd_url, prefix) == []
        assert len(await lock_kvs(etcd_url, neighbour)) == 1


@pytest.mark.etcd
async def test_locks_of_one_ttl_share_one_lease_and_renew_in_two_calls_however_many(
    etcd_url: str, prefix: str
) -> None:
    held = 1_000
    calls: list[str] = []

    async def count(request: httpx.Request) -> None:
        calls.append(request.url.path)

    async with hooked(etcd_url, prefix, {"request": [count]}) as store:
        owners = {f"k{n}": unique_key("owner") for n in range(held)}
        halves = list(owners.items())[: held // 2], list(owners.items())[held // 2 :]
        for half in halves:
            results = await asyncio.gather(
                *(store.acquire(key, owner, ONE_MINUTE_MS) for key, owner in half)
            )
            assert all(isinstance(result, Acquired) for result in results)
            # the second half joins a lease of its own
            await wait_for_real(300)
        assert len({kv["lease"] for kv in await lock_kvs(etcd_url, prefix)}) == 2
        renewals = [Renewal(key, owner, ONE_MINUTE_MS) for key, owner in owners.items()]
        # the first batch gathers the locks under the lease of the most (moves, once)
        assert list(await store.renew_many(renewals)) == [True] * held
        leases = {kv["lease"] for kv in await lock_kvs(etcd_url, prefix)}
        assert len(leases) == 1
        calls.clear()
        assert list(await store.renew_many(renewals)) == [True] * held
        # the keys under the lease, then its keep-alive: every key was put there once, by
        # its renewal's owner, so the list of the lease's keys says whose each one is
        assert calls == ["/v3/lease/timetolive", "/v3/lease/keepalive"]


@pytest.mark.etcd
async def test_an_acquire_joining_a_lease_confirmed_a_moment_before_sends_its_transaction_alone(
    etcd_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the second acquire joins the first's lease however long a loaded machine takes between
    monkeypatch.setattr("leaselock.stores.etcd._leases.JOIN_WINDOW_S", 3_600.0)
    monkeypatch.setattr("leaselock.stores.etcd._leases.UNKEPT_JOIN_S", 3_600.0)
    one_hour_ms = 3_600_000
    sent: list[str] = []

    async def note(request: httpx.Request) -> None:
        sent.append(request.url.path)

    loop = asyncio.get_running_loop()
    async with hooked(etcd_url, prefix, {"request": [note]}) as store:
        began = loop.time()
        first = await store.acquire("first", "owner-1", one_hour_ms)
        sent.clear()
        second = await store.acquire("second", "owner-2", one_hour_ms)
        ended = loop.time()

    assert isinstance(first, Acquired)
    assert first.lease_age_ms == 0, "the lease was granted for the first: its ttl counts from it"
    assert sent == ["/v3/kv/txn"]
    assert isinstance(second, Acquired)
    # its ttl counts from the grant the first acquire waited for, sent after `began`
    assert 0 < second.lease_age_ms <= math.ceil((ended - began) * 1000)
    assert len({kv["lease"] for kv in await lock_kvs(etcd_url, prefix)}) == 1


@pytest.mark.etcd
async def test_an_acquire_joining_an_earlier_lease_sends_its_keep_alive_beside_its_transaction(
    etcd_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the second acquire joins the first's lease however long a loaded machine takes between,
    # and the lease was confirmed too long before for the lock to count its ttl from then
    monkeypatch.setattr("leaselock.stores.etcd._leases.JOIN_WINDOW_S", 3_600.0)
    monkeypatch.setattr("leaselock.stores.etcd._leases.UNKEPT_JOIN_S", 0.0)
    seen: list[tuple[str, str]] = []

    async def sent(request: httpx.Request) -> None:
        seen.append(("sent", request.url.path))

    async def answered(response: httpx.Response) -> None:
        seen.append(("answered", response.request.url.path))

    hooks = {"request": [sent], "response": [answered]}
    async with hooked(etcd_url, prefix, hooks) as store:
        assert isinstance(await store.acquire("first", "owner-1", ONE_MINUTE_MS), Acquired)
        seen.clear()
        second = await store.acquire("second", "owner-2", ONE_MINUTE_MS)
        assert isinstance(second, Acquired)

    # both on their way before either answered: the acquire waits about one round trip
    assert sorted(seen[:2]) == [("sent", "/v3/kv/txn"), ("sent", "/v3/lease/keepalive")]
    assert sorted(seen[2:]) == [("answered", "/v3/kv/txn"), ("answered", "/v3/lease/keepalive")]
    assert second.lease_age_ms == 0
    assert len({kv["lease"] for kv in await lock_kvs(etcd_url, prefix)}) == 1


@pytest.mark.etcd
async def test_a_refused_acquire_returns_once_the_keep_alive_sent_beside_it_is_answered(
    etcd_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("leaselock.stores.etcd._leases.JOIN_WINDOW_S", 3_600.0)
    monkeypatch.setattr("leaselock.stores.etcd._leases.UNKEPT_JOIN_S", 0.0)
    answered: list[str] = []

    async def note(response: httpx.Response) -> None:
        answered.append(response.request.url.path)

    async with hooked(etcd_url, prefix, {"response": [note]}) as store:
        assert isinstance(await store.acquire("taken", "owner-1", ONE_MINUTE_MS), Acquired)
        answered.clear()
        refused = await store.acquire("taken", "owner-2", ONE_MINUTE_MS)
        # nothing of the refused call is left in flight to outlive it (or its client)
        seen_on_return = sorted(answered)

    assert refused == NotAcquired(holder="owner-1")
    assert seen_on_return == ["/v3/kv/txn", "/v3/lease/keepalive"]


@pytest.mark.etcd
async def test_a_lock_not_renewed_expires_though_its_lease_mates_are_renewed(
    etcd_url: str, prefix: str
) -> None:
    async with (
        opened(EtcdLockStore(etcd_url, prefix=prefix)) as store,
        opened(EtcdLockStore(etcd_url, prefix=prefix)) as other,
    ):
        assert isinstance(await store.acquire("renewed", "keeper", SHORT_TTL_MS), Acquired)
        assert isinstance(await store.acquire("left", "leaver", SHORT_TTL_MS), Acquired)
        leases = {kv["lease"] for kv in await lock_kvs(etcd_url, prefix)}
        assert len(leases) == 1, "the two locks were meant to share a lease"
        for _ in range(6):
            await wait_for_real(SHORT_TTL_MS // 4)
            assert await store.renew("renewed", "keeper", SHORT_TTL_MS) is True
        # 3 s after the acquire: the 2 s lock that nobody renewed is gone, the other held
        assert isinstance(await other.acquire("left", "next", ONE_MINUTE_MS), Acquired)
        assert isinstance(await other.acquire("renewed", "next", ONE_MINUTE_MS), NotAcquired)
        assert await store.renew("left", "leaver", SHORT_TTL_MS) is False


@pytest.mark.etcd
async def test_a_key_the_store_did_not_put_under_a_lease_stops_its_keep_alive(
    etcd_url: str, prefix: str
) -> None:
    async with opened(EtcdLockStore(etcd_url, prefix=prefix)) as store:
        assert isinstance(await store.acquire("mine", "owner", ONE_MINUTE_MS), Acquired)
        (kv,) = await lock_kvs(etcd_url, prefix)
        # what an acquire whose answer never came leaves: a key under the lease, unknown here
        async with httpx.AsyncClient(trust_env=False) as raw:
            await raw.post(
                f"{etcd_url}/v3/kv/put",
                json={"key": b64(prefix + "locks/stray"), "value": b64("x"), "lease": kv["lease"]},
            )
        assert await store.renew("mine", "owner", ONE_MINUTE_MS) is True
        leases = {
            base64.b64decode(kv["key"]).decode(): kv["lease"]
            for kv in await lock_kvs(etcd_url, prefix)
        }
        # the renewed lock moved to another lease; the stray's lease was not kept alive
        assert leases[prefix + "locks/mine"] != leases[prefix + "locks/stray"] == kv["lease"]


@pytest.mark.etcd
async def test_locks_keeps_a_lock_past_its_ttl_through_keep_alives(
    etcd_url: str, prefix: str
) -> None:
    key = unique_key("held")
    async with (
        Locks(store=EtcdLockStore(etcd_url, prefix=prefix), ttl="2s") as locks,
        opened(EtcdLockStore(etcd_url, prefix=prefix)) as other,
    ):
        async with locks.hold(key) as lock:
            await wait_for_real(3 * SHORT_TTL_MS // 2)
            assert lock.held
            assert isinstance(await other.acquire(key, "other", ONE_MINUTE_MS), NotAcquired)
        assert isinstance(await other.acquire(key, "other", ONE_MINUTE_MS), Acquired)


# --- run records ----------------------------------------------------------------------------

STARTED = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)


def make_run(
    job: str,
    *,
    at_ms: int,
    token: int | None,
    outcome: RunOutcome = "ok",
    started: datetime = STARTED,
) -> RunRecord:
    started_at = started + timedelta(milliseconds=at_ms)
    return RunRecord(
        job,
        f"shop-{at_ms}",
        token,
        started_at,
        started_at + timedelta(seconds=1),
        outcome,
        error='ValueError: the feed is down \u2014 "again"' if outcome == "error" else None,
    )


def kept(runs: list[RunRecord]) -> JobRecord:
    """What a store keeps of ``runs`` recorded in this order: the reference, ``with_run``."""
    return reduce(with_run, runs[1:], with_run(None, runs[0]))


@pytest.mark.etcd
async def test_runs_are_json_keys_without_a_lease_under_runs_and_never_under_locks(
    etcd_url: str, prefix: str
) -> None:
    job, other = "feed/poll \u732b", "nightly export"
    ok, failed = make_run(job, at_ms=0, token=5), make_run(other, at_ms=1, token=6, outcome="error")
    async with opened(EtcdLockStore(etcd_url, prefix=prefix)) as store:
        await store.record_run(ok)
        await store.record_run(failed)
    kvs = {base64.b64decode(kv["key"]).decode(): kv for kv in await kvs_under(etcd_url, prefix)}
    assert sorted(kvs) == sorted(
        [f"{prefix}runs/last/{job}", f"{prefix}runs/success/{job}", f"{prefix}runs/last/{other}"]
    )
    assert all(kv.get("lease", "0") == "0" for kv in kvs.values())
    values = {key: base64.b64decode(kv["value"]).decode() for key, kv in kvs.items()}
    assert run_from_json(values[f"{prefix}runs/last/{job}"]) == ok
    assert run_from_json(values[f"{prefix}runs/success/{job}"]) == ok
    assert run_from_json(values[f"{prefix}runs/last/{other}"]) == failed


@pytest.mark.etcd
@pytest.mark.parametrize(
    ("older", "newer"),
    [
        pytest.param({"token": None}, {"token": 0}, id="no token, then 0"),
        pytest.param({"token": 9}, {"token": 10}, id="9, then 10 (one more digit)"),
        pytest.param({"token": 5}, {"token": MAX_FENCING_TOKEN}, id="5, then the largest"),
        pytest.param(
            {"token": MAX_FENCING_TOKEN, "at_ms": -1}, {"token": None}, id="one ms earlier"
        ),
        pytest.param(
            {"token": 1, "started": datetime(1, 1, 1, tzinfo=UTC)},
            {"token": 1, "started": datetime(1969, 12, 31, 23, 59, tzinfo=UTC)},
            id="year 1, then 1969",
        ),
        pytest.param(
            {"token": 1, "started": datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)},
            {"token": 1, "started": datetime(1970, 1, 1, tzinfo=UTC)},
            id="the last ms of 1969, then the epoch",
        ),
        pytest.param(
            {"token": 1, "started": datetime(9999, 12, 30, 23, 59, tzinfo=UTC)},
            {"token": 1, "started": datetime(9999, 12, 31, 23, 59, tzinfo=UTC)},
            id="year 9999",
        ),
    ],
)
async def test_a_run_is_kept_over_the_run_just_before_it_in_either_order(
    etcd_url: str, prefix: str, older: dict[str, Any], newer: dict[str, Any]
) -> None:
    async with opened(EtcdLockStore(etcd_url, prefix=prefix)) as store:
        for first, second in (("older", "newer"), ("newer", "older")):
            job = unique_key(f"{first} first")
            runs = {
                "older": make_run(job, **{"at_ms": 0, **older}),
                "newer": make_run(job, **{"at_ms": 0, **newer}),
            }
            await store.record_run(runs[first])
            await store.record_run(runs[second])
            assert await store.job_records([job]) == [JobRecord(job, runs["newer"], runs["newer"])]


@pytest.mark.etcd
async def test_a_run_of_the_same_start_and_token_replaces_the_kept_one(
    etcd_url: str, prefix: str
) -> None:
    job = unique_key("job")
    ended = make_run(job, at_ms=0, token=7)
    abandoned = dataclasses.replace(ended, outcome="lost", detected_by="abandoned")
    async with opened(EtcdLockStore(etcd_url, prefix=prefix)) as store:
        await store.record_run(ended)
        await store.record_run(abandoned)
        assert await store.job_records([job]) == [JobRecord(job, abandoned, ended)]


@pytest.mark.etcd
@pytest.mark.parametrize("seed", range(4))
async def test_the_kept_runs_are_the_newest_whatever_order_they_are_recorded_in(
    etcd_url: str, prefix: str, seed: int
) -> None:
    job = unique_key("job")
    runs = [
        # one millisecond, tokens none < 0 < 5 < the largest; two runs equal in order
        make_run(job, at_ms=0, token=None),
        make_run(job, at_ms=0, token=0, outcome="error"),
        make_run(job, at_ms=0, token=5),
        make_run(job, at_ms=0, token=5, outcome="lost"),
        make_run(job, at_ms=0, token=MAX_FENCING_TOKEN, outcome="error"),
        make_run(job, at_ms=1, token=1, outcome="cancelled"),
        make_run(job, at_ms=-1, token=MAX_FENCING_TOKEN),
        # the ends of what a datetime holds, and before 1970: the order is fixed-width digits
        make_run(job, at_ms=0, token=9, started=datetime(1, 1, 1, tzinfo=UTC)),
        make_run(job, at_ms=0, token=9, started=datetime(1969, 12, 31, 23, 59, tzinfo=UTC)),
        make_run(
            job, at_ms=0, token=2, outcome="error", started=datetime(9999, 12, 30, tzinfo=UTC)
        ),
        make_run(job, at_ms=0, token=1, started=datetime(9999, 12, 29, tzinfo=UTC)),
    ]
    random.Random(seed).shuffle(runs)  # noqa: S311 -- a seeded order of the runs, not a secret
    async with opened(EtcdLockStore(etcd_url, prefix=prefix)) as store:
        for recorded in range(1, len(runs) + 1):
            await store.record_run(runs[recorded - 1])
            assert await store.job_records([job]) == [kept(runs[:recorded])]


@pytest.mark.etcd
@pytest.mark.parametrize("seed", range(3))
async def test_racing_stores_leave_the_newest_run_whole_each_in_one_transaction(
    etcd_url: str, prefix: str, seed: int
) -> None:
    job = unique_key("job")
    runs = [
        make_run(job, at_ms=n // 2, token=n, outcome="ok" if n % 3 else "error") for n in range(32)
    ]
    random.Random(seed).shuffle(runs)  # noqa: S311 -- a seeded order of the runs, not a secret
    calls: list[str] = []

    async def count(request: httpx.Request) -> None:
        calls.append(request.url.path)

    async with contextlib.AsyncExitStack() as stack:
        # four stores, each with connections of its own: the 32 calls reach etcd together
        stores = [
            await stack.enter_async_context(
                opened(
                    EtcdLockStore(
                        etcd_url,
                        prefix=prefix,
                        client=await stack.enter_async_context(
                            httpx.AsyncClient(trust_env=False, event_hooks={"request": [count]})
                        ),
                    )
                )
            )
            for _ in range(4)
        ]
        calls.clear()
        await asyncio.gather(*(stores[n % 4].record_run(run) for n, run in enumerate(runs)))
        assert calls == ["/v3/kv/txn"] * len(runs)
        newest = max(runs, key=lambda run: run.fencing_token or 0)
        newest_ok = max(
            (run for run in runs if run.outcome == "ok"), key=lambda run: run.fencing_token or 0
        )
        assert await stores[0].job_records([job]) == [JobRecord(job, newest, newest_ok)]


@pytest.mark.etcd
async def test_job_records_read_every_job_in_one_range_and_given_jobs_64_to_a_transaction(
    etcd_url: str, prefix: str
) -> None:
    jobs = [f"job {n:03d}" for n in range(70)]
    calls: list[str] = []

    async def count(request: httpx.Request) -> None:
        calls.append(request.url.path)

    async with hooked(etcd_url, prefix, {"request": [count]}) as store:
        runs = [
            make_run(job, at_ms=n, token=n, outcome="ok" if n % 2 else "error")
            for n, job in enumerate(jobs)
        ]
        await asyncio.gather(*(store.record_run(run) for run in runs))
        expected = [JobRecord(run.job, run, run if run.outcome == "ok" else None) for run in runs]
        calls.clear()
        assert await store.job_records() == expected
        assert calls == ["/v3/kv/range"]
        calls.clear()
        assert await store.job_records([*reversed(jobs), "never ran", jobs[0]]) == expected
        assert calls == ["/v3/kv/txn"] * 2
        calls.clear()
        assert await store.job_records([]) == []
        assert calls == []


def test_a_run_whose_token_no_store_hands_out_is_refused_naming_it() -> None:
    with pytest.raises(LockStoreError, match=r"fencing token -2, outside 0\.\.2\*\*53-1"):
        run_value(make_run("job", at_ms=0, token=-2))


# --- job documents --------------------------------------------------------------------------

PAUSED_AT = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def key_of(kv: Mapping[str, Any]) -> str:
    return base64.b64decode(kv["key"]).decode()


@pytest.mark.etcd
async def test_pauses_and_job_states_are_keys_without_a_lease_under_jobs_apart_from_locks(
    etcd_url: str, prefix: str
) -> None:
    job = "nightly \u732b"
    pause = JobPause("reports.*", "stock-taking \u2014 'aisle 7'", "ops", PAUSED_AT, None)
    start = RunStart(job, OpenRun("shop-3001", None, PAUSED_AT), f"job:{job}", "o", ONE_MINUTE_MS)
    async with opened(EtcdLockStore(etcd_url, prefix=prefix)) as store:
        await store.pause_jobs(pause)
        # the run lock's key reads as the job's document name, and stays apart from it
        started = await store.start_run(start)
        assert isinstance(started.taken, Acquired)
        documents = await kvs_under(etcd_url, prefix + "jobs/")
        locks = await lock_kvs(etcd_url, prefix)
        assert await store.job_pauses() == [pause]
        assert await store.job_states([job]) == [
            JobState(job, OpenRun("shop-3001", started.taken.fencing_token, PAUSED_AT), 0, None)
        ]
    assert sorted(map(key_of, documents)) == [
        f"{prefix}jobs/job:{job}",
        f"{prefix}jobs/pause:reports.*",
    ]
    assert all(kv.get("lease", "0") == "0" for kv in documents)
    assert [key_of(kv) for kv in locks] == [f"{prefix}locks/job:{job}"]
    assert locks[0]["lease"] != "0"


@pytest.mark.etcd
async def test_a_swap_writes_only_over_the_document_it_names_each_in_one_transaction(
    etcd_url: str, prefix: str
) -> None:
    # the longest job key, in characters of three bytes each
    name = "job:" + "\u732b" * MAX_KEY_LENGTH
    calls: list[str] = []

    async def count(request: httpx.Request) -> None:
        calls.append(request.url.path)

    async with hooked(etcd_url, prefix, {"request": [count]}) as store:
        calls.clear()
        assert await store.swap_document(name, None, "one") is True
        assert await store.swap_document(name, None, "two") is False
        assert await store.swap_document(name, "two", "three") is False
        assert await store.swap_document(name, "one", "two") is True
        assert await store.swap_document(name, "one", None) is False
        assert calls == ["/v3/kv/txn"] * 5
        assert await store.read_documents([name]) == ["two"]
        assert await store.swap_document(name, "two", None) is True
        assert await store.read_documents([name]) == [None]
        assert await store.swap_document(name, None, "again") is True
        assert await store.read_documents([name]) == ["again"]


@pytest.mark.etcd
async def test_of_racing_swaps_over_one_document_exactly_one_goes_through(
    etcd_url: str, prefix: str
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        # four stores, each with connections of its own: the swaps reach etcd together
        stores = [
            await stack.enter_async_context(opened(EtcdLockStore(etcd_url, prefix=prefix)))
            for _ in range(4)
        ]
        assert await stores[0].swap_document("job:race", None, "read") is True
        swapped = await asyncio.gather(
            *(stores[n % 4].swap_document("job:race", "read", f"by {n}") for n in range(32))
        )
        assert swapped.count(True) == 1
        assert await stores[1].read_documents(["job:race"]) == [f"by {swapped.index(True)}"]


@pytest.mark.etcd
async def test_documents_are_read_128_names_to_a_transaction_and_listed_in_one_range(
    etcd_url: str, prefix: str
) -> None:
    names = [f"job:{n:03d}" for n in range(200)]
    kept = {name: f"state {n}" for n, name in enumerate(names) if n % 3}
    neighbour = prefix[:-1] + "-neighbour/"
    calls: list[str] = []

    async def count(request: httpx.Request) -> None:
        calls.append(request.url.path)

    async with (
        hooked(etcd_url, prefix, {"request": [count]}) as store,
        opened(EtcdLockStore(etcd_url, prefix=neighbour)) as other,
    ):
        await asyncio.gather(*(store.swap_document(n, None, d) for n, d in kept.items()))
        assert await store.swap_document("pause:reports.*", None, "paused") is True
        assert await other.swap_document("job:000", None, "the neighbour's") is True
        asked = [*reversed(names), "job:never", names[1]]
        calls.clear()
        assert await store.read_documents(asked) == [kept.get(name) for name in asked]
        assert calls == ["/v3/kv/txn"] * 2
        calls.clear()
        assert await store.documents_under("job:") == kept
        assert await store.documents_under("pause:") == {"pause:reports.*": "paused"}
        assert calls == ["/v3/kv/range"] * 2
        calls.clear()
        assert await store.read_documents([]) == []
        assert calls == []


@pytest.mark.etcd
async def test_discard_prefix_deletes_the_job_documents_with_the_locks_and_runs(
    etcd_url: str, prefix: str
) -> None:
    async with opened(EtcdLockStore(etcd_url, prefix=prefix)) as store:
        assert isinstance(await store.acquire("k", "me", ONE_MINUTE_MS), Acquired)
        await store.record_run(make_run("nightly", at_ms=0, token=1))
        await store.pause_jobs(JobPause("reports.*", "", "ops", PAUSED_AT, None))
        await store.note_missed("nightly", PAUSED_AT)
        # a lock, the last run and the last success, a pause, a job state
        assert await store.discard_prefix() == 5
        assert await kvs_under(etcd_url, prefix) == []


# --- release wake-ups -----------------------------------------------------------------------


@pytest.mark.etcd
async def test_a_release_a_break_and_an_expiry_wake_the_followers_of_the_key(
    etcd_url: str, prefix: str
) -> None:
    heard: asyncio.Queue[str] = asyncio.Queue()
    async with (
        opened(EtcdLockStore(etcd_url, prefix=prefix)) as store,
        opened(EtcdLockStore(etcd_url, prefix=prefix)) as elsewhere,
        store.follow_releases(heard.put_nowait) as follower,
        follower.following("released"),
        follower.following("broken"),
        follower.following("expired"),
    ):
        for key in ("released", "broken", "expired", "unfollowed"):
            await elsewhere.acquire(key, "holder", SHORT_TTL_MS if key == "expired" else 60_000)
        await elsewhere.release("released", "holder")
        await elsewhere.release("unfollowed", "holder")
        assert await asyncio.wait_for(heard.get(), 5) == "released"
        await elsewhere.break_lock("broken")
        assert await asyncio.wait_for(heard.get(), 5) == "broken"
        # the 2 s lease expires, etcd deletes the key: its waiters hear it at once
        assert await asyncio.wait_for(heard.get(), 5) == "expired"
        assert heard.empty()


@pytest.mark.etcd
async def test_following_returns_only_once_the_watch_is_established(
    etcd_url: str, prefix: str
) -> None:
    heard: asyncio.Queue[str] = asyncio.Queue()
    async with (
        opened(EtcdLockStore(etcd_url, prefix=prefix)) as store,
        store.follow_releases(heard.put_nowait) as follower,
    ):
        for round_number in range(10):
            key = f"k{round_number}"
            await store.acquire(key, "holder", ONE_MINUTE_MS)
            async with follower.following(key):
                # no wait between entering and releasing: the watch must already be there
                await store.release(key, "holder")
                assert await asyncio.wait_for(heard.get(), 5) == key


async def test_following_an_unreachable_server_warns_and_does_not_raise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = EtcdLockStore(dead_url(), timeout=1)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    async with store.follow_releases(lambda _key: None) as follower, follower.following("k"):
        pass
    assert "could not watch 'k'" in caplog.text
    await store.aclose()


# --- errors ---------------------------------------------------------------------------------


async def test_an_unreachable_server_is_a_store_error_naming_the_fix() -> None:
    url = dead_url()
    store = EtcdLockStore(url)
    with pytest.raises(
        LockStoreError, match=r"could not connect to etcd at .*--listen-client-urls"
    ):
        await store.open()
    with pytest.raises(LockStoreError, match=r"could not connect"):
        await store.acquire("k", "owner", ONE_MINUTE_MS)


async def test_a_server_that_does_not_answer_is_a_store_error_within_the_timeout() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        store = EtcdLockStore(url, timeout="300ms")
        async with asyncio.timeout(5):
            with pytest.raises(LockStoreError, match=r"did not answer /v3/\S+ within 0.3 s"):
                await store.acquire("k", "owner", ONE_MINUTE_MS)


@pytest.mark.etcd
async def test_a_dead_member_is_skipped_for_a_live_one(etcd_url: str, prefix: str) -> None:
    async with opened(EtcdLockStore([dead_url(), etcd_url], prefix=prefix)) as store:
        assert isinstance(await store.acquire("k", "owner", ONE_MINUTE_MS), Acquired)
        assert await store.release("k", "owner") is True


@contextlib.contextmanager
def throwaway_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """Start an etcd of this test's own, even where a shared server is configured."""
    with contextlib.ExitStack() as stack:
        with pytest.MonkeyPatch.context() as patch:
            # a shared server must not be stopped: start one of our own even if it is set
            patch.delenv(ETCD_URL_ENV, raising=False)
            try:
                url = stack.enter_context(etcd_server())
            except ServerUnavailable as unavailable:
                if request.config.getoption("--require-servers"):
                    pytest.fail(f"--require-servers: no throwaway etcd: {unavailable}")
                pytest.skip(f"no throwaway etcd: {unavailable}")
        yield url


@pytest.mark.etcd
async def test_a_server_that_stops_turns_calls_into_store_errors(
    request: pytest.FixtureRequest,
) -> None:
    with contextlib.ExitStack() as server:
        store = EtcdLockStore(server.enter_context(throwaway_server(request)))
        await store.open()
        try:
            assert isinstance(await store.acquire("k", "owner", ONE_MINUTE_MS), Acquired)
            server.close()
            with pytest.raises(LockStoreError, match=r"could not connect|connection to etcd"):
                await store.renew("k", "owner", ONE_MINUTE_MS)
            with pytest.raises(LockStoreError, match=r"could not connect|connection to etcd"):
                await store.release("k", "owner")
        finally:
            await store.aclose()


# --- faults: a renewal never shortens a lock's life -----------------------------------------


class Faults(httpx.AsyncBaseTransport):
    """Carries the store's calls to a real etcd, and loses the ones a test names.

    ``lost[path]`` is ``"before"`` (the call never reaches etcd: a timeout), ``"late"`` (it
    reaches etcd 1.5 s late, as through a slow network) or ``"after"`` (etcd applies it, its
    answer never comes: a timeout); ``lost_once[path]`` is the same for the next call only.
    ``members`` names the hosts of the endpoints the store was given: each of them is
    ``etcd_url``; ``unreachable`` ones time out connecting, and ``lose_member`` times out the
    next call sent to it.
    """

    def __init__(self, etcd_url: str, members: tuple[str, ...] = ()) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._etcd = httpx.URL(etcd_url)
        self._members = members
        self.lost: dict[str, str] = {}
        self.lost_once: dict[str, str] = {}
        self.unreachable: set[str] = set()
        self.lose_member: str | None = None
        self.asked: list[tuple[str, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host, path = request.url.host, request.url.path
        self.asked.append((host, path))
        if host in self._members:
            if host in self.unreachable:
                raise httpx.ConnectTimeout("no route to the member", request=request)
            if host == self.lose_member:
                self.lose_member = None
                raise httpx.ReadTimeout("no answer", request=request)
            request.url = request.url.copy_with(host=self._etcd.host, port=self._etcd.port)
        lost = self.lost_once.pop(path, None) or self.lost.get(path)
        if lost == "before":
            raise httpx.ConnectTimeout("never sent", request=request)
        if lost == "late":
            await wait_for_real(1_500)
        response = await self._inner.handle_async_request(request)
        if lost == "after":
            await response.aread()
            raise httpx.ReadTimeout("answer lost", request=request)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class Withheld(httpx.AsyncBaseTransport):
    """Carries the store's calls to a real etcd; holds back the answer of the one it is told.

    The first call to ``path`` whose body contains ``marker`` reaches etcd (and is applied);
    its answer waits until ``let_go`` is set. ``applied`` is set once etcd has answered it.
    """

    def __init__(self, path: str, marker: str) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._path, self._marker = path, marker
        self.applied, self.let_go = asyncio.Event(), asyncio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        withheld = (
            not self.applied.is_set()
            and request.url.path == self._path
            and self._marker in request.content.decode()
        )
        response = await self._inner.handle_async_request(request)
        if withheld:
            await response.aread()
            self.applied.set()
            await self.let_go.wait()
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.fixture
def one_lease_for_every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """New keys keep joining the first lease, however late: lets a test place two on one."""
    monkeypatch.setattr("leaselock.stores.etcd._leases.JOIN_WINDOW_S", 3_600.0)


@pytest.mark.etcd
@pytest.mark.usefixtures("one_lease_for_every_key")
async def test_a_renewal_is_refused_while_another_owners_acquire_of_its_broken_key_is_in_flight(
    etcd_url: str, prefix: str
) -> None:
    # the key of a broken lock, taken again by another owner of the same store under the
    # same lease: the lease's key list shows the key, but it is no longer the first owner's
    withheld = Withheld("/v3/kv/txn", b64("second"))
    async with (
        httpx.AsyncClient(transport=withheld, trust_env=False) as client,
        opened(EtcdLockStore(etcd_url, client=client, prefix=prefix)) as store,
        opened(EtcdLockStore(etcd_url, prefix=prefix)) as operator,
    ):
        assert isinstance(await store.acquire("k", "first", ONE_MINUTE_MS), Acquired)
        assert await operator.break_lock("k") is not None
        second = asyncio.create_task(store.acquire("k", "second", ONE_MINUTE_MS))
        await withheld.applied.wait()
        assert await store.renew("k", "first", ONE_MINUTE_MS) is False
        withheld.let_go.set()
        assert isinstance(await second, Acquired)
        assert await store.renew("k", "second", ONE_MINUTE_MS) is True


@pytest.mark.etcd
@pytest.mark.usefixtures("one_lease_for_every_key")
async def test_a_renewal_is_refused_when_its_key_changed_owner_while_etcd_listed_the_lease(
    etcd_url: str, prefix: str
) -> None:
    withheld = Withheld("/v3/lease/timetolive", '"keys"')
    async with (
        httpx.AsyncClient(transport=withheld, trust_env=False) as client,
        opened(EtcdLockStore(etcd_url, client=client, prefix=prefix)) as store,
        opened(EtcdLockStore(etcd_url, prefix=prefix)) as operator,
    ):
        assert isinstance(await store.acquire("k", "first", ONE_MINUTE_MS), Acquired)
        renewal = asyncio.create_task(store.renew("k", "first", ONE_MINUTE_MS))
        await withheld.applied.wait()
        # while the lease's key list is on its way: the lock is broken, and the key taken
        # again under the same lease by another owner of this store
        assert await operator.break_lock("k") is not None
        assert isinstance(await store.acquire("k", "second", ONE_MINUTE_MS), Acquired)
        withheld.let_go.set()
        assert await renewal is False
        assert await store.renew("k", "second", ONE_MINUTE_MS) is True


async def lease_of(url: str, prefix: str, key: str) -> str:
    (kv,) = await kvs_under(url, f"{prefix}locks/{key}")
    lease: str = kv["lease"]
    return lease


@pytest.mark.etcd
@pytest.mark.parametrize("lost", ["before", "late"])
async def test_a_moved_lock_outlives_its_holders_deadline_whatever_its_keep_alive_does(
    etcd_url: str, prefix: str, lost: str
) -> None:
    ttl_ms = 4_000
    faults = Faults(etcd_url)
    async with (
        httpx.AsyncClient(transport=faults, trust_env=False) as client,
        opened(EtcdLockStore(etcd_url, client=client, prefix=prefix)) as store,
        opened(EtcdLockStore(etcd_url, prefix=prefix)) as other,
    ):
        loop = asyncio.get_running_loop()
        start = loop.time()
        assert isinstance(await store.acquire("k", "o_k", ttl_ms), Acquired)
        assert isinstance(await store.acquire("j", "o_j", ttl_ms), Acquired)
        await wait_for_real(300)
        # an empty lease 0.3 s younger than k's: the open one of the class from now on
        assert isinstance(await store.acquire("tmp", "o_tmp", ttl_ms), Acquired)
        assert await store.release("tmp", "o_tmp") is True
        await wait_for_real(round((start + 2.0 - loop.time()) * 1000))
        sent = loop.time()
        assert list(
            await store.renew_many([Renewal("k", "o_k", ttl_ms), Renewal("j", "o_j", ttl_ms)])
        ) == [True, True]
        deadline = sent + ttl_ms / 1000
        # the empty lease has 0.6 s left; j's holder stopped, so k's renewal moves k
        await wait_for_real(round((start + 3.7 - loop.time()) * 1000))
        faults.lost["/v3/lease/keepalive"] = lost
        with contextlib.suppress(LockStoreError):
            await store.renew("k", "o_k", ttl_ms)
        # the empty lease is surely gone 1 s after its time (etcd's sweep); k must not be
        while loop.time() < deadline - 0.3:
            taken = await other.acquire("k", "intruder", ttl_ms)
            assert isinstance(taken, NotAcquired), (
                f"another owner took k {deadline - loop.time():.2f} s before its holder's deadline"
            )
            await wait_for_real(100)


@pytest.mark.etcd
async def test_a_renewal_never_confirms_a_lock_another_owner_took_under_the_same_lease(
    etcd_url: str, prefix: str
) -> None:
    faults = Faults(etcd_url)
    async with (
        httpx.AsyncClient(transport=faults, trust_env=False) as client,
        opened(EtcdLockStore(etcd_url, client=client, prefix=prefix, timeout="1s")) as store,
        opened(EtcdLockStore(etcd_url, prefix=prefix)) as admin,
    ):
        assert isinstance(await store.acquire("x", "o1", ONE_MINUTE_MS), Acquired)
        lease = await lease_of(etcd_url, prefix, "x")
        assert (await admin.break_lock("x")) is not None
        # another owner's acquire through `store`, applied, whose answers never come
        faults.lost["/v3/kv/txn"] = "after"
        with pytest.raises(LockStoreError, match="did not answer /v3/kv/txn"):
            await store.acquire("x", "o2", ONE_MINUTE_MS)
        del faults.lost["/v3/kv/txn"]
        assert await lease_of(etcd_url, prefix, "x") == lease, "o2's put was meant to apply"
        assert await store.renew("x", "o1", ONE_MINUTE_MS) is False


@pytest.mark.etcd
async def test_a_lock_moved_by_a_renewal_whose_answer_was_lost_is_renewed_later(
    etcd_url: str, prefix: str
) -> None:
    faults = Faults(etcd_url)
    async with (
        httpx.AsyncClient(transport=faults, trust_env=False) as client,
        opened(EtcdLockStore(etcd_url, client=client, prefix=prefix, timeout="1s")) as store,
    ):
        assert isinstance(await store.acquire("k", "o_k", ONE_MINUTE_MS), Acquired)
        assert isinstance(await store.acquire("j", "o_j", ONE_MINUTE_MS), Acquired)
        await wait_for_real(300)
        before = await lease_of(etcd_url, prefix, "k")
        faults.lost["/v3/kv/txn"] = "after"
        with pytest.raises(LockStoreError, match="did not answer /v3/kv/txn"):
            await store.renew("k", "o_k", ONE_MINUTE_MS)  # j is not renewed: k moves
        del faults.lost["/v3/kv/txn"]
        assert await lease_of(etcd_url, prefix, "k") != before, "the move was meant to apply"
        assert await store.release("j", "o_j") is True
        assert await store.renew("k", "o_k", ONE_MINUTE_MS) is True


@pytest.mark.etcd
async def test_a_member_that_times_out_connecting_is_skipped_for_the_next(
    etcd_url: str, prefix: str
) -> None:
    faults = Faults(etcd_url, members=("member-a", "member-b"))
    async with (
        httpx.AsyncClient(transport=faults, trust_env=False) as client,
        opened(
            EtcdLockStore(
                ["http://member-a:2379", "http://member-b:2379"], client=client, prefix=prefix
            )
        ) as store,
    ):
        faults.unreachable.add("member-a")
        assert isinstance(await store.acquire("k", "owner", ONE_MINUTE_MS), Acquired)
        assert ("member-b", "/v3/kv/txn") in faults.asked


@contextlib.asynccontextmanager
async def two_members(etcd_url: str, prefix: str) -> AsyncIterator[tuple[Faults, EtcdLockStore]]:
    """A store given two members, ``member-a`` and ``member-b``: both are ``etcd_url``."""
    faults = Faults(etcd_url, members=("member-a", "member-b"))
    async with (
        httpx.AsyncClient(transport=faults, trust_env=False) as client,
        opened(
            EtcdLockStore(
                ["http://member-a:2379", "http://member-b:2379"], client=client, prefix=prefix
            )
        ) as store,
    ):
        faults.asked.clear()
        yield faults, store


@pytest.mark.etcd
async def test_a_read_a_member_did_not_answer_is_asked_of_the_next_member_at_once(
    etcd_url: str, prefix: str
) -> None:
    async with two_members(etcd_url, prefix) as (faults, store):
        faults.lose_member = "member-a"
        assert await store.read_lock("k") is None
        assert faults.asked == [("member-a", "/v3/kv/range"), ("member-b", "/v3/kv/range")]
        # later calls go to the member that answered
        assert await store.read_lock("k") is None
        assert faults.asked[2:] == [("member-b", "/v3/kv/range")]


@pytest.mark.etcd
async def test_a_break_whose_answer_was_lost_is_not_sent_again(etcd_url: str, prefix: str) -> None:
    async with two_members(etcd_url, prefix) as (faults, store):
        faults.lose_member = "member-a"
        with pytest.raises(LockStoreError, match="not sent again, since it may have been applied"):
            await store.break_lock("k")
        # sent again, it would answer that nothing held the key it may have just freed
        assert faults.asked == [("member-a", "/v3/kv/deleterange")]


@pytest.mark.etcd
async def test_a_swap_whose_answer_was_lost_is_not_sent_again(etcd_url: str, prefix: str) -> None:
    async with two_members(etcd_url, prefix) as (faults, store):
        faults.lost_once["/v3/kv/txn"] = "after"
        with pytest.raises(LockStoreError, match="not sent again, since it may have been applied"):
            await store.swap_document("job:a", None, "one")
        assert faults.asked == [("member-a", "/v3/kv/txn")]
        # it went through: sent again, it would have answered False, and its caller, reading
        # "one" back, would have made its change over its own
        assert await store.read_documents(["job:a"]) == ["one"]


@pytest.mark.etcd
async def test_an_acquire_whose_answer_was_lost_is_sent_again_and_knows_its_own_write(
    etcd_url: str, prefix: str
) -> None:
    async with two_members(etcd_url, prefix) as (faults, store):
        faults.lost_once["/v3/kv/txn"] = "after"
        taken = await store.acquire("k", "owner", ONE_MINUTE_MS)
        assert isinstance(taken, Acquired)
        (kv,) = await lock_kvs(etcd_url, prefix)
        assert base64.b64decode(kv["value"]).decode() == "owner"
        assert taken.fencing_token == int(kv["create_revision"])
        assert [path for _, path in faults.asked].count("/v3/kv/txn") == 2
        assert await store.renew("k", "owner", ONE_MINUTE_MS) is True
        # the owner asking again is still refused: only a resent txn is told its own write
        assert await store.acquire("k", "owner", ONE_MINUTE_MS) == NotAcquired(holder="owner")


@pytest.mark.etcd
async def test_an_acquire_sent_again_to_a_key_another_owner_took_is_refused(
    etcd_url: str, prefix: str
) -> None:
    async with (
        two_members(etcd_url, prefix) as (faults, store),
        opened(EtcdLockStore(etcd_url, prefix=prefix)) as other,
    ):
        assert isinstance(await other.acquire("k", "other", ONE_MINUTE_MS), Acquired)
        faults.lost_once["/v3/kv/txn"] = "after"
        assert await store.acquire("k", "owner", ONE_MINUTE_MS) == NotAcquired(holder="other")


@pytest.mark.etcd
async def test_breaking_a_lock_already_gone_leaves_its_lease_mates_kept_in_place(
    etcd_url: str, prefix: str
) -> None:
    async with (
        opened(EtcdLockStore(etcd_url, prefix=prefix)) as store,
        opened(EtcdLockStore(etcd_url, prefix=prefix)) as elsewhere,
    ):
        assert isinstance(await store.acquire("x", "o1", ONE_MINUTE_MS), Acquired)
        assert isinstance(await store.acquire("y", "o2", ONE_MINUTE_MS), Acquired)
        lease = await lease_of(etcd_url, prefix, "y")
        await wait_for_real(300)  # the lease takes no new key any more
        assert await elsewhere.release("x", "o1") is True
        assert await store.break_lock("x") is None
        # y is now alone under its lease: kept alive there, not moved away
        assert await store.renew("y", "o2", ONE_MINUTE_MS) is True
        assert await lease_of(etcd_url, prefix, "y") == lease
