"""``leaselock serve``: the operator's dashboard of a store, served on this machine.

It binds 127.0.0.1 unless told otherwise: the dashboard shows every lock's key and holder, and
with a token it acts on them. The token comes from a file (``--token-file``) or the environment
(``LEASELOCK_DASHBOARD_TOKEN``), never from the command line, where every user of the machine
could read it in the process list. Without one the dashboard is read-only, and the store is
opened read-only where it can be. It needs an ASGI server: ``pip install 'leaselock[dashboard]'``
(uvicorn).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
from pathlib import Path
from typing import Any, Final

from .._errors import LocksConfigurationError
from ..integrations.dashboard import Dashboard, dashboard
from ._arguments import add_url_argument
from ._operate import add_redis_prefix_argument, out, refuse_a_missing_sqlite_file

__all__ = ["add_serve_command"]

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8787
TOKEN_VARIABLE: Final = "LEASELOCK_DASHBOARD_TOKEN"  # noqa: S105 -- its name, not a token
LOOPBACK: Final = frozenset({"127.0.0.1", "::1", "localhost"})
STREAMS_GRACE_S: Final = 1
BACKLOG: Final = 128


def add_serve_command(commands: Any) -> None:  # noqa: ANN401 -- argparse's subparsers action is untyped
    """Add ``serve`` to the command's subcommands."""
    serve = commands.add_parser(
        "serve",
        help="serve the operator's dashboard of a store: live locks, jobs and a timeline",
        description=(
            "Serve the dashboard of the store at --url on http://HOST:PORT/ until Ctrl-C: live "
            "locks, jobs and a timeline of the last minutes. With a token (--token-file, or "
            f"${TOKEN_VARIABLE}) operators sign in to break locks and pause, resume jobs; "
            "without one it is read-only. It reads the store at most once a second per open "
            "page."
        ),
    )
    add_url_argument(serve)
    add_redis_prefix_argument(serve)
    serve.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"the address to listen on (default {DEFAULT_HOST}: this machine only)",
    )
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: any free one"
    )
    serve.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help=f"a file holding the token operators sign in with (default: ${TOKEN_VARIABLE})",
    )
    serve.add_argument(
        "--window", default="5m", help="how far back the timeline reaches (default 5m)"
    )
    serve.set_defaults(run=_run_serve)


def _run_serve(arguments: argparse.Namespace) -> int:
    refuse_a_missing_sqlite_file(arguments.url)
    token = _token(arguments.token_file)
    app = dashboard(
        arguments.url, token=token, redis_prefix=arguments.redis_prefix, window=arguments.window
    )
    listening = _listen(arguments.host, arguments.port)
    host, port = listening.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    mode = "operators sign in with the token" if token else "read-only: no token"
    out(f"Serving the leaselock dashboard at http://{shown}:{port}/ ({mode}; Ctrl-C to stop)")
    if host not in LOOPBACK:
        out(
            f"Listening on {host}, beyond this machine: "
            + (
                "put it behind TLS, or the token and the session travel in clear text."
                if token
                else "anyone who reaches it sees every lock and job."
            ),
            error=True,
        )
    # the audit trail: every action, and every refused sign-in
    logging.getLogger("leaselock").setLevel(logging.WARNING)
    # Ctrl-C: the server shuts down gracefully (the store closed), then re-raises it
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve(app, listening))
    finally:
        listening.close()
    out("Stopped serving.")
    return 0


def _token(path: Path | None) -> str | None:
    if path is None:
        return os.environ.get(TOKEN_VARIABLE) or None
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as error:
        raise LocksConfigurationError(
            f"--token-file {str(path)!r} cannot be read ({error.strerror}); pass a file "
            "holding the token, e.g. made with `openssl rand -hex 32 > token`"
        ) from None
    if not token:
        raise LocksConfigurationError(
            f"--token-file {str(path)!r} is empty; write the token into it "
            "(`openssl rand -hex 32 > token`), or leave --token-file out for a read-only dashboard"
        )
    return token


def _listen(host: str, port: int) -> socket.socket:
    """Listen on ``host:port`` here, so that a port taken is one line, not a server's traceback."""
    listening: socket.socket | None = None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, protocol, _, address = infos[0]
        listening = socket.socket(family, kind, protocol)
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(address)
        # listening from now: a browser opening the URL printed next waits in the backlog for
        # the server to start, rather than being refused
        listening.listen(BACKLOG)
    except OSError as error:
        if listening is not None:
            listening.close()
        raise LocksConfigurationError(
            f"cannot listen on {host}:{port} ({error.strerror or error}); pass another --port "
            "(0: any free one) or --host"
        ) from None
    return listening


async def _serve(app: Dashboard, listening: socket.socket) -> None:
    try:
        import uvicorn  # noqa: PLC0415 -- the optional ASGI server, loaded by this command only
    except ImportError:
        raise LocksConfigurationError(
            "leaselock serve needs an ASGI server: pip install 'leaselock[dashboard]' (uvicorn); "
            "or mount leaselock.integrations.dashboard in your own ASGI application"
        ) from None
    # an open page's stream never ends by itself: a stop waits this long for them, then ends them
    config = uvicorn.Config(
        app,
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=STREAMS_GRACE_S,
    )
    await uvicorn.Server(config).serve(sockets=[listening])
