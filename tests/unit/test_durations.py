from datetime import timedelta

import pytest

from leaselock import LocksConfigurationError
from leaselock._durations import MAX_TTL_MS, parse_duration, parse_ttl, parse_wait


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        ("1500ms", 1500),
        ("30s", 30_000),
        ("5m", 300_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("1m30s", 90_000),
        ("1h1m1s1ms", 3_661_001),
        (" 30s ", 30_000),
        (timedelta(seconds=2, milliseconds=5), 2005),
        (timedelta(days=40), 40 * 86_400_000),
        (250, 250),
        (0, 0),
    ],
)
def test_accepted_forms_become_milliseconds(value, ms):
    assert parse_duration(value) == ms


@pytest.mark.parametrize(
    "value",
    ["", "30", "30 s", "1.5s", "-5s", "5 minutes", "s", "30sec", "1m30", "5S", "PT5M"],
)
def test_malformed_strings_are_refused_naming_the_accepted_forms(value):
    with pytest.raises(LocksConfigurationError, match=r'"30s".*timedelta.*int of milliseconds'):
        parse_duration(value, name="ttl")


@pytest.mark.parametrize("value", [1.5, float("nan"), float("inf"), None, [30], b"30s"])
def test_other_types_are_refused_with_their_type_named(value):
    with pytest.raises(LocksConfigurationError, match=type(value).__name__):
        parse_duration(value, name="wait")


@pytest.mark.parametrize("value", [True, False])
def test_bools_are_refused_although_they_are_ints(value):
    with pytest.raises(LocksConfigurationError, match="is a bool"):
        parse_duration(value, name="ttl")


def test_negative_durations_are_refused():
    with pytest.raises(LocksConfigurationError, match=r"wait=-1 is negative; pass zero or more"):
        parse_wait(-1)
    with pytest.raises(LocksConfigurationError, match="negative"):
        parse_wait(timedelta(seconds=-1))


def test_sub_millisecond_timedeltas_are_refused_rather_than_rounded():
    with pytest.raises(LocksConfigurationError, match="fraction of a millisecond"):
        parse_duration(timedelta(microseconds=1500))


def test_a_zero_ttl_is_refused_with_an_example():
    with pytest.raises(LocksConfigurationError, match=r'ttl=0 is zero.*"30s"'):
        parse_ttl(0)
    with pytest.raises(LocksConfigurationError, match="is zero"):
        parse_ttl("0s")


def test_a_ttl_too_short_to_renew_is_refused():
    with pytest.raises(LocksConfigurationError, match="shorter than 3 ms"):
        parse_ttl(2)
    assert parse_ttl(3) == 3


def test_a_ttl_beyond_a_year_is_refused_and_a_year_is_accepted():
    assert parse_ttl(MAX_TTL_MS) == MAX_TTL_MS
    assert parse_ttl("30d") == 30 * 86_400_000
    with pytest.raises(LocksConfigurationError, match="longer than one year"):
        parse_ttl(MAX_TTL_MS + 1)
    with pytest.raises(LocksConfigurationError, match="longer than one year"):
        parse_ttl("400d")


def test_zero_wait_means_try_once_and_is_accepted():
    assert parse_wait(0) == 0
    assert parse_wait("0ms") == 0
