"""Job run records on Redis: one hash per prefix, fields ``last:<job>`` and ``success:<job>``.

Each field holds a run as a JSON object. The hash is one key, so on a cluster it stays in one
slot, and :data:`RECORD_RUN` writes both fields of a run in one atomic script.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from .._common._capabilities import (
    JobRecord,
    RunRecord,
    epoch_ms,
    job_records_of,
    run_from_json,
    run_row,
)
from ._keyspace import text
from ._scripts import KEEP_NEWER_RUN, script

if TYPE_CHECKING:
    import redis.asyncio
    from redis.asyncio.cluster import RedisCluster

__all__ = ["RECORD_RUN", "read_job_records", "record_run_args"]

LAST_FIELD: Final = "last:"
SUCCESS_FIELD: Final = "success:"

RECORD_RUN: Final = script(
    "record_run",
    KEEP_NEWER_RUN
    + """
-- KEYS[1] = runs hash
-- ARGV[1] = "last:<job>", ARGV[2] = the run as JSON, ARGV[3] = "success:<job>" if it went well,
-- ARGV[4] = its started_at_ms, ARGV[5] = its token (-1: none)
-- -> 1. Each field is written unless the run kept there started later (the same millisecond:
--    has a greater token).
local started, token = tonumber(ARGV[4]), tonumber(ARGV[5])
keep(KEYS[1], ARGV[1], ARGV[2], started, token)
if ARGV[3] ~= '' then
  keep(KEYS[1], ARGV[3], ARGV[2], started, token)
end
return 1
""",
)


def record_run_args(run: RunRecord) -> list[str | int]:
    """The arguments of :data:`RECORD_RUN` that keep ``run`` (its one key is the runs hash)."""
    return [
        LAST_FIELD + run.job,
        json.dumps(run_row(run), ensure_ascii=False, separators=(",", ":")),
        SUCCESS_FIELD + run.job if run.outcome == "ok" else "",
        epoch_ms(run.started_at),
        -1 if run.fencing_token is None else run.fencing_token,
    ]


async def read_job_records(
    client: redis.asyncio.Redis | RedisCluster, runs_key: str, jobs: Sequence[str] | None
) -> list[JobRecord]:
    """Return the records of ``jobs`` (every job when ``None``) kept in ``runs_key``, by job."""
    if jobs is None:
        fields: Mapping[Any, Any] = await client.hgetall(runs_key)
        found = [(text(field), value) for field, value in fields.items()]
    else:
        wanted = [kind + job for job in sorted(set(jobs)) for kind in (LAST_FIELD, SUCCESS_FIELD)]
        values = await client.hmget(runs_key, wanted) if wanted else []
        found = list(zip(wanted, values, strict=True))
    last: dict[str, RunRecord] = {}
    success: dict[str, RunRecord] = {}
    for field, value in found:
        if value is not None:
            kind, _, job = field.partition(":")
            (success if kind + ":" == SUCCESS_FIELD else last)[job] = run_from_json(text(value))
    return job_records_of(last, success)
