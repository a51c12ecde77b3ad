"""TCP relays in front of etcd members' peer ports, that can cut members off from each other.

:class:`PeerRelays` is how ``tests/etcd_cluster.py`` partitions a cluster on loopback without
root: every member advertises a peer URL that is one of these relays, so every byte of peer
traffic crosses one. On loopback every connection comes from 127.0.0.1, so a relay tells which
member dialed a connection by the process that owns its other end (``/proc``, Linux). Cutting
a link holds every byte of its connections, both ways, and leaves new ones unanswered, as a
network partition does: nothing is closed, and etcd's own timeouts find out.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Coroutine, Sequence

__all__ = ["PeerRelays"]

_HOST: Final = "127.0.0.1"
_CHUNK: Final = 65536


@dataclass
class _Link:
    """Whether two members reach each other; while cut, every byte between them waits."""

    open: asyncio.Event = field(default_factory=asyncio.Event)


class PeerRelays:
    """TCP relays in front of each member's peer port, on an event loop of their own thread.

    Each connection is told to come from the member whose process owns its other end; a cut
    link holds the bytes of its connections both ways, and holds new ones unconnected.
    """

    def __init__(self, count: int) -> None:
        """Bind one relay port per member now (their targets come with :meth:`start`)."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="etcd peer relays", daemon=True
        )
        self._listeners = [socket.create_server((_HOST, 0)) for _ in range(count)]
        self.ports = [listener.getsockname()[1] for listener in self._listeners]
        self._targets: list[int] = [0] * count
        self._pids: dict[int, int] = {}
        self._links: dict[frozenset[int], _Link] = {}
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        # both ends of every relayed connection, aborted when the relays close
        self._ends: set[asyncio.StreamWriter] = set()

    def start(self, targets: Sequence[int]) -> None:
        """Relay member ``i``'s relay port to its real peer port ``targets[i]``."""
        self._targets = list(targets)
        self._thread.start()
        self._run(self._serve_all())

    def member_started(self, index: int, pid: int) -> None:
        """Tell the relays that process ``pid`` is member ``index`` (after every start)."""
        self._pids[pid] = index

    def cut(self, first: int, second: int) -> None:
        """Hold every byte between two members, both ways, until :meth:`heal`."""
        self._run(self._set(frozenset((first, second)), is_open=False))

    def heal(self) -> None:
        """Let every byte held by a cut through, and every link carry traffic again."""
        self._run(self._heal_all())

    def close(self) -> None:
        """Close the relays and every connection through them."""
        if self._thread.is_alive():
            self._run(self._close_all())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.run_until_complete(self._loop.shutdown_default_executor())
        for listener in self._listeners:
            listener.close()
        self._loop.close()

    def _run(self, coroutine: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _link(self, pair: frozenset[int]) -> _Link:
        link = self._links.get(pair)
        if link is None:
            link = self._links[pair] = _Link()
            link.open.set()
        return link

    async def _set(self, pair: frozenset[int], *, is_open: bool) -> None:
        link = self._link(pair)
        if is_open:
            link.open.set()
        else:
            link.open.clear()

    async def _heal_all(self) -> None:
        for link in self._links.values():
            link.open.set()

    async def _serve_all(self) -> None:
        for index, listener in enumerate(self._listeners):
            server = await asyncio.start_server(
                functools.partial(self._accept, index), sock=listener
            )
            self._servers.append(server)

    async def _close_all(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # aborted, not only closed: a close waits to send what a stopped member never reads,
        # and a socket left closing warns, unclosed, in whichever later test collects it
        for end in self._ends:
            end.transport.abort()
        await asyncio.gather(*(end.wait_closed() for end in self._ends), return_exceptions=True)

    def _accept(
        self, target: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        # called as the connection is made, so a connection whose relay has not begun when
        # the relays close is still known, and aborted, instead of left open to warn later
        self._ends.add(writer)
        task = self._loop.create_task(self._serve(target, reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(
        self, target: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        # closing the relays cancels this; it ends quietly, since asyncio's server asks a
        # cancelled handler for its exception (and logs the CancelledError it gets)
        with contextlib.suppress(asyncio.CancelledError):
            await self._relay(target, reader, writer)

    async def _relay(
        self, target: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            dialer = await asyncio.to_thread(self._dialer, writer.get_extra_info("peername"))
            link = self._link(frozenset((dialer, target))) if dialer is not None else None
            if link is not None:
                await link.open.wait()
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(
                    _HOST, self._targets[target]
                )
            except OSError:
                return
            self._ends.add(upstream_writer)
            await asyncio.gather(
                self._pipe(reader, upstream_writer, link),
                self._pipe(upstream_reader, writer, link),
            )
        finally:
            writer.close()

    def _dialer(self, peer: tuple[str, int] | None) -> int | None:
        """The member whose process owns the other end of a connection from ``peer``."""
        if peer is None:
            return None
        sockets = _sockets_on_port(peer[1])
        for pid, index in list(self._pids.items()):
            with contextlib.suppress(OSError):
                for descriptor in Path(f"/proc/{pid}/fd").iterdir():
                    with contextlib.suppress(OSError):
                        if str(descriptor.readlink()) in sockets:
                            return index
        return None

    @staticmethod
    async def _pipe(
        source: asyncio.StreamReader, sink: asyncio.StreamWriter, link: _Link | None
    ) -> None:
        try:
            while chunk := await source.read(_CHUNK):
                if link is not None:
                    await link.open.wait()
                sink.write(chunk)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            sink.close()


def _sockets_on_port(port: int) -> set[str]:
    """The ``socket:[inode]`` links of the TCP sockets whose local port is ``port`` (Linux)."""
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    sockets.add(f"socket:[{fields[9]}]")
    return sockets
