"""The store contract suite's machinery: what a case body gets, and how cases are registered.

Cases live in modules of their own (``_contract`` for the core rules, ``_contract_handoff`` for
waiting lines); each registers its bodies with the decorator of its :func:`case_registry`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Final, TypeAlias, final

from ..stores._common._capabilities import SupportsInspection, SupportsRunRecords
from ..stores._common._job_control import SupportsJobControl
from ..stores._common._protocol import (
    MAX_FENCING_TOKEN,
    Acquired,
    LockStore,
    NotAcquired,
    SupportsBatchRenew,
    SupportsHandoff,
    SupportsReleaseNotifications,
    SupportsReleasesInTurn,
)
from ..stores._common._store_clock import SupportsStoreClock

__all__ = [
    "BATCH_RENEW",
    "CAPABILITIES",
    "CONCURRENT",
    "DEFAULT_CALLERS",
    "DEFAULT_TTL",
    "HANDOFF",
    "INSPECTION",
    "JOB_CONTROL",
    "LONG_TTL_MS",
    "MIN_TTL_MS",
    "NOTIFICATION_TIMEOUT_S",
    "RELEASES_IN_TURN",
    "RELEASE_NOTIFICATIONS",
    "RUN_RECORDS",
    "STORE_CLOCK",
    "AdvanceTime",
    "Body",
    "Check",
    "ContractCase",
    "MakeStore",
    "Spec",
    "case_registry",
]

MakeStore: TypeAlias = Callable[[], LockStore | Awaitable[LockStore]]
AdvanceTime: TypeAlias = Callable[[timedelta], Awaitable[object]]

DEFAULT_CALLERS: Final = 16
LONG_TTL_MS: Final = 60_000
# not a whole number of seconds: a store that rounds expiry to seconds fails at one of the checks
DEFAULT_TTL: Final = "600ms"
# the expiry cases look at a lease at ttl/6 margins: below this they measure the scheduler
MIN_TTL_MS: Final = 60
NOTIFICATION_TIMEOUT_S: Final = 5.0

CONCURRENT: Final = "concurrent"
BATCH_RENEW: Final = "batch_renew"
RELEASE_NOTIFICATIONS: Final = "release_notifications"
RELEASES_IN_TURN: Final = "releases_in_turn"
RUN_RECORDS: Final = "run_records"
INSPECTION: Final = "inspection"
JOB_CONTROL: Final = "job_control"
HANDOFF: Final = "handoff"
STORE_CLOCK: Final = "store_clock"
CAPABILITIES: Final = {
    BATCH_RENEW: (SupportsBatchRenew, "renew_many()"),
    RELEASE_NOTIFICATIONS: (SupportsReleaseNotifications, "follow_releases()"),
    RELEASES_IN_TURN: (SupportsReleasesInTurn, "follow_releases_in_turn()"),
    RUN_RECORDS: (SupportsRunRecords, "record_run() and job_records()"),
    INSPECTION: (SupportsInspection, "read_lock(), list_locks() and break_lock()"),
    JOB_CONTROL: (SupportsJobControl, "start_run(), end_run() and the pause methods"),
    HANDOFF: (SupportsHandoff, "wait_in_line()"),
    STORE_CLOCK: (SupportsStoreClock, "store_time_ms()"),
}


@final
@dataclass(frozen=True, slots=True)
class ContractCase:
    """One rule of the store contract, checked by ``await case.run()``.

    Attributes:
        name: stable snake_case name, public API (``pytest -k <name>`` selects it).
        rule: the contract sentence the case checks.
        requires: capabilities it needs (``concurrent``, ``batch_renew``,
            ``release_notifications``, ``releases_in_turn``, ``run_records``, ``inspection``,
            ``job_control``, ``handoff``); without one, ``run`` raises
            :class:`unittest.SkipTest` naming it. Time needs none: without ``advance_time`` the
            suite waits for real.
        run: makes a store, checks the rule, closes the store; raises ``AssertionError``
            ``"<name>: <rule> — <what happened>"`` when the store breaks it.
    """

    name: str
    rule: str
    requires: frozenset[str]
    run: Callable[[], Awaitable[None]]


@final
class Check:
    """What a case body gets: the store, fresh keys, time, and assertions that name the rule."""

    def __init__(
        self,
        name: str,
        rule: str,
        store: LockStore,
        *,
        callers: int,
        advance: AdvanceTime | None,
        ttl_ms: int,
    ) -> None:
        self.name = name
        self.rule = rule
        self.store = store
        self.callers = callers
        self.ttl_ms = ttl_ms
        self._advance = advance
        self._run_id = uuid.uuid4().hex[:12]
        self._owners = 0

    def key(self, suffix: str = "") -> str:
        return f"contract:{self.name}:{self._run_id}:{suffix}"

    def owner(self) -> str:
        self._owners += 1
        return f"owner-{self._run_id}-{self._owners}"

    def fail(self, what: str) -> AssertionError:
        return AssertionError(f"{self.name}: {self.rule} — {what}")

    def expect(self, condition: bool, what: str) -> None:
        if not condition:
            raise self.fail(what)

    def mark(self) -> float:
        """Return now, for :meth:`advance`'s ``since``: taken just before a call is sent."""
        return asyncio.get_running_loop().time()

    async def advance(self, ms: int, *, since: float | None = None) -> None:
        """Let ``ms`` pass on the store's clock: moved by ``advance_time``, else for real.

        In real time, ``since`` (a :meth:`mark`) counts the ``ms`` from that moment, so the
        time a call took before its answer came (a commit waiting for the disk) is not added
        to the wait: a check "still held" stays ahead of the expiry the call set.
        """
        if self._advance is None:
            elapsed_s = 0.0 if since is None else asyncio.get_running_loop().time() - since
            # the store's clock cannot be moved from here: wait, as the NestJS suite does
            await asyncio.sleep(max(0.0, ms / 1000 - elapsed_s))  # noqa: TID251 -- real time is the store's time here
            return
        await self._advance(timedelta(milliseconds=ms))

    def token(self, result: object, doing: str) -> int:
        """Return the token of an :class:`Acquired`, checking the token's contract."""
        if not isinstance(result, Acquired):
            raise self.fail(f"{doing} returned {result!r}, expected Acquired(...)")
        token = result.fencing_token
        if type(token) is not int:
            raise self.fail(f"{doing} returned token {token!r} as {type(token).__name__}, not int")
        self.expect(
            0 < token <= MAX_FENCING_TOKEN, f"{doing} returned token {token}, outside 1..2**53-1"
        )
        return token

    def refused(self, result: object, doing: str) -> None:
        if not isinstance(result, NotAcquired):
            raise self.fail(f"{doing} returned {result!r}, expected NotAcquired()")

    def answer(self, answer: object, expected: bool, doing: str) -> None:
        if answer is not expected:
            raise self.fail(f"{doing} returned {answer!r}, expected {expected}")

    async def take(self, key: str, owner: str, ttl_ms: int = LONG_TTL_MS) -> int:
        return self.token(await self.store.acquire(key, owner, ttl_ms), f"acquire({key!r})")

    async def held_by_someone(self, key: str, doing: str) -> None:
        self.refused(await self.store.acquire(key, self.owner(), LONG_TTL_MS), doing)

    async def race(self, key: str, ttl_ms: int = LONG_TTL_MS) -> list[int]:
        """Let ``callers`` owners acquire ``key`` at once; return the tokens of the winners."""
        results = await asyncio.gather(
            *(self.store.acquire(key, self.owner(), ttl_ms) for _ in range(self.callers))
        )
        return [self.token(r, "a racing acquire") for r in results if isinstance(r, Acquired)]


Body: TypeAlias = Callable[["Check"], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Spec:
    name: str
    rule: str
    requires: frozenset[str]
    body: Body


def case_registry() -> tuple[list[Spec], Callable[..., Callable[[Body], Body]]]:
    """Return a module's list of cases, and the decorator that adds a case body to it."""
    specs: list[Spec] = []

    def case(rule: str, *requires: str) -> Callable[[Body], Body]:
        def register(body: Body) -> Body:
            specs.append(Spec(body.__name__, rule, frozenset(requires), body))
            return body

        return register

    return specs, case
