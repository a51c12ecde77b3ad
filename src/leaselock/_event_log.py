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
"""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, final

from ._errors import LocksConfigurationError
from ._event_types import Event

__all__ = ["EventLog", "event_record"]


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
    """Appends each event it is given to a JSON Lines file, and the renewals of a quiet holder."""

    __slots__ = ("_by", "_file", "_quiet", "path")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Check ``path``; :meth:`open` opens it.

        Raises:
            LocksConfigurationError: ``path`` is not a path.
        """
        if not isinstance(path, str | os.PathLike) or not os.fspath(path):
            raise LocksConfigurationError(
                f"event_log={path!r}; pass the path of a JSON Lines file to append events to, "
                'such as "/var/log/myapp/leaselock-events.jsonl"'
            )
        self.path = Path(os.fspath(path))
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
            # line buffered: each event reaches the file whole, even if the process is killed
            self._file = self.path.open("a", encoding="utf-8", buffering=1)
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
            self._append({"type": "renewed", "at": datetime.now(UTC).isoformat(), "by": self._by})
        self._quiet = True

    def _append(self, record: dict[str, object]) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
            self._quiet = False

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None
