"""EventLog: every event of one ``Locks`` as a line of JSON, for ``leaselock timeline``.

One object per line, in the order the events happened here: ``type``, ``at`` (ISO 8601, UTC),
``key``, ``fencing_token``, ``owner``, ``instance``, the event's own fields, and ``message``
(its log line). Several instances may append to one file (each line is one ``write`` of a
line-buffered file), or each to its own; the timeline merges them by ``at``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import datetime
from pathlib import Path
from typing import IO, final

from ._errors import LocksConfigurationError
from ._event_types import Event

__all__ = ["EventLog", "event_record"]


def event_record(event: Event) -> dict[str, object]:
    """Return ``event`` as the JSON object of its line."""
    record: dict[str, object] = {}
    for field in dataclasses.fields(event):
        value = getattr(event, field.name)
        record[field.name] = value.isoformat() if isinstance(value, datetime) else value
    record["instance"] = event.instance
    record["message"] = event.message()
    return record


@final
class EventLog:
    """Appends each event it is given to a JSON Lines file."""

    __slots__ = ("_file", "path")

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

    def open(self) -> None:
        """Open the file for appending (created if missing).

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

    def write(self, event: Event) -> None:
        """Append ``event`` as one line."""
        if self._file is not None:
            self._file.write(json.dumps(event_record(event), ensure_ascii=False) + "\n")

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None
