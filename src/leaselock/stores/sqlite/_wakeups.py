"""Release wake-ups between the processes of one host, for SQLiteLockStore: Unix datagrams.

A process that waits on a key binds a datagram socket in that key's directory,
``<temp dir>/leaselock-<hash of the file and table>/<hash of the key>/<pid>-<random>``; a release
lists that directory and sends the key to each socket in it. Nothing is written to the
database, and a release nobody waits for costs one failed directory lookup. A follower that died
leaves its socket file behind: the next send to it is refused, and the sender deletes it.

Wake-ups are hints: a datagram lost (a full receive buffer) or never sent (a process of another
user, whose sockets this one may not write to) leaves the waiter to its own retries. Where the
platform has no Unix sockets, nothing is sent and waiters retry as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import socket
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Final, final

from .._common._followed_keys import FollowedKeys

__all__ = [
    "UNIX_SOCKETS",
    "ReleaseAnnouncer",
    "SQLiteReleaseFollower",
    "following_releases",
    "wakeup_directory",
]

_log = logging.getLogger("leaselock.stores.sqlite")

UNIX_SOCKETS: Final = hasattr(socket, "AF_UNIX")
# a key's release is one datagram of its key; keys are at most 500 characters
_DATAGRAM_BYTES: Final = 4096


def wakeup_directory(database: Path, table: str) -> Path:
    """Return the directory of one store's followers: one per database file and table."""
    store = hashlib.sha256(f"{database}\0{table}".encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"leaselock-{store}"


def _key_digest(key: str) -> str:
    """Return the name of ``key``'s directory: the start of its SHA-256, in hex."""
    return hashlib.sha256(key.encode()).hexdigest()[:24]


@final
class ReleaseAnnouncer:
    """Sends a released key to every socket that follows it on this host."""

    __slots__ = ("_base", "_sender")

    def __init__(self, base: Path) -> None:
        """Announce into ``base``; the sending socket is made at the first announcement."""
        # a str, not a Path: every release looks here, mostly at a directory that is not there,
        # and pathlib made that look cost 10 us instead of 4
        self._base = str(base)
        self._sender: socket.socket | None = None

    def announce(self, key: str) -> None:
        """Tell the followers of ``key`` it was released; never blocks, never raises."""
        if not UNIX_SOCKETS:
            return
        directory = f"{self._base}{os.sep}{_key_digest(key)}"
        try:
            followers = os.listdir(directory)  # noqa: PTH208 -- pathlib costs this hot path 2.5x
        except OSError:
            return
        payload = key.encode()
        for name in followers:
            self.send(payload, Path(directory, name))

    def send(self, payload: bytes, path: Path) -> None:
        """Send ``payload`` to the socket at ``path``; never blocks, never raises."""
        if self._sender is None:
            self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sender.setblocking(False)  # noqa: FBT003 -- socket's own signature
        try:
            self._sender.sendto(payload, str(path))
        except ConnectionRefusedError:
            # nobody reads this socket any more: its process is gone
            with contextlib.suppress(OSError):
                path.unlink()
        except OSError:
            # full, gone meanwhile, or not ours to write: that waiter retries on its own
            pass

    def close(self) -> None:
        """Close the sending socket."""
        if self._sender is not None:
            self._sender.close()
            self._sender = None


@final
class SQLiteReleaseFollower:
    """Binds one datagram socket per key followed, read on this loop."""

    __slots__ = ("_base", "_keys", "_on_release", "_sockets")

    def __init__(self, base: Path, on_release: Callable[[str], None]) -> None:
        """Follow nothing yet."""
        self._base = base
        self._on_release = on_release
        self._sockets: dict[str, tuple[socket.socket, Path]] = {}
        self._keys = FollowedKeys(self._subscribe, self._unsubscribe)

    def following(self, key: str) -> AbstractAsyncContextManager[None]:
        """Hear ``key``'s releases by any process of this host while entered."""
        return self._keys.following(key)

    async def aclose(self) -> None:
        """Close every socket and remove its file."""
        await self._keys.aclose()
        for key in list(self._sockets):
            self._unbind(key)

    async def _subscribe(self, key: str) -> None:
        if not UNIX_SOCKETS:
            return
        directory = self._base / _key_digest(key)
        path = directory / f"{os.getpid()}-{secrets.token_hex(4)}"
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            receiver.setblocking(False)  # noqa: FBT003 -- socket's own signature
            receiver.bind(str(path))
        except OSError as error:
            receiver.close()
            _log.warning(
                "Could not listen for releases of %r in %s (%s): waiters on it in this process "
                "find it free by retrying (up to 1 s late). Fix: make the directory writable",
                key,
                directory,
                error,
            )
            return
        self._sockets[key] = (receiver, path)
        asyncio.get_running_loop().add_reader(receiver.fileno(), self._read, receiver)

    async def _unsubscribe(self, key: str) -> None:
        self._unbind(key)

    def _unbind(self, key: str) -> None:
        bound = self._sockets.pop(key, None)
        if bound is None:
            return
        receiver, path = bound
        asyncio.get_running_loop().remove_reader(receiver.fileno())
        receiver.close()
        with contextlib.suppress(OSError):
            path.unlink()
        with contextlib.suppress(OSError):
            # the last follower of the key removes its directory: releases then look up nothing
            path.parent.rmdir()

    def _read(self, receiver: socket.socket) -> None:
        while True:
            try:
                payload = receiver.recv(_DATAGRAM_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            try:
                self._on_release(payload.decode(errors="replace"))
            except Exception:  # noqa: BLE001 -- one bad callback must not stop the others
                _log.exception("A release callback failed")


@asynccontextmanager
async def following_releases(
    base: Path, on_release: Callable[[str], None]
) -> AsyncIterator[SQLiteReleaseFollower]:
    """Yield a follower of releases into ``base``; close its sockets at the end."""
    follower = SQLiteReleaseFollower(base, on_release)
    try:
        yield follower
    finally:
        await follower.aclose()
