"""How the dashboard writes times: relative for a glance, absolute in UTC for the record."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from leaselock.integrations._dashboard._text import absolute, relative

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "kind", "said"),
    [
        (4.25, "left", "4.2 s left"),
        (12, "left", "12 s left"),
        (-1, "left", "expiring"),
        (90, "ago", "2 min ago"),
        (5400, "ago", "1.5 h ago"),
        (3 * 86400, "ago", "3.0 days ago"),
    ],
)
def test_a_moment_reads_as_a_person_says_it(seconds: float, kind: str, said: str):
    moment = NOW + timedelta(seconds=seconds if kind == "left" else -seconds)
    assert relative(moment, NOW, kind) == said  # type: ignore[arg-type]


def test_the_absolute_time_has_its_date_only_when_not_today():
    assert absolute(NOW - timedelta(minutes=5), NOW) == "11:55:00 UTC"
    assert absolute(NOW - timedelta(days=2), NOW) == "2026-11-29 12:00:00 UTC"
