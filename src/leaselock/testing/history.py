"""A record of every store call and fenced write, and a checker of what locks promise.

Wrap the store of each process in a :class:`HistoryRecorder` writing to one file (JSON Lines,
appended whole), run the processes, then :func:`check_history` the file::

    store = HistoryRecorder(PostgresLockStore.from_url(url), "history.jsonl")
    async with Locks(store=store) as locks, locks.hold("k") as lock:
        await store.fenced_write("k", lock.fencing_token, lambda: write_row(lock.fencing_token))
    ...
    report = check_history("history.jsonl")
    assert report.ok, report.summary()

Times are ``CLOCK_MONOTONIC`` nanoseconds, one clock for every process of a host (each recorder
first writes where that clock stood against the wall clock, so a violation is shown at a
readable time and as an offset from the first recorder's start); the recorder logs a call when
it is sent and again when it is answered, so a process killed mid-call leaves
the half it reached. A store's waiting lines are recorded too: each ``queue`` and ``leave``
call, and each grant when its line hears it. The checker proves, from the record alone:

- at most one live lease per key at any instant. A lease is surely live from its acquire's
  answer to the earlier of its release's send and ``ttl`` after the send of its last renewal
  confirmed before that deadline (the holder's own deadline rule; an acquire counts as sent
  ``lease_age_ms`` earlier where the store answered one). An acquire answered after its ttl is
  no lease (the holder must treat it as not acquired). A queue call answered with a
  token is an acquire; a grant is a lease from when it was heard, with the deadline of the
  place it was given to: ``queue_ms`` from the send of the queue call whose ticket it carries
  (heard after that, it is no lease). A leave's send ends its owner's lease, as a release's;
- tokens unique per key, and growing in real time: an acquire answered before another was sent
  has the smaller token (a grant counts as sent when its ticket's queue call was, and answered
  when heard);
- no fenced write accepted with a token smaller than one whose write was accepted before it was
  sent (a paused holder's late write must be refused).

.. versionadded:: 0.2
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, TypeVar, final

from .._errors import LocksConfigurationError
from ..stores._common._protocol import (
    Acquired,
    AcquireResult,
    Grant,
    LockStore,
    Queued,
    ReleaseFollower,
    Renewal,
    SupportsBatchRenew,
    SupportsLifecycle,
    WaitingLine,
)
from ._follow_through import follow_through, line_through

__all__ = ["HistoryRecorder", "HistoryReport", "Lease", "Violation", "check_history"]

T = TypeVar("T")
_NS_PER_MS: Final = 1_000_000


def _now_ns() -> int:
    # one clock for every process of the host: CLOCK_MONOTONIC, never the injected Clock
    return time.monotonic_ns()


@final
class HistoryRecorder:
    """Wraps a store; appends every call (sent, then answered) to a JSON Lines file.

    Several processes may append to one file: each line is written with one ``write`` on a file
    opened with ``O_APPEND``. Optional capabilities of the inner store pass through (batched
    renewals are recorded as one renewal each, with the batch's times).

    .. versionadded:: 0.2
    """

    __slots__ = ("_calls", "_fd", "_inner", "_process")

    def __init__(
        self, inner: LockStore, path: str | os.PathLike[str], *, process: str | None = None
    ) -> None:
        """Record the calls to ``inner`` in ``path``; ``process`` labels them (default the pid).

        Raises:
            LocksConfigurationError: ``inner`` is not a store.
        """
        for name in ("acquire", "renew", "release"):
            if not callable(getattr(inner, name, None)):
                raise LocksConfigurationError(
                    f"inner={inner!r} has no {name}() method; wrap a lock store"
                )
        self._inner = inner
        self._process = process if process is not None else f"pid-{os.getpid()}"
        self._fd = os.open(os.fspath(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._calls = itertools.count(1)
        self._log({"phase": "clock", "at": _now_ns(), "wall_ns": time.time_ns()})

    @property
    def inner(self) -> LockStore:
        """The wrapped store."""
        return self._inner

    def _log(self, entry: Mapping[str, object]) -> None:
        line = json.dumps({"process": self._process, **entry}, separators=(",", ":"))
        os.write(self._fd, (line + "\n").encode())

    def _sent(self, op: str, **fields: object) -> str:
        call = f"{self._process}:{next(self._calls)}"
        self._log({"call": call, "phase": "sent", "op": op, "at": _now_ns(), **fields})
        return call

    def _answered(self, call: str, **fields: object) -> None:
        self._log({"call": call, "phase": "answered", "at": _now_ns(), **fields})

    async def _recorded(self, call: str, work: Awaitable[T], encode: Callable[[T], object]) -> T:
        try:
            answer = await work
        except asyncio.CancelledError:
            self._answered(call, error="cancelled")
            raise
        except Exception as error:
            self._answered(call, error=type(error).__name__)
            raise
        if isinstance(answer, Acquired) and answer.lease_age_ms:
            self._answered(call, result=encode(answer), lease_age_ms=answer.lease_age_ms)
        else:
            self._answered(call, result=encode(answer))
        return answer

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        """Record and forward ``acquire``; a token is recorded as its int, else ``null``."""
        call = self._sent("acquire", key=key, owner=owner, ttl_ms=ttl_ms)
        return await self._recorded(
            call,
            self._inner.acquire(key, owner, ttl_ms),
            lambda answer: answer.fencing_token if isinstance(answer, Acquired) else None,
        )

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Record and forward ``renew``."""
        call = self._sent("renew", key=key, owner=owner, ttl_ms=ttl_ms)
        return await self._recorded(call, self._inner.renew(key, owner, ttl_ms), _same)

    async def renew_many(self, renewals: Sequence[Renewal]) -> Sequence[bool]:
        """Record and forward a batch: one call where the inner store batches, else one each."""
        if not isinstance(self._inner, SupportsBatchRenew):
            return list(await asyncio.gather(*(self.renew(*renewal) for renewal in renewals)))
        calls = [
            self._sent("renew", key=key, owner=owner, ttl_ms=ttl_ms)
            for key, owner, ttl_ms in renewals
        ]
        try:
            answers = await self._inner.renew_many(renewals)
        except BaseException as error:
            for call in calls:
                self._answered(call, error=type(error).__name__)
            raise
        for call, answer in zip(calls, answers, strict=False):
            self._answered(call, result=answer)
        return answers

    async def release(self, key: str, owner: str) -> bool:
        """Record and forward ``release``."""
        call = self._sent("release", key=key, owner=owner)
        return await self._recorded(call, self._inner.release(key, owner), _same)

    async def fenced_write(
        self, key: str, fencing_token: int, write: Callable[[], Awaitable[bool]]
    ) -> bool:
        """Record a write to the resource that ``key`` protects, fenced with ``fencing_token``.

        Args:
            key: the lock's key (the checker compares writes of one key).
            fencing_token: the token the write was sent with.
            write: performs the write; returns whether the resource accepted it.

        Returns:
            What ``write`` returned. An error it raises is recorded (outcome unknown) and
            raised.
        """
        call = self._sent("write", key=key, token=fencing_token)
        return await self._recorded(call, write(), _same)

    async def open(self) -> None:
        """Open the inner store, if it has a lifecycle."""
        if isinstance(self._inner, SupportsLifecycle):
            await self._inner.open()

    async def aclose(self) -> None:
        """Close the inner store, if it has a lifecycle; the file stays open for writes."""
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
        """Pass the inner store's waiting lines through, recorded (``None`` if it has none)."""

        def heard(grant: Grant) -> None:
            call = self._sent("grant", key=grant.key, owner=grant.owner, ticket=grant.ticket)
            self._answered(call, result=grant.fencing_token)
            on_grant(grant)

        async with line_through(self._inner, heard, self._line_call) as line:
            yield line

    async def _line_call(
        self,
        method: Literal["queue", "leave"],
        key: str,
        owner: str,
        call: Awaitable[T],
        **arguments: int,
    ) -> T:
        sent = self._sent(method, key=key, owner=owner, **arguments)
        return await self._recorded(sent, call, _token_or_answer)

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)

    def __repr__(self) -> str:
        """Name the inner store."""
        return f"HistoryRecorder({self._inner!r})"


