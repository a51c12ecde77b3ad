"""Wake-ups across processes on MySQL/MariaDB: named locks (``GET_LOCK``) as the signal.

MySQL has no LISTEN/NOTIFY; a named lock is the one thing a session can block on until
another session lets go, and the server lets go of a session's named locks when it ends. So:

- The holder's side (:class:`Beacon`): each store keeps one connection of its own, outside the
  pool, on which it holds the named lock of each key this process holds (``GET_LOCK(name, 0)``,
  once the key has been held :data:`BEACON_DELAY_S`), and lets go of it (``RELEASE_LOCK``)
  right after the key's durable release, or when its lease is lost. The beacon's statements
  go in the background, in order, batched: acquire and release never wait for them, and a
  beacon that fails costs wake-ups only, never a lock operation.
- The waiter's side (:class:`MySQLReleaseFollower`): for each key followed, a connection of its
  own reads the key's row and whether its named lock is held; if it is, it waits in
  ``GET_LOCK(name, WAIT_S)``, which returns when the holder's beacon lets go (a release, or
  the holder's connection ended), and lets go at once in the same statement, so the next
  waiter of that name returns too. Where the name is not held (a holder without beacon, or
  not yet), the follower reads the row again after a pause that grows from
  :data:`FIRST_LOOK_PAUSE_S` to :data:`LAST_LOOK_PAUSE_S`: a release between two reads shows
  as a row that was held (or had another token) and is free now. So every release is heard:
  at once where the holder's beacon held its name, else within the pause.

Notifications are hints: a waiter woken tries the key, and the store decides. A name is
``leaselock:`` and 54 hex digits of the SHA-256 of the store's database, table and key
(named locks are one namespace per server, 64 characters at most).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Final, final

from ..._errors import LockStoreError
from ..._forks import process_generation
from .._common._followed_keys import FollowedKeys

if TYPE_CHECKING:
    import asyncmy

    from ._executors import Executor

__all__ = [
    "BEACON_DELAY_S",
    "FIRST_LOOK_PAUSE_S",
    "LAST_LOOK_PAUSE_S",
    "WAIT_S",
    "Beacon",
    "Lines",
    "MySQLReleaseFollower",
    "wakeup_name",
]

_log = logging.getLogger("leaselock.stores.mysql")

# a key held for less than this (from its acquire to the start of its release) never takes its
# name: an uncontended acquire and release cost no beacon statement (a follower of such a key
# hears the release at its next read instead), and no timer stays armed through the release's
# round trip (Beacon.releasing: a loop that waits with a timer armed spends more client CPU)
BEACON_DELAY_S: Final = 0.002
# how long a follower's GET_LOCK waits before it reads the row again: it bounds how long a
# connection that went silent (no RST from a host that vanished) goes unnoticed
WAIT_S: Final = 30
# how long any other statement of a beacon or a follower may take before its connection is
# given up as lost
STATEMENT_TIMEOUT_S: Final = 10.0
# the pauses between a follower's reads of a key whose name nobody holds
FIRST_LOOK_PAUSE_S: Final = 0.005
LAST_LOOK_PAUSE_S: Final = 1.0
# after a beacon's GET_LOCK(name, 0) found the name held (a follower letting go that instant,
# or a process whose lease on the key ended without it noticing yet), when to try again
RETAKE_PAUSE_S: Final = 0.25
# how often the beacon lets go of the names of leases that ended on this process's clock
# without a release or a failed renewal telling it (their holder stopped renewing)
SWEEP_S: Final = 1.0
# how long a beacon holding names may send nothing before it asks SELECT 1: a connection the
# server ended (a restart, a KILL) freed its names, which are taken again once it is noticed
QUIET_S: Final = 5.0
# the pauses between attempts to get a lost connection back
FIRST_RECONNECT_PAUSE_S: Final = 0.1
LAST_RECONNECT_PAUSE_S: Final = 5.0
# names per beacon statement
BATCH: Final = 500

# a follower's reads: is the key's name held; the key's token; is the key held live
LOOK_SQL: Final = """\
SELECT IS_USED_LOCK(%s) IS NOT NULL, t.`fencing_token`,
       t.`owner` IS NOT NULL AND t.`expires_at` > UTC_TIMESTAMP(6)
  FROM (SELECT 1) AS `_leaselock_one` LEFT JOIN {table} AS t ON t.`key` = %s"""
# %s name, %s seconds, %s name -> WOKE: the name's holder let go (the follower let go too);
# TIMED_OUT: still held; KILLED: the wait was cut short (KILL QUERY), or failed
WAIT_SQL: Final = (
    "SELECT CASE GET_LOCK(%s, %s) WHEN 1 THEN RELEASE_LOCK(%s) + 1 WHEN 0 THEN 0 ELSE 3 END"
)
WOKE: Final = 2
KILLED: Final = 3

_NAME_PREFIX: Final = "leaselock:"
_NAME_MAX: Final = 64


def wakeup_name(namespace: str, key: str) -> str:
    """Return the named lock of ``key`` in ``namespace`` (database and table): 64 characters."""
    digest = hashlib.sha256(f"{namespace}\0{key}".encode()).hexdigest()
    return _NAME_PREFIX + digest[: _NAME_MAX - len(_NAME_PREFIX)]


async def _fetch(
    connection: asyncmy.Connection, sql: str, args: Sequence[object], timeout_s: float
) -> Sequence[Any]:
    async with asyncio.timeout(timeout_s), connection.cursor() as cursor:
        await cursor.execute(sql, args)
        row: Sequence[Any] = (await cursor.fetchall())[0]
        return row


@final
class Lines:
    """The connections of a store's wake-ups: its beacon's, and one per key followed.

    Each comes from the store's executor (:meth:`Executor.dial`), and goes back closed. At most
    ``follower_connections`` serve followers at once, and, where the executor lends its own,
    fewer than it lends (the beacon takes one; where it lends none, there is no beacon).

    Args:
        executor: where the connections come from.
        follower_connections: followed keys at most, store-wide.
    """

    __slots__ = ("_executor", "_generation", "_in_use", "beacon", "slots")

    def __init__(self, executor: Executor, follower_connections: int) -> None:
        """Open nothing yet."""
        self._executor = executor
        lendable = executor.lendable
        # a pool too small to lend one (maxsize 1) keeps its connection for the statements
        self.beacon = lendable is None or lendable >= 1
        self.slots = (
            follower_connections
            if lendable is None
            else max(0, min(follower_connections, lendable - 1))
        )
        self._in_use = 0
        self._generation = process_generation()

    def reserve(self) -> bool:
        """Take a follower's slot if one is free."""
        if self._in_use >= self.slots:
            return False
        self._in_use += 1
        return True

    def unreserve(self) -> None:
        """Give a follower's slot back."""
        self._in_use -= 1

    async def open(self) -> asyncmy.Connection:
        """Open a connection for the caller alone."""
        connection = await self._executor.dial()
        if _cancelled():
            # asyncmy connects through asyncio.wait_for, which on Python 3.11 may return a
            # connection made as the caller was cancelled, and drop the cancellation
            self._executor.hang_up(connection)
            raise asyncio.CancelledError
        return connection

    def close(self, connection: asyncmy.Connection) -> None:
        """Close ``connection``: a GET_LOCK waiting on it ends, its named locks are freed."""
        if self._generation != process_generation():
            # a fork's copy of the parent's connection: its socket and its event loop's
            # registrations are the parent's too, so it is left alone
            return
        self._executor.hang_up(connection)


