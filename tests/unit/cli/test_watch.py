"""What `leaselock watch` says about two readings of the live locks, and what it refuses."""

from __future__ import annotations

import pytest

from leaselock._cli import main
from leaselock._cli._watch import Readings, changes, describe_all
from leaselock.stores import LockInfo


def live(key: str, holder: str, token: int | None, left_ms: int) -> LockInfo:
    return LockInfo(key, f"{'0' * 32}@{holder}", token, left_ms)


def words(lines: list[str]) -> list[list[str]]:
    """The lines without their time of day."""
    return [line.split()[1:] for line in lines]


def test_each_kind_of_change_between_two_readings_is_one_line_by_key():
    before = {
        "a": live("a", "shop-1", 4, 20_000),
        "b": live("b", "shop-1", 5, 80),
        "c": live("c", "shop-1", 6, 20_000),
    }
    after = {
        "c": live("c", "shop-2", 9, 30_000),
        "d": live("d", "shop-3", None, 30_000),
    }
    assert words(changes(before, after, between_ms=250)) == [
        ["released", "a", "by", "shop-1", "(token", "4)"],
        ["expired", "b", "by", "shop-1", "(token", "5)"],
        ["handover", "c", "shop-1", "->", "shop-2", "(token", "9)"],
        ["acquired", "d", "by", "shop-3"],
    ]
    assert changes(after, after, between_ms=250) == []


def test_a_lock_gone_within_a_late_reading_is_told_as_expired_not_released():
    before = {"a": live("a", "shop-1", 4, 900)}
    assert words(changes(before, {}, between_ms=250)) == [
        ["released", "a", "by", "shop-1", "(token", "4)"]
    ]
    # the machine was busy: the next reading came a second later, past the lock's expiry
    assert words(changes(before, {}, between_ms=1000)) == [
        ["expired", "a", "by", "shop-1", "(token", "4)"]
    ]


async def test_a_lock_that_expired_inside_a_slow_reading_is_told_as_expired():
    # the store measures time left at the start of the first reading and at the end of the
    # second, which the busy machine stretched to 800 ms after it started
    seconds = [0.0]
    answers = [{"a": live("a", "shop-1", 4, 900)}, {}]

    async def read() -> dict[str, LockInfo]:
        answer = answers.pop(0)
        if not answer:
            seconds[0] += 0.8
        return answer

    readings = Readings(read, lambda: seconds[0])
    assert words(await readings.first()) == [["held", "a", "by", "shop-1", "(token", "4)"]]
    seconds[0] = 0.25
    assert words(await readings.next()) == [["expired", "a", "by", "shop-1", "(token", "4)"]]


async def test_each_reading_is_told_against_the_one_before():
    seconds = [0.0]
    answers = [
        {},
        {"a": live("a", "shop-1", 4, 20_000)},
        {"a": live("a", "shop-1", 4, 19_750)},
        {},
    ]

    async def read() -> dict[str, LockInfo]:
        return answers.pop(0)

    readings = Readings(read, lambda: seconds[0])
    assert await readings.first() == []
    told = []
    for _ in range(3):
        seconds[0] += 0.25
        told.append(words(await readings.next()))
    assert told == [
        [["acquired", "a", "by", "shop-1", "(token", "4)"]],
        [],
        [["released", "a", "by", "shop-1", "(token", "4)"]],
    ]


def test_the_locks_held_when_the_watch_starts_are_listed_first():
    held = {"a": live("a", "shop-1", 4, 20_000)}
    assert words(describe_all(held)) == [["held", "a", "by", "shop-1", "(token", "4)"]]


def test_a_reading_interval_too_short_is_refused_with_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path
):
    assert main(["watch", "--url", f"sqlite:///{tmp_path / 'x.db'}", "--every", "5ms"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("leaselock watch: --every 5ms; pass 20 ms or more")
