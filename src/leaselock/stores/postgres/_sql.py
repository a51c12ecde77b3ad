"""The SQL of PostgresLockStore, written once for every driver, and what fills in its names.

Each statement says its input and output above it. Table and sequence names are validated and
quoted here, and channels validated, before any of them reaches a statement.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass
from typing import Final

from ..._errors import LocksConfigurationError
from ._jobs_sql import (
    ADD_JOB_COLUMNS_SQL,
    ADD_RUN_COLUMNS_SQL,
    CREATE_JOBS_SQL,
    JobStatements,
    job_statements,
)
from ._line_sql import LineStatements, line_statements

__all__ = [
    "ACQUIRE_SQL",
    "ALL_RUNS_SQL",
    "BREAK_LOCK_SQL",
    "CREATE_RUNS_SQL",
    "CREATE_SEQUENCE_SQL",
    "CREATE_TABLE_SQL",
    "FOLLOW_SQL",
    "JOB_RUNS_SQL",
    "LIST_LOCKS_SQL",
    "NEXT_TOKEN_SQL",
    "PRUNE_SQL",
    "READ_LOCK_SQL",
    "RECORD_RUN_SQL",
    "RELEASE_AND_NOTIFY_SQL",
    "RELEASE_SQL",
    "RENEW_MANY_SQL",
    "RENEW_SQL",
    "SCHEMA_EXISTS_SQL",
    "SCHEMA_LOCK_SQL",
    "STORE_TIME_SQL",
    "TIMELINE_BAND_SQL",
    "UNFOLLOW_SQL",
    "Statements",
    "checked_channel",
    "key_channel",
    "quoted_name",
    "statements",
]

_NAME_PART: Final = r"[A-Za-z_][A-Za-z0-9_]{0,62}"
_QUALIFIED_NAME: Final = re.compile(rf"(?:{_NAME_PART}\.)?{_NAME_PART}")
# a key's channel is the store's, ':' and 16 hex digits: at most 63 characters in all
MAX_CHANNEL_LENGTH: Final = 46
_CHANNEL: Final = re.compile(rf"[A-Za-z0-9_.:-]{{1,{MAX_CHANNEL_LENGTH}}}")
# "leaseloc" in ASCII: one advisory lock serializes every leaselock create_schema of a database
_SCHEMA_LOCK_KEY: Final = int.from_bytes(b"leaseloc", "big")

# --- SQL: {table}, {sequence} and {runs} are quoted names, {sequence_name} a string literal,
# {notify_waiters} the expression of NOTIFY_WAITERS_SQL, {next_token} that of NEXT_TOKEN_SQL

# no input -> the first token of the band of the timeline the server writes its WAL on:
# (timeline - 1) * 2**40. A promotion starts a timeline greater than any its standby knew of,
# and a standby promoted after an asynchronous failover can lack the old primary's last
# nextval()s: the band puts every token drawn after it above them. The timeline is read from
# the name of the WAL segment being written (its first 8 hex digits), which changes at the
# promotion itself; pg_control_checkpoint()'s timeline_id changes only at the checkpoint
# after it. Needs no privilege; fails on a server in recovery, where no token is drawn anyway.
TIMELINE_BAND_SQL: Final = (
    "((CAST(CAST('x' || left(pg_walfile_name(pg_current_wal_insert_lsn()), 8) AS bit(32))"
    " AS bigint) - 1) << 40)"
)

# no input -> the next token. nextval() as before, unless the sequence is below the band of the
# server's timeline: then the draw lifts it there, to the band's start plus the sequence's own
# low 40 bits (what it counted so far), and hands that out. The lift stays in the sequence,
# which pg_dump and pg_upgrade keep (pg_upgrade starts the timelines again at 1): tokens never
# fall back to a lower band. On timeline 1 the band is 0, and nothing changes. Sessions lifting
# at once draw distinct tokens (their own nextval()s below the band) and the last setval()
# wins, so two KEYS may share a token in that instant; each key's own tokens still grow (its
# row's token + 1 is the floor). Tokens stay below 2**53 up to timeline 8192, with 2**40 of
# them a band. No '%', which psycopg reads as a placeholder: '&' keeps the low bits.
# -> the server's wall clock in epoch milliseconds: the clock its expiries are measured on
STORE_TIME_SQL: Final = "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

NEXT_TOKEN_SQL: Final = """\
CASE WHEN nextval({sequence_name}) > {band} THEN currval({sequence_name})
     ELSE setval({sequence_name}, {band} + (currval({sequence_name}) & 1099511627775)) END"""  # noqa: S105 -- a lock's token, no secret

# $1 key, $2 owner, $3 ttl_ms (bigint) -> fencing_token: one row if taken, none if a live lock
# holds the key. A key seen live in the statement's snapshot is refused with nothing written: no
# row lock, no sequence number, no WAL, no commit flush, so waiters' retries cost a read (it
# was held at that moment: a refusal is always true when made). A key seen free goes to the
# write, where owner check and write are ONE statement: the row lock taken by ON CONFLICT makes
# exactly one of any concurrent callers win. A new key takes the INSERT path and the token drawn
# in its SELECT; a released or expired row takes the UPDATE path, whose token is drawn in SET
# after the row lock, with the row's own token as its floor: a sequence that went back (restore,
# failover) cannot hand the key an old token. RETURNING gives the written row's token on both
# paths. Every token comes from NEXT_TOKEN_SQL, above the band of the server's timeline: above
# any token handed out before a promotion. Expiry is measured on the server's clock_timestamp(),
# never now(), which stands still for a whole transaction. -> (token, NULL) when taken, else
# (NULL, the holder's owner as the statement's snapshot saw it: for messages only, never for a
# decision).
ACQUIRE_SQL: Final = """\
WITH live AS (
SELECT FROM {table}
 WHERE key = CAST($1 AS text) AND owner IS NOT NULL AND expires_at > clock_timestamp()
), taken AS (
INSERT INTO {table} AS existing (key, owner, fencing_token, expires_at)
SELECT CAST($1 AS text), CAST($2 AS text), {next_token},
       clock_timestamp() + CAST($3 AS bigint) * INTERVAL '1 millisecond'
 WHERE NOT EXISTS (SELECT FROM live)
ON CONFLICT (key) DO UPDATE
   SET owner = excluded.owner,
       fencing_token = greatest({next_token}, existing.fencing_token + 1),
       expires_at = clock_timestamp() + CAST($3 AS bigint) * INTERVAL '1 millisecond'
 WHERE existing.owner IS NULL OR existing.expires_at <= clock_timestamp()
RETURNING existing.fencing_token
)
SELECT fencing_token, NULL::text FROM taken
UNION ALL
SELECT NULL, owner FROM {table} WHERE key = CAST($1 AS text) AND NOT EXISTS (SELECT FROM taken)"""

# $1 key, $2 owner, $3 ttl_ms (bigint) -> one row if owner held a live lock (now renewed), else none
RENEW_SQL: Final = """\
UPDATE {table}
   SET expires_at = clock_timestamp() + CAST($3 AS bigint) * INTERVAL '1 millisecond'
 WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()