@final
class _Held:
    """A key this process holds: by whom, and until when on the loop's clock."""

    __slots__ = ("owner", "until")

    def __init__(self, owner: str, until: float) -> None:
        self.owner = owner
        self.until = until


@final
class Beacon:
    """Holds, on one connection, the named lock of each key the store's process holds.

    Told of each acquire, renewal and release by the store (plain calls: nothing waits on the
    server), it takes a key's name once the key has been held :data:`BEACON_DELAY_S`, and lets
    go of it after its release, a failed renewal, or the end of its lease on this process's
    clock. Statements go in order, batched, in a task of its own; if the connection is lost,
    it connects again and takes every name held back (waiters elsewhere retry meanwhile).

    Args:
        lines: where its connection comes from.
        namespace: the store's database and table, as :func:`wakeup_name` takes them.
        store: how to name the store in log lines.
    """

    __slots__ = (
        "_closed",
        "_connection",
        "_dropping",
        "_held",
        "_kick",
        "_last_sent",
        "_lines",
        "_loop",
        "_namespace",
        "_next_sweep",
        "_pending",
        "_store",
        "_taken",
        "_task",
        "_timer",
    )

    def __init__(self, lines: Lines, namespace: str, store: str) -> None:
        """Hold nothing, and open nothing, yet."""
        self._lines = lines
        self._namespace = namespace
        self._store = store
        self._loop = asyncio.get_running_loop()
        self._held: dict[str, _Held] = {}
        # keys to take, by when (their acquire plus the delay, or a retry's time)
        self._pending: dict[str, float] = {}
        # keys whose names the connection holds, and of those the ones to let go of
        self._taken: set[str] = set()
        self._dropping: set[str] = set()
        self._connection: asyncmy.Connection | None = None
        self._kick = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._next_sweep = 0.0
        self._last_sent = 0.0
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def took(self, key: str, owner: str, ttl_ms: int) -> None:
        """``owner`` holds ``key`` now, for ``ttl_ms``."""
        now = self._loop.time()
        self._held[key] = _Held(owner, now + ttl_ms / 1000)
        if key in self._dropping:
            # released and taken again before the beacon let go: its name stays held
            self._dropping.discard(key)
            return
        if key in self._taken:
            return
        when = now + BEACON_DELAY_S
        self._pending[key] = when
        timer = self._timer
        if timer is None or timer.when() > when:
            if timer is not None:
                timer.cancel()
            self._timer = self._loop.call_at(when, self._wake)

    def renewed(self, key: str, owner: str, ttl_ms: int) -> None:
        """``owner``'s lease on ``key`` now ends ``ttl_ms`` from now."""
        held = self._held.get(key)
        if held is not None and held.owner == owner:
            held.until = self._loop.time() + ttl_ms / 1000

    def releasing(self, key: str, owner: str) -> None:
        """``owner`` starts releasing ``key``: a take of its name not yet due is dropped now.

        :meth:`gave_up` follows the release whatever it answers, and would drop it then; a name
        taken meanwhile would be let go of at once. A name already taken, or a take already
        due (on its way), is left to :meth:`gave_up`, after the durable release.
        """
        held = self._held.get(key)
        if held is None or held.owner != owner:
            return
        when = self._pending.get(key)
        if when is None or when <= self._loop.time():
            return
        del self._pending[key]
        if not self._pending and not self._taken and self._timer is not None:
            # what would wake the beacon now is nothing: its timer goes (as in gave_up)
            self._timer.cancel()
            self._timer = None

    def gave_up(self, key: str, owner: str | None) -> None:
        """``owner`` (anyone, for ``None``) no longer holds ``key``: let go of its name."""
        held = self._held.get(key)
        if held is None or (owner is not None and held.owner != owner):
            return
        del self._held[key]
        self._pending.pop(key, None)
        if key in self._taken:
            self._dropping.add(key)
            self._kick.set()
            self._start()
        elif not self._pending and not self._taken and self._timer is not None:
            # a short hold: its timer would only wake the loop for nothing (a cancelled
            # timer does not)
            self._timer.cancel()
            self._timer = None

    @property
    def holds_any(self) -> bool:
        """Whether some key is held: what a renewal of many need not tell otherwise."""
        return bool(self._held)

    async def aclose(self) -> None:
        """Stop, and close the connection: the server lets go of every name it held."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task = self._task
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        connection, self._connection = self._connection, None
        if connection is not None:
            self._lines.close(connection)

    def _wake(self) -> None:
        self._timer = None
        now = self._loop.time()
        due = min(self._pending.values(), default=None)
        sweep = self._next_sweep if self._taken else None
        if not self._dropping and (due is None or due > now) and (sweep is None or sweep > now):
            # what made this timer was released meanwhile (a short hold): nothing to send,
            # so no task to wake; only the next take, or sweep, to wait for
            when = min((at for at in (due, sweep) if at is not None), default=None)
            if when is not None:
                self._timer = self._loop.call_at(when, self._wake)
            return
        self._kick.set()
        self._start()

    def _start(self) -> None:
        if self._task is None and not self._closed:
            self._task = self._loop.create_task(self._run(), name=f"leaselock beacon {self._store}")

    async def _run(self) -> None:
        failures = 0
        while True:
            if _cancelled():
                # dropped on the way (see Lines.open): stop, as the cancellation asked
                raise asyncio.CancelledError
            await self._kick.wait()
            self._kick.clear()
            try:
                await self._sync()
            except Exception as error:
                if _cancelled():
                    raise asyncio.CancelledError from error
                failures += 1
                self._lost(error, failures)
                await asyncio.sleep(  # noqa: TID251 -- reconnect pacing
                    min(FIRST_RECONNECT_PAUSE_S * 2 ** (failures - 1), LAST_RECONNECT_PAUSE_S)
                )
                self._kick.set()
                continue
            if failures:
                _log.info(
                    "%s holds the named locks (GET_LOCK) that wake other processes again",
                    self._store,
                )
                failures = 0
            self._arm()

    def _arm(self) -> None:
        """Wake at the next pending take, or at the next sweep of ended leases."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        when = min(self._pending.values(), default=None)
        if self._taken:
            when = self._next_sweep if when is None else min(when, self._next_sweep)
        if when is not None:
            self._timer = self._loop.call_at(when, self._wake)

    async def _sync(self) -> None:
        now = self._loop.time()
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_S
            for key in [key for key, held in self._held.items() if held.until <= now]:
                self.gave_up(key, None)
            if self._connection is not None and self._taken and now - self._last_sent >= QUIET_S:
                await _fetch(self._connection, "SELECT 1", (), STATEMENT_TIMEOUT_S)
                self._last_sent = now
        drops = list(self._dropping)
        takes = [key for key, when in self._pending.items() if when <= now]
        while drops or takes:
            if self._connection is None:
                self._connection = await self._lines.open()
            batch_drops, drops = drops[:BATCH], drops[BATCH:]
            batch_takes, takes = (
                takes[: BATCH - len(batch_drops)],
                takes[BATCH - len(batch_drops) :],
            )
            await self._send(self._connection, batch_drops, batch_takes)

    async def _send(
        self, connection: asyncmy.Connection, drops: list[str], takes: list[str]
    ) -> None:
        names = [wakeup_name(self._namespace, key) for key in (*drops, *takes)]
        calls = ["RELEASE_LOCK(%s)"] * len(drops) + ["GET_LOCK(%s, 0)"] * len(takes)
        answers = await _fetch(connection, f"SELECT {', '.join(calls)}", names, STATEMENT_TIMEOUT_S)
        self._last_sent = self._loop.time()
        for key in drops:
            self._taken.discard(key)
            self._dropping.discard(key)
            if key in self._held and key not in self._pending:
                # taken again while its name was being let go of: take the name again
                self._pending[key] = self._loop.time()
                self._kick.set()
        retry_at = self._loop.time() + RETAKE_PAUSE_S
        for key, answer in zip(takes, answers[len(drops) :], strict=True):
            if key not in self._pending:
                # released while the statement was out: let go of it next
                if answer == 1:
                    self._taken.add(key)
                    self._dropping.add(key)
                    self._kick.set()
                continue
            if answer == 1:
                del self._pending[key]
                self._taken.add(key)
            else:
                # held elsewhere this instant: a follower letting go, or a process whose
                # lease ended unnoticed; until it is taken, waiters read the row instead
                self._pending[key] = retry_at

    def _lost(self, error: Exception, failures: int) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._lines.close(connection)
        # the server let go of every name the session held: take each held key's back
        self._taken.clear()
        self._dropping.clear()
        now = self._loop.time()
        self._pending = dict.fromkeys(self._held, now)
        log = _log.warning if failures == 1 else _log.debug
        log(
            "%s lost its wake-up connection (%s: %s); waiters in other processes find the "
            "keys it releases by reading them (within %g s) until it is back",
            self._store,
            type(error).__name__,
            error,
            LAST_LOOK_PAUSE_S,
        )


