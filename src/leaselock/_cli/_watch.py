"""``leaselock watch``: a live feed of who takes, releases and loses the locks under a prefix.

It reads the store's view of the locks every ``--every`` (250 ms) and prints what changed
between two readings: an
acquisition, a release, an expiry, or a handover to another owner, each with its token. A lock
taken and freed between two readings is not seen. Ctrl-C (or SIGTERM) ends it cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Final

from .._durations import parse_wait
from .._errors import LocksConfigurationError
from ..stores._common._capabilities import LockInfo
from ._arguments import add_url_argument
from ._operate import add_redis_prefix_argument, cli_locks, out

__all__ = ["Readings", "add_watch_command", "changes"]

DEFAULT_EVERY: Final = "250ms"
MIN_EVERY_MS: Final = 20
# a lock gone with less than this left at the last reading expired; with more, it was released
EXPIRY_SLACK_MS: Final = 50


def add_watch_command(commands: Any) -> None:  # noqa: ANN401 -- argparse's subparsers action is untyped
    """Add ``watch`` to the command's subcommands."""
    watch = commands.add_parser(
        "watch",
        help="a live feed of acquisitions, releases, expiries and handovers, until Ctrl-C",
        description=(
            "Print each change of the locks under PREFIX (all by default) as it happens: who "
            "took a lock and with which token, who released it, which expired, which went to "
            "another owner. Ends on Ctrl-C."
        ),
    )
    watch.add_argument("prefix", nargs="?", default="", metavar="PREFIX")
    add_url_argument(watch)
    add_redis_prefix_argument(watch)
    watch.add_argument(
        "--every", default=DEFAULT_EVERY, help=f"how often to read (default {DEFAULT_EVERY})"
    )
    watch.set_defaults(run=_run_watch)


def _run_watch(arguments: argparse.Namespace) -> int:
    every_ms = parse_wait(arguments.every, name="--every")
    if every_ms < MIN_EVERY_MS:
        raise LocksConfigurationError(
            f"--every {arguments.every}; pass {MIN_EVERY_MS} ms or more: every reading is a "
            "store round trip"
        )
    asyncio.run(_watch(arguments, every_ms))
    return 0


async def _watch(arguments: argparse.Namespace, every_ms: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signal_number, stop.set)
    prefix: str = arguments.prefix

    async with cli_locks(arguments, read_only=True) as locks:

        async def read() -> dict[str, LockInfo]:
            return {info.key: info for info in await locks.inspect(prefix) if info.live}

        readings = Readings(read, loop.time)
        held = await readings.first()
        under = f"the locks under {prefix!r}" if prefix else "every lock"
        out(f"Watching {under} (Ctrl-C to stop)...", flush=True)
        for line in held:
            out(line, flush=True)
        while not stop.is_set():
            await _sleep_until(stop, every_ms)
            for line in await readings.next():
                out(line, flush=True)
    out("Stopped watching.", flush=True)


class Readings:
    """Successive readings of the live locks, each told as what changed since the one before.

    ``read`` returns the live locks by key; ``now`` is a monotonic clock in seconds.
    """

    def __init__(
        self, read: Callable[[], Awaitable[dict[str, LockInfo]]], now: Callable[[], float]
    ) -> None:
        self._read = read
        self._now = now
        self._seen: dict[str, LockInfo] = {}
        self._seen_from = now()

    async def first(self) -> list[str]:
        """Read the locks live now; the lines that list them."""
        self._seen_from = self._now()
        self._seen = await self._read()
        return describe_all(self._seen)

    async def next(self) -> list[str]:
        """Read the locks again; the lines that tell what changed since the last reading."""
        # the store measures a lock's time left somewhere inside each reading, and a busy
        # machine can stretch a reading far past --every: only the span from the start of the
        # last reading to the end of this one surely covers the time that passed, or a lock
        # that expired would read as released
        now_from = self._now()
        now = await self._read()
        between_ms = round((self._now() - self._seen_from) * 1000)
        lines = changes(self._seen, now, between_ms)
        self._seen, self._seen_from = now, now_from
        return lines


async def _sleep_until(stop: asyncio.Event, every_ms: int) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), every_ms / 1000)


def describe_all(live: dict[str, LockInfo]) -> list[str]:
    """The lines that show the locks live when the watch starts."""
    return [_line("held", info.key, f"by {info.holder}{_token(info)}") for info in live.values()]


def changes(before: dict[str, LockInfo], after: dict[str, LockInfo], between_ms: int) -> list[str]:
    """The lines that tell what changed between two readings of the live locks, by key.

    ``between_ms`` is the time from the start of one reading to the end of the next: at least
    the time that passed between the store's two measures of a lock. A lock gone whose time
    left at the last reading was within that time (plus a margin) expired; one gone sooner was
    released. One held by another owner was handed over: after an
    expiry, or a break, or a release and an acquisition between two readings.
    """
    lines = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old is None and new is not None:
            lines.append(_line("acquired", key, f"by {new.holder}{_token(new)}"))
        elif old is not None and new is None:
            left_ms = old.expires_in_ms
            expired = left_ms is not None and left_ms <= between_ms + EXPIRY_SLACK_MS
            what = "expired" if expired else "released"
            lines.append(_line(what, key, f"by {old.holder}{_token(old)}"))
        elif old is not None and new is not None and old.owner != new.owner:
            lines.append(_line("handover", key, f"{old.holder} -> {new.holder}{_token(new)}"))
    return lines


def _line(what: str, key: str, detail: str) -> str:
    at = datetime.now(UTC).strftime("%H:%M:%S.%f")[:-3]
    return f"{at}  {what:<9} {key}  {detail}"


def _token(info: LockInfo) -> str:
    return "" if info.fencing_token is None else f" (token {info.fencing_token})"
