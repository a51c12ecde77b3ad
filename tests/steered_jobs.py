"""A job `leaselock run --job steered_jobs:import_feed` imports, as an application's would be."""

from __future__ import annotations

import leaselock


@leaselock.without_overlapping(key="feed:import")
async def import_feed() -> str:
    """Return what a run returns, with the trigger it ran for."""
    run = leaselock.current_run()
    return f"imported ({'outside a run' if run is None else run.trigger})"
