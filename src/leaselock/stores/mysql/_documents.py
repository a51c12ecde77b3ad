"""Job documents of MySQLLockStore: ``<table>_jobs``, one row per pause and per job's state.

Job control (:class:`~.._common._job_documents.JobControlOnDocuments`) keeps its pauses
(``"pause:<target>"``) and each job's state (``"job:<key>"``) as short UTF-8 JSON texts under
names, and swaps one only if it still holds what was read. Here a document is a row: its name
the primary key, its text a ``MEDIUMBLOB``. Both are binary, so every comparison is byte for
byte: no collation pads, folds case, or calls two different texts equal. A swap is ONE
statement that writes only where the row holds what was read (an ``INSERT`` that fails on a
duplicate key, an ``UPDATE`` or a ``DELETE`` whose ``WHERE`` names the text read), and answers
by the rows it wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .._common._job_documents import JOB_PREFIX, PAUSE_PREFIX
from ._sql import MAX_KEY_BYTES

__all__ = [
    "CREATE_JOBS_SQL",
    "MAX_DOCUMENT_BYTES",
    "MAX_DOCUMENT_NAME_BYTES",
    "DocumentStatements",
    "successor",
]

# the longest name: the longer prefix, then a pause's target, a key with "*" after it (a prefix)
MAX_DOCUMENT_NAME_BYTES: Final = max(len(PAUSE_PREFIX), len(JOB_PREFIX)) + MAX_KEY_BYTES + 1
# what a MEDIUMBLOB holds; a document is a few hundred bytes (a pause's note, an open run)
MAX_DOCUMENT_BYTES: Final = 16_777_215

# --- SQL: {jobs} is a quoted name

# no input, no output. VARBINARY and MEDIUMBLOB: names and texts compare byte for byte (a
# _bin collation of MariaDB pads with spaces, a _ci one folds case), as in the lock table
CREATE_JOBS_SQL: Final = f"""\
CREATE TABLE IF NOT EXISTS {{jobs}} (
    `name` VARBINARY({MAX_DOCUMENT_NAME_BYTES}) NOT NULL,
    `document` MEDIUMBLOB NOT NULL,
    PRIMARY KEY (`name`)
) ENGINE=InnoDB"""

# %s name per name -> (name, document) of those that exist
_READ_SQL: Final = "SELECT `name`, `document` FROM {jobs} WHERE `name` IN ({names})"

# %s prefix, %s its successor -> (name, document) of every name that starts with prefix: a
# range of the primary key, scanned from the prefix to the first name past it
_UNDER_SQL: Final = "SELECT `name`, `document` FROM {jobs} WHERE `name` >= %s AND `name` < %s"

# %s prefix (one without a successor: empty, or bytes 0xFF only) -> (name, document) from it on
_FROM_SQL: Final = "SELECT `name`, `document` FROM {jobs} WHERE `name` >= %s"

# %s name, %s document -> one row written; a duplicate-key error (1062) if the name has one
_INSERT_SQL: Final = "INSERT INTO {jobs} (`name`, `document`) VALUES (%s, %s)"

# %s document, %s name, %s expected -> one row written if name held expected, else none. The
# store sends it only when document differs from expected: a row that matched then changes, so
# the count is 1 whether the client counts changed rows or matched ones (CLIENT_FOUND_ROWS)
_UPDATE_SQL: Final = "UPDATE {jobs} SET `document` = %s WHERE `name` = %s AND `document` = %s"

# %s name, %s expected -> one row deleted if name held expected, else none
_DELETE_SQL: Final = "DELETE FROM {jobs} WHERE `name` = %s AND `document` = %s"


@dataclass(frozen=True, slots=True)
class DocumentStatements:
    """The job documents SQL of one store, for its quoted jobs table."""

    jobs: str
    under: str
    from_prefix: str
    insert: str
    update: str
    delete: str

    @classmethod
    def of(cls, jobs: str) -> DocumentStatements:
        """Return the statements on ``jobs`` (a quoted name)."""
        return cls(
            jobs=jobs,
            under=_UNDER_SQL.format(jobs=jobs),
            from_prefix=_FROM_SQL.format(jobs=jobs),
            insert=_INSERT_SQL.format(jobs=jobs),
            update=_UPDATE_SQL.format(jobs=jobs),
            delete=_DELETE_SQL.format(jobs=jobs),
        )

    def read(self, count: int) -> str:
        """Return the statement reading the documents of ``count`` names."""
        return _READ_SQL.format(jobs=self.jobs, names=", ".join(["%s"] * count))


def successor(prefix: bytes) -> bytes | None:
    """Return the least byte string greater than every one starting with ``prefix``.

    ``None`` when there is none (``prefix`` is empty or all ``0xFF``, which UTF-8 never is).
    """
    kept = prefix.rstrip(b"\xff")
    if not kept:
        return None
    return kept[:-1] + bytes([kept[-1] + 1])
