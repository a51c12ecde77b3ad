"""What a running torture check has shown so far, read from its history file as it grows.

The nemesis reads it to report progress, and to tell whether the run has the evidence a verdict
needs yet (:mod:`._check_verdict` judges the finished history; this is its running estimate).
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from pathlib import Path
from typing import final

__all__ = ["Tally"]

_ACQUIRING = frozenset({"acquire", "queue", "grant"})


@final
class Tally:
    """Counts acquisitions (in all and by process) and fenced writes, reading only what is new."""

    def __init__(self, path: Path) -> None:
        """Read the history at ``path`` (appended by the workers) from its start."""
        self.path = path
        self._offset = 0
        self._rest = b""
        self._sent: dict[str, tuple[str, str]] = {}
        self.acquisitions = 0
        self.by_process: Counter[str] = Counter()
        self.last_win_ns: dict[str, int] = {}
        self.writes_accepted = 0
        self.writes_refused = 0

    def read(self) -> None:
        """Count what the workers appended since the last read."""
        with contextlib.suppress(FileNotFoundError), self.path.open("rb") as history:
            history.seek(self._offset)
            chunk = history.read()
        self._offset += len(chunk)
        *lines, self._rest = (self._rest + chunk).split(b"\n")
        for line in lines:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self._count(json.loads(line))

    def won_since(self, at_ns: int, *, other_than: str) -> bool:
        """Whether a process but ``other_than`` took the key after ``at_ns``."""
        return any(
            process != other_than and won_ns > at_ns for process, won_ns in self.last_win_ns.items()
        )

    def _count(self, entry: dict[str, object]) -> None:
        call = str(entry["call"]) if "call" in entry else ""
        if entry["phase"] == "sent":
            self._sent[call] = (str(entry["op"]), str(entry["process"]))
            return
        if entry["phase"] != "answered":
            return
        op, process = self._sent.pop(call, ("", ""))
        result = entry.get("result")
        if op == "write":
            self.writes_accepted += result is True
            self.writes_refused += result is False
        # renewals and releases answer true or false; an acquisition, its token
        elif op in _ACQUIRING and isinstance(result, int) and not isinstance(result, bool):
            self.acquisitions += 1
            self.by_process[process] += 1
            at = entry["at"]
            if isinstance(at, int):
                self.last_win_ns[process] = at
