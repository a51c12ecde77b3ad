"""Keys: validation and the keys derived from a job's key."""

from __future__ import annotations

from ._errors import LocksConfigurationError

__all__ = ["MAX_KEY_LENGTH", "lease_key", "refuse_function_as_key", "validate_key"]

MAX_KEY_LENGTH = 500
"""The longest key, in characters (code points)."""


def validate_key(key: object, *, name: str = "key") -> str:
    """Return ``key`` unchanged if it is a usable lock key.

    Keys are compared exactly: no case folding, trimming or Unicode normalisation.

    Raises:
        LocksConfigurationError: not a ``str``, empty, longer than :data:`MAX_KEY_LENGTH`, or
            holding a NUL or a lone surrogate (which no SQL store can keep as text).
    """
    if not isinstance(key, str):
        raise LocksConfigurationError(
            f"{name}={key!r} is a {type(key).__name__}; a lock key is a str, "
            'such as "invoices:nightly-export"'
        )
    if not key:
        raise LocksConfigurationError(
            f'{name} is empty; name what the lock protects, such as "invoices:nightly-export"'
        )
    if len(key) > MAX_KEY_LENGTH:
        raise LocksConfigurationError(
            f"{name} is {len(key)} characters long; keys hold at most {MAX_KEY_LENGTH}: "
            "shorten it, or hash the variable part"
        )
    if "\x00" in key:
        raise LocksConfigurationError(
            f"{name}={key!r} contains a NUL character, which PostgreSQL cannot store; remove it"
        )
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise LocksConfigurationError(
            f"{name}={key!r} contains a lone surrogate, which is not valid Unicode text; "
            "decode the bytes it came from with errors='strict' or 'replace'"
        ) from None
    return key


def lease_key(job_key: str) -> str:
    """Return the key of the sticky lease that says which instance runs ``job_key``."""
    return f"{job_key}:owner"


def refuse_function_as_key(key: object, decorator: str, call: str) -> None:
    """Refuse the function or class a decorator used without parentheses gets as its key.

    Raises:
        LocksConfigurationError: ``key`` is a function or a class; the message shows the call.
    """
    if callable(key) and not isinstance(key, str):
        raise LocksConfigurationError(
            f"{decorator} was used without parentheses, so it received "
            f"{getattr(key, '__qualname__', key)!r} as its key; write {decorator}{call}"
        )
