"""EventLog: every event of one ``Locks`` as a line of JSON, for ``leaselock timeline``.

One object per line, in the order the events happened here: ``type``, ``at`` (ISO 8601, UTC),
``key``, ``fencing_token``, ``owner``, ``instance`` (the instance that held the lock), the
event's own fields, ``message`` (its log line), and ``by``: the instance that wrote the line.
``instance`` and ``by`` differ where an instance reports on another's lock (a ``job-missed``
names the dead owner whose tick it found unrun), so ``by`` is what says who was alive when.

One more line, not an event, keeps a quiet holder's last sign of life in the log: after a
renewal the store confirmed, if this instance wrote nothing since the previous one,
``{"type": "renewed", "at": ..., "by": ...}``. An instance that writes events anyway (a job's
runs, its skips) pays nothing; one that only holds leases (a leader, a long section) writes one
short line per renewal interval (``ttl / 3``), whatever the number of leases it holds. From it
the timeline draws a lease whose holder died without a recorded end as held up to that renewal,
then as expired up to ``ttl`` after it.

Several instances may append to one file (each line is one ``write`` of a line-buffered file),
or each to its own; the timeline merges them by ``at``.

The file is bounded: past ``max_bytes`` (50 MB by default) it is renamed ``<path>.1`` (the
older ones shifted to ``.2``... up to ``backups``, the oldest dropped) and a new one begun, as
:class:`logging.handlers.RotatingFileHandler` does. A job that runs every second writes about
1 KB a run, 86 MB a day: rotation keeps that to ``max_bytes * (backups + 1)``. Rotation assumes
one writer per file: give each instance its own file, or pass ``max_bytes=None`` to several
writers of one file and rotate it with the system's tools.
"""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import datetime
from pathlib import Path
from typing import IO, Final, final

from ._clock import utc_now
from ._errors import LocksConfigurationError
from ._event_types import Event

__all__ = ["DEFAULT_BACKUPS", "DEFAULT_MAX_BYTES", "EventLog", "event_record"]

DEFAULT_MAX_BYTES: Final = 50 * 1024 * 1024
DEFAULT_BACKUPS: Final = 2


def event_record(event: Event) -> dict[str, object]:
    """Return ``event`` as the JSON object of its line (without ``by``, the writer's label)."""
    record: dict[str, object] = {}
    for field in dataclasses.fields(event):
        value = getattr(event, field.name)
        record[field.name] = value.isoformat() if isinstance(value, datetime) else value
    record["instance"] = event.instance
    record["message"] = event.message()
    return record


@final
class EventLog:
    """Appends each event it is given to a JSON Lines file, and the renewals of a quiet holder.

    Pass one as ``Locks(event_log=EventLog(path, max_bytes=..., backups=...))`` to choose its
    bound; a plain path is an ``EventLog`` with the defaults (50 MB, 2 backups).

    .. versionadded:: 0.2
    """

    __slots__ = ("_by", "_file", "_quiet", "_size", "backups", "max_bytes", "path")

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
        backups: int = DEFAULT_BACKUPS,
    ) -> None:
        """Check the arguments; :meth:`open` opens the file.

        Args:
            path: the JSON Lines file to append to.
            max_bytes: past this size the file is rotated; ``None``: it grows unbounded.
            backups: how many rotated files to keep (``<path>.1`` is the newest).

        Raises:
            LocksConfigurationError: ``path`` is not a path, ``max_bytes`` is not a positive
                int or ``None``, ``backups`` is not an int of 1 or more.
        """
        if not isinstance(path, str | os.PathLike) or not os.fspath(path):
            raise LocksConfigurationError(
                f"event_log={path!r}; pass the path of a JSON Lines file to append events to, "
                'such as "/var/log/myapp/leaselock-events.jsonl"'
            )
        if max_bytes is not None and (
            isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1
        ):
            raise LocksConfigurationError(
                f"max_bytes={max_bytes!r}; pass the file's largest size in bytes, such as "
                f"{DEFAULT_MAX_BYTES} (50 MB), or None to let it grow unbounded"
            )
        if isinstance(backups, bool) or not isinstance(backups, int) or backups < 1:
            raise LocksConfigurationError(
                f"backups={backups!r}; pass how many rotated files to keep, 1 or more"
            )
        self.path = Path(os.fspath(path))
        self.max_bytes = max_bytes
        self.backups = backups
        self._size = 0
        self._file: IO[str] | None = None
        self._by = ""
        # nothing written since the last confirmed renewal: the next one is worth a line
        self._quiet = False

    def open(self, instance: str) -> None:
        """Open the file for appending (created if missing); ``instance`` writes every line.

        Raises:
            LocksConfigurationError: the file cannot be opened for appending.
        """
        try:
            self._open()
        except OSError as error:
            raise LocksConfigurationError(
                f"event_log={str(self.path)!r} cannot be opened for appending ({error}); check "
                "that its directory exists and this process may write there"
            ) from None
        self._by = instance
        self._quiet = False

    def write(self, event: Event) -> None:
        """Append ``event`` as one line."""
        record = event_record(event)
        record["by"] = self._by
        self._append(record)

    def renewed(self) -> None:
        """Record that the store confirmed a renewal, if nothing was written since the last one.

        So a holder's last line is never more than a renewal interval older than its last
        confirmed renewal, at the cost of one short line per interval only while it is quiet.
        """
        if self._quiet:
            # wall-clock time, as in every event: it is for people, and for the timeline
            self._append({"type": "renewed", "at": utc_now().isoformat(), "by": self._by})
        self._quiet = True

    def _open(self) -> None:
        # line buffered: each event reaches the file whole, even if the process is killed
        self._file = self.path.open("a", encoding="utf-8", buffering=1)
        self._size = self._file.tell()

    def _append(self, record: dict[str, object]) -> None:
        if self._file is None:
            return
        line = json.dumps(record, ensure_ascii=False) + "\n"
        self._file.write(line)
        self._size += len(line.encode())
        self._quiet = False
        if self.max_bytes is not None and self._size >= self.max_bytes:
            self._rotate()

    def _rotate(self) -> None:
        """Rename the file ``<path>.1`` (shifting the older ones) and begin a new one."""
        assert self._file is not None  # noqa: S101 -- only called while open
        self._file.close()
        for number in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{number}")
            if older.exists():
                older.replace(self.path.with_name(f"{self.path.name}.{number + 1}"))
        self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        self._open()

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None
