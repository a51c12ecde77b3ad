"""What went wrong opening a PostgreSQL store, said as the fix: one LockStoreError per cause.

asyncpg (and SQLAlchemy around it) raise a different exception for each way a start-up fails;
``except LockError`` must catch them all, and the message must name the store and what to change.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import parse_qs, urlsplit

from ..._errors import LocksConfigurationError, LockStoreError

__all__ = ["SSL_MODES", "check_sslmode", "open_failure", "sqlstate"]

SSL_MODES: Final = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")

# SQLSTATEs of a refused connection (PostgreSQL's errcodes)
_UNKNOWN_DATABASE: Final = "3D000"
_UNKNOWN_ROLE: Final = "28000"
_WRONG_PASSWORD: Final = "28P01"  # noqa: S105 -- an error code, not a password
_TOO_MANY_CONNECTIONS: Final = "53300"


def sqlstate(error: BaseException) -> str | None:
    """Return the SQLSTATE of a driver error, through SQLAlchemy's wrapping if any."""
    for seen in _chain(error):
        state = getattr(seen, "sqlstate", None)
        if isinstance(state, str):
            return state
    return None


def _chain(error: BaseException) -> list[BaseException]:
    """The error, what it wraps (SQLAlchemy's ``orig``) and what caused it, a few levels deep."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and len(seen) < 4:  # noqa: PLR2004 -- wrappers nest two or three deep
        seen.append(current)
        current = getattr(current, "orig", None) or current.__cause__
    return seen


def check_sslmode(url: str) -> None:
    """Refuse an ``sslmode`` the driver would only refuse at the first connection.

    Raises:
        LocksConfigurationError: naming the accepted values.
    """
    for mode in parse_qs(urlsplit(url).query).get("sslmode", []):
        if mode not in SSL_MODES:
            raise LocksConfigurationError(
                f"sslmode={mode!r} in the PostgreSQL URL; pass one of {', '.join(SSL_MODES)}"
            )


def open_failure(store: str, error: BaseException) -> LockStoreError:
    """Return the error to raise when ``store`` could not connect or log in: cause and fix."""
    state = sqlstate(error)
    # the driver's own words, without the wrappers' (SQLAlchemy adds a line of its own)
    root = _chain(error)[-1]
    detail = f"{type(root).__name__}: {' '.join(str(root).split())}"
    if state == _UNKNOWN_DATABASE:
        fix = "create it (createdb), or fix the database name at the end of the URL"
        what = "the database does not exist"
    elif state == _UNKNOWN_ROLE:
        fix = "create the role (CREATE ROLE ... LOGIN), or fix the user name in the URL"
        what = "the server refused the role"
    elif state == _WRONG_PASSWORD:
        fix = "fix the password in the URL (percent-encode @, : and / in it)"
        what = "password authentication failed"
    elif state == _TOO_MANY_CONNECTIONS:
        fix = "lower max_size, or raise the server's max_connections"
        what = "the server has no connection left"
    elif any("SSL" in str(seen) for seen in _chain(error)):
        fix = "enable ssl on the server, or use sslmode=prefer (or disable) in the URL"
        what = "the server does not speak TLS as the URL's sslmode asks"
    elif any(isinstance(seen, TimeoutError) for seen in _chain(error)):
        fix = "check the host and any firewall between, or raise command_timeout"
        what = "the server did not answer in time"
    elif any(isinstance(seen, OSError) for seen in _chain(error)):
        fix = "check that the server runs, and that the host and port in the URL are right"
        what = "could not connect"
    else:
        fix = "check the URL and that the server accepts this client"
        what = "could not open a connection"
    return LockStoreError(f"{store} cannot start: {what} ({detail}); {fix}")
