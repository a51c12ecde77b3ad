"""The SQL of PostgresLockStore's waiting lines: the line table, and one function for every step.

A key's line is its rows in ``<table>_line``, first come first served (``arrived``). Every step
on a line (a queue call, a leave, a release, a break) is ONE call of the PL/pgSQL function
``<table>_line(...)``, so one round trip. It is a function, not one statement, for its
snapshots: a single statement reads the line from a snapshot taken before it waited for the
key's row lock, so a release could miss a place committed just before it and free the key with
a waiter in line. In READ COMMITTED each statement of a PL/pgSQL function takes a fresh
snapshot: once the function holds the row lock, it sees every place committed before.

``{table}``, ``{line}`` and ``{line_function}`` are quoted names and ``{sequence_name}`` a
string literal, all validated by ``_postgres_sql``; the function's text holds nothing else of
the store (its release channel stays in :data:`LINE_STEP_SQL`), so every store on a table can
share it. It draws its tokens as ``_postgres_sql.NEXT_TOKEN_SQL`` does, in PL/pgSQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "CREATE_LINE_FUNCTION_SQL",
    "CREATE_LINE_SQL",
    "LINE_FUNCTION_MARK",
    "LINE_STEP_SQL",
    "PRUNE_LINE_SQL",
    "LineStatements",
    "line_statements",
]

# no input, no output. One row per waiter in a key's line: its arrival, the place's end on the
# server's clock, the ticket of the queue call that last kept it, and the LISTEN channel of the
# waiting process (NULL: it hears no grant, and learns of one at its next queue call).
CREATE_LINE_SQL: Final = """\
CREATE TABLE IF NOT EXISTS {line} (
    key text COLLATE "C" NOT NULL,
    owner text NOT NULL,
    arrived bigint GENERATED ALWAYS AS IDENTITY,
    expires_at timestamptz NOT NULL,
    ticket bigint NOT NULL,
    channel text,
    PRIMARY KEY (key, owner)
)"""

# what the body of the current line function says, and an earlier one does not: an earlier one
# draws its grants' tokens without the timeline's band, so the store replaces it (or, when it
# may not, does without lines). A later version names its own Alembic revision here.
LINE_FUNCTION_MARK: Final = "leaselock_0004"

# no input, no output: the function of every line step (see LINE_STEP_SQL for how it is called).
# p_op 'queue': the owner takes the key (no live lock, no live place ahead), renews a lock it
#   holds (a grant it may not have heard of), or keeps its place (kept where it was, else at the
#   end), live p_queue_ms from now, with p_ticket and p_channel -> one row: (token, NULL) when it
#   holds the key, else (NULL, holder)
# p_op 'release' / 'leave' / 'break': frees the owner's live lock (any live lock for 'break');
#   'leave' drops the owner's place first -> one row (token, owner, ms left (NULL for a
#   release), announce) of the lock freed, else none
# A freed key goes to the first live place in the same transaction: that owner holds it, with a
# new token, until the place's end; its process hears '<token> <ticket> <char length of key>
# <key><owner>' on the place's channel at the commit. announce: the key was freed with nobody in
# line (the caller tells its followers). Tokens as ACQUIRE_SQL draws them; expiry on
# clock_timestamp(), never now(). The body is quoted $leaselock$ and holds no '%': psycopg reads
# one as a placeholder even in a statement without parameters.
CREATE_LINE_FUNCTION_SQL: Final = """\
CREATE OR REPLACE FUNCTION {line_function}(
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
    -- {mark}: tokens are drawn in the band of the server's timeline, from
    -- (timeline - 1) * 2^40, so above every token an earlier primary handed out, as the
    -- store's own statements draw them (the store reads this line to know the function is
    -- current).
    -- The key's lock row is locked first, in every step (one order: no deadlock), and the
    -- line is read only after, by statements whose snapshots are taken once the lock is held:
    -- they see every place committed before.
    IF p_op = 'release' THEN
        -- the owner check, the freeing and the row lock in ONE statement, as RELEASE_SQL: a
        -- release nobody waits for costs one look at the line more
        UPDATE {table} AS locks SET owner = NULL, expires_at = clock_timestamp()
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
              FROM {table} AS locks WHERE locks.key = p_key FOR UPDATE;
            EXIT WHEN FOUND;
            IF p_op <> 'queue' THEN
                IF p_op = 'leave' THEN
                    DELETE FROM {line} AS waiting
                     WHERE waiting.key = p_key AND waiting.owner = p_owner;
                END IF;
                RETURN;
            END IF;
            INSERT INTO {table} (key, owner, fencing_token, expires_at)
            VALUES (p_key, NULL, nextval({sequence_name}), clock_timestamp())
            ON CONFLICT (key) DO NOTHING;
        END LOOP;
        moment := clock_timestamp();
        live := held_owner IS NOT NULL AND held_expires_at > moment;
        IF p_op = 'queue' THEN
            IF live AND held_owner = p_owner THEN
                UPDATE {table} AS locks
                   SET expires_at = moment + p_ttl_ms * INTERVAL '1 millisecond'
                 WHERE locks.key = p_key;
                token := held_token;
                RETURN NEXT;
                RETURN;
            END IF;
            -- places whose time is up leave the line: the caller's own starts again at the end
            DELETE FROM {line} AS waiting
             WHERE waiting.key = p_key AND waiting.expires_at <= moment;
            IF NOT live THEN
                SELECT waiting.owner, waiting.expires_at, waiting.ticket, waiting.channel
                  INTO place_owner, place_expires_at, place_ticket, place_channel
                  FROM {line} AS waiting
                 WHERE waiting.key = p_key ORDER BY waiting.arrived LIMIT 1;
                IF NOT FOUND OR place_owner = p_owner THEN
                    -- nobody waits ahead: the caller takes the key and leaves the line; an
                    -- acquisition, so its commit waits for the WAL flush
                    DELETE FROM {line} AS waiting
                     WHERE waiting.key = p_key AND waiting.owner = p_owner;
                    -- the token: the sequence's next, lifted into the band of the server's
                    -- timeline at the first draw after a promotion
                    drawn := nextval({sequence_name});
                    segment := pg_walfile_name(pg_current_wal_insert_lsn());
                    band := (CAST(CAST('x' || left(segment, 8) AS bit(32)) AS bigint) - 1) << 40;
                    IF drawn <= band THEN
                        drawn := setval({sequence_name},
                                        band + (drawn & 1099511627775));
                    END IF;
                    UPDATE {table} AS locks
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
            DELETE FROM {line} AS waiting
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
          FROM {line} AS waiting
         WHERE waiting.key = p_key ORDER BY waiting.arrived LIMIT 1;
        IF place_expires_at <= moment THEN
            DELETE FROM {line} AS waiting
             WHERE waiting.key = p_key AND waiting.expires_at <= moment;
            SELECT waiting.owner, waiting.expires_at, waiting.ticket, waiting.channel
              INTO place_owner, place_expires_at, place_ticket, place_channel
              FROM {line} AS waiting
             WHERE waiting.key = p_key ORDER BY waiting.arrived LIMIT 1;
        END IF;
    END IF;
    IF freed AND place_owner IS NOT NULL THEN
        -- the first live place holds the key now, for what is left of its time; its process
        -- hears of it at the commit, which waits for the WAL flush: a grant is an acquisition
        DELETE FROM {line} AS waiting
         WHERE waiting.key = p_key AND waiting.owner = place_owner;
        drawn := nextval({sequence_name});
        segment := pg_walfile_name(pg_current_wal_insert_lsn());
        band := (CAST(CAST('x' || left(segment, 8) AS bit(32)) AS bigint) - 1) << 40;
        IF drawn <= band THEN
            drawn := setval({sequence_name}, band + (drawn & 1099511627775));
        END IF;
        UPDATE {table} AS locks
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
            UPDATE {table} AS locks SET owner = NULL, expires_at = moment
             WHERE locks.key = p_key;
        END IF;
        IF p_op <> 'break' THEN
            -- nothing taken or handed over: the commit need not wait for the WAL flush (see
            -- ASYNCHRONOUS_COMMIT_SQL; a lost place refresh only shortens a place)
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
    END IF;
    IF p_op = 'queue' THEN
        INSERT INTO {line} AS kept (key, owner, expires_at, ticket, channel)
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
$leaselock$"""

# $1 step ('queue', 'release', 'leave' or 'break'), $2 key, $3 owner (NULL for a break),
# $4 ttl_ms, $5 queue_ms, $6 ticket, $7 the waiting process's channel (all three NULL but for a
# queue call) -> the function's row: (token, holder, ms left) as CREATE_LINE_FUNCTION_SQL says.
# A key freed with nobody in line is announced to its followers in the same statement
# ({announce}: NOTIFY_WAITERS_SQL, or nothing with notifications off).
LINE_STEP_SQL: Final = """\
SELECT stepped.token, stepped.holder, stepped.ms_left{announce}
  FROM (SELECT CAST($2 AS text) AS key) AS called,
       {line_function}(CAST($1 AS text), called.key, CAST($3 AS text), CAST($4 AS bigint),
                       CAST($5 AS bigint), CAST($6 AS bigint), CAST($7 AS text)) AS stepped"""

# $1 age_ms (bigint), $2 batch (bigint) -> one row: how many places were deleted.
# Places whose time was up that long ago, of keys no step has looked at since (a waiter that
# died, on a key nobody uses again). A dead place counts for nothing, so no lock row is needed.
# FOR UPDATE reads each place's latest version, so one refreshed meanwhile stays; SKIP LOCKED,
# as in PRUNE_SQL: the pass never waits for a line step, so it cannot deadlock with one.
PRUNE_LINE_SQL: Final = """\
WITH doomed AS (
    SELECT key, owner FROM {line}
     WHERE expires_at < clock_timestamp() - CAST($1 AS bigint) * INTERVAL '1 millisecond'
     LIMIT CAST($2 AS bigint)
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM {line} AS pruned USING doomed
     WHERE pruned.key = doomed.key AND pruned.owner = doomed.owner
    RETURNING 1
)
SELECT count(*) FROM gone"""


@dataclass(frozen=True, slots=True)
class LineStatements:
    """The line SQL of one store, with its names filled in."""

    step: str
    prune: str
    schema: tuple[str, ...]
    table: str
    signature: str


def line_statements(names: dict[str, str], notify_waiters: str | None) -> LineStatements:
    """Fill in the line SQL; ``notify_waiters`` announces a key freed with nobody in line."""
    announce = (
        ""
        if notify_waiters is None
        else f",\n       CASE WHEN stepped.announce THEN {notify_waiters} END"
    )
    return LineStatements(
        step=LINE_STEP_SQL.format_map({**names, "announce": announce}),
        prune=PRUNE_LINE_SQL.format_map(names),
        schema=(
            CREATE_LINE_SQL.format_map(names),
            CREATE_LINE_FUNCTION_SQL.format_map({**names, "mark": LINE_FUNCTION_MARK}),
        ),
        table=names["line"],
        signature=f"{names['line_function']}(text,text,text,bigint,bigint,bigint,text)",
    )