def _same(answer: T) -> T:
    return answer


def _token_or_answer(answer: object) -> object:
    """A queue call's answer as recorded: its token when it took the key, else ``null``."""
    if isinstance(answer, Acquired):
        return answer.fencing_token
    return None if isinstance(answer, Queued) else answer


@final
@dataclass(frozen=True, slots=True)
class Lease:
    """A lease the record proves: who held ``key`` with which token, and when (ns)."""

    key: str
    process: str
    owner: str
    fencing_token: int
    start_ns: int
    end_ns: int


@final
@dataclass(frozen=True, slots=True)
class Violation:
    """A broken promise, with the calls that prove it."""

    rule: str
    detail: str

    def __str__(self) -> str:
        """Return the rule and the detail."""
        return f"{self.rule}: {self.detail}"


@final
@dataclass
class HistoryReport:
    """What :func:`check_history` found: counts, the proven leases, and any violations."""

    acquisitions: int = 0
    late_acquisitions: int = 0
    renewals: int = 0
    releases: int = 0
    writes_accepted: int = 0
    writes_refused: int = 0
    writes_unknown: int = 0
    late_writes: int = 0
    processes: int = 0
    leases: list[Lease] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether no promise was broken."""
        return not self.violations

    def summary(self) -> str:
        """Return the counts, and every violation, one per line."""
        lines = [
            (
                f"{self.processes} processes: {self.acquisitions} acquisitions "
                f"({self.late_acquisitions} answered after their ttl, not leases), "
                f"{self.renewals} renewals, {self.releases} releases; fenced writes: "
                f"{self.writes_accepted} accepted, {self.writes_refused} refused, "
                f"{self.writes_unknown} unknown; {self.late_writes} sent after their lease ended"
            ),
            f"{len(self.violations)} violations",
        ]
        lines += [f"  {violation}" for violation in self.violations]
        return "\n".join(lines)


@dataclass
class _Call:
    process: str
    op: str
    key: str
    sent_ns: int
    owner: str = ""
    ttl_ms: int = 0
    queue_ms: int = 0
    ticket: int = 0
    token: int | None = None
    answered_ns: int | None = None
    result: object = None
    lease_age_ms: int = 0
    error: str | None = None


def check_history(history: str | os.PathLike[str] | Iterable[Mapping[str, Any]]) -> HistoryReport:
    """Check a recorded history: a file a :class:`HistoryRecorder` wrote, or its entries.

    Returns:
        The report; ``report.ok`` is ``False`` if any promise was broken, and each violation
        names the calls involved with their times.

    .. versionadded:: 0.2
    """
    calls, times = _calls(history)
    report = HistoryReport(processes=len({call.process for call in calls}))
    by_key: defaultdict[str, list[_Call]] = defaultdict(list)
    for call in calls:
        by_key[call.key].append(call)
    for key, key_calls in by_key.items():
        leases = _leases(key, key_calls, report)
        report.leases += leases
        _check_overlaps(leases, report, times)
        _check_tokens(key, key_calls, report, times)
        _check_writes(key, key_calls, leases, report, times)
    return report


@dataclass
class _Times:
    """Shows a monotonic time as a wall-clock time and an offset from the history's start."""

    start_ns: int | None = None
    wall_minus_monotonic_ns: int | None = None

    def saw(self, entry: Mapping[str, Any]) -> None:
        if entry["phase"] == "clock":
            if self.start_ns is None or entry["at"] < self.start_ns:
                self.start_ns = entry["at"]
            if self.wall_minus_monotonic_ns is None:
                self.wall_minus_monotonic_ns = entry["wall_ns"] - entry["at"]
        elif self.start_ns is None and entry["phase"] == "sent":
            self.start_ns = entry["at"]

    def show(self, at_ns: int | None) -> str:
        """Show ``at_ns`` as ``2026-12-06T05:01:02.123456+00:00 (+3.456123 s)``.

        The offset alone where the history has no clock entry (written before recorders wrote
        one).
        """
        if at_ns is None:
            return "never"
        start_ns = at_ns if self.start_ns is None else self.start_ns
        offset = f"+{(at_ns - start_ns) / 1e9:.6f} s"
        if self.wall_minus_monotonic_ns is None:
            return f"{offset} from the first call"
        wall = datetime.fromtimestamp((at_ns + self.wall_minus_monotonic_ns) / 1e9, UTC)
        return f"{wall.isoformat(timespec='microseconds')} ({offset})"


