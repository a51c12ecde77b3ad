"""Run the shop: ``python -m shop serve --port 3001``, ``python -m shop migrate``, ``... seed``.

Run from ``examples/shop`` (or with it on ``PYTHONPATH``); settings come from the environment
(see ``shop.settings``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Final

import uvicorn

from .app import create_app
from .database import create_engine, migrate
from .seed import seed
from .settings import DatabaseSettings, Settings, SettingsError, load_settings

LOG_FORMAT: Final = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
EXIT_BAD_SETTINGS: Final = 2


def main(argv: list[str] | None = None) -> int:
    """Run the command in ``argv``; return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m shop", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve one instance of the shop")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    commands.add_parser("migrate", help="bring the database to the latest migration")
    commands.add_parser("seed", help="insert the seed orders and products into an empty shop")
    arguments = parser.parse_args(argv)
    try:
        if arguments.command == "serve":
            return _serve(arguments.host, arguments.port)
        return asyncio.run(_prepare_database(seed_it=arguments.command == "seed"))
    except SettingsError as error:
        print(error, file=sys.stderr)  # noqa: T201 -- the command line's own answer
        return EXIT_BAD_SETTINGS


def _serve(host: str, port: int) -> int:
    settings = load_settings(Settings)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    for name in ("shop", "leaselock"):
        logging.getLogger(name).setLevel(settings.log_level.upper())
    # one line per tick of every job is APScheduler's INFO; leaselock says what matters
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    uvicorn.run(create_app(settings), host=host, port=port, log_config=None)
    return 0


async def _prepare_database(*, seed_it: bool) -> int:
    settings = load_settings(DatabaseSettings)
    engine = create_engine(settings.database_url)
    try:
        if seed_it:
            inserted = await seed(engine)
            print("Seeded the shop" if inserted else "The shop has data already; left as is")  # noqa: T201
        else:
            await migrate(engine)
            print("The database is at the latest migration")  # noqa: T201
    finally:
        await engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
