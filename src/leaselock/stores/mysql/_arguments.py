"""What MySQLLockStore accepts from its caller: the URL, the pool sizes, flags, key lengths.

Each check raises LocksConfigurationError with a message that names what works instead.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import unquote, urlsplit

from ..._errors import LocksConfigurationError
from ..._redact import redact_secrets

__all__ = [
    "URL_SCHEMES",
    "check_length",
    "connect_args",
]

DEFAULT_PORT: Final = 3306
URL_SCHEMES: Final = ("mysql", "mariadb", "mysql+asyncmy", "mariadb+asyncmy")


def connect_args(url: object) -> dict[str, Any]:
    """Return asyncmy's connection arguments for a ``mysql://`` URL."""
    if not isinstance(url, str):
        raise LocksConfigurationError(
            f"url={url!r} is not a str; pass 'mysql://user:password@host:3306/database'"
        )
    parts = urlsplit(url)
    if parts.scheme not in URL_SCHEMES or not parts.netloc:
        raise LocksConfigurationError(
            f"url={redact_secrets(url)!r} is not a URL MySQLLockStore.from_url accepts; use "
            "mysql://user:password@host:3306/database (or mariadb://, mysql+asyncmy://)"
        )
    if parts.query or parts.fragment:
        raise LocksConfigurationError(
            f"url={redact_secrets(url)!r} has options after '?' or '#', which from_url does not "
            "pass on; for TLS or other driver options build an asyncmy pool "
            "(asyncmy.create_pool(..., autocommit=True)) and pass MySQLLockStore(pool)"
        )
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise LocksConfigurationError(
            f"url={redact_secrets(url)!r} has a port that is not a number from 1 to 65535"
        ) from None
    database = unquote(parts.path.removeprefix("/"))
    return {
        "host": parts.hostname or "localhost",
        "port": port,
        "user": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password else "",
        "database": database or None,
    }


def check_length(value: str, name: str, limit: int) -> None:
    # a server outside strict mode would cut a longer value short, silently: two long keys
    # would become one
    if len(value) * 4 > limit and len(value.encode()) > limit:
        raise LocksConfigurationError(
            f"{name} is {len(value.encode())} bytes long in UTF-8; MySQLLockStore keeps at most "
            f"{limit} ({limit // 4} characters always fit): pass a shorter {name}"
        )
