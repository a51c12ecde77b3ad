"""The etcd transactions of EtcdLockStore, as the JSON bodies the gateway takes.

Each is ONE ``/v3/kv/txn``: etcd applies its compares and its writes atomically, in raft
order, so an owner check and the write it guards are one step, as the store contract asks.
Keys and owners are text here; the bodies carry them base64, as the gateway wants.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ._gateway import encoded

__all__ = [
    "MAX_CHECKS",
    "MAX_MOVES",
    "MAX_TXN_OPS",
    "acquire_txn",
    "held_txn",
    "move_txn",
    "release_txn",
]

MAX_TXN_OPS: Final = 128
"""etcd's default ``--max-txn-ops``: the most compares, or operations, one txn may carry."""

MAX_MOVES: Final = MAX_TXN_OPS - 1
"""The most nested txns of one :func:`move_txn`: etcd counts a nested txn's operation against
what its parent left of ``--max-txn-ops`` (127 nested txns of one operation each fit)."""

MAX_CHECKS: Final = MAX_TXN_OPS // 2
"""The most keys one :func:`held_txn` checks: two compares each."""


def acquire_txn(key: str, owner: str, lease_id: int) -> dict[str, object]:
    """Take ``key`` for ``owner`` under the lease if no live lock holds it.

    compare: ``create_revision(key) == 0``: the key does not exist (never taken, or deleted
        by a release, a break, or its lease's expiry).
    success: put ``key = owner`` under the lease. The answer's ``header.revision`` is the
        revision of this put, the key's ``create_revision``: the fencing token.
    failure: range ``key``: the live lock, whose value is its owner.
    -> ``succeeded`` (left out when false), ``header.revision``, ``responses``.
    """
    encoded_key = encoded(key)
    return {
        "compare": [
            {"key": encoded_key, "result": "EQUAL", "target": "CREATE", "create_revision": "0"}
        ],
        "success": [
            {"request_put": {"key": encoded_key, "value": encoded(owner), "lease": str(lease_id)}}
        ],
        "failure": [{"request_range": {"key": encoded_key}}],
    }


def release_txn(key: str, owner: str) -> dict[str, object]:
    """Delete ``key`` if ``owner`` holds it.

    compare: ``value(key) == owner`` (false for a missing key).
    success: delete ``key``: the deletion wakes the watchers of the key.
    -> ``succeeded`` (left out when false).
    """
    encoded_key = encoded(key)
    return {
        "compare": [
            {"key": encoded_key, "result": "EQUAL", "target": "VALUE", "value": encoded(owner)}
        ],
        "success": [{"request_delete_range": {"key": encoded_key}}],
    }


def move_txn(holders: Sequence[tuple[str, str]], lease_id: int) -> dict[str, object]:
    """Put each key its owner holds under the lease: renewals that leave the lease they were on.

    One nested txn per ``(key, owner)`` (at most :data:`MAX_MOVES`, each key once), so each
    answers on its own:
    compare: ``value(key) == owner``.
    success: put ``key = owner`` under the lease (the key keeps its ``create_revision``,
        so its token).
    -> ``responses[i].response_txn.succeeded``: whether ``owner`` held ``key`` (now moved).
    """
    nested = []
    for key, owner in holders:
        encoded_key, encoded_owner = encoded(key), encoded(owner)
        nested.append(
            {
                "request_txn": {
                    "compare": [
                        {
                            "key": encoded_key,
                            "result": "EQUAL",
                            "target": "VALUE",
                            "value": encoded_owner,
                        }
                    ],
                    "success": [
                        {
                            "request_put": {
                                "key": encoded_key,
                                "value": encoded_owner,
                                "lease": str(lease_id),
                            }
                        }
                    ],
                }
            }
        )
    return {"success": nested}


def held_txn(holders: Sequence[tuple[str, str]], lease_id: int) -> dict[str, object]:
    """Check that each key is held by its owner under the lease; write nothing.

    compare: for each ``(key, owner)`` (at most :data:`MAX_CHECKS`): ``value(key) == owner``
        and ``lease(key) == lease_id`` (etcd 3.3 and later compare leases).
    failure: range each key, in order: which of them failed, and why.
    -> ``succeeded`` (left out when false: some key is gone, another owner's, or under
        another lease), ``responses[i].response_range.kvs`` on failure.
    """
    compare: list[dict[str, str]] = []
    failure: list[dict[str, object]] = []
    for key, owner in holders:
        encoded_key = encoded(key)
        compare.append(
            {"key": encoded_key, "result": "EQUAL", "target": "VALUE", "value": encoded(owner)}
        )
        compare.append(
            {"key": encoded_key, "result": "EQUAL", "target": "LEASE", "lease": str(lease_id)}
        )
        failure.append({"request_range": {"key": encoded_key}})
    return {"compare": compare, "failure": failure}
