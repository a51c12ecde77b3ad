"""FaultyStore: any store, with the faults of production scripted per method and per key."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal, TypeAlias, TypeVar, final, get_args

from .._clock import Clock, SystemClock
from .._durations import Duration, parse_duration
from .._errors import LocksConfigurationError
from ..stores._common._capabilities import (
    JobRecord,
    LockInfo,
    RunRecord,
    SupportsInspection,
    SupportsRunRecords,
)
from ..stores._common._job_control import (
    JobPause,
    JobState,
    RunStart,
    RunStartAnswer,
    SupportsJobControl,
)
from ..stores._common._protocol import (
    Acquired,
    AcquireResult,
    Grant,
    LockStore,
    ReleaseFollower,
    SupportsLifecycle,
    WaitingLine,
)
from ._clock import wait_on_clock
from ._follow_through import follow_through, line_through

__all__ = ["Fault", "FaultyStore", "InjectedFaultError", "Method", "StoreCall"]

Method: TypeAlias = Literal[
    "acquire",
    "renew",
    "release",
    "record_run",
    "job_records",
    "read_lock",
    "list_locks",
    "break_lock",
    "start_run",
    "end_run",
    "note_missed",
    "pause_jobs",
    "resume_jobs",
    "job_pauses",
    "job_states",
    "queue",
    "leave",
    "grant",
]
FaultKind: TypeAlias = Literal[
    "delay",
    "fail",
    "hang",
    "lose_answer",
    "refuse_renewals",
    "swallow_cancellation",
    "tokens_back",
]
_METHODS: Final = get_args(Method)
_CONTRACT_METHODS: Final = ("acquire", "renew", "release")
T = TypeVar("T")


class InjectedFaultError(ConnectionError):
    """What a call that a :class:`FaultyStore` fails raises: a connection error, as a driver's.

    .. versionadded:: 0.2
    """


@final
@dataclass(eq=False)
class Fault:
    """One scripted fault; :meth:`remove` ends it, and answers the calls it holds (a hang).

    Attributes:
        kind: what it does to a call.
        method: the method it applies to, or ``None`` for all three.
        key: the key it applies to, or ``None`` for every key.
        hits: how many calls it has applied to so far.
    """

    kind: FaultKind
    method: Method | None
    key: str | None
    times: int | None
    until_ms: int | None
    delay_ms: int = 0
    on_request: bool = False
    tokens_by: int = 0
    hits: int = 0
    _store: FaultyStore | None = field(default=None, repr=False)
    _held: list[asyncio.Future[None]] = field(default_factory=list, repr=False)

    def applies(self, method: Method, key: str, now_ms: int) -> bool:
        """Whether the fault is live for a call of ``method`` on ``key`` at ``now_ms``."""
        if self.times is not None and self.hits >= self.times:
            return False
        if self.until_ms is not None and now_ms >= self.until_ms:
            return False
        return (self.method is None or self.method == method) and (
            self.key is None or self.key == key
        )

    def remove(self) -> None:
        """End the fault; calls it holds (a hang) go on to the store now."""
        if self._store is not None:
            self._store._forget(self)  # noqa: SLF001 -- the store owns its list of faults
        self.release()

    def _hold(self) -> asyncio.Future[None]:
        """Return a future that :meth:`release` ends: one call held by this fault."""
        held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._held.append(held)
        return held

    def release(self) -> None:
        """Let the calls this hang holds go on to the store now (the fault stays for new calls)."""
        held, self._held = self._held, []
        for future in held:
            if not future.done():
                future.set_result(None)


@final
@dataclass(frozen=True, slots=True)
class StoreCall:
    """One call that reached the :class:`FaultyStore`, as the caller saw it.

    Attributes:
        method: ``"acquire"``, ``"renew"``, ``"release"``, a line's ``"queue"`` or
            ``"leave"``, a ``"grant"`` heard, or an optional capability's method.
        key: the key.
        owner: the owner id sent.
        ttl_ms: the ttl sent (``None`` for a release).
        sent_ms: the clock when the call came in.
        answered_ms: the clock when it returned or raised (``None``: in flight, or cancelled).
        outcome: the answer (an ``Acquired``, ``NotAcquired`` or bool), the error's class name,
            ``"pending"`` while in flight, or ``"cancelled"``.
        faults: the kinds of the faults applied.
    """

    method: Method
    key: str
    owner: str
    ttl_ms: int | None
    sent_ms: int
    answered_ms: int | None
    outcome: object
    faults: tuple[FaultKind, ...]


@final
class FaultyStore:
    """Wraps any store and injects scripted faults per method and per key.

    Each fault method below adds a rule and returns its :class:`Fault`; rules apply to the calls
    that match them, for ``times`` calls or until ``lasting`` has passed on the store's clock,
    or until removed. Every call is recorded in :attr:`calls`. With a
    :class:`~leaselock.testing.ManualClock` every delay is exact and the run deterministic;
    with the system clock it works on a real store the same way::

        store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
        store.lose_answer("acquire", times=1)      # written, but the caller sees an error
        store.delay("release", "500ms", on="request")

    Optional capabilities of the inner store pass through: its lifecycle, its release
    notifications (a store without them simply never notifies), its waiting lines (their
    ``queue`` and ``leave`` calls recorded and faulted under those names, and each grant heard
    under ``"grant"``: ``fail("grant")`` loses grants on the way, ``delay("grant", ...)`` makes
    them late; a store without lines yields none, so waiters retry), its run records and its
    inspection (recorded and faulted like the rest, under their method names; over a store
    without them they raise :class:`~leaselock.LocksConfigurationError`). Batched renewals do
    not: each renewal is a call of its own, so per-key faults apply to it.

    .. versionadded:: 0.2
    """

    __slots__ = ("_clock", "_delivering", "_faults", "_inner", "calls")

    def __init__(self, inner: LockStore, *, clock: Clock | None = None) -> None:
        """Wrap ``inner``; ``clock`` times the delays and windows (default: the system clock).

        Raises:
            LocksConfigurationError: ``inner`` is not a store, or ``clock`` is not a clock.
        """
        for name in _CONTRACT_METHODS:
            if not callable(getattr(inner, name, None)):
                raise LocksConfigurationError(
                    f"inner={inner!r} has no {name}() method; wrap a lock store, such as "
                    "InMemoryLockStore(clock=clock)"
                )
        if clock is not None and not isinstance(clock, Clock):
            raise LocksConfigurationError(
                f"clock={clock!r} is not a clock; pass the test's ManualClock, or None"
            )
        self._inner = inner
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._faults: list[Fault] = []
        self._delivering: set[asyncio.Task[None]] = set()
        self.calls: list[StoreCall] = []

    @property
    def inner(self) -> LockStore:
        """The wrapped store."""
        return self._inner

    # --- scripting faults ----------------------------------------------------------------------

    def delay(
        self,
        method: Method | None,
        by: Duration,
        *,
        key: str | None = None,
        on: Literal["request", "answer"] = "answer",
        times: int | None = None,
        lasting: Duration | None = None,
    ) -> Fault:
        """Add ``by`` of latency: before the call reaches the store, or (default) to its answer.

        A delayed request models one stuck in a network queue that still lands later; a delayed
        answer models a write that happened on time and an answer that arrives late.
        """
        delay_ms = parse_duration(by, name="by")
        if on not in ("request", "answer"):
            raise LocksConfigurationError(f'on={on!r}; pass "request" or "answer"')
        return self._add("delay", method, key, times, lasting, delay_ms=delay_ms, on=on)

    def fail(
        self,
        method: Method | None = None,
        *,
        key: str | None = None,
        times: int | None = None,
        lasting: Duration | None = None,
    ) -> Fault:
        """Fail calls with :class:`InjectedFaultError` before they reach the store (an outage)."""
        return self._add("fail", method, key, times, lasting)

    def hang(
        self,
        method: Method | None = None,
        *,
        key: str | None = None,
        times: int | None = None,
        lasting: Duration | None = None,
    ) -> Fault:
        """Hold calls before they reach the store until :meth:`Fault.release` or ``remove``.

        A held call that its caller gives up on (a timeout, a cancellation) never reaches the
        store.
        """
        return self._add("hang", method, key, times, lasting)

    def lose_answer(
        self,
        method: Method | None = None,
        *,
        key: str | None = None,
        times: int | None = None,
        lasting: Duration | None = None,
    ) -> Fault:
        """Let calls reach the store, then raise :class:`InjectedFaultError` instead of the answer.

        The acquire or release happened; the caller cannot know.
        """
        return self._add("lose_answer", method, key, times, lasting)

    def swallow_cancellation(
        self,
        method: Method | None = None,
        *,
        key: str | None = None,
        times: int | None = None,
        lasting: Duration | None = None,
    ) -> Fault:
        """Hold calls until :meth:`Fault.release`; a cancellation meanwhile is lost, not raised.

        A cancelled call goes on to the store and answers as if nothing had happened, as
        redis-py on Python 3.11 now and then does (its ``asyncio.wait_for`` returns an answer
        that lands with a cancellation); only the task's :meth:`asyncio.Task.cancelling` count
        tells. A held call that nobody cancels waits for ``release``.

        .. versionadded:: 0.3
        """
        return self._add("swallow_cancellation", method, key, times, lasting)

    def refuse_renewals(
        self, *, key: str | None = None, times: int | None = None, lasting: Duration | None = None
    ) -> Fault:
        """Answer renewals ``False`` without asking the store, as when another owner took over."""
        return self._add("refuse_renewals", "renew", key, times, lasting)

    def tokens_back(
        self,
        by: int,
        *,
        key: str | None = None,
        times: int | None = None,
        lasting: Duration | None = None,
    ) -> Fault:
        """Return acquired tokens ``by`` lower (at least 1), as a counter restored from a backup."""
        if isinstance(by, bool) or not isinstance(by, int) or by < 1:
            raise LocksConfigurationError(f"by={by!r}; pass a positive int")
        return self._add("tokens_back", "acquire", key, times, lasting, tokens_by=by)

    def heal(self) -> None:
        """Remove every fault; held calls go on to the store."""
        for fault in list(self._faults):
            fault.remove()

    def _add(
        self,
        kind: FaultKind,
        method: Method | None,
        key: str | None,
        times: int | None,
        lasting: Duration | None,
        *,
        delay_ms: int = 0,
        on: str = "answer",
        tokens_by: int = 0,
    ) -> Fault:
        if method is not None and method not in _METHODS:
            raise LocksConfigurationError(
                f"method={method!r}; pass one of {', '.join(map(repr, _METHODS))}, or None for all"
            )
        if key is not None and not isinstance(key, str):
            raise LocksConfigurationError(f"key={key!r}; pass a str, or None for every key")
        if times is not None and (
            isinstance(times, bool) or not isinstance(times, int) or times < 1
        ):
            raise LocksConfigurationError(f"times={times!r}; pass a positive int, or None")
        until_ms = None
        if lasting is not None:
            until_ms = self._clock.now_ms() + parse_duration(lasting, name="lasting")
        fault = Fault(
            kind,
            method,
            key,
            times,
            until_ms,
            delay_ms=delay_ms,
            on_request=on == "request",
            tokens_by=tokens_by,
            _store=self,
        )
        self._faults.append(fault)
        return fault

    def _forget(self, fault: Fault) -> None:
        if fault in self._faults:
            self._faults.remove(fault)

    # --- the store contract --------------------------------------------------------------------

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        """Call the inner store's ``acquire`` through the faults that match."""

        async def reach(faults: list[Fault]) -> AcquireResult:
            answer = await self._inner.acquire(key, owner, ttl_ms)
            for fault in _of(faults, "tokens_back"):
                if isinstance(answer, Acquired):
                    answer = Acquired(
                        max(1, answer.fencing_token - fault.tokens_by), answer.lease_age_ms
                    )
            return answer

        return await self._call("acquire", key, owner, ttl_ms, reach)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Call the inner store's ``renew`` through the faults that match."""

        async def reach(faults: list[Fault]) -> bool:
            if any(_of(faults, "refuse_renewals")):
                return False
            return await self._inner.renew(key, owner, ttl_ms)

        return await self._call("renew", key, owner, ttl_ms, reach)

    async def release(self, key: str, owner: str) -> bool:
        """Call the inner store's ``release`` through the faults that match."""

        async def reach(_: list[Fault]) -> bool:
            return await self._inner.release(key, owner)

        return await self._call("release", key, owner, None, reach)

    async def _call(
        self,
        method: Method,
        key: str,
        owner: str,
        ttl_ms: int | None,
        reach: Callable[[list[Fault]], Awaitable[T]],
    ) -> T:
        sent_ms = self._clock.now_ms()
        faults = [fault for fault in self._faults if fault.applies(method, key, sent_ms)]
        for fault in faults:
            fault.hits += 1
        kinds = tuple(fault.kind for fault in faults)
        # recorded when sent (outcome "pending"), completed in place when it ends
        index = len(self.calls)
        self.calls.append(StoreCall(method, key, owner, ttl_ms, sent_ms, None, "pending", kinds))
        outcome: object = "cancelled"
        answered_ms: int | None = None
        try:
            answer = await self._through(method, key, faults, reach)
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            outcome, answered_ms = type(error).__name__, self._clock.now_ms()
            raise
        else:
            outcome, answered_ms = answer, self._clock.now_ms()
            return answer
        finally:
            self.calls[index] = StoreCall(
                method, key, owner, ttl_ms, sent_ms, answered_ms, outcome, kinds
            )

    async def _through(
        self,
        method: Method,
        key: str,
        faults: list[Fault],
        reach: Callable[[list[Fault]], Awaitable[T]],
    ) -> T:
        if any(_of(faults, "fail")):
            raise InjectedFaultError(f"{method}({key!r}): store unreachable (injected outage)")
        for fault in _of(faults, "hang"):
            held = fault._hold()  # noqa: SLF001 -- the fault and its store work as one
            await wait_on_clock(self._clock, held)
        for fault in _of(faults, "swallow_cancellation"):
            held = fault._hold()  # noqa: SLF001 -- the fault and its store work as one
            try:
                await wait_on_clock(self._clock, held)
            except asyncio.CancelledError:
                # the fault modelled: the driver carries on with this call as if not cancelled
                fault._held.remove(held)  # noqa: SLF001 -- the fault and its store work as one
        for fault in _of(faults, "delay"):
            if fault.on_request:
                await self._sleep(fault.delay_ms)
        answer = await reach(faults)
        for fault in _of(faults, "delay"):
            if not fault.on_request:
                await self._sleep(fault.delay_ms)
        if any(_of(faults, "lose_answer")):
            raise InjectedFaultError(
                f"{method}({key!r}): the connection dropped after the store answered (injected)"
            )
        return answer

    async def _sleep(self, delay_ms: int) -> None:
        if delay_ms <= 0:
            return
        done = asyncio.get_running_loop().create_future()

        async def wake() -> None:
            if not done.done():
                done.set_result(None)

        timer = self._clock.call_at(self._clock.now_ms() + delay_ms, wake)
        try:
            await wait_on_clock(self._clock, done)
        finally:
            timer.cancel()

    # --- run records and inspection, recorded and faulted like the rest -------------------------

    async def record_run(self, run: RunRecord) -> None:
        """Call the inner store's ``record_run`` (key: the job; owner: the instance label)."""

        async def reach(_: list[Fault]) -> None:
            await self._run_records().record_run(run)

        await self._call("record_run", run.job, run.instance, None, reach)

    async def job_records(self, jobs: Sequence[str] | None = None) -> list[JobRecord]:
        """Call the inner store's ``job_records`` (key: the jobs, comma-separated)."""

        async def reach(_: list[Fault]) -> list[JobRecord]:
            return await self._run_records().job_records(jobs)

        return await self._call("job_records", ",".join(jobs or ()), "", None, reach)

    async def read_lock(self, key: str) -> LockInfo | None:
        """Call the inner store's ``read_lock``."""

        async def reach(_: list[Fault]) -> LockInfo | None:
            return await self._inspection().read_lock(key)

        return await self._call("read_lock", key, "", None, reach)

    async def list_locks(self, prefix: str = "", limit: int = 1000) -> list[LockInfo]:
        """Call the inner store's ``list_locks`` (key: the prefix)."""

        async def reach(_: list[Fault]) -> list[LockInfo]:
            return await self._inspection().list_locks(prefix, limit)

        return await self._call("list_locks", prefix, "", None, reach)

    async def break_lock(self, key: str) -> LockInfo | None:
        """Call the inner store's ``break_lock``."""

        async def reach(_: list[Fault]) -> LockInfo | None:
            return await self._inspection().break_lock(key)

        return await self._call("break_lock", key, "", None, reach)

    async def start_run(self, start: RunStart) -> RunStartAnswer:
        """Call the inner store's ``start_run`` (key: the run lock's, else the job's)."""

        async def reach(_: list[Fault]) -> RunStartAnswer:
            return await self._job_control().start_run(start)

        key = start.take_key if start.take_key is not None else start.job
        return await self._call("start_run", key, start.owner, start.ttl_ms or None, reach)

    async def end_run(self, run: RunRecord) -> bool:
        """Call the inner store's ``end_run`` (key: the job; owner: the instance label)."""

        async def reach(_: list[Fault]) -> bool:
            return await self._job_control().end_run(run)

        return await self._call("end_run", run.job, run.instance, None, reach)

    async def note_missed(self, job: str, missed_at: datetime) -> None:
        """Call the inner store's ``note_missed`` (key: the job)."""

        async def reach(_: list[Fault]) -> None:
            await self._job_control().note_missed(job, missed_at)

        await self._call("note_missed", job, "", None, reach)

    async def pause_jobs(self, pause: JobPause) -> None:
        """Call the inner store's ``pause_jobs`` (key: the target; owner: who paused)."""

        async def reach(_: list[Fault]) -> None:
            await self._job_control().pause_jobs(pause)

        await self._call("pause_jobs", pause.target, pause.paused_by, None, reach)

    async def resume_jobs(self, target: str) -> JobPause | None:
        """Call the inner store's ``resume_jobs`` (key: the target)."""

        async def reach(_: list[Fault]) -> JobPause | None:
            return await self._job_control().resume_jobs(target)

        return await self._call("resume_jobs", target, "", None, reach)

    async def job_pauses(self) -> list[JobPause]:
        """Call the inner store's ``job_pauses``."""

        async def reach(_: list[Fault]) -> list[JobPause]:
            return await self._job_control().job_pauses()

        return await self._call("job_pauses", "", "", None, reach)

    async def job_states(self, jobs: Sequence[str] | None = None) -> list[JobState]:
        """Call the inner store's ``job_states`` (key: the jobs, comma-separated)."""

        async def reach(_: list[Fault]) -> list[JobState]:
            return await self._job_control().job_states(jobs)

        return await self._call("job_states", ",".join(jobs or ()), "", None, reach)

    def _job_control(self) -> SupportsJobControl:
        if not isinstance(self._inner, SupportsJobControl):
            raise LocksConfigurationError(f"{self._inner!r} keeps no job control")
        return self._inner

    def _run_records(self) -> SupportsRunRecords:
        if not isinstance(self._inner, SupportsRunRecords):
            raise LocksConfigurationError(f"{self._inner!r} keeps no run records")
        return self._inner

    def _inspection(self) -> SupportsInspection:
        if not isinstance(self._inner, SupportsInspection):
            raise LocksConfigurationError(f"{self._inner!r} cannot be inspected")
        return self._inner

    # --- optional capabilities of the inner store ------------------------------------------------

    async def open(self) -> None:
        """Open the inner store, if it has a lifecycle."""
        if isinstance(self._inner, SupportsLifecycle):
            await self._inner.open()

    async def aclose(self) -> None:
        """Close the inner store, if it has a lifecycle."""
        if isinstance(self._inner, SupportsLifecycle):
            await self._inner.aclose()

    def follow_releases(
        self, on_release: Callable[[str], None]
    ) -> AbstractAsyncContextManager[ReleaseFollower]:
        """Pass the inner store's release notifications through (none if it has none)."""
        return follow_through(self._inner, on_release)

    @asynccontextmanager
    async def wait_in_line(
        self, on_grant: Callable[[Grant], None]
    ) -> AsyncIterator[WaitingLine | None]:
        """Pass the inner store's waiting lines through, their calls faulted (``None``: none)."""

        def heard(grant: Grant) -> None:
            task = asyncio.get_running_loop().create_task(self._deliver(grant, on_grant))
            self._delivering.add(task)
            task.add_done_callback(self._delivering.discard)

        async with line_through(self._inner, heard, self._line_call) as line:
            try:
                yield line
            finally:
                for task in list(self._delivering):
                    task.cancel()

    async def _deliver(self, grant: Grant, on_grant: Callable[[Grant], None]) -> None:
        """Hand ``grant`` on through the faults that match ``"grant"``; a failed one is lost."""

        async def reach(_: list[Fault]) -> Grant:
            return grant

        with contextlib.suppress(InjectedFaultError):
            # heard once through the faults: a delay of either kind makes it late
            on_grant(await self._call("grant", grant.key, grant.owner, None, reach))

    async def _line_call(
        self,
        method: Literal["queue", "leave"],
        key: str,
        owner: str,
        call: Awaitable[T],
        **arguments: int,
    ) -> T:
        async def reach(_: list[Fault]) -> T:
            return await call

        try:
            return await self._call(method, key, owner, arguments.get("ttl_ms"), reach)
        finally:
            # a call stopped by a fault before it reached the line is never awaited
            if asyncio.iscoroutine(call):
                call.close()

    def __repr__(self) -> str:
        """Show the inner store and the faults in force."""
        return f"FaultyStore({self._inner!r}, faults={len(self._faults)})"


def _of(faults: list[Fault], kind: FaultKind) -> Iterator[Fault]:
    return (fault for fault in faults if fault.kind == kind)
