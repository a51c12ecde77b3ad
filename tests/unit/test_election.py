"""Leader election: one leader among instances, handover on pause, shutdown and failure."""

import asyncio
import logging
import threading
from typing import Self

import pytest

import leaselock
from helpers import SlowlyToldStore
from leaselock import Event, Lock, Locks, LocksConfigurationError, current_lock
from leaselock.stores import Acquired, AcquireResult, InMemoryLockStore
from leaselock.testing import ManualClock, wait_all_tasks_blocked


@leaselock.leader_election("inventory:warehouse-feed")
class WarehouseFeed:
    """Connects to the warehouse's alerts while leading."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.log: list[tuple[str, int]] = []
        self.fail_on_acquire = False

    async def on_leadership_acquired(self, lock: Lock) -> None:
        assert current_lock() is lock
        self.log.append(("acquired", lock.fencing_token))
        if self.fail_on_acquire:
            raise RuntimeError("warehouse refused the connection")

    async def on_leadership_lost(self, lock: Lock) -> None:
        self.log.append(("lost", lock.fencing_token))


class Cluster:
    """Three instances, each with its Locks and its feed."""

    def __init__(self, store: InMemoryLockStore, clocks: list[ManualClock]) -> None:
        self.locks = [Locks(store=store, clock=clock, ttl="30s") for clock in clocks]
        self.feeds = [WarehouseFeed(f"instance-{n}") for n in range(len(clocks))]
        self.events: list[Event] = []
        for locks, feed in zip(self.locks, self.feeds, strict=True):
            locks.register(feed)
            locks.events.subscribe(self.events.append, "leadership-acquired", "leadership-lost")

    async def __aenter__(self) -> Self:
        for locks in self.locks:
            await locks.start()
        await wait_all_tasks_blocked()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for locks in self.locks:
            await locks.aclose()

    def leaders(self) -> list[str]:
        return [feed.name for feed in self.feeds if feed.log and feed.log[-1][0] == "acquired"]


async def test_exactly_one_of_three_instances_leads(store, clock, caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.INFO, logger="leaselock"):
        async with Cluster(store, [clock] * 3) as cluster:
            await clock.advance("1m")
            assert cluster.leaders() == ["instance-0"]
            assert [len(feed.log) for feed in cluster.feeds] == [1, 0, 0]
    token = cluster.feeds[0].log[0][1]
    assert f'Leading "inventory:warehouse-feed" (fencing token {token})' in caplog.text
    assert 'Stepped down from "inventory:warehouse-feed"' in caplog.text


async def test_a_paused_leader_is_replaced_after_ttl_and_learns_at_its_next_renewal(store, clock):
    paused = ManualClock()
    async with Cluster(store, [paused, clock, clock]) as cluster:
        old = cluster.feeds[0].log[0][1]
        await clock.advance("31s")
        await wait_all_tasks_blocked()
        assert cluster.feeds[1].log == [("acquired", cluster.feeds[1].log[0][1])]
        assert cluster.feeds[1].log[0][1] > old
        assert cluster.feeds[0].log == [("acquired", old)], "a paused leader cannot know yet"
        await paused.advance("10s")
        await wait_all_tasks_blocked()
        assert cluster.feeds[0].log == [("acquired", old), ("lost", old)]
        lost = [e for e in cluster.events if e.type == "leadership-lost"]
        assert [(e.key, e.reason) for e in lost] == [  # type: ignore[union-attr]
            ("inventory:warehouse-feed", "lost")
        ]


async def test_a_leader_that_shuts_down_hands_over_at_once(store, clock):
    async with Cluster(store, [clock] * 3) as cluster:
        await cluster.locks[0].aclose()
        assert cluster.feeds[0].log[-1][0] == "lost"
        # no time passes: the release itself wakes the standbys' campaigns
        await wait_all_tasks_blocked()
        assert len(cluster.leaders()) == 1
        assert cluster.leaders()[0] in {"instance-1", "instance-2"}
        released = [e for e in cluster.events if e.type == "leadership-lost"]
        assert [e.reason for e in released] == ["released"]  # type: ignore[union-attr]


async def test_a_standby_finds_a_release_made_before_its_following_was_in_place(clock):
    # the leader is another process: its release reaches nothing in this one
    store = SlowlyToldStore(clock)
    held = await store.acquire("inventory:warehouse-feed", "leader-elsewhere", 60_000)
    assert isinstance(held, Acquired)
    async with Cluster(store, [clock]) as cluster:
        assert cluster.leaders() == []
        assert await store.release("inventory:warehouse-feed", "leader-elsewhere")
        store.gate.set()
        await wait_all_tasks_blocked()
        assert cluster.leaders() == ["instance-0"], "no time passed: the following's own look"
        assert clock.now_ms() == 0


async def test_an_acquired_hook_that_raises_steps_down(
    store, clock, caplog: pytest.LogCaptureFixture
):
    cluster = Cluster(store, [clock] * 2)
    cluster.feeds[0].fail_on_acquire = True
    with caplog.at_level(logging.ERROR, logger="leaselock"):
        async with cluster:
            assert cluster.feeds[0].log[0][0] == "acquired"
            assert cluster.feeds[0].log[1][0] == "lost"
            cluster.feeds[0].fail_on_acquire = False
            await clock.advance("10s")
            await wait_all_tasks_blocked()
            assert len(cluster.leaders()) == 1
    assert "Leadership of 'inventory:warehouse-feed' failed; stepping down" in caplog.text
    assert "warehouse refused the connection" in caplog.text


async def test_a_leader_that_steps_down_leaves_the_key_to_the_others_until_its_next_campaign(
    store, clock
):
    cluster = Cluster(store, [clock] * 2)
    cluster.feeds[0].fail_on_acquire = True
    async with cluster:
        await wait_all_tasks_blocked()
        # no time passed: the step-down's release woke the standby, not the one that left
        assert [entry[0] for entry in cluster.feeds[0].log] == ["acquired", "lost"]
        assert cluster.leaders() == ["instance-1"]
        await clock.advance("10s")
        await wait_all_tasks_blocked()
        assert cluster.leaders() == ["instance-1"]


class AnsweredOnceOpen(SlowlyToldStore):
    """A :class:`SlowlyToldStore` whose acquisitions are answered only once :attr:`answer`
    is set, so the following can go in place while a campaign waits for the store."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.answer = asyncio.Event()

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        await self.answer.wait()
        return await super().acquire(key, owner, ttl_ms)


