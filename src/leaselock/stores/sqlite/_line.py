"""Waiting lines in a SQLite file: a release hands the key to the first live place of its line.

A key's line is its rows in ``<table>_line``, ordered by arrival; a place lives until its
``expires_at_ms`` on the store's clock. Every step runs inside the store's one ``BEGIN
IMMEDIATE`` transaction of the call (a release, a break, a queue call, a leave), so a grant is
decided with the write lock held, atomically with the release that freed the key. After the
commit, the grant goes to the waiting process as one Unix datagram to its line's socket,
``<the store's wake-up directory>/lines/<pid>-<random>``, carrying ``<token> NUL <ticket> NUL
<key> NUL <owner>``. A datagram that cannot be delivered (a full buffer, a process of another
user) leaves the waiter to learn of its grant at its next queue call, within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol, final

from .._common._protocol import Acquired, Grant, NotAcquired, Queued
from ._wakeups import UNIX_SOCKETS

__all__ = [
    "CREATE_LINE",
    "CREATE_LINE_ORDER",
    "PendingGrant",
    "SQLiteLines",
    "SQLiteWaitingLine",
    "parse_grant",
]

_log = logging.getLogger("leaselock.stores.sqlite")

# a grant is its token, ticket, key (at most 500 characters) and owner id
_DATAGRAM_BYTES: Final = 8192

# -> nothing; one row per waiter in a key's line: arrival order, the place's end on the store's
# clock, the ticket of the queue call that kept it, and the socket of the process to tell
CREATE_LINE: Final = """
CREATE TABLE IF NOT EXISTS {line} (
    key           TEXT    NOT NULL,
    owner         TEXT    NOT NULL,
    arrived       INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    ticket        INTEGER NOT NULL,
    line          TEXT    NOT NULL,
    PRIMARY KEY (key, owner)
) WITHOUT ROWID
"""

# -> nothing; a key's line in arrival order
CREATE_LINE_ORDER: Final = "CREATE INDEX IF NOT EXISTS {line_order} ON {line} (key, arrived)"

# :key :now_ms -> nothing; places whose time is up leave the line
DROP_DEAD: Final = "DELETE FROM {line} WHERE key = :key AND expires_at_ms <= :now_ms"

# :key :now_ms -> (owner, expires_at_ms, ticket, line) of the first live place, or nothing
FIRST_LIVE: Final = """
SELECT owner, expires_at_ms, ticket, line FROM {line}
WHERE key = :key AND expires_at_ms > :now_ms ORDER BY arrived LIMIT 1
"""

# :key -> (1,) if the key's line has a place, live or not, else nothing
ANY_PLACE: Final = "SELECT 1 FROM {line} WHERE key = :key LIMIT 1"

# :key :owner -> nothing; owner's place leaves the line
LEAVE: Final = "DELETE FROM {line} WHERE key = :key AND owner = :owner"

# :key :owner :expires_at_ms :ticket :line -> nothing; owner's place, kept where it was (else
# at the end of the line), lives until expires_at_ms and remembers ticket
KEEP_PLACE: Final = """
INSERT INTO {line} (key, owner, arrived, expires_at_ms, ticket, line)
VALUES (:key, :owner, coalesce((SELECT max(arrived) FROM {line} WHERE key = :key), 0) + 1,
        :expires_at_ms, :ticket, :line)
ON CONFLICT (key, owner) DO UPDATE SET
    expires_at_ms = excluded.expires_at_ms,
    ticket = excluded.ticket,
    line = excluded.line
