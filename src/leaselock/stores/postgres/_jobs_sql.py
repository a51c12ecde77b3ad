"""The job-control SQL of PostgresLockStore: pauses, open runs and failure streaks.

Each statement says its input and output above it; every call is ONE statement, so one round
trip, atomic on the server. ``{table}``, ``{sequence_name}``, ``{runs}`` and ``{jobs}`` are
filled in with names validated and quoted by ``_postgres_sql``, and ``{next_token}`` with its
``NEXT_TOKEN_SQL``, which draws every token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "ADD_JOB_COLUMNS_SQL",
    "ADD_RUN_COLUMNS_SQL",
    "CREATE_JOBS_SQL",
    "JobStatements",
    "job_statements",
]

# no input, no output. One row per job (its open run, failure streak, last missed tick, last
# started tick as the JSON of tick_run_json) and one per pause target (a job key, or a prefix
# ending in "*"): a job's pause lives on its own row.
CREATE_JOBS_SQL: Final = """\
CREATE TABLE IF NOT EXISTS {jobs} (
    name text COLLATE "C" PRIMARY KEY,
    pause jsonb,
    open_run jsonb,
    failures integer NOT NULL DEFAULT 0,
    missed_at_ms bigint,
    buffered boolean NOT NULL DEFAULT false,
    last_tick jsonb
)"""

# no input, no output: the column a jobs table made by an earlier leaselock lacks
ADD_JOB_COLUMNS_SQL: Final = """\
ALTER TABLE {jobs} ADD COLUMN IF NOT EXISTS last_tick jsonb"""

# no input, no output: the columns a runs table made by an earlier leaselock lacks
ADD_RUN_COLUMNS_SQL: Final = """\
ALTER TABLE {runs}
    ADD COLUMN IF NOT EXISTS trigger text NOT NULL DEFAULT 'schedule',
    ADD COLUMN IF NOT EXISTS detected_by text"""

# $1 job, $2 run lock key (NULL: no lock to take), $3 owner, $4 ttl_ms, $5 the open run as JSON
# (its token is filled in here), $6 the run's token when no lock is taken, $7 ignore pauses,
# $8 now as epoch ms (the caller's wall clock, which a pause's until_ms is on), $9 when busy:
# 'skip', 'buffer' or 'replace', $10 the run's scheduled tick as epoch ms (NULL: none)
# -> one row: (token taken, holder of the lock that kept it out, pause target, pause, the job's
# open run before, its failures, the job's last tick as JSON when it refused the start, whether
# the job had no row to lock (made now, nothing else done: ask again), its last run's columns).
# A live pause stops everything; else a tick at or before the job's last tick stops the start,
# writing nothing. A start that writes (no lock to take, a lock free in the snapshot, or
# 'replace') first locks the job's row (FOR UPDATE): a racing start waits there for the other's
# commit and then reads the row's latest version (READ COMMITTED), so of starts racing for one
# tick exactly one finds it unrun, the others take nothing; and every start locks the job's row
# before the run lock, so two starts never deadlock. A job with no row has nothing to lock: the
# start makes the row and does nothing else. Then the lock is taken as ACQUIRE_SQL takes it
# (one statement: the row lock decides one winner, the row's own token is the floor), or from a
# live holder with 'replace'; the open run and the tick (its instance, the token taken or $6)
# are written (and a noted trigger cleared) only if the lock was taken, or none was asked for; a
# busy 'buffer' start notes one trigger unless the row's latest version has its tick run. A
# lock seen live in the snapshot is not written to (as in ACQUIRE_SQL): a busy 'skip' start
# writes nothing. The open run and failures answered are the locked row's, else the snapshot's;
# every other read in the outer SELECT sees the state from before the statement.
START_RUN_SQL: Final = """\
WITH paused AS (
    SELECT name, pause FROM {jobs}
     WHERE NOT CAST($7 AS boolean) AND pause IS NOT NULL
       AND (name = CAST($1 AS text)
            OR (right(name, 1) = '*' AND starts_with(CAST($1 AS text), left(name, -1))))
       AND (pause->>'until_ms' IS NULL
            OR CAST(pause->>'until_ms' AS bigint) > CAST($8 AS bigint))
     ORDER BY name LIMIT 1
), known AS (
    SELECT open_run, failures, last_tick FROM {jobs} WHERE name = CAST($1 AS text)
), seen AS (
    SELECT last_tick FROM known
     WHERE NOT EXISTS (SELECT FROM paused)
       AND CAST(last_tick->>'at_ms' AS bigint) >= CAST($10 AS bigint)
), live AS (
    SELECT FROM {table}
     WHERE key = CAST($2 AS text) AND owner IS NOT NULL AND expires_at > clock_timestamp()
), writing AS (
    SELECT
     WHERE NOT EXISTS (SELECT FROM paused) AND NOT EXISTS (SELECT FROM seen)
       AND (CAST($2 AS text) IS NULL OR CAST($9 AS text) = 'replace'
            OR NOT EXISTS (SELECT FROM live))
), locked AS (
    SELECT open_run, failures, last_tick FROM {jobs}
     WHERE name = CAST($1 AS text) AND EXISTS (SELECT FROM writing)
       FOR UPDATE
), made AS (
    INSERT INTO {jobs} (name)
    SELECT CAST($1 AS text) WHERE EXISTS (SELECT FROM writing) AND NOT EXISTS (SELECT FROM locked)
    ON CONFLICT (name) DO NOTHING
), ran AS (
    SELECT last_tick FROM seen
    UNION ALL
    SELECT last_tick FROM locked WHERE CAST(last_tick->>'at_ms' AS bigint) >= CAST($10 AS bigint)
), go AS (
    SELECT
     WHERE NOT EXISTS (SELECT FROM paused) AND NOT EXISTS (SELECT FROM ran)
       AND (EXISTS (SELECT FROM locked) OR NOT EXISTS (SELECT FROM writing))
), taken AS (
    INSERT INTO {table} AS existing (key, owner, fencing_token, expires_at)
    SELECT CAST($2 AS text), CAST($3 AS text), {next_token},
           clock_timestamp() + CAST($4 AS bigint) * INTERVAL '1 millisecond'
     WHERE CAST($2 AS text) IS NOT NULL AND EXISTS (SELECT FROM go)
       AND (CAST($9 AS text) = 'replace' OR NOT EXISTS (SELECT FROM live))
    ON CONFLICT (key) DO UPDATE
       SET owner = excluded.owner,
           fencing_token = greatest({next_token}, existing.fencing_token + 1),
           expires_at = excluded.expires_at
     WHERE existing.owner IS NULL OR existing.expires_at <= clock_timestamp()
        OR CAST($9 AS text) = 'replace'
    RETURNING existing.fencing_token
), opened AS (
    UPDATE {jobs} AS kept
       SET open_run = jsonb_set(CAST($5 AS jsonb), '{{token}}', run.token),
           last_tick = CASE WHEN CAST($10 AS bigint) IS NULL THEN kept.last_tick
                            ELSE jsonb_build_object('at_ms', CAST($10 AS bigint),
                                                    'instance', CAST($5 AS jsonb)->'instance',
                                                    'token', run.token) END,
           buffered = false
      FROM (SELECT coalesce(to_jsonb(coalesce((SELECT fencing_token FROM taken),
                                              CAST($6 AS bigint))), 'null'::jsonb) AS token
           ) AS run
     WHERE kept.name = CAST($1 AS text) AND EXISTS (SELECT FROM go)
       AND (CAST($2 AS text) IS NULL OR EXISTS (SELECT FROM taken))
), noted AS (
    INSERT INTO {jobs} AS kept (name, buffered)
    SELECT CAST($1 AS text), true
     WHERE CAST($9 AS text) = 'buffer' AND CAST($2 AS text) IS NOT NULL
       AND EXISTS (SELECT FROM go) AND NOT EXISTS (SELECT FROM taken)
    ON CONFLICT (name) DO UPDATE SET buffered = true
     WHERE coalesce(CAST(kept.last_tick->>'at_ms' AS bigint) < CAST($10 AS bigint), true)
), prior AS (
    SELECT open_run, failures FROM locked
    UNION ALL
    SELECT open_run, failures FROM known WHERE NOT EXISTS (SELECT FROM locked)
)
SELECT (SELECT fencing_token FROM taken),
       (SELECT owner FROM {table} WHERE key = CAST($2 AS text)),
       (SELECT name FROM paused),
       (SELECT CAST(pause AS text) FROM paused),
       (SELECT CAST(open_run AS text) FROM prior),
       coalesce((SELECT failures FROM prior), 0),
       (SELECT CAST(last_tick AS text) FROM ran),
       EXISTS (SELECT FROM writing) AND NOT EXISTS (SELECT FROM locked),
       last.job, last.instance, last.fencing_token, last.started_at_ms, last.ended_at_ms,
       last.outcome, last.error, last.trigger, last.detected_by
  FROM (SELECT) AS one
  LEFT JOIN {runs} AS last ON last.job = CAST($1 AS text) AND last.kind = 'last'"""

# the input of RECORD_RUN_SQL -> one row: whether a trigger was noted while the run was open.
# Records the run, clears the job's open run if it is this one (same token and start) with the
# trigger noted meanwhile, and counts the failure streak: +1 for "error", 0 for "ok".
END_RUN_SQL: Final = """\
WITH recorded AS (
{record_run}
), prior AS (
    SELECT open_run->'token' = coalesce(to_jsonb(CAST($3 AS bigint)), 'null'::jsonb)
           AND CAST(open_run->>'started_at_ms' AS bigint) = CAST($4 AS bigint) AS closes,
           buffered
      FROM {jobs} WHERE name = CAST($1 AS text)
)
INSERT INTO {jobs} AS kept (name, failures)
VALUES (CAST($1 AS text), CASE WHEN CAST($6 AS text) = 'error' THEN 1 ELSE 0 END)
ON CONFLICT (name) DO UPDATE
   SET open_run = CASE WHEN (SELECT closes FROM prior) THEN NULL ELSE kept.open_run END,
       buffered = CASE WHEN (SELECT closes FROM prior) THEN false ELSE kept.buffered END,
       failures = CASE CAST($6 AS text) WHEN 'ok' THEN 0
                       WHEN 'error' THEN kept.failures + 1 ELSE kept.failures END
