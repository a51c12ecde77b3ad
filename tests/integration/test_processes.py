"""Three OS processes, each with its own Locks on one real store, race one key 500 times."""

from __future__ import annotations

import multiprocessing
import uuid
from pathlib import Path

import pytest

from helpers import unique_key
from process_worker import race

SECTIONS = 500
PROCESSES = 3


def checked_history(record: Path) -> list[int]:
    """Return the tokens in order of entry; fail on any overlap or a token that did not grow."""
    inside: tuple[int, str] | None = None
    tokens: list[int] = []
    for line in record.read_text().splitlines():
        event, token, pid = line.split()
        if event == "enter":
            assert inside is None, f"{pid} entered with token {token} while {inside} was inside"
            inside = (int(token), pid)
            tokens.append(int(token))
        else:
            assert inside == (int(token), pid), f"exit {token} {pid} does not match {inside}"
            inside = None
    assert inside is None
    return tokens


@pytest.mark.parametrize(
    "kind",
    [
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis_cluster", marks=pytest.mark.redis_cluster),
        pytest.param("etcd", marks=pytest.mark.etcd),
    ],
)
def test_three_processes_never_overlap_and_tokens_grow(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
):
    if kind == "sqlite":
        where = str(tmp_path / "locks.db")
    elif kind in ("postgres", "mysql"):
        where = request.getfixturevalue(f"{kind}_url")
    else:
        url = request.getfixturevalue(f"{kind}_url")
        separator = "/" if kind == "etcd" else ":"
        where = f"{url} processes{separator}{uuid.uuid4().hex[:8]}{separator}"
    record = tmp_path / "sections.log"
    key = unique_key("shared")
    shares = [SECTIONS // PROCESSES + (n < SECTIONS % PROCESSES) for n in range(PROCESSES)]
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=race, args=(kind, where, key, share, str(record)))
        for share in shares
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=240)
    assert [process.exitcode for process in processes] == [0] * PROCESSES
    tokens = checked_history(record)
    assert len(tokens) == SECTIONS
    assert tokens == sorted(set(tokens))
    assert len({line.split()[2] for line in record.read_text().splitlines()}) == PROCESSES
