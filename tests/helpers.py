"""Helpers shared by tests (never import from test_*.py)."""

from __future__ import annotations

import asyncio
import uuid


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