RETURNING true"""

# $1 keys text[], $2 owners text[], $3 ttl_ms bigint[] (one element per renewal)
# -> (key, owner) of every renewal that held a live lock, now renewed.
# One index lookup of the primary key per renewal, whatever the batch: the arrays reach
# unnest() through scalar subqueries (InitPlans), whose values the planner cannot see, so it
# takes the batch for a few rows (10) and joins them to the table by a nested loop over the
# key's index (a prepared statement's generic plan, which sees no values either, is the same);
# only a table of a few pages is read whole instead, being cheaper than those few lookups.
# Given the arrays themselves, it counts their elements, and from about 1,000 renewals in
# 200,000 keys hashes a scan of the whole table instead, whose cost grows with the table. A
# renewal named twice joins its row twice: the row is written once, and both are answered.
RENEW_MANY_SQL: Final = """\
UPDATE {table} AS held
   SET expires_at = clock_timestamp() + renewal.ttl_ms * INTERVAL '1 millisecond'
  FROM unnest((SELECT CAST($1 AS text[])), (SELECT CAST($2 AS text[])),
              (SELECT CAST($3 AS bigint[]))) AS renewal (key, owner, ttl_ms)
 WHERE held.key = renewal.key AND held.owner = renewal.owner
   AND held.expires_at > clock_timestamp()
