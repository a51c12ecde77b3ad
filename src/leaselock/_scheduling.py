"""Scheduling: the jobs' runs and the elections' campaigns of one started Locks, and their end."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, final

from ._clock import Clock
from ._election import Campaign, ElectionSpec
from ._engine import LockEngine
from ._events import Events
from ._job_runs import JobRuns
from ._registry import Registry

__all__ = ["Scheduling"]

_log = logging.getLogger("leaselock")


@final
class Scheduling:
    """Owns the job runs and the campaigns; shuts them down in the order the design gives."""

    __slots__ = (
        "_campaigns",
        "_clock",
        "_default_ttl_ms",
        "_engine",
        "_events",
        "_registry",
        "_tasks",
        "runs",
    )

    def __init__(
        self,
        engine: LockEngine,
        clock: Clock,
        events: Events,
        registry: Registry,
        *,
        default_ttl_ms: int,
    ) -> None:
        """Create the runs and campaigns of a Locks that is starting."""
        self._engine = engine
        self._clock = clock
        self._events = events
        self._registry = registry
        self._default_ttl_ms = default_ttl_ms
        self.runs = JobRuns(engine, clock, events, default_ttl_ms)
        self._campaigns: dict[ElectionSpec, Campaign] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Campaign once in every election now: after start, each has a leader somewhere."""
        await asyncio.gather(*(campaign.start() for campaign in self._new_campaigns()))

    def adopt_new_elections(self) -> None:
        """Start campaigning in elections registered after start."""
        for campaign in self._new_campaigns():
            self._spawn(campaign.start())

    def _new_campaigns(self) -> list[Campaign]:
        fresh = []
        for spec, participant in self._registry.participants():
            if spec in self._campaigns:
                continue
            campaign = Campaign(
                spec,
                participant,
                self._engine,
                self._clock,
                self._events,
                default_ttl_ms=self._default_ttl_ms,
                spawn=self._spawn,
            )
            self._campaigns[spec] = campaign
            fresh.append(campaign)
        return fresh

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self, grace_ms: int) -> None:
        """Step down from elections, let runs finish (up to ``grace_ms``), hand leases back."""
        await asyncio.gather(*(campaign.stop() for campaign in self._campaigns.values()))
        await self.runs.drain(grace_ms)
        await self.runs.hand_back_leases()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
