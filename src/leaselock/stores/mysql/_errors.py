"""What a MySQL error means for MySQLLockStore: retry it, or say the fix in a LockStoreError.

asyncmy raises its errors with the server's error number first (``args == (errno, message)``);
SQLAlchemy wraps them (``.orig``). Every start-up failure becomes one LockStoreError whose
message names the store, the cause and what to change, so ``except LockError`` catches it.
"""

from __future__ import annotations

from typing import Final

from ..._errors import LockStoreError

__all__ = [
    "DUPLICATE_ENTRY",
    "NO_DATABASE_SELECTED",
    "NO_SUCH_TABLE",
    "RETRIED_ERRORS",
    "mysql_errno",
    "open_failure",
]

# a statement the server rolled back whole, so sending it again is a new attempt, nothing more:
# ER_LOCK_DEADLOCK (InnoDB chose it as a deadlock's victim: racing inserts of one new key take
# gap locks) and ER_LOCK_WAIT_TIMEOUT (it waited innodb_lock_wait_timeout for a row lock)
RETRIED_ERRORS: Final = frozenset({1213, 1205})
NO_SUCH_TABLE: Final = 1146
# ER_DUP_ENTRY: an INSERT found the key taken
DUPLICATE_ENTRY: Final = 1062
NO_DATABASE_SELECTED: Final = 1046

_ACCESS_DENIED: Final = 1045
_DATABASE_ACCESS_DENIED: Final = 1044
_UNKNOWN_DATABASE: Final = 1049
_TOO_MANY_CONNECTIONS: Final = (1040, 1203)
_CANNOT_CONNECT: Final = (2002, 2003, 2005, 2013)
_FIRST_SERVER_ERROR: Final = 1000
_LAST_CLIENT_ERROR: Final = 9999


def _chain(error: BaseException) -> list[BaseException]:
    """The error, what it wraps (SQLAlchemy's ``orig``) and what caused it, a few levels deep."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and len(seen) < 4:  # noqa: PLR2004 -- wrappers nest two or three deep
        seen.append(current)
        current = getattr(current, "orig", None) or current.__cause__
    return seen


def mysql_errno(error: BaseException) -> int | None:
    """Return the MySQL error number of a driver error, through SQLAlchemy's wrapping if any."""
    for seen in _chain(error):
        number = seen.args[0] if seen.args else None
        if type(number) is int and _FIRST_SERVER_ERROR <= number <= _LAST_CLIENT_ERROR:
            return number
    return None


def open_failure(store: str, error: BaseException) -> LockStoreError:
    """Return the error to raise when ``store`` could not connect or log in: cause and fix."""
    number = mysql_errno(error)
    root = _chain(error)[-1]
    detail = f"{type(root).__name__}: {' '.join(str(root).split())}"
    if number == _UNKNOWN_DATABASE:
        what = "the database does not exist"
        fix = "create it (CREATE DATABASE), or fix the database name at the end of the URL"
    elif number in (_ACCESS_DENIED, _DATABASE_ACCESS_DENIED):
        what = "the server refused the user"
        fix = (
            "fix the user or the password in the URL (percent-encode @, : and / in it), or "
            "GRANT the user access to the database from this host"
        )
    elif number in _TOO_MANY_CONNECTIONS:
        what = "the server has no connection left"
        fix = "lower max_size, or raise the server's max_connections"
    elif number == NO_DATABASE_SELECTED:
        what = "the connection has no database"
        fix = "name the database at the end of the URL, or qualify the table (table='db.name')"
    elif number in _CANNOT_CONNECT or any(isinstance(seen, OSError) for seen in _chain(error)):
        what = "could not connect"
        fix = "check that the server runs, and that the host and port in the URL are right"
    else:
        what = "could not open a connection"
        fix = "check the URL and that the server accepts this client"
    return LockStoreError(f"{store} cannot start: {what} ({detail}); {fix}")
