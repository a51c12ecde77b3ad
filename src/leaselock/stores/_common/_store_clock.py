"""The store's own wall clock, for instances to measure how far theirs is from it.

A scheduler fires a job's tick on its instance's wall clock; the store decides on its own.
Instances whose clocks disagree by more than the job layer's one-second guard can each run
one tick (``docs/jobs.md``). A store that keeps a clock of its own says what it reads, and
every instance measures its offset to it. A store on the instance's own host (in-memory,
SQLite) has no other clock to compare; etcd's leases count durations, never wall time, and it
shows no clock.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["SupportsStoreClock"]


@runtime_checkable
class SupportsStoreClock(Protocol):
    """A store that reads its server's wall clock."""

    async def store_time_ms(self) -> int:
        """Return the server's wall-clock time now, in milliseconds since the Unix epoch (UTC).

        One round trip; the caller takes its middle as the moment it was read.
        """
        ...