RETURNING held.key, held.owner"""

# $1 key, $2 owner -> one row if owner held a live lock (now released), else none.
# The row stays, owner NULL: its token is the floor of the key's next one. The NOTIFY rides in the
# same statement (one round trip), is delivered at its commit, after the row is free, and is sent
# only when a process waits on the key ({notify_waiters}). The commit does not wait for the WAL
# flush ({asynchronous}): a crash may undo a release, never a token.
RELEASE_AND_NOTIFY_SQL: Final = """\
WITH released AS (
    UPDATE {table}
       SET owner = NULL, expires_at = clock_timestamp()
     WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()
    RETURNING key
)
SELECT {notify_waiters}, {asynchronous} FROM released"""

# -> this transaction commits without waiting for its WAL to reach disk (or a synchronous
# standby); only for a release (renewals stay synchronous). set_config(..., true) is SET LOCAL:
# it ends with the statement's own transaction, so no pooled session keeps it. What a crash can
# lose: releases acknowledged within the last ~3 * wal_writer_delay (600 ms by default). Such a
# lock comes back held by its old owner, who believes it released, and expires at its ttl: the
# key waits at most that long; no one holds it meanwhile. Its token is not touched: a release
# writes none, and every later acquire still draws a greater one.
ASYNCHRONOUS_COMMIT_SQL: Final = "set_config('synchronous_commit', 'off', true)"

# key -> a NOTIFY of the key on its own channel, only if some process holds the key's interest
# lock (shared, by FOLLOW_SQL): the exclusive try fails exactly then. Taking it when free holds it
# to this transaction's end, so a follower arriving meanwhile waits for the commit, then finds
# the key free by its own retry. Hashes may collide: a stray notification, never a missed one.
NOTIFY_WAITERS_SQL: Final = """\
CASE WHEN pg_try_advisory_xact_lock({interest}, hashtext(key)) THEN NULL
     ELSE pg_notify({channel} || ':' || left(md5(convert_to(key, 'UTF8')), 16), key) END"""

# $1 interest class, $2 key -> nothing: this session waits on the key's releases. Held until
# UNFOLLOW_SQL or the session's end, so a crashed process never leaves an interest behind.
FOLLOW_SQL: Final = "SELECT pg_advisory_lock_shared($1, hashtext($2))"

# $1 interest class, $2 key -> nothing: this session no longer waits on the key's releases.
UNFOLLOW_SQL: Final = "SELECT pg_advisory_unlock_shared($1, hashtext($2))"

# $1 key, $2 owner -> one row if owner held a live lock (now released), else none; no NOTIFY;
# committed as RELEASE_AND_NOTIFY_SQL is ({asynchronous})
RELEASE_SQL: Final = """\
WITH released AS (
    UPDATE {table}
       SET owner = NULL, expires_at = clock_timestamp()
     WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()
    RETURNING true
)
SELECT {asynchronous} FROM released"""

# $1 age_ms (bigint), $2 batch (bigint) -> one row: how many rows were deleted.
# Deletes up to $2 rows free (released or expired) for longer than $1, whose token the sequence
# has already passed: for those the sequence alone is the floor of the key's next token
# (nextval > last_value >= the row's token), so the row adds nothing to fencing. A row with a
# token above the sequence (one set back by hand) stays and keeps flooring its key. Rows held by
# another pass or an acquire are skipped (SKIP LOCKED); FOR UPDATE reads each row's latest
# version, so a key taken meanwhile is live again and kept. Needs SELECT on the sequence.
PRUNE_SQL: Final = """\
WITH doomed AS (
    SELECT key FROM {table}
     WHERE expires_at < clock_timestamp() - CAST($1 AS bigint) * INTERVAL '1 millisecond'
       AND fencing_token <= (SELECT last_value FROM {sequence})
     LIMIT CAST($2 AS bigint)
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM {table} AS pruned USING doomed WHERE pruned.key = doomed.key RETURNING 1
)
SELECT count(*) FROM gone"""

# $1 table, $2 sequence, $3 runs table, $4 jobs table, $5 line table (quoted names, as text),
# $6 the line function's signature, $7 the mark of its current body (LINE_FUNCTION_MARK)
# -> one row: (whether each of the first four exists, one column each, whether the line table
# and its function exist, whether that function's body is the current one, whether the jobs
# table has the column last_tick). Needs no DDL privilege, so a role without CREATE can open a
# store on a schema made by a migration; a schema made before lines were keeps working without.
SCHEMA_EXISTS_SQL: Final = """\
SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL,
       to_regclass($3) IS NOT NULL, to_regclass($4) IS NOT NULL,
       to_regclass($5) IS NOT NULL AND to_regprocedure($6) IS NOT NULL,
       coalesce((SELECT strpos(prosrc, CAST($7 AS text)) > 0 FROM pg_proc
                  WHERE oid = to_regprocedure($6)), false),
       EXISTS (SELECT FROM pg_attribute
                WHERE attrelid = to_regclass($4) AND attname = 'last_tick' AND NOT attisdropped)"""

# $1 job, $2 instance, $3 fencing_token (NULL: none), $4 started_at_ms, $5 ended_at_ms,
# $6 outcome, $7 error, $8 trigger, $9 detected_by -> the kinds written. One statement: the
# job's "last" row, and its "success" row when the outcome is "ok", each unless the run kept
# there started later, or in the same millisecond with a greater token (a replaced or late run
# does not hide a newer one).
RECORD_RUN_SQL: Final = """\
INSERT INTO {runs} AS kept
       (job, kind, instance, fencing_token, started_at_ms, ended_at_ms, outcome, error, trigger,
        detected_by)
