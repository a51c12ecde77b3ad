"""Job documents of EtcdLockStore: one key per document, ``<prefix>jobs/<name>``.

Job control (``_common/_job_documents.py``) keeps pauses and job states as short documents
under names (``pause:<target>``, ``job:<key>``). Each is the etcd key ``<prefix>jobs/<name>``,
its value the document's UTF-8 text, with no lease (a pause outlives every instance), never
under ``<prefix>locks/`` or ``<prefix>runs/``. etcd keeps them as it keeps the locks: written
through raft, read linearizably.

A swap is one txn: etcd compares the key with what the caller read and writes in one step,
in raft order. Reads of several names are ranges in one txn (one per :data:`MAX_TXN_OPS`
names, sent together), so they see one revision; a listing is one range read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ._gateway import decoded, encoded, encoded_bytes, prefix_end
from ._requests import MAX_TXN_OPS

if TYPE_CHECKING:
    from ._gateway import EtcdGateway

__all__ = ["JOBS_SEGMENT", "documents_under", "read_documents", "swap_txn"]

JOBS_SEGMENT: Final = "jobs/"


def swap_txn(key: str, expected: str | None, document: str | None) -> dict[str, object]:
    """Make ``document`` the value of ``key`` if its value is ``expected``.

    compare: ``value(key) == expected``, or ``create_revision(key) == 0`` (the key does not
        exist) when ``expected`` is ``None``;
    success: put ``key = document`` with no lease, or delete ``key`` when ``document`` is
        ``None``;
    -> ``succeeded`` (left out when false: the key holds something else).
    """
    encoded_key = encoded(key)
    compare = (
        {"key": encoded_key, "result": "EQUAL", "target": "CREATE", "create_revision": "0"}
        if expected is None
        else {"key": encoded_key, "result": "EQUAL", "target": "VALUE", "value": encoded(expected)}
    )
    write = (
        {"request_delete_range": {"key": encoded_key}}
        if document is None
        else {"request_put": {"key": encoded_key, "value": encoded(document)}}
    )
    return {"compare": [compare], "success": [write]}


async def read_documents(
    gateway: EtcdGateway, jobs_prefix: str, names: Sequence[str]
) -> list[str | None]:
    """Return the document of each name, in order; ``None`` where there is none.

    One txn of ranges per :data:`MAX_TXN_OPS` names (etcd's ``--max-txn-ops``), sent together.
    """
    chunks = [names[at : at + MAX_TXN_OPS] for at in range(0, len(names), MAX_TXN_OPS)]
    answers = await asyncio.gather(
        *(
            gateway.call(
                "kv/txn",
                {"success": [{"request_range": {"key": encoded(jobs_prefix + n)}} for n in chunk]},
            )
            for chunk in chunks
        )
    )
    return [
        _value(response.get("response_range", {}).get("kvs"))
        for answer in answers
        for response in answer.get("responses", ())
    ]


async def documents_under(gateway: EtcdGateway, jobs_prefix: str, prefix: str) -> dict[str, str]:
    """Return every document whose name starts with ``prefix``, by name: one range read."""
    start = (jobs_prefix + prefix).encode()
    answer = await gateway.call(
        "kv/range", {"key": encoded_bytes(start), "range_end": encoded_bytes(prefix_end(start))}
    )
    return {
        decoded(kv.get("key")).removeprefix(jobs_prefix): decoded(kv.get("value"))
        for kv in answer.get("kvs") or []
    }


def _value(kvs: list[dict[str, Any]] | None) -> str | None:
    """The document a range of one key found, or ``None`` for no key."""
    return decoded(kvs[0].get("value")) if kvs else None
