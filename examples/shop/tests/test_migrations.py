"""Migrations: the shop's tables, fenced, and leaselock's lock table and sequence on PostgreSQL."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, inspect, text, update
from sqlalchemy.exc import DBAPIError

from shop.database import create_engine, not_the_sqlite_lock_stores
from shop.models import Base, Order, Product
from shop.seed import PLACED_ORDER_IDS
from shop_harness import Backend, Cluster


async def test_the_migrated_and_seeded_database_has_orders_products_and_on_postgresql_the_locks(
    database_backend: Backend, plain_cluster: Cluster
) -> None:
    engine = create_engine(database_backend.database_url)
    try:
        async with engine.connect() as connection:
            tables = set(await connection.run_sync(lambda sync: inspect(sync).get_table_names()))
            if database_backend.name == "postgres":
                sequence = await connection.scalar(
                    text("SELECT to_regclass('leaselock_fencing_token_seq') IS NOT NULL")
                )
                assert sequence is True
                # the waiting lines' function, as this leaselock makes it (it draws tokens in
                # the timeline's band): with none, or an earlier one, the shop's waiters retry
                line_function = await connection.scalar(
                    text(
                        "SELECT strpos(prosrc, 'leaselock_0004') > 0 FROM pg_proc WHERE oid = "
                        "to_regprocedure('leaselock_locks_line"
                        "(text, text, text, bigint, bigint, bigint, text)')"
                    )
                )
                assert line_function is True
    finally:
        await engine.dispose()
    assert {"orders", "products", "leaselock_fences", "alembic_version"} <= tables
    assert ("leaselock_locks" in tables) == (database_backend.name == "postgres")
    batches = await plain_cluster.invoice_batches()
    assert sorted(order for order, batch in batches.items() if batch is None) == sorted(
        [*PLACED_ORDER_IDS, "ord_1003"]
    )
    assert len(await plain_cluster.products()) == 3


def differences(connection: Connection) -> list[object]:
    """What ``alembic revision --autogenerate`` would put in a new revision."""
    on_sqlite = connection.dialect.name == "sqlite"
    context = MigrationContext.configure(
        connection,
        opts={"include_object": not_the_sqlite_lock_stores if on_sqlite else None},
    )
    return list(compare_metadata(context, Base.metadata))


async def test_autogenerate_after_the_migrations_proposes_nothing_lock_tables_included(
    database_backend: Backend, plain_cluster: Cluster
) -> None:
    await plain_cluster.start()
    engine = create_engine(database_backend.database_url)
    try:
        async with engine.connect() as connection:
            assert await connection.run_sync(differences) == []
    finally:
        await engine.dispose()


async def test_the_migrated_orders_and_products_refuse_a_write_outside_fenced_and_unfenced(
    database_backend: Backend, plain_cluster: Cluster
) -> None:
    engine = create_engine(database_backend.database_url)
    try:
        for write in (update(Order).values(invoice_batch=None), update(Product).values(in_stock=0)):
            # SQLite: a connection no fenced session has used lacks the triggers' function
            with pytest.raises(DBAPIError, match="leaselock"):
                async with engine.begin() as connection:
                    await connection.execute(write)
    finally:
        await engine.dispose()
    assert {stock for stock, _ in (await plain_cluster.products()).values()} != {0}
