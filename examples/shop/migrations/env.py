"""Alembic's entry point: run the shop's migrations on its database.

``shop.database.migrate(engine)`` passes its own connection (tests, the demo); the ``alembic``
command line gets one from ``DATABASE_URL``.
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection

from shop.database import create_engine, not_the_sqlite_lock_stores
from shop.models import Base
from shop.settings import DatabaseSettings, load_settings

config = context.config


def run_migrations_on(connection: Connection) -> None:
    """Run the pending migrations on ``connection``, in one transaction."""
    on_sqlite = connection.dialect.name == "sqlite"
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        include_object=not_the_sqlite_lock_stores if on_sqlite else None,
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_migrations_on_database_url() -> None:
    """Run the pending migrations on ``DATABASE_URL``."""
    engine = create_engine(load_settings(DatabaseSettings).database_url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(run_migrations_on)
    finally:
        await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("The shop's migrations run on a live database only; leave out --sql")
shared_connection = config.attributes.get("connection")
if shared_connection is not None:
    run_migrations_on(shared_connection)
else:
    if config.config_file_name is not None:
        # the command line's logging; an application that migrates keeps its own
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    asyncio.run(run_migrations_on_database_url())
