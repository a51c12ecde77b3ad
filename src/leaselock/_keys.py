"""Keys: validation and the keys derived from a job's key."""

from __future__ import annotations

import os
import socket

from ._errors import LocksConfigurationError

__all__ = [
    "MAX_INSTANCE_LENGTH",
    "MAX_KEY_LENGTH",
    "default_instance",
    "lease_key",
    "refuse_function_as_key",
    "validate_instance",
    "validate_key",
]

MAX_KEY_LENGTH = 500
"""The longest key, in characters (code points)."""

MAX_INSTANCE_LENGTH = 100
"""The longest instance label: it travels inside every owner id."""


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


def default_instance() -> str:
    """Return this process's instance label: ``hostname:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def validate_instance(label: object) -> str:
    """Return ``label`` if it can name an instance in every owner id, message and tool.

    Raises:
        LocksConfigurationError: not a ``str``, empty, longer than
            :data:`MAX_INSTANCE_LENGTH`, or holding a character that is not printable.
    """
    if not isinstance(label, str) or not label or len(label) > MAX_INSTANCE_LENGTH:
        raise LocksConfigurationError(
            f"instance={label!r}; pass a label of 1 to {MAX_INSTANCE_LENGTH} characters that a "
            'person recognises, such as "shop-3002" or "web-7f9c:1234" (default hostname:pid)'
        )
    if not label.isprintable():
        raise LocksConfigurationError(
            f"instance={label!r} holds a character that is not printable; use letters, digits "
            "and punctuation"
        )
    return label


def instance_label(owner: str | None) -> str | None:
    """Return the instance label a leaselock owner id ends with (``<32 hex>@<label>``).

    ``None`` for no owner, or an owner id made elsewhere (no ``@``).
    """
    if owner is None:
        return None
    _, separator, label = owner.partition("@")
    return label if separator else None


def holder_name(owner: str | None) -> str | None:
    """Name an owner for people: its instance label, else the whole owner id."""
    return instance_label(owner) or owner
