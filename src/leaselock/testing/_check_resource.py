"""Where ``leaselock check``'s workers make their fenced writes: a SQLite file of the check's own.

The nemesis reads the resource's token (``token`` of the key's row of ``fenced_resource``) to
see that a paused holder's successor has written; every resource keeps it there.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Final, Protocol

__all__ = ["RESOURCE_TABLE", "FencedResource", "SqliteResource"]

RESOURCE_TABLE: Final = "fenced_resource"


class FencedResource(Protocol):
    """How the check's workers write: prepared once, then written by every worker process.

    An implementation must be picklable (the workers are spawned processes) and keep, in
    ``path``'s table ``fenced_resource``, one row per key (``key``, the token of its last accepted
    write in ``token``).

    .. versionadded:: 0.3
    """

    def prepare(self, path: Path, key: str) -> None:
        """Create the table in the SQLite file ``path`` (in WAL mode), ``key``'s row at token 0."""
        ...

    def write(self, path: Path, key: str, fencing_token: int) -> bool:
        """Write ``key``'s row with ``fencing_token``, in a worker's thread.

        Returns:
            ``True`` if the resource accepted the write, ``False`` if it refused it as stale.
        """
        ...


class SqliteResource:
    """The default: a conditional UPDATE, which changes the row only for a token at least its own.

    .. versionadded:: 0.3
    """

    def prepare(self, path: Path, key: str) -> None:
        """Create the table and ``key``'s row, token 0."""
        connection = sqlite3.connect(path, isolation_level=None)
        try:
            connection.execute(
                f"CREATE TABLE {RESOURCE_TABLE} (key TEXT PRIMARY KEY, token INTEGER)"
            )
            connection.execute(f"INSERT INTO {RESOURCE_TABLE} VALUES (?, 0)", (key,))  # noqa: S608 -- a constant table name
        finally:
            connection.close()

    def write(self, path: Path, key: str, fencing_token: int) -> bool:
        """Set the row's token to ``fencing_token`` unless it holds a greater one."""
        connection = sqlite3.connect(path, timeout=30, isolation_level=None)
        try:
            written = connection.execute(
                f"UPDATE {RESOURCE_TABLE} SET token = ? WHERE key = ? AND token <= ?",  # noqa: S608 -- a constant table name
                (fencing_token, key, fencing_token),
            )
            return written.rowcount == 1
        finally:
            connection.close()
