"""Drawing fencing tokens on Redis so that they never go back, failovers included.

Every script that hands out a token draws it with :data:`DRAW`'s ``draw(counter, source)``.
Beside the counter sits its *source* key: the replication id (``master_replid`` of
``INFO replication``) of the master that drew last, written by the same script as the counter,
so a replica receives both in one step or neither.

A master whose replication id differs from the source's is not the one that drew last: a
replica promoted by Sentinel, Redis Cluster or an operator (a promotion gives a new id), or a
master restarted (its id may change). Replication is asynchronous, so it may have missed the
last increments of the master before it, and that master may even go on serving clients that
cannot see the promotion (a split brain). Its counter first moves up by :data:`TOKEN_GAP` and
the source takes its id: its tokens start above every token the other master handed out,
unless that one handed out more than ``TOKEN_GAP`` tokens that never reached this one.

- The bound: ``2**32`` increments unreplicated at the promotion plus handed out in a split
  brain afterwards, over four billion: 11 hours of a split brain at 100 000 acquisitions a
  second. Tokens stay below ``2**53`` for more than two million moves (``2**21``), whatever
  caused them: a move per failover or restart.
- A master restarted with its data (AOF) and a new id moves once, harmlessly: its tokens go on
  growing. One restarted with the SAME id is trusted, so it must not lose writes: run it with
  ``appendonly yes`` and ``appendfsync always``, as before.
- Failovers one after the other: each promotion gives a new id, so each new master moves once,
  at its first draw; a node that comes back as a replica takes the new master's data, source
  included.
- A deployment from before the source key existed has none: its first draw moves once, and
  tokens go on growing from there.

The id is read inside the script, on the master that draws, at the moment it draws: nothing is
cached by a client, so no failover can make a stale id trusted. ``INFO`` is allowed in scripts,
and costs about 3 us of the server's time; the source is written only when it changes.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DRAW", "SOURCE_NAME", "TOKEN_GAP"]

TOKEN_GAP: Final = 2**32
# the source key's name beside the counter's
SOURCE_NAME: Final = "fencing-source"

DRAW: Final = f"""
-- draw(counter, source) -> the next fencing token of counter (a number). source holds the
-- replication id of the master that drew last; another master (a promoted replica, a restart)
-- may have missed its last increments, so the counter first moves up by {TOKEN_GAP}, past every
-- token the other could have handed out, and source takes this master's id: in this script,
-- so a replica gets the counter and its source together
local function draw(counter, source)
  local id = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
  if not id then
    error('leaselock: INFO replication shows no master_replid, which fencing needs')
  end
  if redis.call('GET', source) ~= id then
    redis.call('INCRBY', counter, '{TOKEN_GAP}')
    redis.call('SET', source, id)
  end
  return redis.call('INCR', counter)
end
"""
