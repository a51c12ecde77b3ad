"""Job documents on a Redis Cluster: one hash per prefix, a field per document, its Lua scripts.

Every document of a prefix is a field of ``<prefix>job-documents``, so each of
``read_documents``, ``documents_under`` and ``swap_document`` touches one key, hence one slot
on one master, and is one command or one script there: one round trip, atomic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ..redis._keyspace import text
from ..redis._scripts import script

__all__ = ["DOCUMENTS_SEGMENT", "DOCUMENTS_UNDER", "SWAP_DOCUMENT", "documents_of", "swap_args"]

# no brace: the key hashes whole, so the documents of different prefixes spread over masters
DOCUMENTS_SEGMENT: Final = "job-documents"
_ABSENT: Final = "absent"
_KEPT: Final = "kept"
_REMOVE: Final = "remove"
_WRITE: Final = "write"

SWAP_DOCUMENT: Final = script(
    "swap_document",
    """
-- KEYS[1] = the documents hash
-- ARGV[1] = the document's name, ARGV[2] = 'absent' (no document expected under it) or 'kept'
-- (ARGV[3] expected), ARGV[4] = 'remove' (remove it) or 'write' (ARGV[5] becomes it)
-- -> 1 if what was expected was there (now written or removed), else 0 (nothing written). The
--    flags stand apart from the documents, so an empty document is never taken for none.
local kept = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[2] == 'absent' then
  if kept then
    return 0
  end
elseif kept ~= ARGV[3] then
  return 0
end
if ARGV[4] == 'remove' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[5])
end
return 1
""",
)

DOCUMENTS_UNDER: Final = script(
    "documents_under",
    """
-- KEYS[1] = the documents hash
-- ARGV[1] = the start of the names wanted
-- -> {name, document, name, document, ...} of every document whose name starts with it, read
--    in one atomic step; filtered here, so a start's look at the pauses does not carry every
--    job's state back
local fields = redis.call('HGETALL', KEYS[1])
local found = {}
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, #ARGV[1]) == ARGV[1] then
    found[#found + 1] = fields[i]
    found[#found + 1] = fields[i + 1]
  end
end
return found
""",
)


def swap_args(name: str, expected: str | None, document: str | None) -> list[str]:
    """The arguments of :data:`SWAP_DOCUMENT` (its one key is the documents hash)."""
    return [
        name,
        _ABSENT if expected is None else _KEPT,
        "" if expected is None else expected,
        _REMOVE if document is None else _WRITE,
        "" if document is None else document,
    ]


def documents_of(reply: Sequence[object]) -> dict[str, str]:
    """Read :data:`DOCUMENTS_UNDER`'s reply: each document by its name."""
    return {text(reply[n]): text(reply[n + 1]) for n in range(0, len(reply), 2)}