SELECT CAST($1 AS text), kind, CAST($2 AS text), CAST($3 AS bigint), CAST($4 AS bigint),
       CAST($5 AS bigint), CAST($6 AS text), CAST($7 AS text), CAST($8 AS text),
       CAST($9 AS text)
  FROM unnest(CASE WHEN CAST($6 AS text) = 'ok' THEN ARRAY['last', 'success']
                   ELSE ARRAY['last'] END) AS kind
    ON CONFLICT (job, kind) DO UPDATE
   SET instance = excluded.instance, fencing_token = excluded.fencing_token,
       started_at_ms = excluded.started_at_ms, ended_at_ms = excluded.ended_at_ms,
       outcome = excluded.outcome, error = excluded.error, trigger = excluded.trigger,
       detected_by = excluded.detected_by
 WHERE excluded.started_at_ms > kept.started_at_ms
    OR (excluded.started_at_ms = kept.started_at_ms
        AND coalesce(excluded.fencing_token, -1) >= coalesce(kept.fencing_token, -1))
RETURNING kind"""

# no input -> (job, kind, instance, fencing_token, started_at_ms, ended_at_ms, outcome, error,
# trigger, detected_by)
ALL_RUNS_SQL: Final = """\
SELECT job, kind, instance, fencing_token, started_at_ms, ended_at_ms, outcome, error, trigger,
       detected_by
  FROM {runs} ORDER BY job"""

# $1 jobs text[] -> the same rows, of those jobs
JOB_RUNS_SQL: Final = """\
SELECT job, kind, instance, fencing_token, started_at_ms, ended_at_ms, outcome, error, trigger,
       detected_by
  FROM {runs} WHERE job = ANY(CAST($1 AS text[])) ORDER BY job"""

# the columns an operator reads: (key, owner if live, fencing_token, ms left if live)
_LOCK_COLUMNS: Final = """\
SELECT key,
       CASE WHEN owner IS NOT NULL AND expires_at > clock_timestamp() THEN owner END,
       fencing_token,
       CASE WHEN owner IS NOT NULL AND expires_at > clock_timestamp()
            THEN CAST(ceil(EXTRACT(EPOCH FROM expires_at - clock_timestamp()) * 1000) AS bigint)
       END"""

# $1 key -> one row (see _LOCK_COLUMNS) if the key has a row, else none
READ_LOCK_SQL: Final = (
    _LOCK_COLUMNS
    + """
  FROM {table} WHERE key = $1"""
)

# $1 prefix, $2 limit -> rows (see _LOCK_COLUMNS) of the keys starting with prefix, by key
LIST_LOCKS_SQL: Final = (
    _LOCK_COLUMNS
    + """
  FROM {table} WHERE left(key, char_length(CAST($1 AS text))) = $1
 ORDER BY key LIMIT CAST($2 AS bigint)"""
)

# $1 key -> (key, owner, fencing_token, ms left) of the live lock now broken, else none. The
# row stays, owner NULL, as after a release; the NOTIFY (when on) rides in the same statement.
BREAK_LOCK_SQL: Final = """\
WITH held AS (
    SELECT key, owner, fencing_token, expires_at FROM {table}
     WHERE key = $1 AND owner IS NOT NULL AND expires_at > clock_timestamp()
       FOR UPDATE
), broken AS (
    UPDATE {table} AS freed SET owner = NULL, expires_at = clock_timestamp()
      FROM held WHERE freed.key = held.key
    RETURNING held.key, held.owner, held.fencing_token, held.expires_at
)
SELECT key, owner, fencing_token,
       CAST(ceil(EXTRACT(EPOCH FROM expires_at - clock_timestamp()) * 1000) AS bigint)
       {notify}
  FROM broken"""

# no input, no output; in one transaction: the lock keeps two processes creating the schema at
# once from colliding on the catalog (CREATE ... IF NOT EXISTS alone races into unique_violation)
SCHEMA_LOCK_SQL: Final = f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK_KEY})"

# no input, no output. Tokens stay below 2**53: exact in a JSON number.
CREATE_SEQUENCE_SQL: Final = """\
CREATE SEQUENCE IF NOT EXISTS {sequence}
    AS bigint MINVALUE 1 MAXVALUE 9007199254740991 NO CYCLE"""

# no input, no output. Per job a "last" row (its last run) and a "success" row (its last
# success); times in milliseconds since the Unix epoch, on the running instance's clock.
CREATE_RUNS_SQL: Final = """\
CREATE TABLE IF NOT EXISTS {runs} (
    job text COLLATE "C" NOT NULL,
    kind text NOT NULL CHECK (kind IN ('last', 'success')),
    instance text NOT NULL,
    fencing_token bigint,
    started_at_ms bigint NOT NULL,
    ended_at_ms bigint NOT NULL,
    outcome text NOT NULL,
    error text,
    trigger text NOT NULL DEFAULT 'schedule',
    detected_by text,
    PRIMARY KEY (job, kind)
)"""

# no input, no output. COLLATE "C": keys compare byte for byte, never by a locale's rules.
CREATE_TABLE_SQL: Final = """\
CREATE TABLE IF NOT EXISTS {table} (
    key text COLLATE "C" PRIMARY KEY,
    owner text,
    fencing_token bigint NOT NULL CHECK (fencing_token > 0),
    expires_at timestamptz NOT NULL
)"""


@dataclass(frozen=True, slots=True)
class Statements:
    """The SQL of one store, with its names filled in."""

    acquire: str
    renew: str
    renew_many: str
    release: str
    record_run: str
    all_runs: str
    job_runs: str
    read_lock: str
    list_locks: str
    break_lock: str
    prune: str
    jobs: JobStatements
    lines: LineStatements
    schema: tuple[str, ...]
    table: str
    sequence: str
    runs: str
    jobs_table: str
    interest: int


def statements(
    table: str, sequence: str, runs: str, jobs: str, line: str, *, channel: str | None
) -> Statements:
    interest = interest_class(table)
    notify_waiters = NOTIFY_WAITERS_SQL.format(interest=interest, channel=_literal(channel or ""))
    names = {
        "table": table,
        "sequence": sequence,
        "runs": runs,
        "jobs": jobs,
        # functions and tables live in different catalogs: the line's function has its name
        "line": line,
        "line_function": line,
        "sequence_name": _literal(sequence),
        "next_token": NEXT_TOKEN_SQL.format(
            sequence_name=_literal(sequence), band=TIMELINE_BAND_SQL
        ),
        "notify_waiters": notify_waiters,
        "asynchronous": ASYNCHRONOUS_COMMIT_SQL,
        "notify": "" if channel is None else f", {notify_waiters}",
    }
    release = RELEASE_SQL if channel is None else RELEASE_AND_NOTIFY_SQL
    lines = line_statements(names, None if channel is None else notify_waiters)
    return Statements(
        acquire=ACQUIRE_SQL.format_map(names),
        renew=RENEW_SQL.format_map(names),
        renew_many=RENEW_MANY_SQL.format_map(names),
        release=release.format_map(names),
        record_run=RECORD_RUN_SQL.format_map(names),
        jobs=job_statements(names, RECORD_RUN_SQL.format_map(names)),
        all_runs=ALL_RUNS_SQL.format_map(names),
        job_runs=JOB_RUNS_SQL.format_map(names),
        read_lock=READ_LOCK_SQL.format_map(names),
        list_locks=LIST_LOCKS_SQL.format_map(names),
        break_lock=BREAK_LOCK_SQL.format_map(names),
        prune=PRUNE_SQL.format_map(names),
        lines=lines,
        schema=(
            SCHEMA_LOCK_SQL,
            CREATE_SEQUENCE_SQL.format_map(names),
            CREATE_TABLE_SQL.format_map(names),
            CREATE_RUNS_SQL.format_map(names),
            ADD_RUN_COLUMNS_SQL.format_map(names),
            CREATE_JOBS_SQL.format_map(names),
            ADD_JOB_COLUMNS_SQL.format_map(names),
            *lines.schema,
        ),
        table=table,
        sequence=sequence,
        runs=runs,
        jobs_table=jobs,
        interest=interest,
    )


def quoted_name(value: object, argument: str) -> str:
    """Return ``value`` as a quoted, optionally schema-qualified, PostgreSQL name."""
    if not isinstance(value, str) or not _QUALIFIED_NAME.fullmatch(value):
        raise LocksConfigurationError(
            f"{argument}={value!r} is not a name PostgresLockStore accepts: use letters, digits "
            "and underscores, starting with a letter or underscore, at most 63 characters, "
            'optionally schema-qualified ("locks.leaselock_locks"); it is used as written (quoted)'
        )
    return ".".join(f'"{part}"' for part in value.split("."))


def _literal(text: str) -> str:
    """Return ``text`` as a SQL string literal (names and channels are validated already)."""
    return "'" + text.replace("'", "''") + "'"


def interest_class(table: str) -> int:
    """Return the first key of the advisory locks that mark a waiting process, for ``table``.

    Two-key advisory locks of their own class, one per table: they never meet the
    application's one-key advisory locks, nor the waiters of another table.
    """
    return zlib.crc32(table.encode()) - 2**31


def key_channel(channel: str, key: str) -> str:
    """Return the channel ``key``'s releases are announced on: the store's, a colon, a hash."""
    return f"{channel}:{hashlib.md5(key.encode(), usedforsecurity=False).hexdigest()[:16]}"


def checked_channel(channel: object, table: str) -> str:
    name = f"{table}_released" if channel is None else channel
    if not isinstance(name, str) or not _CHANNEL.fullmatch(name):
        raise LocksConfigurationError(
            f"channel={name!r} is not a usable LISTEN/NOTIFY channel: use 1 to "
            f"{MAX_CHANNEL_LENGTH} letters, digits, '_', '.', ':' or '-' (each key's channel "
            "adds 17 characters, within PostgreSQL's 63)"
            + ("; the default is derived from the table name, so pass channel=" * (channel is None))
        )
    return name