async def test_a_look_asked_for_during_the_first_campaign_leaves_the_key_after_a_step_down(clock):
    # the following's own look comes while the first campaign waits for the store; the look
    # it asks for must not take back the key the failed term then handed back
    store = AnsweredOnceOpen(clock)
    cluster = Cluster(store, [clock])
    cluster.feeds[0].fail_on_acquire = True
    starting = asyncio.create_task(cluster.__aenter__())
    await wait_all_tasks_blocked()
    store.gate.set()
    await wait_all_tasks_blocked()
    store.answer.set()
    await starting
    try:
        await wait_all_tasks_blocked()
        await clock.advance("1ms")
        await wait_all_tasks_blocked()
        assert [entry[0] for entry in cluster.feeds[0].log] == ["acquired", "lost"]
        cluster.feeds[0].fail_on_acquire = False
        await clock.advance("10s")
        await wait_all_tasks_blocked()
        assert cluster.leaders() == ["instance-0"], "its next timed campaign takes the key"
    finally:
        await cluster.__aexit__(None, None, None)


async def test_a_duty_runs_while_leading_and_is_cancelled_when_leadership_is_lost(store, clock):
    started = asyncio.Event()
    cancelled: list[int] = []

    @leaselock.leader_election("cache:warmer")
    async def warm_cache(lock: Lock) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(lock.fencing_token)
            raise

    async with Locks(store=store, clock=clock) as locks:
        locks.register(warm_cache)
        await asyncio.wait_for(started.wait(), timeout=5)
        del store._rows["cache:warmer"]
        await clock.advance("10s")
        await wait_all_tasks_blocked()
        assert len(cancelled) == 1


async def test_a_duty_that_returns_steps_down_and_campaigns_again(store, clock):
    terms: list[int] = []

    @leaselock.leader_election("report:once-per-term")
    async def report(lock: Lock) -> None:
        terms.append(lock.fencing_token)

    async with Locks(store=store, clock=clock) as locks:
        locks.register(report)
        await wait_all_tasks_blocked()
        assert len(terms) == 1
        assert "report:once-per-term" not in store._rows
        await clock.advance("10s")
        await wait_all_tasks_blocked()
        assert len(terms) == 2


