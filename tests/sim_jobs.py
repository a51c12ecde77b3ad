"""The jobs the simulation's tests run (and benchmarks/bench_simulate.py): a tick export.

Each run exports every tick that came since the last one exported, as the shop's invoice export
uploads every order not exported yet: it reads what was exported, works for 20 s (the upload),
then appends each tick it exported to the list. Unfenced, a run paused past its lease appends
what the run that took over appended too; fenced, the list refuses it.
"""

from __future__ import annotations

from typing import Final

import leaselock
from leaselock import current_lock
from leaselock.testing import SimulatedInstance

EXPORTED: Final = "exported"
"""The list each tick is appended to, once (the invariant's resource)."""
TICK_MS: Final = 60_000
"""The export runs every minute."""
UPLOAD: Final = "20s"
"""How long a run's upload takes."""


class TickExport:
    """Appends every tick not exported yet to the list ``exported``; fenced, or not."""

    def __init__(self, instance: SimulatedInstance, *, fenced: bool) -> None:
        self._instance = instance
        self._exported = instance.resource(EXPORTED)
        self._fenced = fenced

    @leaselock.on_one_instance(key="tick-export")
    @leaselock.without_overlapping()
    async def export(self) -> None:
        """Export the ticks since the last export, under the run's lock."""
        lock = current_lock()
        token = lock.fencing_token if self._fenced and lock is not None else None
        # a fenced read tells the list this run's token: an older run's later write is refused
        done = [tick for tick in self._exported.read(fencing_token=token) if isinstance(tick, int)]
        due = range(max(done, default=0) + 1, self._instance.clock.now_ms() // TICK_MS + 1)
        await self._instance.sleep(UPLOAD)
        for tick in due:
            self._exported.write(tick, fencing_token=token)


def unfenced_export(instance: SimulatedInstance) -> None:
    """Set up one instance with the unfenced export, every minute."""
    job = TickExport(instance, fenced=False)
    instance.locks.register(job)
    instance.every(TICK_MS / 1000, job.export)


def fenced_export(instance: SimulatedInstance) -> None:
    """Set up one instance with the fenced export, every minute."""
    job = TickExport(instance, fenced=True)
    instance.locks.register(job)
    instance.every(TICK_MS / 1000, job.export)
