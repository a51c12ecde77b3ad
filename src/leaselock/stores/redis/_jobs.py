"""The job-control half of RedisLockStore: its Lua scripts, and how their replies read.

Two hashes beside the runs hash: ``<prefix>jobs`` (fields ``open:<job>``, ``failures:<job>``,
``missed:<job>``, ``buffered:<job>``, ``tick:<job>``: the last started tick as JSON) and
``<prefix>pauses`` (one field per pause target, its pause as JSON).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

from .._common._capabilities import RunRecord, from_epoch_ms, run_from_json
from .._common._job_control import (
    JobPause,
    JobState,
    OpenRun,
    RunStartAnswer,
    open_run_from_json,
    open_run_json,
    pause_from_json,
    tick_run_from_json,
    tick_run_json,
)
from .._common._protocol import Acquired, NotAcquired
from ._keyspace import text
from ._scripts import KEEP_NEWER_RUN, script
from ._tokens import DRAW

__all__ = [
    "END_RUN",
    "FAILURES_FIELD",
    "JOB_SCRIPTS",
    "MISSED_FIELD",
    "OPEN_FIELD",
    "START_RUN",
    "TICK_FIELD",
    "closing_open_run",
    "job_states_from_fields",
    "open_run_prefix",
    "pauses_from_fields",
    "start_answer",
    "tick_run_prefix",
]

OPEN_FIELD: Final = "open:"
FAILURES_FIELD: Final = "failures:"
MISSED_FIELD: Final = "missed:"
TICK_FIELD: Final = "tick:"
_UNSET_TAIL: Final = "null}"

START_RUN: Final = script(
    "start_run",
    DRAW
    + """
