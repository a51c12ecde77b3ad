"""CheckedStore: every store call the engine makes, with the contract checked on the way back.

A store that raises is reported as :class:`LockStoreError` naming the store and the method; a
store that answers outside the contract (a token as ``str``, a renewal as ``None``) is refused
with a message naming the fix, so no caller ever believes in a lock it may not hold.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeAlias, final

from .._errors import LocksConfigurationError, LockStoreError
from ..stores._protocol import (
    MAX_FENCING_TOKEN,
    Acquired,
    LockStore,
    NotAcquired,
    Renewal,
    SupportsBatchRenew,
)

__all__ = ["AcquireCall", "CheckedStore", "check_store_shape"]

AcquireCall: TypeAlias = Callable[[str, str, int], Awaitable["Acquired | NotAcquired"]]
"""A store call that acquires ``(key, owner, ttl_ms)`` as ``acquire`` does, and maybe more."""

_REQUIRED = {
    "acquire": (
        "async def acquire(self, key: str, owner: str, ttl_ms: int) -> Acquired | NotAcquired"
    ),
    "renew": "async def renew(self, key: str, owner: str, ttl_ms: int) -> bool",
    "release": "async def release(self, key: str, owner: str) -> bool",
}


def check_store_shape(store: object) -> LockStore:
    """Return ``store`` if it has the three methods of the store contract.

    Raises:
        LocksConfigurationError: a method is missing or is not callable.
    """
    if isinstance(store, type):
        raise LocksConfigurationError(
            f"store={store.__qualname__} is a class; pass an instance of it, such as "
            f"{store.__qualname__}(...) (or {store.__qualname__}.from_url(url) where it has one)"
        )
    for name, signature in _REQUIRED.items():
        method = getattr(store, name, None)
        if not callable(method):
            raise LocksConfigurationError(
                f"store={store!r} has no {name}() method; a lock store implements {signature} "
                "(see leaselock.stores.LockStore), or use a shipped store such as "
                "leaselock.stores.SQLiteLockStore"
            )
        if not inspect.iscoroutinefunction(method):
            raise LocksConfigurationError(
                f"store={store!r} has a {name}() that is not a coroutine function; leaselock "
                f"awaits every store call: define it as {signature}"
            )
    return store  # type: ignore[return-value] # shape checked above, semantics by the contract suite


@final
class CheckedStore:
    """Calls into one store, validating what comes back."""

    __slots__ = ("_batch", "inner")

    def __init__(self, store: LockStore) -> None:
        """Wrap ``store``; batch renewals are used when it supports them."""
        self.inner = store
        self._batch = store if isinstance(store, SupportsBatchRenew) else None

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> Acquired | NotAcquired:
        """Call ``store.acquire``; a token outside the contract is refused.

        Raises:
            LockStoreError: the store raised, or returned something the contract does not allow.
        """
        return await self.checked_acquire("acquire", self.inner.acquire(key, owner, ttl_ms))

    async def checked_acquire(
        self, method: str, call: Awaitable[Acquired | NotAcquired]
    ) -> Acquired | NotAcquired:
        """Await ``call``, a store method that acquires, checking its answer as ``acquire``'s.

        Raises:
            LockStoreError: the store raised, or returned something the contract does not allow.
        """
        try:
            result = await call
        except (asyncio.CancelledError, LockStoreError):
            raise
        except Exception as error:
            raise self._failed(method, error) from error
        if isinstance(result, NotAcquired):
            # the holder is for messages only: one of another type is dropped, not trusted
            return (
                result
                if result.holder is None or isinstance(result.holder, str)
                else (NotAcquired())
            )
        if not isinstance(result, Acquired):
            raise LockStoreError(
                f"{self.inner!r}.{method} returned {result!r}; return "
                "leaselock.stores.Acquired(fencing_token) or leaselock.stores.NotAcquired()"
            )
        token = result.fencing_token
        if type(token) is not int:
            raise LockStoreError(
                f"{self.inner!r}.{method} returned fencing token {token!r} as "
                f"{type(token).__name__}; return an int (convert a driver's text or Decimal "
                "bigint with int())"
            )
        if not 0 < token <= MAX_FENCING_TOKEN:
            raise LockStoreError(
                f"{self.inner!r}.{method} returned fencing token {token}; tokens are positive "
                f"integers below 2**53 (at most {MAX_FENCING_TOKEN}): check the store's counter"
            )
        return result

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Call ``store.renew``.

        Raises:
            LockStoreError: the store raised, or did not return a bool.
        """
        try:
            renewed = await self.inner.renew(key, owner, ttl_ms)
        except (asyncio.CancelledError, LockStoreError):
            raise
        except Exception as error:
            raise self._failed("renew", error) from error
        return self._checked_bool("renew", renewed)

    async def renew_many(self, renewals: Sequence[Renewal]) -> list[bool | LockStoreError]:
        """Renew every lease: one round trip where the store batches, else concurrently.

        Returns:
            One result per renewal, in order: the store's answer, or the error it raised.
        """
        if self._batch is not None and len(renewals) > 1:
            try:
                answers = await self._batch.renew_many(renewals)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 -- every renewal shares the failure
                failure = (
                    error
                    if isinstance(error, LockStoreError)
                    else self._failed("renew_many", error)
                )
                return [failure] * len(renewals)
            if len(answers) != len(renewals):
                failure = LockStoreError(
                    f"{self.inner!r}.renew_many returned {len(answers)} results for "
                    f"{len(renewals)} renewals; return one bool per renewal, in order"
                )
                return [failure] * len(renewals)
            return [self._bool_or_error("renew_many", answer) for answer in answers]
        if len(renewals) == 1:
            try:
                return [await self.renew(*renewals[0])]
            except LockStoreError as error:
                return [error]
        outcomes = await asyncio.gather(
            *(self.renew(*renewal) for renewal in renewals), return_exceptions=True
        )
        results: list[bool | LockStoreError] = []
        for outcome in outcomes:
            if isinstance(outcome, bool | LockStoreError):
                results.append(outcome)
            elif isinstance(outcome, asyncio.CancelledError):
                raise outcome
            else:
                results.append(self._failed("renew", outcome))
        return results

    async def release(self, key: str, owner: str) -> bool:
        """Call ``store.release``.

        Raises:
            LockStoreError: the store raised, or did not return a bool.
        """
        try:
            released = await self.inner.release(key, owner)
        except (asyncio.CancelledError, LockStoreError):
            raise
        except Exception as error:
            raise self._failed("release", error) from error
        return self._checked_bool("release", released)

    def _checked_bool(self, method: str, answer: object) -> bool:
        result = self._bool_or_error(method, answer)
        if isinstance(result, LockStoreError):
            raise result
        return result

    def _bool_or_error(self, method: str, answer: object) -> bool | LockStoreError:
        if isinstance(answer, bool):
            return answer
        return LockStoreError(
            f"{self.inner!r}.{method} returned {answer!r} ({type(answer).__name__}); "
            "return True or False"
        )

    def _failed(self, method: str, error: BaseException) -> LockStoreError:
        return LockStoreError(
            f"{self.inner!r}.{method} failed: {type(error).__name__}: {error}. "
            "Check that the store's server is reachable; leaselock retries renewals until "
            "the holder's deadline"
        )
