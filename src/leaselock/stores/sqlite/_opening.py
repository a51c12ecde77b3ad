"""How a SQLiteLockStore opens its file: made if missing, only if it exists, or read-only.

A store that may create its schema (the default) opens the file as ``sqlite3`` does, making it
if missing. One that may not (``create_schema=False``) opens it with the URI mode ``rw``, and a
read-only one with ``ro``: SQLite itself then refuses to make the file, and a read-only
connection refuses every write, so no caller's mistake can change an application's database.
Before such a store uses the file, :func:`missing_schema` says what of leaselock's schema it lacks.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path

from ._jobs import COLUMNS_ADDED

__all__ = ["connect", "missing_schema"]

# -> (name,) of each table of the file
_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"


def connect(
    path: Path, *, may_create: bool, read_only: bool, timeout_s: float
) -> sqlite3.Connection:
    """Open ``path`` (absolute): made if missing only when ``may_create`` and not ``read_only``.

    Raises:
        sqlite3.Error: SQLite could not open it (with ``rw`` or ``ro``: also a missing file).
    """
    if may_create and not read_only:
        target, uri = str(path), False
    else:
        # a URI, the path percent-encoded by as_uri(): a '?' or '#' in a name stays in the name
        target, uri = f"{path.as_uri()}?mode={'ro' if read_only else 'rw'}", True
    return sqlite3.connect(
        target,
        timeout=timeout_s,
        # transactions are explicit: BEGIN ... COMMIT in the store's _in_transaction
        isolation_level=None,
        uri=uri,
        # the store's SQLiteWorker lets one thread at a time use it: its own, or a caller's
        check_same_thread=False,
    )


def missing_schema(
    db: sqlite3.Connection, tables: Sequence[str], grown: Mapping[str, str]
) -> list[str]:
    """Return what the file lacks of ``tables`` and of the columns added since, quoted.

    ``grown`` names (unquoted) the table of each kind of :data:`COLUMNS_ADDED`. A table is
    given as ``"name"``, a column that an earlier leaselock did not make as
    ``"table"."column"``; nothing when the schema is whole.
    """
    present = {name for (name,) in db.execute(_TABLES)}
    missing = [f'"{table}"' for table in tables if table not in present]
    for kind, added in COLUMNS_ADDED.items():
        table = grown[kind]
        if table in present:
            columns = {row[1] for row in db.execute(f'PRAGMA table_info("{table}")')}
            missing += [
                f'"{table}"."{column}"' for column, _definition in added if column not in columns
            ]
    return missing
