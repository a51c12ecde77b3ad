"""SQLAlchemy: leaselock's tables in your metadata, and fenced writes in one statement.

Import this module explicitly; ``import leaselock`` never loads SQLAlchemy (the functions below
import it when called).

- :func:`lock_tables` puts :class:`~leaselock.stores.PostgresLockStore`'s tables and sequence in
  the application's ``MetaData``, so ``alembic revision --autogenerate`` knows them (it proposed
  to drop them before) and a migration of your own creates them.
- :func:`fenced_update` is an UPDATE that a holder paused past its lease cannot slip through.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from .._errors import LocksConfigurationError
from .._fencing import checked_token
from ..stores._protocol import MAX_FENCING_TOKEN

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, MetaData, Table, Update
    from sqlalchemy.orm import QueryableAttribute

__all__ = ["fenced_update", "lock_tables"]

DEFAULT_TABLE = "leaselock_locks"
DEFAULT_SEQUENCE = "leaselock_fencing_token_seq"


def lock_tables(
    metadata: MetaData,
    *,
    table: str = DEFAULT_TABLE,
    sequence: str = DEFAULT_SEQUENCE,
    schema: str | None = None,
) -> Table:
    """Add PostgresLockStore's lock, run records, jobs and line tables and sequence to ``metadata``.

    What it describes is exactly what ``PostgresLockStore.create_schema()`` makes (a test
    compares them), so Alembic's autogenerate sees no difference on a database the store set up,
    and creates both in a new one. Keep ``table``, ``sequence`` and ``schema`` equal to what you
    pass the store (the defaults match), and pass ``create_schema=False`` to the store once your
    migrations create them.

    For ``SQLiteLockStore`` there is nothing to add: it makes its own tables (``<table>``,
    ``<table>_tokens``, ``<table>_runs`` and ``<table>_jobs``) when it opens the file; keep
    them out of autogenerate with an ``include_name`` that skips them.

    The line table's function (``<table>_line(...)``, every step of a waiting line) is no
    table: autogenerate neither sees nor makes it. Create it with the store, the SQL file or the
    documented migrations (``alembic_leaselock_line.py``, then ``alembic_leaselock_tokens.py``);
    without it, or with an earlier one, the store has no waiting lines, and its waiters retry.

    Returns:
        The lock table (the run records table ``<table>_runs``, the jobs table, the line table
        ``<table>_line`` and the sequence are in ``metadata`` too).

    Raises:
        LocksConfigurationError: SQLAlchemy is not installed.

    .. versionadded:: 0.2
    """
    _require_sqlalchemy()
    import sqlalchemy as sa  # noqa: PLC0415 -- SQLAlchemy stays an optional extra
    from sqlalchemy.dialects import postgresql  # noqa: PLC0415 -- the same optional extra

    sa.Sequence(
        sequence,
        metadata=metadata,
        schema=schema,
        data_type=sa.BigInteger(),
        minvalue=1,
        maxvalue=MAX_FENCING_TOKEN,
        cycle=False,
    )
    sa.Table(
        f"{table}_runs",
        metadata,
        sa.Column("job", sa.Text(collation="C"), primary_key=True),
        # "last": the job's last run; "success": its last successful run
        sa.Column("kind", sa.Text(), primary_key=True),
        sa.Column("instance", sa.Text(), nullable=False),
        sa.Column("fencing_token", sa.BigInteger(), nullable=True),
        # milliseconds since the Unix epoch, on the running instance's clock
        sa.Column("started_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("ended_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        # why the run started: a scheduled tick, run_now(), or a re-run after its instance died
        sa.Column("trigger", sa.Text(), nullable=False, server_default="schedule"),
        sa.Column("detected_by", sa.Text(), nullable=True),
        sa.CheckConstraint("kind IN ('last', 'success')", name=f"{table}_runs_kind_check"),
        schema=schema,
    )
    sa.Table(
        f"{table}_jobs",
        metadata,
        # a job key, or a pause target (a key, or a prefix ending in "*")
        sa.Column("name", sa.Text(collation="C"), primary_key=True),
        sa.Column("pause", postgresql.JSONB(), nullable=True),
        sa.Column("open_run", postgresql.JSONB(), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("missed_at_ms", sa.BigInteger(), nullable=True),
        # a trigger noted during a run (overlap="buffer_one"): one more run after it
        sa.Column("buffered", sa.Boolean(), nullable=False, server_default=sa.false()),
        schema=schema,
    )
    sa.Table(
        f"{table}_line",
        metadata,
        # one row per waiter in a key's line, first come (arrived) first served
        sa.Column("key", sa.Text(collation="C"), primary_key=True),
        sa.Column("owner", sa.Text(), primary_key=True),
        sa.Column("arrived", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        # the place's end, on the server's clock
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ticket", sa.BigInteger(), nullable=False),
        # where the waiting process LISTENs for its grant
        sa.Column("channel", sa.Text(), nullable=True),
        schema=schema,
    )
    return sa.Table(
        table,
        metadata,
        # COLLATE "C": keys compare byte for byte, never by a locale's rules
        sa.Column("key", sa.Text(collation="C"), primary_key=True),
        # NULL once released: the row stays, its token is the floor of the key's next token
        sa.Column("owner", sa.Text(), nullable=True),
        sa.Column("fencing_token", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("fencing_token > 0", name=f"{table}_fencing_token_check"),
        schema=schema,
    )


def fenced_update(
    table: Table | type[Any],
    token_column: ColumnElement[Any] | QueryableAttribute[Any],
    token: int,
    *where: ColumnElement[bool],
    **values: object,
) -> Update:
    """Return an UPDATE that writes only rows last written under ``token`` or a lower one.

    ``UPDATE table SET **values, token_column = token WHERE *where AND token_column <= token``.

    A row last written under a greater token is left alone: the statement's ``rowcount`` says
    how many rows the write reached. Equal tokens pass, so one run may write a row twice. Works
    with a ``Table`` and its columns, and with an ORM class and its mapped attributes::

        result = await session.execute(
            fenced_update(Product, Product.stock_fencing_token, lock.fencing_token,
                          Product.id == product_id, in_stock=count)
        )
        if result.rowcount == 0: ...   # a newer holder wrote this row: the write was refused

    Args:
        table: the ``Table`` or ORM class to update.
        token_column: the column that keeps the highest token written to each row.
        token: the writer's ``lock.fencing_token``.
        *where: the rows to write (``Product.id == product_id``).
        **values: the new values.

    Raises:
        LocksConfigurationError: ``token`` is not a fencing token, ``token_column`` is also among
            ``values``, or SQLAlchemy is not installed.

    .. versionadded:: 0.1
    """
    _require_sqlalchemy()
    import sqlalchemy as sa  # noqa: PLC0415 -- SQLAlchemy stays an optional extra

    checked = checked_token(token)
    name = getattr(token_column, "key", None)
    if name in values:
        raise LocksConfigurationError(
            f"{name}= is set by fenced_update from the token; leave it out of the values"
        )
    column: Any = token_column
    return sa.update(table).where(*where, column <= checked).values({**values, column: checked})


def _require_sqlalchemy() -> None:
    if importlib.util.find_spec("sqlalchemy") is None:
        raise LocksConfigurationError(
            "leaselock.integrations.sqlalchemy needs SQLAlchemy: "
            "pip install 'leaselock[sqlalchemy]'"
        )