RETURNING coalesce((SELECT closes AND buffered FROM prior), false)"""

# $1 job, $2 missed tick as epoch ms -> one row (true)
NOTE_MISSED_SQL: Final = """\
INSERT INTO {jobs} (name, missed_at_ms) VALUES (CAST($1 AS text), CAST($2 AS bigint))
ON CONFLICT (name) DO UPDATE SET missed_at_ms = excluded.missed_at_ms
RETURNING true"""

# $1 target, $2 the pause as JSON -> one row (true)
PAUSE_SQL: Final = """\
INSERT INTO {jobs} (name, pause) VALUES (CAST($1 AS text), CAST($2 AS jsonb))
ON CONFLICT (name) DO UPDATE SET pause = excluded.pause
RETURNING true"""

# $1 target -> (the removed pause as JSON) if there was one, else no row
RESUME_SQL: Final = """\
UPDATE {jobs} AS kept SET pause = NULL
  FROM (SELECT name, pause FROM {jobs} WHERE name = CAST($1 AS text) FOR UPDATE) AS prior
 WHERE kept.name = prior.name AND kept.pause IS NOT NULL
RETURNING CAST(prior.pause AS text)"""

# -> (target, pause as JSON) of every pause, by target
PAUSES_SQL: Final = """\
SELECT name, CAST(pause AS text) FROM {jobs} WHERE pause IS NOT NULL ORDER BY name"""

# $1 jobs text[] (NULL: every job) -> (job, open run as JSON, failures, missed_at_ms, last tick
# as JSON) of the jobs with something to say (JobState.worth_listing), by job
STATES_SQL: Final = """\
SELECT name, CAST(open_run AS text), failures, missed_at_ms, CAST(last_tick AS text) FROM {jobs}
 WHERE (open_run IS NOT NULL OR failures > 0 OR missed_at_ms IS NOT NULL
        OR last_tick IS NOT NULL)
   AND (CAST($1 AS text[]) IS NULL OR name = ANY(CAST($1 AS text[])))
 ORDER BY name"""


@dataclass(frozen=True, slots=True)
class JobStatements:
    """The job-control SQL of one store, with its names filled in."""

    start_run: str
    end_run: str
    note_missed: str
    pause: str
    resume: str
    pauses: str
    states: str


def job_statements(names: dict[str, str], record_run: str) -> JobStatements:
    """Fill ``names`` in; ``record_run`` is the store's own RECORD_RUN statement."""
    return JobStatements(
        start_run=START_RUN_SQL.format_map(names),
        end_run=END_RUN_SQL.format_map({**names, "record_run": record_run}),
        note_missed=NOTE_MISSED_SQL.format_map(names),
        pause=PAUSE_SQL.format_map(names),
        resume=RESUME_SQL.format_map(names),
        pauses=PAUSES_SQL.format_map(names),
        states=STATES_SQL.format_map(names),
    )
