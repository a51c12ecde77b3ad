"""The one error tree of leaselock.

::

    LockError                      base: catch this to catch everything leaselock raises
    ├── LockNotAcquiredError       the key stayed held by someone else for the whole wait
    ├── LockLostError              a held lock was lost (renewal refused, deadline passed, shutdown)
    │   └── StaleFencingTokenError a database refused a write: a newer holder of the key wrote first
    ├── LockStoreError             a store failed, or broke its contract (e.g. a token as str)
    └── LocksConfigurationError    an argument or a configuration is wrong; also a ValueError

Every message says what happened and how to fix it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, final

__all__ = [
    "DetectedBy",
    "LockError",
    "LockLostError",
    "LockNotAcquiredError",
    "LockStoreError",
    "LocksConfigurationError",
    "StaleFencingTokenError",
]

DetectedBy = Literal["renewal", "deadline", "shutdown", "max_run", "replaced", "fencing"]
"""How a loss was noticed.

``"renewal"``: the store refused a renewal (someone else holds the key, or the lease expired there).
``"deadline"``: ``ttl`` passed since the last renewal the store confirmed (e.g. it was unreachable).
``"shutdown"``: the :class:`~leaselock.Locks` closed while the lock was still held.
``"max_run"``: a job's run outlived its ``max_run`` cap; its run lock was given up.
``"replaced"``: a newer run of a job with ``overlap="replace"`` took its run lock.
``"fencing"``: a database refused a write fenced with its token: a newer holder wrote first.
"""


class LockError(Exception):
    """Base class of every error leaselock raises."""


@final
class LockNotAcquiredError(LockError):
    """The key stayed held by another owner for the whole wait.

    Attributes:
        key: the key that could not be taken.
        waited_ms: how long the caller waited, in milliseconds (0: tried once).
    """

    def __init__(self, key: str, waited_ms: int, *, hint: str | None = None) -> None:
        """Build the error for ``key`` after a wait of ``waited_ms``; ``hint`` names the fix."""
        self.key = key
        self.waited_ms = waited_ms
        self._hint = hint
        waited = "it was tried once" if waited_ms == 0 else f"waited {waited_ms} ms"
        fix = hint or (
            "pass a longer wait= to wait for it, or use acquire() to get None instead of an error"
        )
        super().__init__(f"Lock {key!r} is held by another owner ({waited}); {fix}")

    def __reduce__(self) -> tuple[Callable[..., LockNotAcquiredError], tuple[object, ...]]:
        """Pickle by constructor arguments, so the error crosses process boundaries."""
        return (_not_acquired, (self.key, self.waited_ms, self._hint))


def _not_acquired(key: str, waited_ms: int, hint: str | None) -> LockNotAcquiredError:
    return LockNotAcquiredError(key, waited_ms, hint=hint)


class LockLostError(LockError):
    """A held lock was lost; the critical section must stop.

    Attributes:
        key: the key of the lost lock.
        fencing_token: the token the lost lock was acquired with.
        detected_by: how the loss was noticed, see :data:`DetectedBy`.
    """

    def __init__(self, key: str, fencing_token: int, detected_by: DetectedBy) -> None:
        """Build the error for the lock on ``key`` acquired with ``fencing_token``."""
        self.key = key
        self.fencing_token = fencing_token
        self.detected_by: DetectedBy = detected_by
        how = {
            "renewal": "the store refused its renewal: another owner may hold it now",
            "deadline": "no renewal was confirmed within its ttl (store unreachable or slow)",
            "shutdown": "its Locks was closed while it was still held",
            "max_run": "the run outlived its max_run cap, so its run lock was given up",
            "replaced": 'a newer run of its job took its run lock (overlap="replace")',
            "fencing": "a database refused a write fenced with its token",
        }[detected_by]
        super().__init__(
            f"Lost lock {key!r} (fencing token {fencing_token}): {how}. "
            "Stop writing on its behalf; fence writes with the token so a late one is refused"
        )

    def __reduce__(self) -> tuple[Callable[..., LockLostError], tuple[object, ...]]:
        """Pickle by constructor arguments, so the error crosses process boundaries."""
        return (LockLostError, (self.key, self.fencing_token, self.detected_by))


@final
class StaleFencingTokenError(LockLostError):
    """A database refused a fenced write: a newer holder of the key had written before it.

    Raised at the flush or commit of a session in ``fenced(session, lock)``
    (:mod:`leaselock.integrations.sqlalchemy`); the transaction is rolled back, so every row
    keeps what the newer holder wrote. ``detected_by`` is ``"fencing"``.

    Attributes:
        key: the key of the lock the write was fenced with.
        fencing_token: the stale token, the one this holder's lock was acquired with.
        newer_token: the greatest token the database has seen for ``key``.
    """

    def __init__(self, key: str, fencing_token: int, newer_token: int) -> None:
        """Build the error for a write under ``fencing_token`` after ``newer_token`` wrote."""
        self.key = key
        self.fencing_token = fencing_token
        self.newer_token = newer_token
        self.detected_by: DetectedBy = "fencing"
        Exception.__init__(
            self,
            f"The database refused a write under lock {key!r} with fencing token "
            f"{fencing_token}: a newer holder (fencing token {newer_token}) wrote under that key "
            "after this holder lost its lease (paused or cut off past its ttl). Its transaction "
            "was rolled back; stop working on the key's behalf, and take the lock again to "
            "retry with a fresh token",
        )

    def __reduce__(self) -> tuple[Callable[..., LockLostError], tuple[object, ...]]:
        """Pickle by constructor arguments, so the error crosses process boundaries."""
        return (StaleFencingTokenError, (self.key, self.fencing_token, self.newer_token))


@final
class LockStoreError(LockError):
    """A store failed, or broke the store contract.

    The message names the store, the method and what to change.
    """


@final
class LocksConfigurationError(LockError, ValueError):
    """An argument or configuration is wrong; the message says which and how to fix it."""