@final
class MySQLReleaseFollower:
    """Hears the releases of the keys followed: one connection per key, up to the store's cap.

    Keys past the cap are not followed (logged once): their waiters find a release by
    retrying; the first of them takes the slot a key unfollowed frees.

    Args:
        lines: where the connections come from, and the cap.
        namespace: the store's database and table, as :func:`wakeup_name` takes them.
        table: the lock table, quoted.
        on_release: called on this loop with the key of each release heard.
        store: how to name the store in log lines.
    """

    __slots__ = (
        "_keys",
        "_lines",
        "_look_sql",
        "_namespace",
        "_on_release",
        "_past_cap",
        "_store",
        "_tasks",
        "_warned",
    )

    def __init__(
        self,
        lines: Lines,
        namespace: str,
        table: str,
        on_release: Callable[[str], None],
        store: str,
    ) -> None:
        """Follow nothing, and open nothing, yet."""
        self._lines = lines
        self._namespace = namespace
        self._look_sql = LOOK_SQL.format(table=table)
        self._on_release = on_release
        self._store = store
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # keys followed past the cap, in the order they came: the next to get a slot first
        self._past_cap: dict[str, None] = {}
        self._warned = False
        self._keys = FollowedKeys(self._subscribe, self._unsubscribe)

    def following(self, key: str) -> AbstractAsyncContextManager[None]:
        """Hear ``key``'s releases while entered (see :class:`ReleaseFollower`)."""
        return self._keys.following(key)

    async def aclose(self) -> None:
        """Stop following: close every connection of this follower."""
        await self._keys.aclose()
        self._past_cap.clear()
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def _subscribe(self, key: str) -> None:
        """Start following ``key``; return once its first read is in, or it failed (logged)."""
        if not self._lines.reserve():
            self._past_cap[key] = None
            if not self._warned:
                self._warned = True
                _log.warning(
                    "%s follows %d keys at most (follower_connections; over an application's "
                    "asyncmy pool, fewer than half its maxsize): waiters on %r and any further "
                    "key find a release by retrying (up to 1 s), until a followed key frees a "
                    "connection; raise follower_connections (or the pool's maxsize) to follow "
                    "more",
                    self._store,
                    self._lines.slots,
                    key,
                )
            return
        established = asyncio.get_running_loop().create_future()
        # a subscribe cancelled (the store closing) leaves the outcome to nobody
        established.add_done_callback(_retrieve)
        self._tasks[key] = asyncio.get_running_loop().create_task(
            self._follow(key, established, hint_if_free=False),
            name=f"leaselock follower {self._store}",
        )
        try:
            await established
        except LockStoreError as error:
            _log.warning(
                "%s could not follow %r (%s): waiters on that key in this process find its "
                "release by retrying (up to 1 s), until it can",
                self._store,
                key,
                error,
            )

    async def _unsubscribe(self, key: str) -> None:
        if key in self._past_cap:
            del self._past_cap[key]
            return
        task = self._tasks.pop(key, None)
        if task is None:
            return
        task.cancel()
        await asyncio.wait([task])
        # the slot it frees goes to the key past the cap that has waited longest
        if self._past_cap:
            promoted = next(iter(self._past_cap))
            del self._past_cap[promoted]
            if self._lines.reserve():
                # its waiters may have missed a release: hear the key free at its first read
                self._tasks[promoted] = asyncio.get_running_loop().create_task(
                    self._follow(
                        promoted, asyncio.get_running_loop().create_future(), hint_if_free=True
                    ),
                    name=f"leaselock follower {self._store}",
                )

    async def _follow(
        self, key: str, established: asyncio.Future[None], *, hint_if_free: bool
    ) -> None:
        """Hear ``key``'s releases until cancelled, on a connection of its own."""
        following = _Following(
            self._lines, self._look_sql, key, wakeup_name(self._namespace, key), self._heard
        )
        try:
            await following.run(established, hint_if_free=hint_if_free, store=self._store)
        finally:
            following.close()
            self._lines.unreserve()
            if not established.done():
                established.cancel()

    def _heard(self, key: str) -> None:
        try:
            self._on_release(key)
        except Exception:  # noqa: BLE001 -- one bad callback must not stop the following
            _log.exception("A release callback of %s failed", self._store)


