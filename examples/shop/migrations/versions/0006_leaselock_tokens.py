"""leaselock's waiting lines draw their tokens in the band of the server's timeline.

leaselock's documented migration (docs/stores/alembic_leaselock_tokens.py) with its default
names: it replaces the function of every step on a line with the one whose grants draw their
tokens as leaselock's own statements do, above every token an earlier primary handed out.
Without it the shop's store (``create_schema=False``) runs without lines, and its waiters retry.

On SQLite it does nothing: ``SQLiteLockStore`` keeps its own tokens.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

from __future__ import annotations

from typing import Final

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TABLE: Final = "leaselock_locks"
LINE: Final = "leaselock_locks_line"
SEQUENCE: Final = "leaselock_fencing_token_seq"

# the function as leaselock's store creates it; {table}, {line}, {line_function} are quoted
# names, {sequence_name} the sequence's as a string literal
LINE_FUNCTION: Final = """\
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


def _on_postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    """Replace the line function with the one that draws tokens in the timeline's band."""
    if not _on_postgresql():
        return
    op.execute(
        LINE_FUNCTION.format(
            table=f'"{TABLE}"',
            line=f'"{LINE}"',
            line_function=f'"{LINE}"',
            sequence_name=f"'\"{SEQUENCE}\"'",
        )
    )


def downgrade() -> None:
    """Keep the function: the shop's earlier leaselock calls it as it called the one before."""
