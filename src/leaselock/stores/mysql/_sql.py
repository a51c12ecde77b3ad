"""The SQL of MySQLLockStore, written once for MySQL 8 and MariaDB, and what fills in its names.

Each statement says its input and output above it; parameters are ``%s`` (the asyncmy driver's,
also under SQLAlchemy's ``exec_driver_sql``), so no statement holds a literal ``%``.

Two rules hold in every statement:

- Time is ``UTC_TIMESTAMP(6)``: microseconds, and no session's ``time_zone`` shifts it (``NOW(6)``
  and ``TIMESTAMP`` columns are read in the session's zone, so two application pools set to
  different zones would see each other's locks hours early or late). ``expires_at`` is a
  ``DATETIME(6)`` in UTC. Like ``NOW()``, it is the time the statement started: a statement that
  waited for a row lock writes an expiry counted from before the wait, never after.
- A write answers through the OK packet's insert id, set by ``LAST_INSERT_ID(expr)``: MySQL has
  no ``RETURNING``, and the affected-row count means "changed" or "matched" depending on the
  client's ``CLIENT_FOUND_ROWS`` flag (SQLAlchemy sets it, a bare asyncmy pool does not), so it
  cannot tell a renewal in the same microsecond from a refused one. The insert id can.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Final, NamedTuple

from ..._errors import LocksConfigurationError

__all__ = [
    "ACQUIRE_SQL",
    "BREAK_READ_LOCKED_SQL",
    "BREAK_READ_SQL",
    "BREAK_WRITE_SQL",
    "CREATE_TABLE_SQL",
    "JOBS_SUFFIX",
    "LIST_LOCKS_SQL",
    "MAX_KEY_BYTES",
    "MAX_OWNER_BYTES",
    "READ_LOCK_SQL",
    "RELEASE_SQL",
    "RENEW_SQL",
    "RUNS_SUFFIX",
    "SERVER_SQL",
    "STORE_TIME_SQL",
    "Statements",
    "TableNames",
    "checked_table",
    "renew_many_sql",
    "statements",
]

# a key is at most 500 characters, at most 4 bytes each in UTF-8
MAX_KEY_BYTES: Final = 2000
MAX_OWNER_BYTES: Final = 2000
# the run records live in "<table>_runs", the job documents in "<table>_jobs": names of at most
# 64 characters, as any MySQL name
RUNS_SUFFIX: Final = "_runs"
JOBS_SUFFIX: Final = "_jobs"
_DATABASE_NAME: Final = r"[A-Za-z_][A-Za-z0-9_$]{0,63}"
_LONGEST_SUFFIX: Final = max(len(RUNS_SUFFIX), len(JOBS_SUFFIX))
_TABLE_NAME: Final = rf"[A-Za-z_][A-Za-z0-9_$]{{0,{63 - _LONGEST_SUFFIX}}}"
_QUALIFIED_NAME: Final = re.compile(rf"(?:{_DATABASE_NAME}\.)?{_TABLE_NAME}")
# MySQL 8.0.19 reads the inserted row by alias; 8.0.20 deprecates VALUES(col) with a warning,
# and a warning costs asyncmy a SHOW WARNINGS round trip on every acquire
_ROW_ALIAS_SINCE: Final = (8, 0, 19)

# --- SQL: {table} is a quoted name; {row_alias} is " AS `_leaselock_new`" on MySQL 8.0.19+
# (a name no table of the application has), else empty; {drawn} the token the INSERT drew from
# the counter (`_leaselock_new`.`fencing_token` or
# VALUES(`fencing_token`))

# %s key, %s owner, %s ttl_ms, %s owner, %s ttl_ms -> insert id: the token if taken, 0 if a live
# lock holds the key. ONE statement: the row lock taken by ON DUPLICATE KEY makes exactly one of
# any concurrent callers win, and the owner check and the write happen under it. The counter is
# the table's AUTO_INCREMENT: the INSERT draws a value (kept, never handed out twice, even when
# the row exists and the draw goes unused). A new key keeps it as its token; a free row (released
# or expired) takes GREATEST(drawn, its own token + 1): the row floors the key's next token, so a
# counter that went back cannot hand the key an old one. The first assignment sets
# LAST_INSERT_ID to the new token, or to 0 when the key is live; the two after it read that
# verdict (assignments run left to right, each seeing the ones before). A refused acquire
# changes nothing in the row.
# -> the server's wall clock in epoch milliseconds, the clock its expiries are measured on:
# UTC_TIMESTAMP(6) counted from the epoch, so no session time zone takes part
STORE_TIME_SQL: Final = (
    "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000"
)

ACQUIRE_SQL: Final = """\
INSERT INTO {table} (`key`, `owner`, `fencing_token`, `expires_at`)
VALUES (%s, %s, NULL, UTC_TIMESTAMP(6) + INTERVAL (%s * 1000) MICROSECOND){row_alias}
ON DUPLICATE KEY UPDATE
    `fencing_token` = GREATEST(`fencing_token`, LAST_INSERT_ID(
        IF(`owner` IS NULL OR `expires_at` <= UTC_TIMESTAMP(6),
           GREATEST(COALESCE({drawn}, 0), `fencing_token` + 1), 0))),
    `owner` = IF(LAST_INSERT_ID() = 0, `owner`, %s),
    `expires_at` = IF(LAST_INSERT_ID() = 0, `expires_at`,
                      UTC_TIMESTAMP(6) + INTERVAL (%s * 1000) MICROSECOND)"""

# %s ttl_ms, %s key, %s owner -> insert id: the lock's token if owner held a live lock (now
# renewed), else 0
RENEW_SQL: Final = """\
UPDATE {table}
   SET `expires_at` = UTC_TIMESTAMP(6) + INTERVAL (%s * 1000) MICROSECOND,
       `fencing_token` = LAST_INSERT_ID(`fencing_token`)
 WHERE `key` = %s AND `owner` = %s AND `expires_at` > UTC_TIMESTAMP(6)"""

# %s key, %s owner -> insert id: the lock's token if owner held a live lock (now released),
# else 0. The row stays, owner NULL: its token is the floor of the key's next one.
RELEASE_SQL: Final = """\
UPDATE {table}
   SET `owner` = NULL, `expires_at` = UTC_TIMESTAMP(6),
       `fencing_token` = LAST_INSERT_ID(`fencing_token`)
 WHERE `key` = %s AND `owner` = %s AND `expires_at` > UTC_TIMESTAMP(6)"""

# (%s key, %s owner, %s ttl_ms) per renewal, then (%s key) per renewal, then (%s key, %s owner)
# per renewal -> affected rows: how many of the leases were held live (now renewed). Renewed
# rows change (a new expiry) unless a renewal lands in the microsecond of the last one with the
# same ttl: the count is then low, never high, which the store answers by renewing one by one.
_RENEW_MANY_SQL: Final = """\
UPDATE {table}
   SET `expires_at` = UTC_TIMESTAMP(6) + INTERVAL (CASE {ttls} END * 1000) MICROSECOND
 WHERE `key` IN ({keys}) AND ({pairs}) AND `expires_at` > UTC_TIMESTAMP(6)"""

# %s key -> (owner, fencing_token, ms left) of the live lock, or no row
BREAK_READ_SQL: Final = """\
SELECT `owner`, `fencing_token`,
       CEILING(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), `expires_at`) / 1000)
  FROM {table} WHERE `key` = %s AND `owner` IS NOT NULL AND `expires_at` > UTC_TIMESTAMP(6)"""

# %s key -> as BREAK_READ_SQL, the key's row locked (exclusive) until the transaction ends
BREAK_READ_LOCKED_SQL: Final = BREAK_READ_SQL + " FOR UPDATE"

# %s key, %s owner, %s fencing_token -> insert id: the token if that very lock was still live
# (now freed, as by a release), else 0
BREAK_WRITE_SQL: Final = """\
UPDATE {table}
   SET `owner` = NULL, `expires_at` = UTC_TIMESTAMP(6),
       `fencing_token` = LAST_INSERT_ID(`fencing_token`)
 WHERE `key` = %s AND `owner` = %s AND `fencing_token` = %s AND `expires_at` > UTC_TIMESTAMP(6)"""

# the columns an operator reads: (key, owner if live, fencing_token, ms left if live)
_LOCK_COLUMNS: Final = """\
SELECT `key`,
       IF(`owner` IS NOT NULL AND `expires_at` > UTC_TIMESTAMP(6), `owner`, NULL),
       `fencing_token`,
       IF(`owner` IS NOT NULL AND `expires_at` > UTC_TIMESTAMP(6),
          CEILING(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), `expires_at`) / 1000), NULL)"""

# %s key -> one row (see _LOCK_COLUMNS) if the key has a row, else none
READ_LOCK_SQL: Final = _LOCK_COLUMNS + "\n  FROM {table} WHERE `key` = %s"

# %s prefix, %s prefix length in bytes, %s prefix, %s limit -> rows (see _LOCK_COLUMNS) of the
# keys starting with prefix, by key (bytewise). The range condition lets the primary key start
# the scan at the prefix.
LIST_LOCKS_SQL: Final = (
    _LOCK_COLUMNS
    + """
  FROM {table} WHERE `key` >= %s AND LEFT(`key`, %s) = %s
 ORDER BY `key` LIMIT %s"""
)

# (%s schema or NULL: the connection's database, %s table) for the lock table, the runs table
# and the jobs table -> (server version, the database in use, whether the lock table exists,
# whether the runs table exists, whether the jobs table exists). Needs no privilege beyond
# reading the tables.
SERVER_SQL: Final = """\
SELECT VERSION(), DATABASE(),
       EXISTS(SELECT 1 FROM information_schema.tables
               WHERE table_schema = COALESCE(%s, DATABASE()) AND table_name = %s),
       EXISTS(SELECT 1 FROM information_schema.tables
               WHERE table_schema = COALESCE(%s, DATABASE()) AND table_name = %s),
       EXISTS(SELECT 1 FROM information_schema.tables
               WHERE table_schema = COALESCE(%s, DATABASE()) AND table_name = %s)"""

# no input, no output. VARBINARY keys compare byte for byte: a _bin collation of MySQL 5.7
# and MariaDB pads with spaces ("job" = "job "), and a _ci one folds case and accents. The
# AUTO_INCREMENT is the token counter (InnoDB keeps it on disk, above every token the column
# holds); it needs an index of its own. InnoDB for row locks and crash safety.
CREATE_TABLE_SQL: Final = f"""\
CREATE TABLE IF NOT EXISTS {{table}} (
    `key` VARBINARY({MAX_KEY_BYTES}) NOT NULL,
    `owner` VARBINARY({MAX_OWNER_BYTES}) NULL,
    `fencing_token` BIGINT NOT NULL AUTO_INCREMENT,
    `expires_at` DATETIME(6) NOT NULL,
    PRIMARY KEY (`key`),
    KEY `fencing_token` (`fencing_token`)
) ENGINE=InnoDB"""


@dataclass(frozen=True, slots=True)
class Statements:
    """The SQL of one store, with its names filled in for the server it talks to."""

    table: str
    acquire: str
    renew: str
    release: str
    break_read: str
    break_read_locked: str
    break_write: str
    read_lock: str
    list_locks: str


def statements(table: str, server_version: str) -> Statements:
    """Return the SQL of the store for ``table`` (quoted) on the server of ``server_version``."""
    alias = _reads_row_alias(server_version)
    acquire = ACQUIRE_SQL.format(
        table=table,
        row_alias=" AS `_leaselock_new`" if alias else "",
        drawn="`_leaselock_new`.`fencing_token`" if alias else "VALUES(`fencing_token`)",
    )
    return Statements(
        table=table,
        acquire=acquire,
        renew=RENEW_SQL.format(table=table),
        release=RELEASE_SQL.format(table=table),
        break_read=BREAK_READ_SQL.format(table=table),
        break_read_locked=BREAK_READ_LOCKED_SQL.format(table=table),
        break_write=BREAK_WRITE_SQL.format(table=table),
        read_lock=READ_LOCK_SQL.format(table=table),
        list_locks=LIST_LOCKS_SQL.format(table=table),
    )


@cache
def renew_many_sql(table: str, count: int) -> str:
    """Return the statement renewing ``count`` leases of ``table`` (see ``_RENEW_MANY_SQL``)."""
    return _RENEW_MANY_SQL.format(
        table=table,
        ttls=" ".join(["WHEN `key` = %s AND `owner` = %s THEN %s"] * count),
        keys=", ".join(["%s"] * count),
        pairs=" OR ".join(["(`key` = %s AND `owner` = %s)"] * count),
    )


def _reads_row_alias(server_version: str) -> bool:
    """Tell whether the server is MySQL 8.0.19 or later (MariaDB has no row alias)."""
    if "mariadb" in server_version.lower():
        return False
    numbers = re.match(r"(\d+)\.(\d+)\.(\d+)", server_version)
    if numbers is None:
        return False
    return tuple(int(part) for part in numbers.groups()) >= _ROW_ALIAS_SINCE


class TableNames(NamedTuple):
    """The store's three tables, quoted for its SQL and bare for ``information_schema``."""

    locks: str
    runs: str
    jobs: str
    schema: str | None
    """The database named in ``table=``; ``None``: the connection's."""
    locks_name: str
    runs_name: str
    jobs_name: str