"""

# :key -> (owner, fencing_token, expires_at_ms) of the key's row, or nothing
LOCK_ROW: Final = "SELECT owner, fencing_token, expires_at_ms FROM {locks} WHERE key = :key"

# :key :owner :expires_at_ms -> nothing; the holder's lock now ends at expires_at_ms
EXTEND: Final = (
    "UPDATE {locks} SET expires_at_ms = :expires_at_ms WHERE key = :key AND owner = :owner"
)

Take = Callable[[sqlite3.Connection, int, str, str, int], "int | NotAcquired"]
Release = Callable[[sqlite3.Connection, int, str, str], bool]


@final
@dataclass(frozen=True, slots=True)
class PendingGrant:
    """A grant decided in a transaction, to send once it commits: where, and what."""

    line: str
    grant: Grant


@final
class SQLiteLines:
    """The line steps of one store, run on its worker thread inside its transactions.

    Args:
        names: the store's quoted table names (``locks``, ``line``).
        take: the store's acquire step (``_take``): takes a free key with a new token.
        release: the store's release step (``_release``): frees a key its owner holds.
    """

    __slots__ = ("_release", "_sql", "_take")

    def __init__(self, names: dict[str, str], take: Take, release: Release) -> None:
        """Fill the table names into the statements."""
        self._sql = {
            name: sql.format_map(names)
            for name, sql in {
                "drop_dead": DROP_DEAD,
                "first_live": FIRST_LIVE,
                "any_place": ANY_PLACE,
                "leave": LEAVE,
                "keep_place": KEEP_PLACE,
                "lock_row": LOCK_ROW,
                "extend": EXTEND,
            }.items()
        }
        self._take = take
        self._release = release

    def waits(self, db: sqlite3.Connection, key: str) -> bool:
        """Whether ``key``'s line has a place, live or not, as of this read (no clock read)."""
        return db.execute(self._sql["any_place"], {"key": key}).fetchone() is not None

    def hand_on(self, db: sqlite3.Connection, now_ms: int, key: str) -> PendingGrant | None:
        """Give the freed ``key`` to the first live place of its line, if one waits."""
        db.execute(self._sql["drop_dead"], {"key": key, "now_ms": now_ms})
        first = db.execute(self._sql["first_live"], {"key": key, "now_ms": now_ms}).fetchone()
        if first is None:
            return None
        owner, expires_at_ms, ticket, line = first
        db.execute(self._sql["leave"], {"key": key, "owner": owner})
        token = self._take(db, now_ms, key, owner, expires_at_ms - now_ms)
        if isinstance(token, NotAcquired):
            # only a key just freed is handed on: it cannot be held here
            return None
        return PendingGrant(line, Grant(key, owner, token, ticket))

    def queue(
        self,
        db: sqlite3.Connection,
        now_ms: int,
        *,
        key: str,
        owner: str,
        ttl_ms: int,
        queue_ms: int,
        ticket: int,
        line: str,
    ) -> tuple[Acquired | Queued, PendingGrant | None]:
        """Take ``key``, or keep ``owner``'s place in its line (see ``WaitingLine.queue``)."""
        row = db.execute(self._sql["lock_row"], {"key": key}).fetchone()
        live = row is not None and row[0] is not None and row[2] > now_ms
        if live and row[0] == owner:
            db.execute(
                self._sql["extend"],
                {"key": key, "owner": owner, "expires_at_ms": now_ms + ttl_ms},
            )
            return Acquired(row[1]), None
        pending = None
        holder = row[0] if live else None
        if not live:
            db.execute(self._sql["drop_dead"], {"key": key, "now_ms": now_ms})
            first = db.execute(self._sql["first_live"], {"key": key, "now_ms": now_ms}).fetchone()
            if first is None or first[0] == owner:
                db.execute(self._sql["leave"], {"key": key, "owner": owner})
                token = self._take(db, now_ms, key, owner, ttl_ms)
                if not isinstance(token, NotAcquired):
                    return Acquired(token), None
            else:
                pending = self.hand_on(db, now_ms, key)
                holder = None if pending is None else pending.grant.owner
        db.execute(
            self._sql["keep_place"],
            {
                "key": key,
                "owner": owner,
                "expires_at_ms": now_ms + queue_ms,
                "ticket": ticket,
                "line": line,
            },
        )
        return Queued(holder=holder), pending

    def leave(
        self, db: sqlite3.Connection, now_ms: int, key: str, owner: str
    ) -> tuple[bool, PendingGrant | None]:
        """Leave ``key``'s line; release (and hand on) what was granted to ``owner``."""
        db.execute(self._sql["leave"], {"key": key, "owner": owner})
        if not self._release(db, now_ms, key, owner):
            return False, None
        return True, self.hand_on(db, now_ms, key)


def parse_grant(payload: bytes) -> Grant | None:
    """Read ``<token> NUL <ticket> NUL <key> NUL <owner>`` (keys hold no NUL; owners may)."""
    parts = payload.decode(errors="replace").split("\x00", 3)
    if len(parts) != 4 or not parts[0].isdigit() or not parts[1].isdigit():  # noqa: PLR2004 -- the four fields
        return None
    token, ticket, key, owner = parts
    return Grant(key, owner, int(token), int(ticket))


