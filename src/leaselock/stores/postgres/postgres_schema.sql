-- leaselock: the schema of PostgresLockStore (locks, tokens, job runs, job control, waiting
-- lines), default names.
--
-- PostgresLockStore creates it by itself (create_schema=True, the default, or
-- `await store.create_schema()`); run this file instead where the application's role may not
-- run DDL (psql -f postgres_schema.sql), or copy the Alembic migrations of docs/stores
-- (alembic_leaselock_locks.py, then _runs.py, _line.py, _tokens.py and _ticks.py) into yours.
-- Keep it identical to what the store creates: a test compares them. Every statement may run
-- again: the function's CREATE OR REPLACE and the ADD COLUMN IF NOT EXISTS bring an earlier
-- version up to date.
--
-- One row per key. A released lock keeps its row (owner NULL): its fencing_token is the floor
-- of the key's next token, so a sequence that went back (restore, failover) can never hand the
-- key an old token. Tokens are drawn in the band of the server's timeline, from
-- (timeline - 1) * 2^40, so a promoted standby hands out tokens above the old primary's. Tokens
-- stay below 2**53, exact in a JSON number.

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

-- Job control: one row per job (its open run, failure streak, last missed tick, last started
-- tick: {"at_ms", "instance", "token"}) and one per pause target (a job key, or a prefix
-- ending in "*").
CREATE TABLE IF NOT EXISTS "leaselock_locks_jobs" (
    name text COLLATE "C" PRIMARY KEY,
    pause jsonb,
    open_run jsonb,
    failures integer NOT NULL DEFAULT 0,
    missed_at_ms bigint,
    buffered boolean NOT NULL DEFAULT false,
    last_tick jsonb
);

-- The last column above, on a jobs table an earlier leaselock made without it.
ALTER TABLE "leaselock_locks_jobs" ADD COLUMN IF NOT EXISTS last_tick jsonb;

