"""Job run records of MySQLLockStore: ``<table>_runs``, a "last" and a "success" row per job.

A row holds one whole run. :meth:`RunStatements.record` writes a run's rows in ONE statement,
one round trip: InnoDB locks each row it updates, so concurrent runs of one job take turns on
each row, and a row never mixes the columns of two runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from .._common._capabilities import (
    RUN_ROW_COLUMNS,
    JobRecord,
    RunRecord,
    job_records_from_rows,
    run_row,
)
from ._arguments import check_length
from ._executors import Row
from ._sql import MAX_KEY_BYTES, MAX_OWNER_BYTES

__all__ = ["CREATE_RUNS_SQL", "RunStatements", "records_from_rows"]

# a BLOB holds 65,535 bytes; leaselock cuts an error to 500 characters (2,000 bytes at most)
MAX_ERROR_BYTES: Final = 65_535
MAX_INSTANCE_BYTES: Final = MAX_OWNER_BYTES

# --- SQL: {runs} is a quoted name

# no input, no output. Per job a "last" row (its last run) and a "success" row (its last
# success); times in milliseconds since the Unix epoch, on the running instance's clock. Text is
# VARBINARY (UTF-8), as in the lock table: the job, a lock key, compares byte for byte.
CREATE_RUNS_SQL: Final = f"""\
CREATE TABLE IF NOT EXISTS {{runs}} (
    `job` VARBINARY({MAX_KEY_BYTES}) NOT NULL,
    `kind` ENUM('last', 'success') NOT NULL,
    `instance` VARBINARY({MAX_INSTANCE_BYTES}) NOT NULL,
    `fencing_token` BIGINT NULL,
    `started_at_ms` BIGINT NOT NULL,
    `ended_at_ms` BIGINT NOT NULL,
    `outcome` VARBINARY(64) NOT NULL,
    `error` BLOB NULL,
    `trigger` VARBINARY(64) NOT NULL DEFAULT 'schedule',
    `detected_by` VARBINARY(64) NULL,
    PRIMARY KEY (`job`, `kind`)
) ENGINE=InnoDB"""

# a run's columns besides its job, in the order the statements name them
_COLUMN_NAMES: Final = (
    "instance",
    "fencing_token",
    "started_at_ms",
    "ended_at_ms",
    "outcome",
    "error",
    "trigger",
    "detected_by",
)

# one row per kind: (%s job, %s instance, %s fencing_token, %s started_at_ms, %s ended_at_ms,
# %s outcome, %s error, %s trigger, %s detected_by); then %s started_at_ms, %s started_at_ms,
# %s fencing_token, and the run's columns (%s instance ... %s detected_by, as above) -> nothing.
# A row that exists is kept unless the run kept there started earlier, or in the same
# millisecond with a token no greater (no token: -1): a replaced or late run ending last does
# not hide a newer one. The first assignment takes that verdict before any column changes and
# stores it in LAST_INSERT_ID; the others, run left to right after it, read it: judged again,
# they would compare with a start or token already overwritten. The run's columns come as
# parameters, not VALUES(col): MySQL 8.0.20
# deprecates VALUES() with a warning, which asyncmy would fetch in a round trip of its own.
_RECORD_SQL: Final = """\
INSERT INTO {runs} (`job`, `kind`, `instance`, `fencing_token`, `started_at_ms`, `ended_at_ms`,
                    `outcome`, `error`, `trigger`, `detected_by`)
VALUES {rows}
ON DUPLICATE KEY UPDATE
    `instance` = IF(LAST_INSERT_ID(
        %s > `started_at_ms`
        OR (%s = `started_at_ms` AND COALESCE(%s, -1) >= COALESCE(`fencing_token`, -1))),
        %s, `instance`),
    `fencing_token` = IF(LAST_INSERT_ID(), %s, `fencing_token`),
    `started_at_ms` = IF(LAST_INSERT_ID(), %s, `started_at_ms`),
    `ended_at_ms` = IF(LAST_INSERT_ID(), %s, `ended_at_ms`),
    `outcome` = IF(LAST_INSERT_ID(), %s, `outcome`),
    `error` = IF(LAST_INSERT_ID(), %s, `error`),
    `trigger` = IF(LAST_INSERT_ID(), %s, `trigger`),
    `detected_by` = IF(LAST_INSERT_ID(), %s, `detected_by`)"""
_RUN_ROW: Final = "(%s, '{kind}', %s, %s, %s, %s, %s, %s, %s, %s)"

# the columns job_records_from_rows reads: (job, kind, instance, fencing_token, started_at_ms,
# ended_at_ms, outcome, error, trigger, detected_by)
_SELECT: Final = """\
SELECT `job`, `kind`, `instance`, `fencing_token`, `started_at_ms`, `ended_at_ms`, `outcome`,
       `error`, `trigger`, `detected_by`
  FROM {runs}"""

# no input -> the rows (see _SELECT) of every job
ALL_RUNS_SQL: Final = _SELECT + " ORDER BY `job`"

# %s job per job -> the rows (see _SELECT) of those jobs
JOB_RUNS_SQL: Final = _SELECT + " WHERE `job` IN ({jobs}) ORDER BY `job`"


@dataclass(frozen=True, slots=True)
class RunStatements:
    """The run records SQL of one store, for its quoted runs table."""

    runs: str
    record_last: str
    record_last_and_success: str
    all_runs: str

    @classmethod
    def of(cls, runs: str) -> RunStatements:
        """Return the statements on ``runs`` (a quoted name)."""
        last = _RUN_ROW.format(kind="last")
        success = _RUN_ROW.format(kind="success")
        return cls(
            runs=runs,
            record_last=_RECORD_SQL.format(runs=runs, rows=last),
            # "last" first, in the primary key's order (ENUM values sort by position): every
            # statement locks a job's rows in one order, so two of them never wait on each other
            record_last_and_success=_RECORD_SQL.format(runs=runs, rows=f"{last}, {success}"),
            all_runs=ALL_RUNS_SQL.format(runs=runs),
        )

    def record(self, run: RunRecord) -> tuple[str, list[object]]:
        """Return the statement keeping ``run``, and its parameters.

        Raises:
            LocksConfigurationError: the job, the instance or the error is longer than its
                column.
        """
        check_length(run.job, "job", MAX_KEY_BYTES)
        check_length(run.instance, "instance", MAX_INSTANCE_BYTES)
        if run.error is not None:
            check_length(run.error, "error", MAX_ERROR_BYTES)
        kept = run_row(run)
        columns = [kept[column] for column in _COLUMN_NAMES]
        verdict = [kept["started_at_ms"], kept["started_at_ms"], kept["fencing_token"]]
        if run.outcome == "ok":
            rows = [run.job, *columns, run.job, *columns]
            return self.record_last_and_success, [*rows, *verdict, *columns]
        return self.record_last, [run.job, *columns, *verdict, *columns]

    def job_runs(self, count: int) -> str:
        """Return the statement reading the rows of ``count`` jobs."""
        return JOB_RUNS_SQL.format(runs=self.runs, jobs=", ".join(["%s"] * count))


def records_from_rows(rows: Sequence[Row]) -> list[JobRecord]:
    """Return the job records the runs table's rows make, by job key."""
    return job_records_from_rows(
        [_decoded(row[column]) for column in range(RUN_ROW_COLUMNS)] for row in rows
    )


def _decoded(value: object) -> object:
    """Return a VARBINARY or BLOB column (bytes) as the UTF-8 text it holds; others as they are."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode()
    return value
