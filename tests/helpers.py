"""Helpers shared by tests (never import from test_*.py)."""

from __future__ import annotations

import asyncio
import uuid

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
