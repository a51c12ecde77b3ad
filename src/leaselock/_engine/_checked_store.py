"""CheckedStore: every store call the engine makes, with the contract checked on the way back.

A store that raises is reported as :class:`LockStoreError` naming the store and the method; a
store that answers outside the contract (a token as ``str``, a renewal as ``None``) is refused
with a message naming the fix, so no caller ever believes in a lock it may not hold.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeAlias, final

from .._errors import LocksConfigurationError, LockStoreError
from .._redact import redact_secrets
from ..stores._common._protocol import (
    MAX_FENCING_TOKEN,
    Acquired,
    Grant,
    LockStore,
    NotAcquired,
    Queued,
    Renewal,
    SupportsBatchRenew,
    WaitingLine,
)

__all__ = ["AcquireCall", "CheckedLine", "CheckedStore", "check_store_shape"]

_log = logging.getLogger("leaselock")

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
    if isinstance(store, str):
        raise LocksConfigurationError(
            f"store={redact_secrets(store)!r} is a string; pass a store: "
            "leaselock.stores.store_from_url(url) makes one from a URL, or build it, such as "
            "PostgresLockStore.from_url(url) or SQLiteLockStore(path)"
        )
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
        try:
            result = await self.inner.acquire(key, owner, ttl_ms)
        except (asyncio.CancelledError, LockStoreError):
            raise
        except Exception as error:
            raise self._failed("acquire", error) from error
        return self._acquire_answer("acquire", result)

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
        return self._acquire_answer(method, result)

    def _acquire_answer(self, method: str, result: object) -> Acquired | NotAcquired:
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
        _check_token(self.inner, method, result.fencing_token)
        age = result.lease_age_ms
        if type(age) is not int or age < 0:
            raise LockStoreError(
                f"{self.inner!r}.{method} returned lease_age_ms={age!r}; return a whole number "
                "of milliseconds, 0 or more (0: the lock's ttl counts from the call)"
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
            return await self._renew_batch(self._batch, renewals)
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

    async def _renew_batch(
        self, batch: SupportsBatchRenew, renewals: Sequence[Renewal]
    ) -> list[bool | LockStoreError]:
        try:
            answers = await batch.renew_many(renewals)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 -- every renewal shares the failure
            failure = (
                error if isinstance(error, LockStoreError) else self._failed("renew_many", error)
            )
            return [failure] * len(renewals)
        if len(answers) != len(renewals):
            failure = LockStoreError(
                f"{self.inner!r}.renew_many returned {len(answers)} results for "
                f"{len(renewals)} renewals; return one bool per renewal, in order"
            )
            return [failure] * len(renewals)
        if set(map(type, answers)) == {bool}:
            return list(answers)
        return [self._bool_or_error("renew_many", answer) for answer in answers]

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


def _check_token(store: object, method: str, token: object) -> None:
    """Refuse a fencing token outside the contract, naming the fix.

    Raises:
        LockStoreError: ``token`` is not an int in ``1 .. 2**53 - 1``.
    """
    if type(token) is not int:
        raise LockStoreError(
            f"{store!r}.{method} returned fencing token {token!r} as "
            f"{type(token).__name__}; return an int (convert a driver's text or Decimal "
            "bigint with int())"
        )
    if not 0 < token <= MAX_FENCING_TOKEN:
        raise LockStoreError(
            f"{store!r}.{method} returned fencing token {token}; tokens are positive "
            f"integers below 2**53 (at most {MAX_FENCING_TOKEN}): check the store's counter"
        )


@final
class CheckedLine:
    """Calls into one store's waiting line, validating what comes back (as :class:`CheckedStore`).

    Args:
        line: the line the store's ``wait_in_line`` gave.
        store: the store, to name in errors.
    """

    __slots__ = ("_line", "_store")

    def __init__(self, line: WaitingLine, store: object) -> None:
        """Wrap ``line`` of ``store``."""
        self._line = line
        self._store = store

    async def queue(
        self, key: str, owner: str, ttl_ms: int, queue_ms: int, ticket: int
    ) -> Acquired | Queued:
        """Call the line's ``queue``; an answer outside the contract is refused.

        Raises:
            LockStoreError: the store raised, or returned something the contract does not allow.
        """
        try:
            answer = await self._line.queue(key, owner, ttl_ms, queue_ms, ticket)
        except (asyncio.CancelledError, LockStoreError):
            raise
        except Exception as error:
            raise self._failed("queue", error) from error
        if isinstance(answer, Queued):
            return answer if answer.holder is None or isinstance(answer.holder, str) else Queued()
        if not isinstance(answer, Acquired):
            raise LockStoreError(
                f"{self._store!r}'s line: queue returned {answer!r}; return "
                "leaselock.stores.Acquired(fencing_token) or leaselock.stores.Queued()"
            )
        _check_token(self._store, "queue", answer.fencing_token)
        return answer

    async def leave(self, key: str, owner: str) -> bool:
        """Call the line's ``leave``.

        Raises:
            LockStoreError: the store raised, or did not return a bool.
        """
        try:
            left = await self._line.leave(key, owner)
        except (asyncio.CancelledError, LockStoreError):
            raise
        except Exception as error:
            raise self._failed("leave", error) from error
        if not isinstance(left, bool):
            raise LockStoreError(
                f"{self._store!r}'s line: leave returned {left!r} ({type(left).__name__}); "
                "return True or False"
            )
        return left

    def checked_grant(self, grant: object) -> Grant | None:
        """Return ``grant`` if it keeps the contract; else log why and return ``None``.

        A refused grant is not lost: the waiter's next ``queue`` call answers it (and its
        token is checked there).
        """
        try:
            return self._grant(grant)
        except LockStoreError as error:
            _log.error("Ignored a grant: %s", error)
            return None

    def _grant(self, grant: object) -> Grant:
        if not isinstance(grant, Grant):
            raise LockStoreError(
                f"{self._store!r} heard grant {grant!r}; pass leaselock.stores.Grant(...)"
            )
        _check_token(self._store, "wait_in_line's grant", grant.fencing_token)
        if type(grant.ticket) is not int:
            raise LockStoreError(
                f"{self._store!r} heard a grant with ticket {grant.ticket!r}; pass back "
                "the int ticket of the queue() call that kept the place"
            )
        return grant

    def _failed(self, method: str, error: BaseException) -> LockStoreError:
        return LockStoreError(
            f"{self._store!r}'s line: {method} failed: {type(error).__name__}: {error}. "
            "Check that the store's server is reachable; a waiter keeps its place by asking "
            "again"
        )
