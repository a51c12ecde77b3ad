from datetime import timedelta

import pytest

from leaselock import LocksConfigurationError
from leaselock._durations import MAX_TTL_MS, parse_duration, parse_ttl, parse_wait


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        ("1500ms", 1500),
        ("30s", 30_000),
        ("1.5s", 1500),
        ("0.1s", 100),
        ("0.5m", 30_000),
        ("5m", 300_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("1m30s", 90_000),
        ("1h1m1s1ms", 3_661_001),
        (" 30s ", 30_000),
        (timedelta(seconds=2, milliseconds=5), 2005),
        (timedelta(days=40), 40 * 86_400_000),
        (30, 30_000),
        (2, 2000),
        (1.5, 1500),
        (0.25, 250),
        (0.0001, 0),
        (0, 0),
        (0.0, 0),
    ],
)
def test_accepted_forms_become_milliseconds_and_bare_numbers_are_seconds(value, ms):
    assert parse_duration(value) == ms


@pytest.mark.parametrize(
    "value",
    ["", "30", "30 s", "-5s", "5 minutes", "s", "30sec", "1m30", "5S", "PT5M", ".5s", "1,5s"],
)
def test_malformed_strings_are_refused_naming_the_accepted_forms(value):
    with pytest.raises(
        LocksConfigurationError, match=r'"30s", "1.5s".*timedelta.*number of seconds \(30, 1.5\)'
    ):
        parse_duration(value, name="ttl")


@pytest.mark.parametrize("value", [None, [30], b"30s", 1j])
def test_other_types_are_refused_with_their_type_named(value):
    with pytest.raises(LocksConfigurationError, match=type(value).__name__):
        parse_duration(value, name="wait")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinities_are_refused(value):
    with pytest.raises(LocksConfigurationError, match="is not a finite number of seconds"):
        parse_duration(value, name="ttl")


@pytest.mark.parametrize("value", [True, False])
def test_bools_are_refused_although_they_are_ints(value):
    with pytest.raises(LocksConfigurationError, match="is a bool"):
        parse_duration(value, name="ttl")


@pytest.mark.parametrize("value", [-1, -0.5, -0.0001, timedelta(seconds=-1), "-1s"])
def test_negative_durations_are_refused(value):
    expected = "is not a duration" if isinstance(value, str) else "is negative; pass zero or more"
    with pytest.raises(LocksConfigurationError, match=expected):
        parse_wait(value)


@pytest.mark.parametrize("value", [-3, -0.5, timedelta(seconds=-1)])
def test_a_negative_ttl_is_told_to_be_positive_not_zero_or_more(value):
    with pytest.raises(
        LocksConfigurationError, match=r'is negative; pass a positive duration such as "30s"'
    ):
        parse_ttl(value)


def test_fractions_of_a_millisecond_are_refused_in_strings_and_timedeltas_not_rounded():
    with pytest.raises(LocksConfigurationError, match="fraction of a millisecond"):
        parse_duration(timedelta(microseconds=1500))
    with pytest.raises(LocksConfigurationError, match="fraction of a millisecond"):
        parse_duration("1.5ms")
    assert parse_duration(0.0015) == 2, "a number of seconds is rounded to whole milliseconds"


def test_a_zero_ttl_is_refused_with_an_example():
    with pytest.raises(LocksConfigurationError, match=r'ttl=0 is zero.*"30s"'):
        parse_ttl(0)
    with pytest.raises(LocksConfigurationError, match="is zero"):
        parse_ttl("0s")


def test_a_ttl_too_short_to_renew_is_refused():
    with pytest.raises(LocksConfigurationError, match="shorter than 3 ms"):
        parse_ttl("2ms")
    assert parse_ttl("3ms") == 3


def test_a_ttl_beyond_a_year_is_refused_and_a_year_is_accepted():
    assert parse_ttl(timedelta(milliseconds=MAX_TTL_MS)) == MAX_TTL_MS
    assert parse_ttl("365d") == MAX_TTL_MS
    assert parse_ttl("30d") == 30 * 86_400_000
    with pytest.raises(LocksConfigurationError, match="longer than one year"):
        parse_ttl(timedelta(milliseconds=MAX_TTL_MS + 1))
    with pytest.raises(LocksConfigurationError, match="longer than one year"):
        parse_ttl("400d")


def test_zero_wait_means_try_once_and_is_accepted():
    assert parse_wait(0) == 0
    assert parse_wait("0ms") == 0
