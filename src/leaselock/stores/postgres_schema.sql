-- leaselock: the schema of PostgresLockStore (locks, tokens, job runs, job control), default names.
--
-- PostgresLockStore creates it by itself (create_schema=True, the default, or
-- `await store.create_schema()`); run this file instead where the application's role may not
-- run DDL (psql -f postgres_schema.sql), or copy docs/stores/alembic_leaselock_locks.py into
-- your Alembic migrations. Keep it identical to what the store creates: a test compares them.
--
-- One row per key. A released lock keeps its row (owner NULL): its fencing_token is the floor
-- of the key's next token, so a sequence that went back (restore, failover) can never hand the
-- key an old token. Tokens stay below 2**53, exact in a JSON number.

CREATE SEQUENCE IF NOT EXISTS "leaselock_fencing_token_seq"
    AS bigint MINVALUE 1 MAXVALUE 9007199254740991 NO CYCLE;

CREATE TABLE IF NOT EXISTS "leaselock_locks" (
    key text COLLATE "C" PRIMARY KEY,
    owner text,
    fencing_token bigint NOT NULL CHECK (fencing_token > 0),
    expires_at timestamptz NOT NULL
);

-- Job run records: per job a "last" row (its last run) and a "success" row (its last success).
-- Times are milliseconds since the Unix epoch, on the running instance's clock.
CREATE TABLE IF NOT EXISTS "leaselock_locks_runs" (
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
);

-- The two columns above, on a runs table an earlier leaselock made without them.
ALTER TABLE "leaselock_locks_runs"
    ADD COLUMN IF NOT EXISTS trigger text NOT NULL DEFAULT 'schedule',
    ADD COLUMN IF NOT EXISTS detected_by text;

-- Job control: one row per job (its open run, failure streak, last missed tick) and one per
-- pause target (a job key, or a prefix ending in "*").
CREATE TABLE IF NOT EXISTS "leaselock_locks_jobs" (
    name text COLLATE "C" PRIMARY KEY,
    pause jsonb,
    open_run jsonb,
    failures integer NOT NULL DEFAULT 0,
    missed_at_ms bigint,
    buffered boolean NOT NULL DEFAULT false
);
