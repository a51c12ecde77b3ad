"""A real MySQL or MariaDB server for the test suite, without pytest.

``mysql_server()`` yields a URL. When ``LEASELOCK_TEST_MYSQL_URL`` is set, that URL is yielded
unchanged and nothing is started. Otherwise a throwaway server is started from the machine's own
binary (``mariadbd``, else ``mysqld``) on a free TCP port of 127.0.0.1, with its data directory,
socket and pid file in a temporary directory that is removed at exit, so it never meets a server
the machine runs. Anything that makes a server impossible to get raises
:class:`servers.ServerUnavailable`, whose message says why.

Under root the server runs as root (``--user=root``): MySQL refuses root unless told so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from servers import ServerUnavailable, _scratch_dir, _Server, _start, _stop

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["MYSQL_URL_ENV", "mysql_server"]

MYSQL_URL_ENV = "LEASELOCK_TEST_MYSQL_URL"

_HOST = "127.0.0.1"
_DATABASE = "test"
_INSTALL_TIMEOUT = 120.0
_LOG_TAIL_CHARS = 2000
_SEARCH_PATH = os.pathsep.join(
    (os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin")
)
_SERVERS = ("mariadbd", "mysqld")
_MARIADB_INSTALLERS = ("mariadb-install-db", "mysql_install_db")

# Runs once at start-up, before the server listens: a root that logs in over TCP without a
# password (name resolution is off, so the host is 127.0.0.1), and the test database.
_INIT_SQL = f"""\
CREATE USER IF NOT EXISTS 'root'@'{_HOST}';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'{_HOST}' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS `{_DATABASE}`;
"""


@contextlib.contextmanager
def mysql_server() -> Iterator[str]:
    """Yield a ``mysql://root@127.0.0.1:PORT/test`` URL of a live server.

    The throwaway server keeps its data in a temporary directory, without binary log or a
    flush at every commit (nothing here must survive a crash of the machine).

    Raises:
        ServerUnavailable: ``LEASELOCK_TEST_MYSQL_URL`` is unset and no local server binary
            could be initialised and started.
    """
    url = os.environ.get(MYSQL_URL_ENV)
    if url:
        yield url
        return

    server_binary = _find(_SERVERS)
    if server_binary is None:
        raise ServerUnavailable(
            f"{MYSQL_URL_ENV} is not set and neither mariadbd nor mysqld is installed "
            "(apt-get install mariadb-server) to start a throwaway server"
        )
    with _scratch_dir("leaselock-mysql-", None) as workdir:
        datadir = workdir / "data"
        init_file = workdir / "init.sql"
        init_file.write_text(_INIT_SQL)
        _initialise(server_binary, datadir, workdir)

        def argv(port: int) -> list[str]:
            return [
                str(server_binary),
                "--no-defaults",  # nothing from the machine's my.cnf: its socket, its port
                f"--datadir={datadir}",
                f"--socket={workdir / 'mysqld.sock'}",
                f"--pid-file={workdir / 'mysqld.pid'}",
                f"--tmpdir={workdir}",
                f"--bind-address={_HOST}",
                f"--port={port}",
                f"--init-file={init_file}",
                "--user=root",
                "--skip-name-resolve",
                "--skip-log-bin",
                "--innodb-flush-log-at-trx-commit=0",
                "--innodb-buffer-pool-size=64M",
                "--max-connections=400",
            ]

        server = _start("mysqld", argv, workdir, None, _mysql_ready)
        try:
            yield f"mysql://root@{_HOST}:{server.port}/{_DATABASE}"
        finally:
            _stop(server.process, signal.SIGTERM)  # a clean shutdown


def _find(names: tuple[str, ...]) -> Path | None:
    for name in names:
        found = shutil.which(name, path=_SEARCH_PATH)
        if found is not None:
            return Path(found)
    return None


def _initialise(server_binary: Path, datadir: Path, workdir: Path) -> None:
    """Create the system tables in ``datadir``: MariaDB's installer, or MySQL's --initialize."""
    version = _run([str(server_binary), "--no-defaults", "--version"], workdir)
    if "mariadb" in version.lower():
        installer = _find(_MARIADB_INSTALLERS)
        if installer is None:
            raise ServerUnavailable(
                f"{server_binary} is MariaDB but mariadb-install-db is missing to create its "
                f"data directory; install it or set {MYSQL_URL_ENV}"
            )
        _run(
            [
                str(installer),
                "--no-defaults",
                f"--datadir={datadir}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            workdir,
        )
    else:
        _run(
            [
                str(server_binary),
                "--no-defaults",
                "--initialize-insecure",
                f"--datadir={datadir}",
                "--user=root",
            ],
            workdir,
        )


def _run(argv: list[str], workdir: Path) -> str:
    try:
        result = subprocess.run(  # noqa: S603 - fixed argv of a binary we located
            argv,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_INSTALL_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise ServerUnavailable(f"could not run {argv[0]}: {error}") from error
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-_LOG_TAIL_CHARS:]
        raise ServerUnavailable(f"{argv[0]} exited with {result.returncode}:\n{output}")
    return result.stdout


def _mysql_ready(server: _Server) -> bool:
    """Tell whether the server sends its handshake on its port (protocol 10), so it listens."""
    try:
        with socket.create_connection((_HOST, server.port), timeout=1.0) as connection:
            header = connection.recv(5)
    except OSError:
        return False
    # 3 bytes of length, 1 of sequence, then the handshake's protocol version
    return len(header) == 5 and header[4] == 10
