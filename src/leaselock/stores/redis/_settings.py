"""What RedisLockStore and RedisClusterLockStore accept: a key prefix and connection options."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ..._errors import LocksConfigurationError

__all__ = ["DEFAULT_PREFIX", "DEFAULT_SOCKET_TIMEOUTS", "check_options", "check_prefix"]

DEFAULT_PREFIX: Final = "leaselock:"
MAX_PREFIX_LENGTH: Final = 100
# redis-py 5 waits for ever by default; leaselock bounds every call anyway, and these let the
# driver notice a dead connection and let the pool give it up
DEFAULT_SOCKET_TIMEOUTS: Final = {"socket_timeout": 5.0, "socket_connect_timeout": 5.0}
_SECONDS_OPTIONS: Final = ("socket_timeout", "socket_connect_timeout", "timeout")
_FLAG_OPTIONS: Final = ("decode_responses", "retry_on_timeout", "socket_keepalive", "ssl")


def check_options(options: Mapping[str, object], store: str = "RedisLockStore") -> None:
    """Refuse option values the pool would only trip over at the first connection.

    Raises:
        LocksConfigurationError: naming the option, what it got and what it takes.
    """
    for name in _SECONDS_OPTIONS:
        value = options.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise LocksConfigurationError(
                f"{store}.from_url: {name}={value!r}; pass a positive number of seconds "
                "(such as 5), or None to wait without limit"
            )
    for name in _FLAG_OPTIONS:
        if name in options and not isinstance(options[name], bool):
            raise LocksConfigurationError(
                f"{store}.from_url: {name}={options[name]!r}; pass True or False"
            )
    connections = options.get("max_connections")
    if connections is not None and (
        isinstance(connections, bool) or not isinstance(connections, int) or connections < 1
    ):
        raise LocksConfigurationError(
            f"{store}.from_url: max_connections={connections!r}; pass a positive int"
        )


def check_prefix(prefix: object) -> None:
    """Refuse a prefix under which one store's counter could be another store's lock key.

    Lock keys are ``<prefix>lock:<key>``; a prefix that ends with ``:`` and has no ``lock``
    segment cannot start with another prefix's ``<prefix>lock:``, so no two stores share a key.
    """
    if (
        not isinstance(prefix, str)
        or not prefix.endswith(":")
        or len(prefix) > MAX_PREFIX_LENGTH
        or "lock" in prefix.split(":")
        or "\x00" in prefix
    ):
        raise LocksConfigurationError(
            f"prefix={prefix!r}; pass a str of at most {MAX_PREFIX_LENGTH} characters that ends "
            'with ":" and has no "lock" segment (which would overlap lock keys), such as '
            f'{DEFAULT_PREFIX!r} or "myapp:leaselock:"'
        )
