"""PostgreSQL failover: a primary with a streaming standby, crashed and promoted, again and again.

Without synchronous replication a promoted standby can lack the old primary's last grants: for
at most one ttl two holders may each believe they hold a key, which fencing covers, and the
tokens must still never go back (every token drawn after a promotion is above the old
primary's). With synchronous replication nothing acknowledged is lost, and every rule holds.

The servers are this test's own (``postgres_replicas``), whatever LEASELOCK_TEST_POSTGRES_URL
says. The failover runs are leaselock.testing's torture check with one more fault, a failover;
run longer with LEASELOCK_FAILOVER_SECONDS=240 (the numbers of docs/stores/postgres.md), and
with LEASELOCK_FAILOVER_TTL_MS=2000 for leases that outlive a failover.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from helpers import unique_key
from leaselock.stores import Acquired, Grant, Queued
from leaselock.stores._common._job_control import OpenRun, RunStart
from leaselock.stores.postgres import PostgresLockStore
from leaselock.testing.check import check_store
from leaselock.testing.history import HistoryReport
from postgres_replicas import PostgresReplicas, postgres_replicas
from servers import ServerUnavailable

pytestmark = [pytest.mark.postgres, pytest.mark.nemesis]

SECONDS = float(os.environ.get("LEASELOCK_FAILOVER_SECONDS", "12"))
# a longer ttl lets a lease granted in a lost window outlive the failover: a two-holder window
TTL_MS = int(os.environ.get("LEASELOCK_FAILOVER_TTL_MS", "400"))
WORKERS = 3
SEQUENCE = "leaselock_fencing_token_seq"
# draws the old primary makes that its standby never sees: more than the 32 values a sequence
# logs ahead in its WAL, so the standby's sequence surely lags the old primary's tokens
LOST_DRAWS = 40
# how long a lossy failover waits for grants the standby will miss, at most
LOSS_WINDOW_S = 1.5
# the rules a failover without synchronous replication must still keep
FENCING_RULES = ("tokens went back", "a token given twice", "a stale fenced write accepted")


@contextlib.contextmanager
def replicas_or_skip(
    request: pytest.FixtureRequest, *, synchronous: bool
) -> Iterator[PostgresReplicas]:
    try:
        with postgres_replicas(synchronous=synchronous) as replicas:
            yield replicas
    except ServerUnavailable as unavailable:
        if request.config.getoption("--require-servers"):
            pytest.fail(f"--require-servers: no PostgreSQL primary and standby: {unavailable}")
        pytest.skip(f"no PostgreSQL primary and standby to fail over: {unavailable}")


@pytest.fixture(scope="module")
def async_replicas(request: pytest.FixtureRequest) -> Iterator[PostgresReplicas]:
    with replicas_or_skip(request, synchronous=False) as replicas:
        yield replicas


@pytest.fixture(scope="module")
def sync_replicas(request: pytest.FixtureRequest) -> Iterator[PostgresReplicas]:
    with replicas_or_skip(request, synchronous=True) as replicas:
        yield replicas


def wait_until(done: Callable[[], bool], within_s: float) -> bool:
    """Poll ``done`` on the real servers for at most ``within_s``; whether it came true."""
    deadline = time.perf_counter() + within_s
    while not done():
        if time.perf_counter() > deadline:
            return False
        time.sleep(0.01)  # noqa: TID251 -- waiting for real servers and processes
    return True


def sequence_value(replicas: PostgresReplicas) -> int:
    ((value,),) = replicas.query(f"SELECT last_value FROM {SEQUENCE}")
    return int(str(value))


def commits_waiting_for_the_standby(replicas: PostgresReplicas) -> int:
    ((count,),) = replicas.query(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
    )
    return int(str(count))


def failing_over(replicas: PostgresReplicas, *, synchronous: bool) -> Callable[[], None]:
    """The check's failover: in turns, one that loses what the standby missed, and a plain one.

    A plain failover kills the primary and promotes its standby at once (it missed little or
    nothing). A lossy one kills the standby first and waits until the primary has handed out
    grants it will never see (without synchronous replication) or until a grant waits for it
    (with), then kills the primary and promotes the standby, which comes back with only what it
    had. Either way a new standby is made from the new primary.
    """
    made = 0

    def fail_over() -> None:
        nonlocal made
        made += 1
        if made % 2:
            replicas.crash_standby()
            if synchronous:
                wait_until(lambda: commits_waiting_for_the_standby(replicas) > 0, LOSS_WINDOW_S)
            else:
                start = sequence_value(replicas)
                wait_until(lambda: sequence_value(replicas) >= start + LOST_DRAWS, LOSS_WINDOW_S)
        replicas.fail_over()

    return fail_over


def two_holder_windows_ms(report: HistoryReport) -> list[float]:
    """How long each stretch of time with two or more live leases of one key lasted, in ms."""
    windows = []
    by_key: dict[str, list[tuple[int, int]]] = {}
    for lease in report.leases:
        by_key.setdefault(lease.key, []).append((lease.start_ns, 1))
        by_key.setdefault(lease.key, []).append((lease.end_ns, -1))
    for edges in by_key.values():
        live, since = 0, 0
        # an end before a start at the same instant: leases that only touch do not overlap
        for at, step in sorted(edges):
            if live == 1 and step == 1:
                since = at
            elif live == 2 and step == -1:
                windows.append((at - since) / 1e6)
            live += step
    return windows


def run_summary(label: str, replicas: PostgresReplicas, report: HistoryReport) -> str:
    windows = two_holder_windows_ms(report)
    rules = [violation.rule for violation in report.violations]
    return (
        f"{label}: {replicas.failovers} failovers, {report.acquisitions} acquisitions, "
        f"{len(windows)} two-holder windows (longest {max(windows, default=0):.0f} ms), "
        + ", ".join(f"{rules.count(rule)} {rule}" for rule in FENCING_RULES)
    )


# --- failover runs -------------------------------------------------------------------------


def test_tokens_never_go_back_across_asynchronous_failovers(
    async_replicas: PostgresReplicas, tmp_path: Path
):
    result = check_store(
        async_replicas.url,
        seconds=SECONDS,
        at_most=SECONDS * 3,
        workers=WORKERS,
        ttl=f"{TTL_MS}ms",
        failover=failing_over(async_replicas, synchronous=False),
        directory=tmp_path,
    )
    report = result.report
    print(f"\n{run_summary('asynchronous', async_replicas, report)}\n{result.summary()}")  # noqa: T201 -- the run's counts, for the record

    # the first failover loses what the standby missed
    assert result.faults["failovers"] >= 1, result.summary()
    assert report.acquisitions >= 10, result.summary()
    assert report.writes_accepted >= 5, result.summary()
    broken = [v for v in report.violations if v.rule in FENCING_RULES]
    assert not broken, result.summary()
    # what asynchronous replication may cost: a lease lost to a failover, for at most a ttl
    assert all(v.rule == "two live leases" for v in report.violations), result.summary()
    assert all(window < TTL_MS for window in two_holder_windows_ms(report)), result.summary()


def test_no_rule_is_broken_across_synchronous_failovers(
    sync_replicas: PostgresReplicas, tmp_path: Path
):
    result = check_store(
        sync_replicas.url,
        seconds=SECONDS,
        at_most=SECONDS * 3,
        workers=WORKERS,
        ttl=f"{TTL_MS}ms",
        failover=failing_over(sync_replicas, synchronous=True),
        directory=tmp_path,
    )
    report = result.report
    print(f"\n{run_summary('synchronous', sync_replicas, report)}\n{result.summary()}")  # noqa: T201 -- the run's counts, for the record

    assert result.faults["failovers"] >= 1, result.summary()
    assert not report.violations, result.summary()
    assert report.acquisitions >= 10, result.summary()
    assert report.writes_accepted >= 5, result.summary()


# --- one failover, step by step --------------------------------------------------------------


async def draw_every_way(store: PostgresLockStore, keys: dict[str, str], owner: str) -> list[int]:
    """Draw a token on each path that draws one; the tokens, in the order of ``keys``."""
    tokens = []
    taken = await store.acquire(keys["acquire"], owner, 60_000)
    assert isinstance(taken, Acquired)
    tokens.append(taken.fencing_token)
    assert await store.release(keys["acquire"], owner)
    started = await store.start_run(
        RunStart(
            keys["run"],
            OpenRun("here", None, datetime.now(UTC)),
            take_key=keys["run"],
            owner=owner,
            ttl_ms=60_000,
        )
    )
    assert isinstance(started.taken, Acquired)
    tokens.append(started.taken.fencing_token)
    assert await store.release(keys["run"], owner)
    grants: list[Grant] = []
    async with store.wait_in_line(grants.append) as line:
        assert line is not None
        queued = await line.queue(keys["queue"], owner, 60_000, 60_000, 1)
        assert isinstance(queued, Acquired)
        tokens.append(queued.fencing_token)
        assert await store.release(keys["queue"], owner)
        assert isinstance(await store.acquire(keys["grant"], "holder", 60_000), Acquired)
        assert isinstance(await line.queue(keys["grant"], owner, 60_000, 60_000, 2), Queued)
        assert await store.release(keys["grant"], "holder")
        granted = await store.read_lock(keys["grant"])
        assert granted is not None
        assert granted.owner == owner
        tokens.append(granted.fencing_token)
        assert await store.release(keys["grant"], owner)
    return tokens


async def test_tokens_after_a_promotion_are_above_every_token_the_old_primary_handed_out(
    async_replicas: PostgresReplicas,
):
    keys = {path: unique_key(path) for path in ("acquire", "run", "queue", "grant")}
    timeline = async_replicas.timeline()
    before = PostgresLockStore.from_url(async_replicas.url)
    try:
        await draw_every_way(before, keys, "first")
        async_replicas.wait_until_replayed()
        async_replicas.crash_standby()
        # what the standby never sees: tokens on every path, and the sequence far past its own
        lost = [
            token
            for round_ in range(LOST_DRAWS // 4)
            for token in await draw_every_way(before, keys, f"lost-{round_}")
        ]
    finally:
        await before.aclose()
    async_replicas.crash_primary()

    async_replicas.promote()
    after = PostgresLockStore.from_url(async_replicas.url)
    try:
        # at once: the timeline is read where it changes at the promotion, not at a checkpoint
        drawn = await draw_every_way(after, keys, "after")
        fresh = await after.acquire(unique_key("fresh"), "after", 60_000)
    finally:
        await after.aclose()
        async_replicas.rebuild_standby()

    assert async_replicas.timeline() == timeline + 1
    assert isinstance(fresh, Acquired)
    assert min(*drawn, fresh.fencing_token) > max(lost), (drawn, fresh, max(lost))


# --- what the store says at start ------------------------------------------------------------


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "leaselock.stores.postgres" and "standby" in record.getMessage()
    ]


async def test_a_store_says_once_at_start_that_its_grants_reach_the_standby_asynchronously(
    async_replicas: PostgresReplicas, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="leaselock.stores.postgres")
    store = PostgresLockStore.from_url(async_replicas.url)
    try:
        await store.open()
        await store.acquire(unique_key("told"), "owner", 60_000)
        await store.open()
    finally:
        await store.aclose()
        await store.aclose()

    (message,) = said(caplog)
    assert [r.levelno for r in caplog.records if r.getMessage() == message] == [logging.WARNING]
    assert "streams to 1 standby asynchronously" in message
    assert "synchronous_standby_names is empty" in message
    assert "two holders" in message
    assert "never go back" in message
    assert "synchronous_commit" in message


async def test_a_store_whose_tokens_are_in_a_later_timelines_band_says_a_failover_may_repeat_them(
    async_replicas: PostgresReplicas, caplog: pytest.LogCaptureFixture
):
    # what pg_upgrade leaves: the timelines start again at 1, the sequence keeps its band
    table = f"upgraded_{uuid.uuid4().hex[:8]}"
    made = PostgresLockStore.from_url(async_replicas.url, table=table, sequence=f"{table}_seq")
    await made.create_schema()
    await made.aclose()
    later = async_replicas.timeline() + 4
    async_replicas.query(f"SELECT setval('{table}_seq', {(later - 1) << 40})")
    caplog.clear()
    caplog.set_level(logging.INFO, logger="leaselock.stores.postgres")
    store = PostgresLockStore.from_url(async_replicas.url, table=table, sequence=f"{table}_seq")
    try:
        await store.open()
    finally:
        await store.aclose()

    (message,) = said(caplog)
    assert f"the band of timeline {later}" in message
    assert "a token may be handed out again" in message


async def test_a_store_without_the_right_to_read_standbys_is_told_too(
    async_replicas: PostgresReplicas, caplog: pytest.LogCaptureFixture
):
    async_replicas.query("CREATE ROLE app LOGIN")
    async_replicas.query("GRANT CREATE ON SCHEMA public TO app")
    caplog.set_level(logging.INFO, logger="leaselock.stores.postgres")
    store = PostgresLockStore.from_url(async_replicas.url.replace("postgres@", "app@"))
    try:
        await store.open()
    finally:
        await store.aclose()

    assert len(said(caplog)) == 1


async def test_a_store_whose_commits_wait_for_the_standby_says_nothing(
    sync_replicas: PostgresReplicas, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="leaselock.stores.postgres")
    store = PostgresLockStore.from_url(sync_replicas.url)
    try:
        await store.open()
    finally:
        await store.aclose()

    assert said(caplog) == []


async def test_a_store_whose_role_commits_locally_is_told_despite_a_synchronous_standby(
    sync_replicas: PostgresReplicas, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="leaselock.stores.postgres")
    store = PostgresLockStore.from_url(f"{sync_replicas.url}&synchronous_commit=local")
    try:
        await store.open()
    finally:
        await store.aclose()

    (message,) = said(caplog)
    assert "synchronous_commit is 'local'" in message


async def test_a_store_on_a_server_without_standbys_says_nothing_of_them(
    postgres_url: str, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="leaselock.stores.postgres")
    store = PostgresLockStore.from_url(postgres_url)
    try:
        await store.open()
    finally:
        await store.aclose()

    assert said(caplog) == []