-- Waiting lines: one row per waiter in a key's line, first come first served (arrived), live
-- until expires_at (the server's clock), with the ticket of the queue call that last kept it and
-- the LISTEN channel of the waiting process. A store whose schema lacks them works as before,
-- its waiters retrying instead of standing in line.
CREATE TABLE IF NOT EXISTS "leaselock_locks_line" (
    key text COLLATE "C" NOT NULL,
    owner text NOT NULL,
    arrived bigint GENERATED ALWAYS AS IDENTITY,
    expires_at timestamptz NOT NULL,
    ticket bigint NOT NULL,
    channel text,
    PRIMARY KEY (key, owner)
);

-- Every step on a line (queue, leave, release, break) is one call of this function: it locks
-- the key's row first, then reads the line with a fresh snapshot, so a release sees every place
-- committed before it and hands the key to the first live one in the same transaction (a new
-- token, the place's end as the lock's), NOTIFYing that waiter's process at the commit:
-- '<token> <ticket> <char length of key> <key><owner>'. Same name as the table: functions and
-- tables live in different catalogs.
CREATE OR REPLACE FUNCTION "leaselock_locks_line"(
    p_op text, p_key text, p_owner text, p_ttl_ms bigint, p_queue_ms bigint, p_ticket bigint,
    p_channel text
) RETURNS TABLE (token bigint, holder text, ms_left bigint, announce boolean)
LANGUAGE plpgsql AS $leaselock$
DECLARE
    held_owner text;
    held_token bigint;
    held_expires_at timestamptz;
    place_owner text;
    place_expires_at timestamptz;
    place_ticket bigint;
    place_channel text;
    moment timestamptz;
    live boolean;
    freed boolean := false;
    granted bigint;
    drawn bigint;
    segment text;
    band bigint;
BEGIN
    -- leaselock_0004: tokens are drawn in the band of the server's timeline, from
    -- (timeline - 1) * 2^40, so above every token an earlier primary handed out, as the
    -- store's own statements draw them (the store reads this line to know the function is
    -- current).
    -- The key's lock row is locked first, in every step (one order: no deadlock), and the
    -- line is read only after, by statements whose snapshots are taken once the lock is held:
    -- they see every place committed before.
    IF p_op = 'release' THEN
        -- the owner check, the freeing and the row lock in ONE statement, as RELEASE_SQL: a
        -- release nobody waits for costs one look at the line more
        UPDATE "leaselock_locks" AS locks SET owner = NULL, expires_at = clock_timestamp()
         WHERE locks.key = p_key AND locks.owner = p_owner
           AND locks.expires_at > clock_timestamp()
        RETURNING locks.fencing_token INTO token;
        freed := FOUND;
        holder := p_owner;
        moment := clock_timestamp();
    ELSE
        -- a key with no row gets a free one, its token from the sequence as the next floor
        -- (never handed out: the key is taken by the UPDATEs below, with a token of their own)
        LOOP
            SELECT locks.owner, locks.fencing_token, locks.expires_at
              INTO held_owner, held_token, held_expires_at
              FROM "leaselock_locks" AS locks WHERE locks.key = p_key FOR UPDATE;
            EXIT WHEN FOUND;
            IF p_op <> 'queue' THEN
                IF p_op = 'leave' THEN
                    DELETE FROM "leaselock_locks_line" AS waiting
                     WHERE waiting.key = p_key AND waiting.owner = p_owner;
                END IF;
                RETURN;
            END IF;
            INSERT INTO "leaselock_locks" (key, owner, fencing_token, expires_at)
            VALUES (p_key, NULL, nextval('"leaselock_fencing_token_seq"'), clock_timestamp())
            ON CONFLICT (key) DO NOTHING;
        END LOOP;
        moment := clock_timestamp();
        live := held_owner IS NOT NULL AND held_expires_at > moment;
        IF p_op = 'queue' THEN
            IF live AND held_owner = p_owner THEN
                UPDATE "leaselock_locks" AS locks
                   SET expires_at = moment + p_ttl_ms * INTERVAL '1 millisecond'
                 WHERE locks.key = p_key;
                token := held_token;
                RETURN NEXT;
                RETURN;
            END IF;
            -- places whose time is up leave the line: the caller's own starts again at the end
            DELETE FROM "leaselock_locks_line" AS waiting
             WHERE waiting.key = p_key AND waiting.expires_at <= moment;
            IF NOT live THEN
                SELECT waiting.owner, waiting.expires_at, waiting.ticket, waiting.channel
                  INTO place_owner, place_expires_at, place_ticket, place_channel
                  FROM "leaselock_locks_line" AS waiting
                 WHERE waiting.key = p_key ORDER BY waiting.arrived LIMIT 1;
                IF NOT FOUND OR place_owner = p_owner THEN
                    -- nobody waits ahead: the caller takes the key and leaves the line; an
                    -- acquisition, so its commit waits for the WAL flush
                    DELETE FROM "leaselock_locks_line" AS waiting
                     WHERE waiting.key = p_key AND waiting.owner = p_owner;
                    -- the token: the sequence's next, lifted into the band of the server's
                    -- timeline at the first draw after a promotion
                    drawn := nextval('"leaselock_fencing_token_seq"');
                    segment := pg_walfile_name(pg_current_wal_insert_lsn());
                    band := (CAST(CAST('x' || left(segment, 8) AS bit(32)) AS bigint) - 1) << 40;
                    IF drawn <= band THEN
                        drawn := setval('"leaselock_fencing_token_seq"',
                                        band + (drawn & 1099511627775));
                    END IF;
                    UPDATE "leaselock_locks" AS locks
                       SET owner = p_owner,
                           fencing_token = greatest(drawn, locks.fencing_token + 1),
                           expires_at = moment + p_ttl_ms * INTERVAL '1 millisecond'
                     WHERE locks.key = p_key
                    RETURNING locks.fencing_token INTO token;
                    RETURN NEXT;
                    RETURN;
                END IF;
                -- a live place ahead: the free key is handed to it, as at a release
                freed := true;
            END IF;
        ELSIF p_op = 'leave' THEN
            DELETE FROM "leaselock_locks_line" AS waiting
             WHERE waiting.key = p_key AND waiting.owner = p_owner;
            freed := live AND held_owner = p_owner;
        ELSIF p_op = 'break' THEN
            freed := live;
        ELSE
            RAISE EXCEPTION USING MESSAGE = 'leaselock: no line step ' || quote_literal(p_op);
        END IF;
        IF freed AND p_op <> 'queue' THEN
            token := held_token;
            holder := held_owner;
            ms_left := CAST(ceil(EXTRACT(EPOCH FROM held_expires_at - moment) * 1000)
                            AS bigint);
        END IF;
    END IF;
    IF freed AND p_op <> 'queue' THEN
        -- the first live place; places whose time is up found on the way leave the line
        SELECT waiting.owner, waiting.expires_at, waiting.ticket, waiting.channel
          INTO place_owner, place_expires_at, place_ticket, place_channel
          FROM "leaselock_locks_line" AS waiting
         WHERE waiting.key = p_key ORDER BY waiting.arrived LIMIT 1;
        IF place_expires_at <= moment THEN
            DELETE FROM "leaselock_locks_line" AS waiting
             WHERE waiting.key = p_key AND waiting.expires_at <= moment;
            SELECT waiting.owner, waiting.expires_at, waiting.ticket, waiting.channel
              INTO place_owner, place_expires_at, place_ticket, place_channel
              FROM "leaselock_locks_line" AS waiting
             WHERE waiting.key = p_key ORDER BY waiting.arrived LIMIT 1;
        END IF;
    END IF;
    IF freed AND place_owner IS NOT NULL THEN
        -- the first live place holds the key now, for what is left of its time; its process
        -- hears of it at the commit, which waits for the WAL flush: a grant is an acquisition
        DELETE FROM "leaselock_locks_line" AS waiting
         WHERE waiting.key = p_key AND waiting.owner = place_owner;
        drawn := nextval('"leaselock_fencing_token_seq"');
        segment := pg_walfile_name(pg_current_wal_insert_lsn());
        band := (CAST(CAST('x' || left(segment, 8) AS bit(32)) AS bigint) - 1) << 40;
        IF drawn <= band THEN
            drawn := setval('"leaselock_fencing_token_seq"', band + (drawn & 1099511627775));
        END IF;
        UPDATE "leaselock_locks" AS locks
           SET owner = place_owner,
               fencing_token = greatest(drawn, locks.fencing_token + 1),
               expires_at = place_expires_at
         WHERE locks.key = p_key
        RETURNING locks.fencing_token INTO granted;
        IF place_channel IS NOT NULL THEN
            PERFORM pg_notify(place_channel, granted || ' ' || place_ticket || ' '
                              || char_length(p_key) || ' ' || p_key || place_owner);
        END IF;
    ELSE
        IF freed AND p_op IN ('leave', 'break') THEN
            -- freed as a release frees (a release freed it already, above)
            UPDATE "leaselock_locks" AS locks SET owner = NULL, expires_at = moment
             WHERE locks.key = p_key;
        END IF;
        IF p_op <> 'break' THEN
            -- nothing taken or handed over: the commit need not wait for the WAL flush (see
            -- ASYNCHRONOUS_COMMIT_SQL; a lost place refresh only shortens a place)
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
    END IF;
    IF p_op = 'queue' THEN
        INSERT INTO "leaselock_locks_line" AS kept (key, owner, expires_at, ticket, channel)
        VALUES (p_key, p_owner, moment + p_queue_ms * INTERVAL '1 millisecond', p_ticket,
                p_channel)
        ON CONFLICT (key, owner) DO UPDATE
           SET expires_at = excluded.expires_at, ticket = excluded.ticket,
               channel = excluded.channel;
        holder := CASE WHEN live THEN held_owner ELSE place_owner END;
        RETURN NEXT;
    ELSIF freed THEN
        announce := place_owner IS NULL;
        RETURN NEXT;
    END IF;
END
$leaselock$;