def _calls(
    history: str | os.PathLike[str] | Iterable[Mapping[str, Any]],
) -> tuple[list[_Call], _Times]:
    entries: Iterable[Mapping[str, Any]]
    if isinstance(history, str | os.PathLike):
        text = Path(history).read_text()
        # a process killed mid-write leaves at most a torn last line of its own
        entries = [json.loads(line) for line in text.splitlines() if line.endswith("}")]
    else:
        entries = history
    calls: dict[str, _Call] = {}
    times = _Times()
    for entry in entries:
        times.saw(entry)
        if entry["phase"] == "sent":
            calls[entry["call"]] = _Call(
                process=entry["process"],
                op=entry["op"],
                key=entry["key"],
                sent_ns=entry["at"],
                owner=entry.get("owner", ""),
                ttl_ms=entry.get("ttl_ms", 0),
                queue_ms=entry.get("queue_ms", 0),
                ticket=entry.get("ticket", 0),
                token=entry.get("token"),
            )
        elif entry["phase"] == "answered" and (call := calls.get(entry["call"])) is not None:
            call.answered_ns = entry["at"]
            call.result = entry.get("result")
            call.lease_age_ms = entry.get("lease_age_ms", 0)
            call.error = entry.get("error")
    return list(calls.values()), times


@dataclass
class _Won:
    """One piece of evidence that ``owner`` holds ``token``: when sent, heard, and its deadline."""

    call: _Call
    token: int
    sent_ns: int
    answered_ns: int
    deadline_ns: int

    @property
    def late(self) -> bool:
        return self.answered_ns >= self.deadline_ns


