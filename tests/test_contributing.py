"""CONTRIBUTING says what the code does: its capability table, and its one thread bridge."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import leaselock.stores

REPO = Path(__file__).parent.parent
PACKAGE = REPO / "src" / "leaselock"


def capability_rows() -> dict[str, set[str]]:
    """The table of "Adding a store": capability -> its methods."""
    text = (REPO / "CONTRIBUTING.md").read_text()
    rows = re.findall(r"^\s*\| `(Supports\w+)` \| (.+?) \|", text, re.MULTILINE)
    return {name: set(re.findall(r"`(\w+)`", methods)) for name, methods in rows}


def test_the_capability_table_lists_every_protocol_and_its_methods():
    shipped = {
        name: {
            member
            for member, value in vars(getattr(leaselock.stores, name)).items()
            if not member.startswith("_") and inspect.isfunction(value)
        }
        for name in leaselock.stores.__all__
        if name.startswith("Supports")
    }
    assert capability_rows() == shipped


def test_no_module_but_the_thread_bridge_crosses_between_threads_and_loops():
    crossings = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "_threads.py"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"\b(run_coroutine_threadsafe|run_in_executor)\b", line)
    ]
    assert crossings == []
