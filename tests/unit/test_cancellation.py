"""A cancellation a driver swallows is delivered where the call returns.

On Python 3.11, redis-py now and then answers a cancelled command as if nothing had happened.
"""

import asyncio
import contextlib

import pytest

from leaselock._cancellation import delivered


async def _swallowing(answer: object, reached: asyncio.Event) -> object:
    reached.set()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.Event().wait()
    if isinstance(answer, Exception):
        raise answer
    return answer


@pytest.mark.parametrize("answer", ["answer", ConnectionError("reset after the cancel")])
async def test_a_call_that_swallows_a_cancellation_raises_it_after_all(answer):
    reached = asyncio.Event()
    call = asyncio.create_task(delivered(_swallowing(answer, reached)))
    await reached.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert call.cancelled()


async def test_an_uncancelled_call_answers_or_fails_as_it_would():
    async def answer() -> int:
        return 7

    async def fail() -> None:
        raise ConnectionError("down")

    assert await delivered(answer()) == 7
    with pytest.raises(ConnectionError, match="down"):
        await delivered(fail())


async def test_a_cancellation_the_call_raises_itself_passes_through():
    reached = asyncio.Event()

    async def honest() -> None:
        reached.set()
        await asyncio.Event().wait()

    call = asyncio.create_task(delivered(honest()))
    await reached.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
