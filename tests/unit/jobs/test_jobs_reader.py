"""JobsReader: a job's status from reads a watcher paced, the same as Locks.jobs() answers."""

from __future__ import annotations

from datetime import UTC, datetime

import leaselock
from leaselock import Locks
from leaselock._locks import runtime_of
from leaselock.stores import InMemoryLockStore
from leaselock.testing import FaultyStore, ManualClock


class Feed:
    @leaselock.on_one_instance(key="feed:import")
    @leaselock.without_overlapping()
    async def import_feed(self) -> None:
        """A job that runs on one instance, never beside itself."""


async def test_statuses_from_four_reads_equal_what_jobs_answers(
    store: InMemoryLockStore, clock: ManualClock
):
    faulty = FaultyStore(store, clock=clock)
    async with Locks(store=faulty, clock=clock, instance="shop-1") as locks:
        feed = locks.register(Feed())
        await feed.import_feed()
        await locks.pause("feed:*", note="supplier outage", by="alice")
        expected = await locks.jobs()

        reader = runtime_of(locks).jobs_reader()
        faulty.calls.clear()
        records, states, pauses = (
            await reader.records(),
            await reader.states(),
            await reader.pauses(),
        )
        held = {info.key: info for info in await locks.inspect("")}
        statuses = reader.statuses(records, states, pauses, held, datetime.now(UTC))

    # the lease's own renewals aside, one store call a read
    operator_calls = [c.method for c in faulty.calls if c.method not in {"renew", "acquire"}]
    assert operator_calls == [
        "job_records",
        "job_states",
        "job_pauses",
        "list_locks",
    ]
    assert statuses == expected
    [status] = statuses
    assert (status.owner, status.paused is not None) == ("shop-1", True)
