"""``leaselock check --orm``: the workers' fenced writes go through a fenced SQLAlchemy session.

The resource's table is marked with ``fenced_table()`` and each write is an ORM UPDATE inside
``fenced_sync()``: the check then proves the database's own refusal (the triggers, the fences
table, ``StaleFencingTokenError``) under the nemesis's pauses and kills, and counts any stale
write it accepted. It lives here, not in ``leaselock.testing``, because only the command line
may use both ``testing`` and ``integrations``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.pool import NullPool

from .._errors import StaleFencingTokenError
from ..integrations.sqlalchemy import fenced_sync, fenced_table, unfenced_sync

__all__ = ["OrmResource"]

# a paused worker's late write may wait this long for the file's write lock, as the default
# resource's does
_BUSY_TIMEOUT_S = 30


class _Base(DeclarativeBase):
    pass


class _Row(_Base):
    # the table and columns FencedResource names: the nemesis reads the token from them
    __tablename__ = "fenced_resource"

    key: Mapped[str] = mapped_column(sa.Text(), primary_key=True)
    # stamped by the database with the token of the write that last changed the row
    token: Mapped[int] = mapped_column(sa.BigInteger(), server_default="0")
    writes: Mapped[int] = mapped_column(server_default="0")


fenced_table(_Row, token_column="token")  # noqa: S106 -- a column's name


@dataclass(frozen=True)
class _Holder:
    """A lock as its holder sees it: held, with its token.

    A worker that was paused past its lease still believes it holds the lock; its write must
    reach the database, whose refusal is what the check proves.
    """

    key: str
    fencing_token: int
    held: bool = True


@functools.cache
def _engine(path: Path) -> sa.Engine:
    # no pool: a connection is opened and closed per write, as the default resource's is, so a
    # worker paused between writes holds no connection of the file
    return sa.create_engine(
        f"sqlite:///{path}", poolclass=NullPool, connect_args={"timeout": _BUSY_TIMEOUT_S}
    )


class OrmResource:
    """Fenced writes through SQLAlchemy: ``fenced_table()``, ``fenced_sync()``, its refusals.

    Picklable: the workers are spawned processes, each with an engine of its own.
    """

    def prepare(self, path: Path, key: str) -> None:
        """Create the fenced table (its triggers and the fences table with it) and ``key``'s row."""
        engine = _engine(path)
        _Base.metadata.create_all(engine)
        with Session(engine) as session, unfenced_sync(session):
            session.add(_Row(key=key))
            session.commit()

    def write(self, path: Path, key: str, fencing_token: int) -> bool:
        """Count one write on ``key``'s row in a session fenced with ``fencing_token``.

        Returns:
            ``True`` if the database accepted it, ``False`` if it refused it as stale.
        """
        try:
            with (
                Session(_engine(path)) as session,
                fenced_sync(session, _Holder(key, fencing_token)),
            ):
                session.execute(
                    sa.update(_Row).where(_Row.key == key).values(writes=_Row.writes + 1)
                )
                session.commit()
        except StaleFencingTokenError:
            return False
        return True