async def test_sync_hooks_run_in_a_worker_thread(store, clock):
    threads: list[int] = []

    @leaselock.leader_election("sync:feed")
    class SyncFeed:
        def on_leadership_acquired(self, lock: Lock) -> None:
            threads.append(threading.get_ident())

        def on_leadership_lost(self, lock: Lock) -> None:
            threads.append(threading.get_ident())

    async with Locks(store=store, clock=clock) as locks:
        locks.register(SyncFeed)
        await wait_all_tasks_blocked()
    assert len(threads) == 2
    assert threading.get_ident() not in threads


async def test_a_bound_election_class_is_made_at_start(store, clock):
    made: list[str] = []
    locks = Locks(store=store, clock=clock)

    @locks.leader_election("bound:feed")
    class Feed:
        def __init__(self) -> None:
            made.append("made")

        async def on_leadership_acquired(self, lock: Lock) -> None: ...

        async def on_leadership_lost(self, lock: Lock) -> None: ...

    async with locks:
        assert made == ["made"]
        assert "bound:feed" in store._rows


async def test_an_election_class_that_needs_arguments_must_be_registered(store, clock):
    locks = Locks(store=store, clock=clock)
    locks.register(WarehouseFeed)
    with pytest.raises(
        LocksConfigurationError, match=r"cannot be made without arguments.*register"
    ):
        await locks.start()


def test_bad_election_targets_are_refused():
    class NoHooks:
        pass

    with pytest.raises(LocksConfigurationError, match="has no on_leadership_acquired or"):
        leaselock.leader_election("k")(NoHooks)

    def sync_duty(lock: Lock) -> None: ...

    with pytest.raises(LocksConfigurationError, match="async duty"):
        leaselock.leader_election("k")(sync_duty)
    with pytest.raises(LocksConfigurationError, match="key is empty"):
        leaselock.leader_election("")


async def test_stepping_down_runs_the_lost_hook_while_the_lease_is_still_held(store, clock):
    held_in_hook: list[bool] = []

    @leaselock.leader_election("feed:orderly")
    class Feed:
        async def on_leadership_acquired(self, lock: Lock) -> None: ...

        async def on_leadership_lost(self, lock: Lock) -> None:
            held_in_hook.append(lock.held)
            held_in_hook.append("feed:orderly" in store._rows)

    async with Locks(store=store, clock=clock) as locks:
        locks.register(Feed)
        await wait_all_tasks_blocked()
    assert held_in_hook == [True, True]
    assert "feed:orderly" not in store._rows


async def test_no_new_term_starts_before_the_lost_hook_of_the_last_one_has_run(store, clock):
    hook_may_finish = asyncio.Event()
    log: list[str] = []

    @leaselock.leader_election("feed:one-term-at-a-time")
    class Feed:
        async def on_leadership_acquired(self, lock: Lock) -> None:
            log.append(f"acquired {lock.fencing_token}")

        async def on_leadership_lost(self, lock: Lock) -> None:
            log.append(f"losing {lock.fencing_token}")
            await hook_may_finish.wait()
            log.append(f"lost {lock.fencing_token}")

    async with Locks(store=store, clock=clock) as locks:
        locks.register(Feed)
        await wait_all_tasks_blocked()
        del store._rows["feed:one-term-at-a-time"]
        await clock.advance("10s")
        await clock.advance("10s")
        await wait_all_tasks_blocked()
        assert log == ["acquired 1", "losing 1"]
        hook_may_finish.set()
        await wait_all_tasks_blocked()
        await clock.advance("10s")
        await wait_all_tasks_blocked()
        assert log[:3] == ["acquired 1", "losing 1", "lost 1"]
        assert log[3].startswith("acquired ")


async def test_a_term_lost_to_a_pause_before_it_began_calls_neither_hook(store, clock):
    feed = WarehouseFeed("paused-at-the-wrong-moment")
    locks = Locks(store=store, clock=clock, ttl="30s")
    locks.register(feed)
    won: list[Event] = []

    def pause_right_after_winning(event: Event) -> None:
        if not won:
            won.append(event)
            clock.jump("30s")

    locks.events.subscribe(pause_right_after_winning, "leadership-acquired")
    async with locks:
        await clock.advance(0)
        lost_term = won[0].fencing_token
        assert ("acquired", lost_term) not in feed.log
        assert ("lost", lost_term) not in feed.log
        await clock.advance("10s")
        assert [event for event, _ in feed.log] == ["acquired"]
        assert feed.log[0][1] > (lost_term or 0)
