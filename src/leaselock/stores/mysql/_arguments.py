"""What MySQLLockStore accepts from its caller: the URL, the pool sizes, flags, key lengths.

Each check raises LocksConfigurationError with a message that names what works instead.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import unquote, urlsplit

from ..._errors import LocksConfigurationError
from ..._redact import redact_secrets

__all__ = [
    "DEFAULT_FOLLOWER_CONNECTIONS",
    "URL_SCHEMES",
    "check_follower_connections",
    "check_length",
    "connect_args",
]

DEFAULT_PORT: Final = 3306
URL_SCHEMES: Final = ("mysql", "mariadb", "mysql+asyncmy", "mariadb+asyncmy")
DEFAULT_FOLLOWER_CONNECTIONS: Final = 16


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


def check_follower_connections(value: object) -> None:
    """Refuse a cap on following connections that is not a whole number of at least 1."""
    if type(value) is not int or value < 1:
        raise LocksConfigurationError(
            f"follower_connections={value!r}; pass a whole number of at least 1 (default "
            f"{DEFAULT_FOLLOWER_CONNECTIONS}): the connections a store spends waiting for the "
            "releases of keys its process waits on, one per key. To follow no key, pass "
            "notify_releases=False"
        )
