"""What PostgresLockStore says at open when its grants reach standbys asynchronously.

A primary that streams to standbys without synchronous replication acknowledges a grant before
any standby has it. A failover to such a standby can lose the latest grants and renewals: for
at most one ttl, two holders may each believe they hold a key. Fencing tokens still never go
back (``NEXT_TOKEN_SQL`` places every token drawn after a promotion above the old primary's),
so fenced writes stay safe. The store says so once, at open, where it matters: a server with
physical standbys attached. A single server, or one whose commits wait for a standby, hears
nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from ._executors import Row

__all__ = ["REPLICATION_SQL", "Replication", "replication_from_row", "say_replication"]

# $1 the token sequence (a quoted name, as text) -> one row: (how many physical standbys stream
# from this server, synchronous_standby_names, this session's synchronous_commit, the timeline
# the server writes on, the timeline band the sequence is in (NULL where the role may not read
# it)). A logical subscriber is no failover target, and pg_basebackup only copies: neither
# counts. Needs no privilege: a role without pg_read_all_stats sees the standbys' rows (not
# their states), and the settings, which decide: with standbys named, a commit waits until
# they confirm it (or forever, if none of those attached is named: then nothing is
# acknowledged that a failover could lose).
REPLICATION_SQL: Final = """\
SELECT count(*),
       current_setting('synchronous_standby_names'),
       current_setting('synchronous_commit'),
       CAST(CAST('x' || left(pg_walfile_name(pg_current_wal_insert_lsn()), 8) AS bit(32))
            AS bigint),
       CASE WHEN has_sequence_privilege(CAST($1 AS text), 'SELECT,USAGE')
            THEN pg_sequence_last_value(to_regclass(CAST($1 AS text))) >> 40 END
  FROM pg_stat_replication AS standby
 WHERE standby.application_name IS DISTINCT FROM 'pg_basebackup'
   AND standby.state IS DISTINCT FROM 'backup'
   AND standby.pid NOT IN (SELECT slot.active_pid FROM pg_replication_slots AS slot
                            WHERE slot.slot_type = 'logical' AND slot.active_pid IS NOT NULL)"""

# the synchronous_commit levels at which a commit waits for the standbys that
# synchronous_standby_names names (remote_write: in the standby's memory, not yet on its disk)
_WAITING_LEVELS: Final = frozenset({"on", "remote_write", "remote_apply"})

_log = logging.getLogger("leaselock.stores.postgres")


@dataclass(frozen=True, slots=True)
class Replication:
    """The standbys of the server a store opened on, as its role may see them."""

    standbys: int
    standby_names: str
    synchronous_commit: str
    timeline: int
    sequence_band: int | None

    @property
    def asynchronous(self) -> bool:
        """Whether a grant is acknowledged before any standby has it, while standbys exist."""
        if not self.standbys:
            return False
        return not (self.standby_names.strip() and self.synchronous_commit in _WAITING_LEVELS)

    @property
    def band_ahead(self) -> bool:
        """Whether the sequence is in the band of a later timeline than the server's.

        The timelines started again at 1 (``pg_upgrade``, a dump restored into a new
        cluster) while the sequence kept its band: a promotion lifts tokens again only once
        the timeline passes that band.
        """
        return self.sequence_band is not None and self.sequence_band > self.timeline - 1

    def why(self) -> str:
        """What makes the grants asynchronous, in the settings' own words."""
        if not self.standby_names.strip():
            return "synchronous_standby_names is empty"
        return f"synchronous_commit is {self.synchronous_commit!r} for this role"


def replication_from_row(row: Row) -> Replication:
    """Read :data:`REPLICATION_SQL`'s row."""
    return Replication(
        standbys=int(row[0]),
        standby_names=str(row[1]),
        synchronous_commit=str(row[2]),
        timeline=int(row[3]),
        sequence_band=None if row[4] is None else int(row[4]),
    )


def say_replication(store: str, replication: Replication) -> None:
    """Log, at WARNING, what a failover can cost when the grants are not replicated in step."""
    if not replication.asynchronous:
        return
    count = replication.standbys
    tokens = (
        "Fencing tokens still never go back (after a promotion they are placed above every "
        "token the old primary handed out), so fenced writes stay safe."
    )
    if replication.band_ahead and replication.sequence_band is not None:
        later = replication.sequence_band + 1
        tokens = (
            f"And the token sequence is in the band of timeline {later}, above this server's "
            f"timeline {replication.timeline} (pg_upgrade, or a dump restored into a new "
            "cluster, starts the timelines again at 1): until a promotion brings the timeline "
            f"past {later}, a failover does not place the tokens above the old primary's, and "
            "a token may be handed out again."
        )
    _log.warning(
        "%s: the server streams to %d standby%s asynchronously (%s). A failover to one can "
        "lose the latest grants and renewals: for at most one ttl, two holders may each "
        "believe they hold a key. %s To keep one holder across failovers, make the commits "
        "wait for a standby: set synchronous_standby_names (e.g. 'ANY 1 (*)') on the primary "
        "and synchronous_commit to on or remote_apply, and let your failover tool promote only "
        "a synchronous standby",
        store,
        count,
        "" if count == 1 else "s",
        replication.why(),
        tokens,
    )
