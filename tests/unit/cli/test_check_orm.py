"""`leaselock check --orm`'s resource: the database itself refuses a stale ORM write."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from leaselock._cli._check_orm import OrmResource


def test_the_orm_resource_refuses_a_write_older_than_one_it_accepted_and_keeps_the_newer(
    tmp_path: Path,
):
    path = tmp_path / "resource.db"
    resource = OrmResource()
    resource.prepare(path, "k")
    assert resource.write(path, "k", 2) is True
    assert resource.write(path, "k", 1) is False
    assert resource.write(path, "k", 2) is True
    with sqlite3.connect(path) as connection:
        row = connection.execute("SELECT token, writes FROM fenced_resource").fetchone()
    assert row == (2, 2)
