"""Helpers shared by tests (never import from test_*.py)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Self

from leaselock.stores import Acquired, AcquireResult, LockStore, SupportsLifecycle


def unique_key(name: str) -> str:
    """Return ``name`` with a unique suffix, so runs can share a server."""
    return f"{name}:{uuid.uuid4().hex[:12]}"


async def wait_for_real(ms: int) -> None:
    """Let real time pass: only for stores whose clock is the server's and cannot be moved."""
    await asyncio.sleep(ms / 1000)  # noqa: TID251 -- the server's clock cannot be advanced


async def let_loop_run(passes: int = 5) -> None:
    """Let ready tasks run a few steps; no time passes."""
    for _ in range(passes):
        await asyncio.sleep(0)  # noqa: TID251 -- a zero sleep yields to the loop; no time passes


class TokensAsText:
    """Wraps a store and breaks the contract as a careless driver would: tokens come back as str."""

    def __init__(self, inner: LockStore) -> None:
        self.inner = inner

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        result = await self.inner.acquire(key, owner, ttl_ms)
        if isinstance(result, Acquired):
            return Acquired(str(result.fencing_token))  # type: ignore[arg-type]
        return result

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        return await self.inner.renew(key, owner, ttl_ms)

    async def release(self, key: str, owner: str) -> bool:
        return await self.inner.release(key, owner)

    async def open(self) -> None:
        if isinstance(self.inner, SupportsLifecycle):
            await self.inner.open()

    async def aclose(self) -> None:
        if isinstance(self.inner, SupportsLifecycle):
            await self.inner.aclose()


class Partition:
    """A TCP proxy in front of a real server; ``cut()`` holds every byte, both ways, until
    ``heal()``, as a network partition does (new connections hang too)."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.heal()
        assert self._server is not None
        self._server.close()
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        await self._server.wait_closed()

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def cut(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._open.wait()
        try:
            server_in, server_out = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        for source, sink in ((reader, server_out), (server_in, writer)):
            pipe = asyncio.get_running_loop().create_task(self._pipe(source, sink))
            self._pipes.add(pipe)
            pipe.add_done_callback(self._pipes.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while chunk := await source.read(65536):
                await self._open.wait()
                sink.write(chunk)
                await sink.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            sink.close()