@final
class _Following:
    """One key followed: its connection, and the key as last read."""

    __slots__ = ("_connection", "_heard", "_key", "_lines", "_look_sql", "_name", "_seen")

    def __init__(
        self,
        lines: Lines,
        look_sql: str,
        key: str,
        name: str,
        heard: Callable[[str], None],
    ) -> None:
        self._lines = lines
        self._look_sql = look_sql
        self._key = key
        self._name = name
        self._heard = heard
        self._connection: asyncmy.Connection | None = None
        # the key's token and whether it was held live, at the last read; None before it
        self._seen: tuple[object, bool] | None = None

    async def run(
        self, established: asyncio.Future[None], *, hint_if_free: bool, store: str
    ) -> None:
        """Read and wait until cancelled; ``established`` once the first read is in."""
        pause_s = FIRST_LOOK_PAUSE_S
        failures = 0
        while True:
            if _cancelled():
                # dropped on the way (see Lines.open): stop, as the cancellation asked
                raise asyncio.CancelledError
            try:
                used, changed = await self._look(hint_if_free=hint_if_free)
                if not established.done():
                    established.set_result(None)
                if failures:
                    _log.info("%s follows %r again", store, self._key)
                    failures = 0
                if used:
                    await self._wait()
                    pause_s = FIRST_LOOK_PAUSE_S
                    continue
                # nobody holds the name: read again, sooner after a change
                pause_s = FIRST_LOOK_PAUSE_S if changed else min(pause_s * 2, LAST_LOOK_PAUSE_S)
                await asyncio.sleep(pause_s)  # noqa: TID251 -- reads of a key nobody signals
            except Exception as error:
                if _cancelled():
                    raise asyncio.CancelledError from error
                self.close()
                failures += 1
                if not established.done():
                    established.set_exception(LockStoreError(f"{type(error).__name__}: {error}"))
                elif failures == 1:
                    _log.warning(
                        "%s lost its connection following %r (%s: %s); following again "
                        "(waiters retry meanwhile)",
                        store,
                        self._key,
                        type(error).__name__,
                        error,
                    )
                await asyncio.sleep(  # noqa: TID251 -- reconnect pacing
                    min(FIRST_RECONNECT_PAUSE_S * 2 ** (failures - 1), LAST_RECONNECT_PAUSE_S)
                )

    async def _look(self, *, hint_if_free: bool) -> tuple[bool, bool]:
        """Read the key; hear a release since the last read. Is its name held; did it change?"""
        if self._connection is None:
            self._connection = await self._lines.open()
        used, token, live = await _fetch(
            self._connection, self._look_sql, (self._name, self._key), STATEMENT_TIMEOUT_S
        )
        now, seen = (token, bool(live)), self._seen
        if seen is None:
            if hint_if_free and not now[1]:
                self._heard(self._key)
        elif not now[1] and (seen[1] or seen[0] != token):
            # released since the last read (and maybe taken and released again)
            self._heard(self._key)
        self._seen = now
        return bool(used), now != seen

    async def _wait(self) -> None:
        """Wait in GET_LOCK until the name's holder lets go, or WAIT_S passed."""
        assert self._connection is not None  # noqa: S101 -- _look opened it
        (answer,) = await _fetch(
            self._connection,
            WAIT_SQL,
            (self._name, WAIT_S, self._name),
            WAIT_S + STATEMENT_TIMEOUT_S,
        )
        # a name let go after the last read found the key free already is the tail of that
        # release, heard then (its holder lets go after the release): not heard again; a later
        # release changes the key's token, which the next read hears
        if answer == WOKE and self._seen is not None and self._seen[1]:
            self._heard(self._key)
            # that release is heard: the next read must not hear it again
            self._seen = (self._seen[0], False)
        elif answer == KILLED:
            # cut short (KILL QUERY): a release meanwhile shows at the next read
            await asyncio.sleep(FIRST_LOOK_PAUSE_S)  # noqa: TID251 -- no spinning

    def close(self) -> None:
        """Close the connection, if open: a GET_LOCK waiting on it ends at once."""
        connection, self._connection = self._connection, None
        if connection is not None:
            self._lines.close(connection)


def _retrieve(outcome: asyncio.Future[None]) -> None:
    if not outcome.cancelled():
        outcome.exception()


def _cancelled() -> bool:
    """Whether this task was asked to stop, whatever the awaits since made of it.

    A cancellation may come out as another error (a driver closing its connection on it), or
    be dropped (``asyncio.wait_for`` on Python 3.11, inside asyncmy's connect): a task that
    ran on would never let its closing end.
    """
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