def checked_table(value: object) -> TableNames:
    """Return the names of the lock table ``value``, its run records and its jobs tables.

    Raises:
        LocksConfigurationError: not a name of letters, digits, ``_`` and ``$``, optionally
            qualified by a database, short enough for ``_runs`` and ``_jobs`` to be appended.
    """
    if not isinstance(value, str) or not _QUALIFIED_NAME.fullmatch(value):
        raise LocksConfigurationError(
            f"table={value!r} is not a name MySQLLockStore accepts: use letters, digits, '_' "
            f"and '$', starting with a letter or underscore, at most {64 - _LONGEST_SUFFIX} "
            f"characters (its run records go in '<table>{RUNS_SUFFIX}' and its jobs in "
            f"'<table>{JOBS_SUFFIX}', at most 64 each), optionally "
            'qualified by a database ("locks.leaselock_locks"); it is used as written (quoted)'
        )
    schema, _, name = value.rpartition(".")
    prefix = f"`{schema}`." if schema else ""
    return TableNames(
        locks=f"{prefix}`{name}`",
        runs=f"{prefix}`{name}{RUNS_SUFFIX}`",
        jobs=f"{prefix}`{name}{JOBS_SUFFIX}`",
        schema=schema or None,
        locks_name=name,
        runs_name=name + RUNS_SUFFIX,
        jobs_name=name + JOBS_SUFFIX,
    )