def _evidence(calls: list[_Call]) -> list[_Won]:
    """Every acquire (a queue call's too) answered with a token, and every grant heard."""
    tickets = {
        (call.process, call.owner, call.ticket): call for call in calls if call.op == "queue"
    }
    won = []
    for call in calls:
        if not isinstance(call.result, int) or call.answered_ns is None:
            continue
        if call.op in {"acquire", "queue"}:
            deadline_ns = call.sent_ns + (call.ttl_ms - call.lease_age_ms) * _NS_PER_MS
            won.append(_Won(call, call.result, call.sent_ns, call.answered_ns, deadline_ns))
        elif call.op == "grant":
            placed = tickets.get((call.process, call.owner, call.ticket))
            if placed is not None:
                deadline_ns = placed.sent_ns + placed.queue_ms * _NS_PER_MS
                won.append(_Won(call, call.result, placed.sent_ns, call.answered_ns, deadline_ns))
    return won


def _leases(key: str, calls: list[_Call], report: HistoryReport) -> list[Lease]:
    renewals: defaultdict[str, list[_Call]] = defaultdict(list)
    release_sent: dict[str, int] = {}
    for call in calls:
        if call.op == "renew":
            report.renewals += 1
            if call.result is True and call.answered_ns is not None:
                renewals[call.owner].append(call)
        elif call.op in {"release", "leave"}:
            report.releases += call.op == "release"
            release_sent[call.owner] = min(release_sent.get(call.owner, call.sent_ns), call.sent_ns)
    # a grant heard and the queue call that found it again are one lease of one owner
    held: dict[tuple[str, int], list[_Won]] = defaultdict(list)
    for won in _evidence(calls):
        report.acquisitions += 1
        if won.late:
            report.late_acquisitions += 1
        else:
            held[won.call.owner, won.token].append(won)
    leases = []
    for (owner, token), wins in held.items():
        first = min(wins, key=lambda won: won.answered_ns)
        deadline_ns = max(won.deadline_ns for won in wins)
        for renewal in sorted(renewals[owner], key=lambda renewal: renewal.answered_ns or 0):
            # a confirmation after the deadline does not count: the holder has let go by then
            if renewal.answered_ns is not None and renewal.answered_ns < deadline_ns:
                deadline_ns = max(deadline_ns, renewal.sent_ns + renewal.ttl_ms * _NS_PER_MS)
        end_ns = min(deadline_ns, release_sent.get(owner, deadline_ns))
        leases.append(Lease(key, first.call.process, owner, token, first.answered_ns, end_ns))
    return sorted(leases, key=lambda lease: lease.start_ns)


