"""Helpers shared by tests (never import from test_*.py)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Generic, Protocol, Self, TypeVar

from leaselock import Clock, Locks
from leaselock.stores import (
    Acquired,
    AcquireResult,
    InMemoryLockStore,
    LockStore,
    SupportsLifecycle,
)

TESTS = Path(__file__).resolve().parent
T = TypeVar("T")


def unique_key(name: str) -> str:
    """Return ``name`` with a unique suffix, so runs can share a server."""
    return f"{name}:{uuid.uuid4().hex[:12]}"


async def wait_for_real(ms: int) -> None:
    """Let real time pass: only for stores whose clock is the server's and cannot be moved."""
    await asyncio.sleep(ms / 1000)  # noqa: TID251 -- the server's clock cannot be advanced


async def until_real(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool], within_s: float = 5.0
) -> None:
    """Poll ``check`` until it is true, for at most ``within_s`` of real time; fail if never.

    For what a real server does in the background (a subscription, a queue), which no clock of
    the test can move.
    """
    try:
        async with asyncio.timeout(within_s):
            while True:
                outcome = check()
                if inspect.isawaitable(outcome):
                    outcome = await outcome
                if outcome:
                    return
                await asyncio.sleep(0.01)  # noqa: TID251 -- a bounded poll of a real server
    except TimeoutError:
        raise AssertionError(f"not true within {within_s} s: {check}") from None


async def yield_once() -> None:
    """Let the loop run one pass, on purpose: each ready task takes ONE step (a race to set up).

    To let everything settle, use ``leaselock.testing.wait_all_tasks_blocked()`` instead.
    """
    await asyncio.sleep(0)  # noqa: TID251 -- a zero sleep yields to the loop; no time passes


async def back_to_back(
    tick: Callable[[], Awaitable[T]], returned: asyncio.Event, ticks: int
) -> list[T]:
    """Fire ``ticks`` ticks as a scheduler with no interval does; return what each returned.

    Each comes as soon as the one before it returned; every fifth sooner still (a scheduler
    with two workers): as soon as the run before it set ``returned`` (its body returned, its
    end still on its way to the store), or that tick was skipped.
    """
    results: list[T] = []
    finishing: list[asyncio.Future[T]] = []
    for count in range(1, ticks + 1):
        if count % 5:
            results.append(await tick())
            continue
        returned.clear()
        ticking = asyncio.ensure_future(tick())
        body_returned = asyncio.ensure_future(returned.wait())
        await asyncio.wait({ticking, body_returned}, return_when=asyncio.FIRST_COMPLETED)
        body_returned.cancel()
        finishing.append(ticking)
    results += await asyncio.gather(*finishing)
    return results


class TokensAsText:
    """Wraps a store and breaks the contract as a careless driver would: tokens come back as str."""

    def __init__(self, inner: LockStore) -> None:
        self.inner = inner

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        result = await self.inner.acquire(key, owner, ttl_ms)
        if isinstance(result, Acquired):
            return Acquired(str(result.fencing_token))  # type: ignore[arg-type]
        return result

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        return await self.inner.renew(key, owner, ttl_ms)

    async def release(self, key: str, owner: str) -> bool:
        return await self.inner.release(key, owner)

    async def open(self) -> None:
        if isinstance(self.inner, SupportsLifecycle):
            await self.inner.open()

    async def aclose(self) -> None:
        if isinstance(self.inner, SupportsLifecycle):
            await self.inner.aclose()


class LocksOnlyStore:
    """Wraps a store and offers only the three contract methods: no optional capability."""

    def __init__(self, inner: LockStore) -> None:
        self.inner = inner

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        return await self.inner.acquire(key, owner, ttl_ms)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        return await self.inner.renew(key, owner, ttl_ms)

    async def release(self, key: str, owner: str) -> bool:
        return await self.inner.release(key, owner)


