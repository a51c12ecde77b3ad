"""`store_from_url`: what a caller that only reads gets (no server needed: nothing is opened)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from leaselock import LocksConfigurationError
from leaselock.stores import store_from_url


def test_a_sqlite_reader_from_a_url_opens_the_file_read_only_and_makes_none(tmp_path: Path):
    store = store_from_url(f"sqlite:///{tmp_path / 'locks.db'}", read_only=True)

    with pytest.raises(LocksConfigurationError, match=r"creates none \(read_only=True\)"):
        asyncio.run(store.list_locks())  # type: ignore[attr-defined]

    assert list(tmp_path.iterdir()) == []


def test_a_postgres_reader_from_a_url_neither_creates_tables_nor_prunes():
    pytest.importorskip("asyncpg")
    store = store_from_url("postgresql://reader@127.0.0.1:5432/app", read_only=True)

    assert store._create_schema_at_open is False  # type: ignore[attr-defined]
    assert store._pruner is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("flag", ["create_schema", "read_only"])
def test_a_flag_that_is_not_a_bool_is_refused(flag: str):
    with pytest.raises(LocksConfigurationError, match=f"{flag}='yes'; pass True or False"):
        store_from_url("sqlite:///locks.db", **{flag: "yes"})  # type: ignore[arg-type]
