"""The SQL stores' openers: an application's pool handed out, or a pool made at each open."""

from __future__ import annotations

import pytest

from leaselock import LocksConfigurationError
from leaselock.stores._common._openers import given_pool, made_pool


async def test_a_pool_the_store_does_not_own_is_handed_out_at_every_open() -> None:
    pool = object()
    opener = given_pool(pool, owned=False, store=lambda: "Store(db)")

    assert await opener.make() is pool
    opener.after_close()

    assert await opener.make() is pool


async def test_a_store_that_closed_the_pool_it_owned_cannot_open_again_and_says_why() -> None:
    pool = object()
    opener = given_pool(pool, owned=True, store=lambda: "Store(db)")
    assert await opener.make() is pool

    opener.after_close()

    with pytest.raises(LocksConfigurationError) as refused:
        await opener.make()
    assert str(refused.value) == (
        "Store(db) closed the pool it was given (own_pool=True) and cannot open again; "
        "build a new store with a new pool"
    )


async def test_a_pool_of_the_stores_own_is_made_anew_at_every_open() -> None:
    made: list[object] = []

    async def make() -> object:
        made.append(object())
        return made[-1]

    opener = made_pool(make)
    first = await opener.make()
    opener.after_close()
    second = await opener.make()

    assert made == [first, second]
    assert first is not second
