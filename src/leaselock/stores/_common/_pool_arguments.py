"""What the SQL stores' constructors share: pool sizes and flags, checked the same way."""

from __future__ import annotations

from typing import Final

from ..._errors import LocksConfigurationError

__all__ = ["DEFAULT_MAX_SIZE", "DEFAULT_MIN_SIZE", "check_flags", "check_pool_size"]

DEFAULT_MIN_SIZE: Final = 1
DEFAULT_MAX_SIZE: Final = 10


def check_pool_size(min_size: object, max_size: object) -> None:
    """Refuse pool sizes a driver would only trip over later, naming what to pass.

    Raises:
        LocksConfigurationError: not ints with 0 <= min_size <= max_size and max_size >= 1.
    """
    if (
        type(min_size) is not int
        or type(max_size) is not int
        or not 0 <= min_size <= max_size
        or max_size < 1
    ):
        raise LocksConfigurationError(
            f"min_size={min_size!r}, max_size={max_size!r}; pass ints with "
            f"0 <= min_size <= max_size and max_size >= 1 (defaults {DEFAULT_MIN_SIZE} and "
            f"{DEFAULT_MAX_SIZE})"
        )


def check_flags(**flags: object) -> None:
    """Refuse a flag that is not a bool (``"false"`` is true in an ``if``).

    Raises:
        LocksConfigurationError: naming the flag.
    """
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise LocksConfigurationError(f"{name}={value!r}; pass True or False")