def _check_overlaps(leases: list[Lease], report: HistoryReport, times: _Times) -> None:
    latest: Lease | None = None
    for lease in leases:
        if latest is not None and lease.start_ns < latest.end_ns:
            report.violations.append(
                Violation(
                    "two live leases",
                    f"{lease.key!r}: {_describe(latest)} was live until "
                    f"{times.show(latest.end_ns)}, and {_describe(lease)} began at "
                    f"{times.show(lease.start_ns)}",
                )
            )
        if latest is None or lease.end_ns > latest.end_ns:
            latest = lease


def _check_tokens(key: str, calls: list[_Call], report: HistoryReport, times: _Times) -> None:
    won = _evidence(calls)
    seen: dict[int, _Won] = {}
    for evidence in won:
        other = seen.get(evidence.token)
        if other is not None and other.call.owner != evidence.call.owner:
            report.violations.append(
                Violation(
                    "a token given twice",
                    f"{key!r}: token {evidence.token} went to {other.call.process} (sent "
                    f"{times.show(other.sent_ns)}) and to {evidence.call.process} (sent "
                    f"{times.show(evidence.sent_ns)})",
                )
            )
        seen[evidence.token] = evidence
    # one lease seen twice (a grant, then the queue call that found it) is compared once
    firsts: dict[tuple[str, int], _Won] = {}
    for evidence in sorted(won, key=lambda evidence: evidence.answered_ns):
        firsts.setdefault((evidence.call.owner, evidence.token), evidence)
    grown = [
        _Call(e.call.process, "acquire", key, e.sent_ns, answered_ns=e.answered_ns, result=e.token)
        for e in firsts.values()
    ]
    by_answer = sorted(grown, key=lambda call: call.answered_ns or 0)
    by_send = sorted(grown, key=lambda call: call.sent_ns)
    _check_growth(key, "acquire", by_answer, by_send, report=report, times=times)


def _check_writes(
    key: str, calls: list[_Call], leases: list[Lease], report: HistoryReport, times: _Times
) -> None:
    writes = [call for call in calls if call.op == "write"]
    ends = {lease.fencing_token: lease.end_ns for lease in leases}
    accepted = []
    for write in writes:
        if write.answered_ns is None or write.error is not None:
            report.writes_unknown += 1
        elif write.result is True:
            report.writes_accepted += 1
            accepted.append(write)
        else:
            report.writes_refused += 1
        end_ns = ends.get(write.token or 0)
        if end_ns is None or write.sent_ns >= end_ns:
            report.late_writes += 1
    by_answer = sorted(accepted, key=lambda call: call.answered_ns or 0)
    by_send = sorted(accepted, key=lambda call: call.sent_ns)
    _check_growth(key, "write", by_answer, by_send, report=report, times=times)


def _check_growth(
    key: str,
    op: str,
    by_answer: list[_Call],
    by_send: list[_Call],
    *,
    report: HistoryReport,
    times: _Times,
) -> None:
    """Every call's token exceeds (writes: reaches) the tokens of calls answered before it."""
    highest: _Call | None = None
    answered = iter(by_answer)
    pending = next(answered, None)
    for call in by_send:
        while pending is not None and (pending.answered_ns or 0) < call.sent_ns:
            if highest is None or _token(pending) > _token(highest):
                highest = pending
            pending = next(answered, None)
        if highest is None:
            continue
        stale = _token(call) < _token(highest) if op == "write" else _token(call) <= _token(highest)
        if stale:
            rule = "a stale fenced write accepted" if op == "write" else "tokens went back"
            report.violations.append(
                Violation(
                    rule,
                    f"{key!r}: {op} with token {_token(highest)} by {highest.process} was "
                    f"answered at {times.show(highest.answered_ns)}, then {op} with token "
                    f"{_token(call)} by {call.process} sent at {times.show(call.sent_ns)} was "
                    f"{'accepted' if op == 'write' else 'answered'}",
                )
            )


def _token(call: _Call) -> int:
    value = call.token if call.op == "write" else call.result
    return value if isinstance(value, int) else 0


def _describe(lease: Lease) -> str:
    return f"token {lease.fencing_token} of {lease.process} (owner {lease.owner[:8]})"
