"""LockStoreContractTests: the store contract suite as a pytest base class (opt-in).

Subclass it in a test module, override :meth:`LockStoreContractTests.make_store` (and
``advance_time`` if the store's clock can be moved; without it the expiry cases wait for real on
a ``ttl`` of 600 ms, which you may raise), and pytest runs every case as
``test_contract[<case name>]``::

    from leaselock.testing.pytest import LockStoreContractTests

    class TestMyStore(LockStoreContractTests):
        concurrent = {"callers": 32}

        def make_store(self):
            return MyLockStore(url)

Each case runs on an event loop of its own (``asyncio.run``), so no async pytest plugin is needed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import ClassVar

import pytest

from .._durations import Duration
from ..stores._common._protocol import LockStore
from ._contract import lock_store_contract
from ._contract_check import DEFAULT_TTL

__all__ = ["LockStoreContractTests"]


def _unused_store() -> LockStore:
    raise AssertionError("only the case names are read here")


async def _as_coroutine(work: Awaitable[None]) -> None:
    await work


class LockStoreContractTests:
    """Base class: one parametrized test per contract case.

    Attributes:
        concurrent: passed to :func:`~leaselock.testing.lock_store_contract`.
        advance_time: ``None`` (the expiry cases wait for real), or an async method
            ``advance_time(self, by)`` that moves the store's clock forward by the
            :class:`~datetime.timedelta` ``by``.
        ttl: the lease length of the expiry cases (``"600ms"``); ``"2s"`` for a slow store.

    .. versionadded:: 0.1
    """

    concurrent: ClassVar[bool | Mapping[str, int]] = False
    advance_time: ClassVar[Callable[..., Awaitable[object]] | None] = None
    ttl: ClassVar[Duration] = DEFAULT_TTL

    def make_store(self) -> LockStore | Awaitable[LockStore]:
        """Return a new store (or an awaitable of one); called once per case, inside it."""
        raise NotImplementedError(
            f"{type(self).__name__} must override make_store() to return the store under test"
        )

    @pytest.mark.parametrize(
        "case_name", [case.name for case in lock_store_contract(_unused_store)]
    )
    def test_contract(self, case_name: str) -> None:
        """Run the contract case ``case_name`` against this class's store."""
        cases = lock_store_contract(
            self.make_store,
            concurrent=self.concurrent,
            advance_time=self.advance_time,
            ttl=self.ttl,
        )
        case = next(case for case in cases if case.name == case_name)
        asyncio.run(_as_coroutine(case.run()))