class FollowedOnceOpen:
    """A follower whose following of any key is in place only once :attr:`gate` is set."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    @contextlib.asynccontextmanager
    async def following(self, key: str) -> AsyncIterator[None]:
        await self.gate.wait()
        yield


class SlowlyToldStore:
    """The in-memory store, as if it told of other processes' releases once :attr:`gate` opens.

    A release straight on this store (not through a ``Locks``) stands for another process's:
    nothing in this process hears it, so only the following's own wake-up can find the key free.
    """

    def __init__(self, clock: Clock) -> None:
        self.inner = InMemoryLockStore(clock=clock)
        self.follower = FollowedOnceOpen()

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        return await self.inner.acquire(key, owner, ttl_ms)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        return await self.inner.renew(key, owner, ttl_ms)

    async def release(self, key: str, owner: str) -> bool:
        return await self.inner.release(key, owner)

    @property
    def gate(self) -> asyncio.Event:
        """Set it to put the following in place."""
        return self.follower.gate

    @contextlib.asynccontextmanager
    async def follow_releases(
        self,
        on_release: Callable[[str], None],
    ) -> AsyncIterator[FollowedOnceOpen]:
        yield self.follower


class Partition:
    """A TCP proxy in front of a real server; ``cut()`` holds every byte, both ways, until
    ``heal()``, as a network partition does (new connections hang too)."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        # connections accepted during a cut wait in their handler; at the end they are closed
        self._handlers: set[asyncio.Task[object]] = set()
        # both ends of every connection, aborted at the end and waited for until closed
        self._ends: set[asyncio.StreamWriter] = set()
        self._closing = False

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._closing = True
        self.heal()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        assert self._server is not None
        self._server.close()
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        # aborted, not closed: a close waits to send what a stalled peer never reads, and the
        # socket of a transport left closing warns, unclosed, in whichever test collects it
        for end in self._ends:
            end.transport.abort()
        await asyncio.gather(*(end.wait_closed() for end in self._ends), return_exceptions=True)
        await self._server.wait_closed()

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def cut(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    def reset(self) -> None:
        """Close every connection through the proxy, both ways, as a server restart does."""
        for pipe in list(self._pipes):
            pipe.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        handler.add_done_callback(self._handlers.discard)
        self._ends.add(writer)
        await self._open.wait()
        if self._closing:
            writer.transport.abort()
            return
        try:
            server_in, server_out = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._ends.add(server_out)
        for source, sink in ((reader, server_out), (server_in, writer)):
            pipe = asyncio.get_running_loop().create_task(self._pipe(source, sink))
            self._pipes.add(pipe)
            pipe.add_done_callback(self._pipes.discard)
            # in a callback, not a finally: a pipe cancelled before its first step runs no
            # finally, and its unclosed transport would warn in a later test
            pipe.add_done_callback(functools.partial(_close_when_done, sink))

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while chunk := await source.read(65536):
                await self._open.wait()
                sink.write(chunk)
                await sink.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass


def _close_when_done(sink: asyncio.StreamWriter, _pipe: asyncio.Task[None]) -> None:
    sink.close()


class ReconcilesStock(Protocol):
    """A job object of the stories: one decorated tick."""

    async def reconcile_stock(self) -> str | None: ...


J = TypeVar("J", bound=ReconcilesStock)


class Instances(Generic[J]):
    """Instances of one application in one process, each with its own Locks and its job object.

    ``make_locks(clock)`` gives each instance its Locks (one clock per instance: a paused one is
    a clock never advanced); ``make_job(name)`` its job object, registered with that Locks.
    """

    def __init__(
        self,
        make_locks: Callable[[Clock], Locks],
        clocks: Sequence[Clock],
        make_job: Callable[[str], J],
    ) -> None:
        self.locks = [make_locks(clock) for clock in clocks]
        self.jobs = [
            locks.register(make_job(f"instance-{n}")) for n, locks in enumerate(self.locks)
        ]

    async def __aenter__(self) -> Self:
        for locks in self.locks:
            await locks.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for locks in self.locks:
            await locks.aclose()

    async def tick(self, *which: int) -> list[str | None]:
        """Fire one tick on every instance (or on those chosen), at once."""
        chosen = which or tuple(range(len(self.jobs)))
        return list(await asyncio.gather(*(self.jobs[n].reconcile_stock() for n in chosen)))


def leaselock_command(*arguments: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m leaselock ARGUMENTS`` in a new process, the tests' modules importable."""
    environment = os.environ | {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    }
    return subprocess.run(  # noqa: S603 -- our interpreter, our command
        [sys.executable, "-m", "leaselock", *arguments],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# --- a story of three instances, as the event logs of leaselock timeline -----------------

TIMELINE_T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def timeline_event(
    kind: str, seconds: float, key: str, instance: str, token: int | None, **more: object
) -> dict[str, object]:
    """One line of an event log, ``seconds`` after :data:`TIMELINE_T0`, about ``instance``'s lock.

    Written by ``instance`` itself unless ``by`` names another writer; ``token`` is also the
    owner id's last digits, so each token is a lease of its own.
    """
    return {
        "type": kind,
        "at": (TIMELINE_T0 + timedelta(seconds=seconds)).isoformat(),
        "key": key,
        "fencing_token": token,
        "owner": f"{'0' * 31}{token}@{instance}",
        "instance": instance,
        "by": instance,
        **more,
    }


def timeline_renewed(seconds: float, instance: str) -> dict[str, object]:
    """The line an event log writes for a renewal while its instance is otherwise quiet."""
    at = (TIMELINE_T0 + timedelta(seconds=seconds)).isoformat()
    return {"type": "renewed", "at": at, "by": instance}


# the owner id of shop-3001's lease on the job (fencing token 2), which it held when killed
DEAD_OWNER = f"{'0' * 31}2@shop-3001"


def timeline_story() -> dict[str, list[dict[str, object]]]:
    """Three instances' event logs: a killed owner, a graceful shutdown, a lost run lock.

    shop-3001 is SIGKILLed at 3.5 s, in a run; shop-3002 takes the job's lease at 9 s and reports
    on the dead owner's lease (a tick it never ran, the run it abandoned), naming it.
    """
    return {
        "shop-3001": [
            timeline_event("lock-acquired", 0, "feed", "shop-3001", 1, ttl_ms=6000),
            timeline_event("lock-acquired", 0.5, "job:owner", "shop-3001", 2, ttl_ms=6000),
            timeline_event("lock-acquired", 1, "job", "shop-3001", 3, ttl_ms=6000),
            timeline_event("lock-released", 1.2, "job", "shop-3001", 3),
            timeline_event("lock-acquired", 3, "job", "shop-3001", 4, ttl_ms=6000),
            timeline_renewed(3.4, "shop-3001"),
            # SIGKILL at 3.5 s: nothing more from this instance
        ],
        "shop-3002": [
            timeline_event("lock-acquired", 9, "job:owner", "shop-3002", 5, ttl_ms=6000),
            timeline_event("lock-acquired", 9.5, "job", "shop-3002", 7, ttl_ms=6000),
            # the dead owner's run, and the tick it never ran: shop-3002's lines, naming it
            timeline_event(
                "run-abandoned", 9.55, "job", "shop-3001", 4, owner="@shop-3001", by="shop-3002"
            ),
            timeline_event(
                "job-missed", 9.6, "job", "shop-3001", None, owner=DEAD_OWNER, by="shop-3002"
            ),
            timeline_event("lock-lost", 12, "job", "shop-3002", 7, detected_by="max_run"),
            timeline_event("lock-handed-back", 14, "job:owner", "shop-3002", 5, reason="shutdown"),
        ],
        "shop-3003": [
            timeline_event("lock-acquired", 8, "feed", "shop-3003", 6, ttl_ms=6000),
            timeline_event("lock-released", 20, "feed", "shop-3003", 6),
        ],
    }


def write_timeline_story(directory: Path) -> list[Path]:
    """Write :func:`timeline_story` as one event log per instance; return their paths."""
    paths = []
    for instance, events in timeline_story().items():
        path = directory / f"{instance}.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
        paths.append(path)
    return paths
