"""Unit tests run on the manual clock and never wait for real: each gets 20 s, not 120."""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT_TIMEOUT_S = 20
HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every unit test a short timeout (a hang here is a bug, not a slow server)."""
    for item in items:
        if item.path.is_relative_to(HERE) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_S))