def grant_payload(grant: Grant) -> bytes:
    """The datagram of ``grant`` (see :func:`parse_grant`)."""
    return f"{grant.fencing_token}\x00{grant.ticket}\x00{grant.key}\x00{grant.owner}".encode()


class QueueCall(Protocol):
    """Runs :meth:`SQLiteLines.queue` in one of the store's transactions."""

    def __call__(
        self, key: str, owner: str, ttl_ms: int, queue_ms: int, ticket: int, *, line: str
    ) -> Awaitable[tuple[Acquired | Queued, PendingGrant | None]]: ...


LeaveCall = Callable[[str, str], Awaitable["tuple[bool, PendingGrant | None]"]]


@final
class SQLiteWaitingLine:
    """One process's places in a store's lines, and the socket its grants arrive on.

    Args:
        directory: where the line's socket is bound (made if missing).
        queue_call: runs :meth:`SQLiteLines.queue` in one of the store's transactions.
        leave_call: runs :meth:`SQLiteLines.leave` likewise.
        send: sends a :class:`PendingGrant` after its transaction committed.
        on_grant: called on this loop for each grant heard.
        store: how to name the store in log lines.
    """

    __slots__ = (
        "_directory",
        "_leave_call",
        "_on_grant",
        "_path",
        "_queue_call",
        "_receiver",
        "_send",
        "_store",
    )

    def __init__(
        self,
        directory: Path,
        *,
        queue_call: QueueCall,
        leave_call: LeaveCall,
        send: Callable[[PendingGrant], None],
        on_grant: Callable[[Grant], None],
        store: str,
    ) -> None:
        """Bind nothing yet: the socket comes with the first queue call."""
        self._directory = directory
        self._queue_call = queue_call
        self._leave_call = leave_call
        self._send = send
        self._on_grant = on_grant
        self._store = store
        self._receiver: socket.socket | None = None
        # "": no socket (none possible, or binding failed): grants come by asking
        self._path: str | None = None

    async def queue(
        self, key: str, owner: str, ttl_ms: int, queue_ms: int, ticket: int
    ) -> Acquired | Queued:
        """Take ``key``, or keep ``owner``'s place in its line (see ``WaitingLine.queue``)."""
        answer, pending = await self._queue_call(
            key, owner, ttl_ms, queue_ms, ticket, line=self._bound()
        )
        if pending is not None:
            self._send(pending)
        return answer

    async def leave(self, key: str, owner: str) -> bool:
        """Leave ``key``'s line; release what was granted to ``owner`` (see ``WaitingLine``)."""
        left, pending = await self._leave_call(key, owner)
        if pending is not None:
            self._send(pending)
        return left

    def close(self) -> None:
        """Stop hearing grants; remove the socket."""
        receiver, self._receiver = self._receiver, None
        if receiver is None:
            return
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().remove_reader(receiver.fileno())
        receiver.close()
        if self._path:
            with contextlib.suppress(OSError):
                Path(self._path).unlink()

    def _bound(self) -> str:
        """Return the path of this line's socket, binding it the first time."""
        if self._path is not None:
            return self._path
        self._path = ""
        if not UNIX_SOCKETS:
            return self._path
        path = self._directory / f"{os.getpid()}-{secrets.token_hex(6)}"
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self._directory.mkdir(parents=True, exist_ok=True)
            receiver.setblocking(False)  # noqa: FBT003 -- socket's own signature
            receiver.bind(str(path))
        except OSError as error:
            receiver.close()
            _log.warning(
                "%s could not listen for its grants in %s (%s): waiters in this process take a "
                "key handed to them up to 1 s late. Fix: make the directory writable",
                self._store,
                self._directory,
                error,
            )
            return self._path
        self._receiver = receiver
        self._path = str(path)
        asyncio.get_running_loop().add_reader(receiver.fileno(), self._read, receiver)
        return self._path

    def _read(self, receiver: socket.socket) -> None:
        while True:
            try:
                payload = receiver.recv(_DATAGRAM_BYTES)
            except OSError:
                return
            grant = parse_grant(payload)
            if grant is None:
                _log.warning("%s heard a grant it cannot read: %r", self._store, payload)
                continue
            try:
                self._on_grant(grant)
            except Exception:  # noqa: BLE001 -- one bad callback must not stop the others
                _log.exception("A grant callback of %s failed", self._store)
