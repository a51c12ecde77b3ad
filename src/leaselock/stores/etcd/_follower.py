"""EtcdReleaseFollower: an etcd watch of each followed key's deletions, opened while it is followed.

A lock's key is deleted when it is released, broken, or when its lease expires; each deletion
wakes the followers of that key, and only them: a process watches the keys it waits on, so
what it receives does not grow with the size of the fleet.

A watch outlives the member it runs on: when its stream breaks (the member died, or lost its
leader and ended the stream), it is opened again on the next member from the revision after
the last one it heard, so a deletion made meanwhile is still heard. Where etcd has compacted
that revision away, the waiters are woken once, since a deletion may have been missed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Final, final

from ..._errors import LockStoreError
from .._common._followed_keys import FollowedKeys
from ._gateway import EtcdGateway, as_int

__all__ = ["EtcdReleaseFollower"]

_log = logging.getLogger("leaselock.stores.etcd")

# pause between attempts to get a broken watch back; waiters poll meanwhile
REWATCH_PAUSE_S: Final = 1.0


@final
class EtcdReleaseFollower:
    """Watches, one stream per followed key, the deletions of the followed keys' etcd keys.

    Args:
        gateway: the store's gateway; each watch is one streaming request of its client.
        key_prefix: what the store puts before a lock's key to make its etcd key.
        on_release: called on this loop with the key of each deletion heard.
        store: how to name the store in log lines.
        timeout_s: how long entering ``following(key)`` waits for etcd to confirm the watch.
    """

    __slots__ = (
        "_gateway",
        "_keys",
        "_on_release",
        "_prefix",
        "_store",
        "_timeout_s",
        "_watches",
    )

    def __init__(
        self,
        gateway: EtcdGateway,
        key_prefix: str,
        on_release: Callable[[str], None],
        store: str,
        timeout_s: float,
    ) -> None:
        """Follow nothing, and open nothing, yet."""
        self._timeout_s = timeout_s
        self._gateway = gateway
        self._prefix = key_prefix
        self._on_release = on_release
        self._store = store
        self._watches: dict[str, asyncio.Task[None]] = {}
        self._keys = FollowedKeys(self._subscribe, self._unsubscribe)

    def following(self, key: str) -> AbstractAsyncContextManager[None]:
        """Hear ``key``'s releases while entered (see :class:`ReleaseFollower`)."""
        return self._keys.following(key)

    async def aclose(self) -> None:
        """Close every watch."""
        await self._keys.aclose()
        watches = list(self._watches.values())
        self._watches.clear()
        for watch in watches:
            watch.cancel()
        if watches:
            await asyncio.wait(watches)

    async def _subscribe(self, key: str) -> None:
        """Open ``key``'s watch; return once etcd confirmed it, or once it failed (logged)."""
        established = asyncio.get_running_loop().create_future()
        watch = asyncio.get_running_loop().create_task(
            self._watch(key, established), name=f"leaselock etcd watch {self._store}"
        )
        self._watches[key] = watch
        try:
            async with asyncio.timeout(self._timeout_s):
                await established
        except (LockStoreError, TimeoutError) as error:
            _log.warning(
                "%s could not watch %r (%s): waiters on that key in this process wake up to "
                "1 s after its release, instead of at once",
                self._store,
                key,
                str(error) or f"no confirmation within {self._timeout_s:g} s",
            )

    async def _unsubscribe(self, key: str) -> None:
        watch = self._watches.pop(key, None)
        if watch is not None:
            watch.cancel()
            await asyncio.wait([watch])

    async def _watch(self, key: str, established: asyncio.Future[None]) -> None:
        """Hear ``key``'s deletions until cancelled; after a broken stream, watch again."""
        failures = 0
        position = _Position()

        def created() -> None:
            nonlocal failures
            if failures:
                _log.info("%s watches %r again", self._store, key)
            failures = 0
            if not established.done():
                established.set_result(None)

        while True:
            try:
                await self._stream(key, created, position)
            except LockStoreError as error:
                if not established.done():
                    # following() returns, and warns; the watch goes on trying meanwhile
                    established.set_exception(error)
                failures += 1
                if failures == 1:
                    _log.info(
                        "%s lost its watch of %r (%s); watching again", self._store, key, error
                    )
            if failures > 1:
                # the cluster is away: do not spin; waiters poll meanwhile
                await asyncio.sleep(REWATCH_PAUSE_S)  # noqa: TID251 -- reconnect pacing

    async def _stream(self, key: str, created: Callable[[], None], position: _Position) -> None:
        async with self._gateway.watch(self._prefix + key, position.next_revision) as messages:
            async for message in messages:
                if message.get("created"):
                    if position.next_revision is None:
                        # a watch from now starts after the revision its creation answers
                        position.next_revision = (
                            as_int(message.get("header", {}).get("revision")) + 1
                        )
                    created()
                if message.get("canceled"):
                    if as_int(message.get("compact_revision")) > 0:
                        # what happened since the last revision heard is gone: wake the
                        # waiters, in case it was a deletion, and watch from now on
                        position.next_revision = None
                        self._heard(key)
                    raise LockStoreError(
                        f"etcd cancelled the watch: {message.get('cancel_reason', 'no reason')}"
                    )
                for event in message.get("events", ()):
                    position.heard(as_int(event.get("kv", {}).get("mod_revision")))
                    if event.get("type") == "DELETE":
                        self._heard(key)
        raise LockStoreError("etcd closed the watch stream")

    def _heard(self, key: str) -> None:
        try:
            self._on_release(key)
        except Exception:  # noqa: BLE001 -- one bad callback must not stop the watch
            _log.exception("A release callback of %s failed", self._store)


@final
class _Position:
    """Where a watch resumes after its stream broke: the first revision not heard yet."""

    __slots__ = ("next_revision",)

    def __init__(self) -> None:
        self.next_revision: int | None = None

    def heard(self, revision: int) -> None:
        if self.next_revision is None or revision >= self.next_revision:
            self.next_revision = revision + 1
