"""Redis: a fenced write to a hash, in one Lua script, so a paused holder's late write is refused.

Import this module explicitly; ``import leaselock`` never loads redis-py. The hash keeps the
highest fencing token that wrote it in a field of its own (``fencing_token`` by default); a write
with a lower token changes nothing::

    written = await fenced_hset(client, "stock:salmon", lock.fencing_token, {"in_stock": 9})
    if not written: ...   # a newer holder wrote this hash: the write was refused
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from .._errors import LocksConfigurationError
from .._fencing import checked_token

if TYPE_CHECKING:
    import redis
    import redis.asyncio

__all__ = ["FENCED_HSET", "TOKEN_FIELD", "fenced_hset", "fenced_hset_sync"]

TOKEN_FIELD: Final = "fencing_token"  # noqa: S105 -- a field name, not a secret

FENCED_HSET: Final = """
-- KEYS[1] = the hash the lock protects
-- ARGV[1] = the field that keeps the highest token written, ARGV[2] = the writer's token,
-- ARGV[3], ARGV[4], ... = field, value pairs to write
-- -> 1 written (and the token field set to ARGV[2]), 0 refused (a greater token wrote before)
-- compare and write in ONE script: a read first lets a newer holder's write slip in between
local seen = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) < seen then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], unpack(ARGV, 3))
return 1
"""

Value = str | bytes | int | float


async def fenced_hset(
    client: redis.asyncio.Redis,
    key: str,
    token: int,
    values: Mapping[str, Value],
    *,
    token_field: str = TOKEN_FIELD,
) -> bool:
    """Write ``values`` into the hash ``key`` unless a greater token wrote it before.

    Equal tokens pass, so one holder may write twice. One round trip (``EVALSHA``).

    Args:
        client: a ``redis.asyncio.Redis`` client.
        key: the hash.
        token: the writer's ``lock.fencing_token``.
        values: the fields to set (at least one).
        token_field: the field that keeps the highest token; never among ``values``.

    Returns:
        ``True`` if written, ``False`` if refused.

    Raises:
        LocksConfigurationError: a bad token, no values, or ``token_field`` among them.

    .. versionadded:: 0.2
    """
    arguments = _arguments(token, values, token_field)
    script = client.register_script(FENCED_HSET)
    return bool(await script(keys=[key], args=arguments))


def fenced_hset_sync(
    client: redis.Redis,
    key: str,
    token: int,
    values: Mapping[str, Value],
    *,
    token_field: str = TOKEN_FIELD,
) -> bool:
    """Do what :func:`fenced_hset` does, with a blocking ``redis.Redis`` client (threads, Celery).

    .. versionadded:: 0.2
    """
    arguments = _arguments(token, values, token_field)
    script = client.register_script(FENCED_HSET)
    return bool(script(keys=[key], args=arguments))


def _arguments(token: int, values: Mapping[str, Value], token_field: str) -> list[Value]:
    if importlib.util.find_spec("redis") is None:
        raise LocksConfigurationError(
            "leaselock.integrations.redis needs redis-py: pip install 'leaselock[redis]'"
        )
    checked = checked_token(token)
    if not isinstance(values, Mapping) or not values:
        raise LocksConfigurationError(
            f"values={values!r}; pass a mapping of at least one field to write, such as "
            '{"in_stock": 9}'
        )
    if token_field in values:
        raise LocksConfigurationError(
            f"{token_field}= is set from the token by fenced_hset; leave it out of the values"
        )
    arguments: list[Value] = [token_field, checked]
    for field, value in values.items():
        arguments += (field, value)
    return arguments