-- KEYS[1] = pauses hash, KEYS[2] = jobs hash, KEYS[3] = runs hash,
-- KEYS[4] = run lock key, KEYS[5] = fencing-token counter, KEYS[6] = the counter's source
-- (all three absent: no lock to take)
-- ARGV[1] = job, ARGV[2] = owner, ARGV[3] = ttl_ms, ARGV[4] = the open run as JSON up to its
-- token, ARGV[5] = the run's token when no lock is taken ('' for none), ARGV[6] = '1' to ignore
-- pauses, ARGV[7] = now as epoch ms (the caller's wall clock, that of a pause's until_ms),
-- ARGV[8] = when busy: 'skip', 'buffer' (note one trigger) or 'replace' (take it anyway),
-- ARGV[9] = the run's tick as epoch ms ('' for none), ARGV[10] = the tick as JSON up to its token
-- -> {status, token or holder, pause target, pause, open run before, last run, failures, last
--    tick}, status 'paused' (nothing written), 'ran' (the tick is at or before the last started
--    tick, which the reply carries: nothing written), 'busy' (the lock is held: nothing written
--    but a noted trigger), 'started' (the tick, if any, is kept as the last, with the run's token)
local job = ARGV[1]
local open_before = redis.call('HGET', KEYS[2], 'open:' .. job)
local last = redis.call('HGET', KEYS[3], 'last:' .. job)
local failures = tonumber(redis.call('HGET', KEYS[2], 'failures:' .. job) or '0')
if ARGV[6] ~= '1' then
  local fields = redis.call('HGETALL', KEYS[1])
  local found, found_pause = false, false
  for i = 1, #fields, 2 do
    local target = fields[i]
    local covers
    if string.sub(target, -1) == '*' then
      covers = string.sub(job, 1, #target - 1) == string.sub(target, 1, -2)
    else
      covers = job == target
    end
    if covers and (not found or target < found) then
      local until_ms = cjson.decode(fields[i + 1])['until_ms']
      if until_ms == nil or until_ms == cjson.null or until_ms > tonumber(ARGV[7]) then
        found, found_pause = target, fields[i + 1]
      end
    end
  end
  if found then
    return {'paused', false, found, found_pause, open_before, last, failures, false}
  end
end
-- checked in the step that writes the tick: of starts racing for one tick, one goes on
local last_tick = ARGV[9] ~= '' and redis.call('HGET', KEYS[2], 'tick:' .. job)
if last_tick and tonumber(ARGV[9]) <= cjson.decode(last_tick)['at_ms'] then
  return {'ran', false, false, false, open_before, last, failures, last_tick}
end
local token = ARGV[5]
if #KEYS == 6 then
  if ARGV[8] == 'replace' then
    redis.call('SET', KEYS[4], ARGV[2], 'PX', ARGV[3])
  elseif not redis.call('SET', KEYS[4], ARGV[2], 'PX', ARGV[3], 'NX') then
    if ARGV[8] == 'buffer' then
      redis.call('HSET', KEYS[2], 'buffered:' .. job, '1')
    end
    return {'busy', redis.call('GET', KEYS[4]), false, false, open_before, last, failures, false}
  end
  token = string.format('%d', draw(KEYS[5], KEYS[6]))
end
if token == '' then
  token = 'null'
end
redis.call('HSET', KEYS[2], 'open:' .. job, ARGV[4] .. token .. '}')
redis.call('HDEL', KEYS[2], 'buffered:' .. job)
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[2], 'tick:' .. job, ARGV[10] .. token .. '}')
end
return {'started', token, false, false, open_before, last, failures, false}
""",
)

END_RUN: Final = script(
    "end_run",
    KEEP_NEWER_RUN
    + """
-- KEYS[1] = runs hash, KEYS[2] = jobs hash
-- ARGV[1] = job, ARGV[2] = the run as JSON, ARGV[3] = '1' if it went well, ARGV[4] = its
-- outcome, ARGV[5] = the open run as START_RUN kept it for this run, ARGV[6] = its started_at_ms,
-- ARGV[7] = its token (-1: none)
-- -> 1 if a trigger was noted while this run was open (cleared now), else 0. Records the run
--    (unless the run kept started later), clears the open run if it is this one, counts the
--    failure streak.
local job = ARGV[1]
local served = 0
local started, token = tonumber(ARGV[6]), tonumber(ARGV[7])
keep(KEYS[1], 'last:' .. job, ARGV[2], started, token)
if ARGV[3] == '1' then
  keep(KEYS[1], 'success:' .. job, ARGV[2], started, token)
end
if redis.call('HGET', KEYS[2], 'open:' .. job) == ARGV[5] then
  redis.call('HDEL', KEYS[2], 'open:' .. job)
  served = redis.call('HDEL', KEYS[2], 'buffered:' .. job)
end
if ARGV[4] == 'ok' then
  redis.call('HDEL', KEYS[2], 'failures:' .. job)
elseif ARGV[4] == 'error' then
  redis.call('HINCRBY', KEYS[2], 'failures:' .. job, 1)
end
return served
""",
)

JOB_SCRIPTS: Final = (START_RUN, END_RUN)


def open_run_prefix(run: OpenRun) -> str:
    """Return ``run`` as JSON up to its token, which START_RUN appends (and the closing brace)."""
    return open_run_json(run, None).removesuffix(_UNSET_TAIL)


def tick_run_prefix(tick: datetime, instance: str) -> str:
    """Return a started tick as JSON up to its token, which START_RUN appends (and the brace)."""
    return tick_run_json(tick, instance, None).removesuffix(_UNSET_TAIL)


def closing_open_run(run: RunRecord) -> str:
    """Return the open run START_RUN kept for ``run``: END_RUN clears it if it is still there."""
    return open_run_json(
        OpenRun(run.instance, None, run.started_at, run.trigger), run.fencing_token
    )


def start_answer(reply: Sequence[object], took: bool) -> RunStartAnswer:
    """Read START_RUN's reply; ``took`` says whether a lock was asked for."""
    status, token_or_holder, target, pause, open_before, last, failures, last_tick = reply
    kept_pause = None if not target else pause_from_json(text(target), text(pause))
    last_run = run_from_json(text(last)) if last else None
    taken: Acquired | NotAcquired | None = None
    if took and text(status) == "started":
        taken = Acquired(int(text(token_or_holder)))
    elif took and text(status) == "busy":
        taken = NotAcquired(None if not token_or_holder else text(token_or_holder))
    return RunStartAnswer(
        taken,
        kept_pause,
        open_run_from_json(None if not open_before else text(open_before)),
        last_run,
        int(text(failures)),
        tick_run_from_json(text(last_tick)) if text(status) == "ran" else None,
    )


def pauses_from_fields(fields: dict[str, str]) -> list[JobPause]:
    """Return the pauses of the pauses hash, by target."""
    return [pause_from_json(target, fields[target]) for target in sorted(fields)]


def job_states_from_fields(fields: dict[str, str], jobs: Sequence[str] | None) -> list[JobState]:
    """Return the states the jobs hash keeps, of ``jobs`` (all when ``None``), by job."""
    names = {field.partition(":")[2] for field in fields}
    wanted = names if jobs is None else names & set(jobs)
    states = []
    for job in sorted(wanted):
        missed = fields.get(MISSED_FIELD + job)
        state = JobState(
            job,
            open_run_from_json(fields.get(OPEN_FIELD + job)),
            int(fields.get(FAILURES_FIELD + job) or 0),
            None if missed is None else from_epoch_ms(int(missed)),
            tick_run_from_json(fields.get(TICK_FIELD + job)),
        )
        if state.worth_listing:
            states.append(state)
    return states
