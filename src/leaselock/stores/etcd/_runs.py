"""Job run records of EtcdLockStore: ``<prefix>runs/last/<job>`` and ``<prefix>runs/success/<job>``.

Each key holds one run as the JSON object of :func:`run_row`, with no lease, never under
``<prefix>locks/``. Keeping the newer run needs a comparison of runs, and etcd compares a
value only as bytes (``EQUAL``, ``LESS``, ...). So each value starts with its run's
**order**, fixed-width digits that sort as runs do: started_at in epoch ms plus 10**15 (so
that runs before 1970 sort too), then the token plus one (0: no token)::

    {"order":"1001772357400000.0000000000000043","job":"feed:poll","fencing_token":42,...}

and ``value(key) < {"order":"<the new run's order>"`` + ``0xFF`` holds exactly when the kept run
started before the new one, or in the same millisecond with a token no greater (0xFF never
occurs in UTF-8, so it sorts after the rest of any value with the same order).
:func:`record_run_txn` is then one transaction that etcd decides on its own, in raft order.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from ..._errors import LockStoreError
from .._common._capabilities import (
    JobRecord,
    RunRecord,
    epoch_ms,
    job_records_of,
    run_from_json,
    run_row,
)
from .._common._protocol import MAX_FENCING_TOKEN
from ._gateway import decoded, encoded, encoded_bytes, prefix_end
from ._requests import MAX_TXN_OPS

if TYPE_CHECKING:
    from ._gateway import EtcdGateway

__all__ = ["RUNS_SEGMENT", "read_job_records", "record_run_txn", "run_order", "run_value"]

RUNS_SEGMENT: Final = "runs/"
LAST: Final = "last/"
SUCCESS: Final = "success/"
# added to a start's epoch ms: every datetime (year 1 to 9999) is then positive, in 16 digits
_STARTED_OFFSET_MS: Final = 10**15
_JOBS_PER_TXN: Final = MAX_TXN_OPS // 2  # two ranges a job


def run_order(run: RunRecord) -> str:
    """Return ``run``'s order: its start in ms, then its token (none: -1), as fixed-width digits.

    Two orders compare as strings (and as bytes) as the runs compare: the later start is
    greater; in the same millisecond, the greater token.

    Raises:
        LockStoreError: the token is outside 0..2**53-1, which no store hands out.
    """
    token = run.fencing_token
    if token is not None and not 0 <= token <= MAX_FENCING_TOKEN:
        raise LockStoreError(
            f"the run of {run.job!r} has fencing token {token}, outside 0..2**53-1; "
            "record the token its lock or lease was given"
        )
    started = epoch_ms(run.started_at) + _STARTED_OFFSET_MS
    return f"{started:016d}.{0 if token is None else token + 1:016d}"


def run_value(run: RunRecord) -> str:
    """Return the value a run key holds: :func:`run_row` as JSON, its order first."""
    return json.dumps(
        {"order": run_order(run), **run_row(run)}, ensure_ascii=False, separators=(",", ":")
    )


def record_run_txn(runs_prefix: str, run: RunRecord) -> dict[str, object]:
    """Keep ``run`` as its job's last run, and as its last success if its outcome is ``"ok"``.

    One nested txn per key, in one txn (both keys or neither):
    compare: ``create_revision(key) == 0`` (no run kept yet);
    success: put ``key = run``;
    failure: nested txn: compare ``value(key) < {"order":"<order>"`` + ``0xFF`` (the kept run
        started earlier, or in the same millisecond with a token no greater); success: put.
    -> nothing read: a kept run that is newer stays.
    """
    value = encoded(run_value(run))
    below = encoded_bytes(f'{{"order":"{run_order(run)}"'.encode() + b"\xff")
    kinds = (LAST, SUCCESS) if run.outcome == "ok" else (LAST,)
    return {"success": [_keep_newer(runs_prefix + kind + run.job, value, below) for kind in kinds]}


def _keep_newer(key: str, value: str, below: str) -> dict[str, object]:
    encoded_key = encoded(key)
    put = {"request_put": {"key": encoded_key, "value": value}}
    # a VALUE compare of a missing key is always false: absence is its own branch
    newer = {"compare": [{"key": encoded_key, "result": "LESS", "target": "VALUE", "value": below}]}
    return {
        "request_txn": {
            "compare": [
                {"key": encoded_key, "result": "EQUAL", "target": "CREATE", "create_revision": "0"}
            ],
            "success": [put],
            "failure": [{"request_txn": {**newer, "success": [put]}}],
        }
    }


async def read_job_records(
    gateway: EtcdGateway, runs_prefix: str, jobs: Sequence[str] | None
) -> list[JobRecord]:
    """Return the records of ``jobs`` (every job when ``None``) kept under ``runs_prefix``.

    Every job: one range read of ``runs_prefix``. Given jobs: one txn of their two keys' ranges
    per 64 jobs (etcd's ``--max-txn-ops``), sent together.
    """
    if jobs is None:
        start = runs_prefix.encode()
        answer = await gateway.call(
            "kv/range",
            {"key": encoded_bytes(start), "range_end": encoded_bytes(prefix_end(start))},
        )
        return _records(runs_prefix, answer.get("kvs") or [])
    wanted = sorted(set(jobs))
    answers = await asyncio.gather(
        *(
            gateway.call("kv/txn", _ranges_txn(runs_prefix, wanted[at : at + _JOBS_PER_TXN]))
            for at in range(0, len(wanted), _JOBS_PER_TXN)
        )
    )
    kvs = [
        kv
        for answer in answers
        for response in answer.get("responses", ())
        for kv in response.get("response_range", {}).get("kvs") or []
    ]
    return _records(runs_prefix, kvs)


def _ranges_txn(runs_prefix: str, jobs: Sequence[str]) -> dict[str, object]:
    """Read the two run keys of each job -> ``responses[i].response_range.kvs``."""
    return {
        "success": [
            {"request_range": {"key": encoded(runs_prefix + kind + job)}}
            for job in jobs
            for kind in (LAST, SUCCESS)
        ]
    }


def _records(runs_prefix: str, kvs: Iterable[dict[str, Any]]) -> list[JobRecord]:
    last: dict[str, RunRecord] = {}
    success: dict[str, RunRecord] = {}
    for kv in kvs:
        kind, _, job = decoded(kv.get("key")).removeprefix(runs_prefix).partition("/")
        (success if kind + "/" == SUCCESS else last)[job] = run_from_json(decoded(kv.get("value")))
    return job_records_of(last, success)
