"""A MariaDB primary with a replica on loopback, for failover tests, without pytest.

:func:`mysql_replicas` starts two throwaway ``mariadbd`` servers from the machine's binary on
free TCP ports of 127.0.0.1, in a temporary directory removed at exit: a primary with a binary
log, and a replica of it (GTID replication, ``CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos``).
Always throwaway, whatever ``LEASELOCK_TEST_MYSQL_URL`` says: a shared server must never be
crashed. With ``semi_synchronous=True`` the primary's commits wait until the replica has them
(``rpl_semi_sync_master_wait_point=AFTER_SYNC``, with a timeout of a day, so it never falls back
to asynchronous replication during a test).

The faults: :meth:`~MySQLReplicas.stop_replication` (the replica receives nothing more, cleanly:
MariaDB's I/O thread stops), :meth:`~MySQLReplicas.crash_primary` (``SIGKILL``) and
:meth:`~MySQLReplicas.promote` (the replica applies what it received, stops replicating and
takes writes), as a failover tool does. MariaDB only: MySQL's semi-synchronous replication is a
plugin of other names. The statements go through the ``mariadb`` command-line client.

Anything that makes the servers impossible to get raises :class:`servers.ServerUnavailable`.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from mysql_server import _INIT_SQL, _SERVERS, _find, _initialise, _mysql_ready
from servers import ServerUnavailable, _scratch_dir, _Server, _start, _stop

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["MySQLReplicas", "mysql_replicas"]

_HOST = "127.0.0.1"
_DATABASE = "test"
_CLIENTS = ("mariadb", "mysql")
_CLIENT_TIMEOUT = 60.0
_WAIT_TIMEOUT = 30.0
_POLL_INTERVAL = 0.02
# a day: semi-synchronous replication falls back to asynchronous after this long without an ack
_SEMI_SYNC_TIMEOUT_MS = 86_400_000


class MySQLReplicas:
    """A primary and its replica; the replica becomes the primary at :meth:`promote`."""

    def __init__(self, client: Path, primary: _Server, replica: _Server) -> None:
        self._client = client
        self._primary: _Server | None = primary
        self._replica = replica

    @property
    def url(self) -> str:
        """The primary (the promoted replica after :meth:`promote`)."""
        port = self._replica.port if self._primary is None else self._primary.port
        return f"mysql://root@{_HOST}:{port}/{_DATABASE}"

    def query(self, sql: str, *, replica: bool = False, names: bool = False) -> list[list[str]]:
        """Run ``sql`` on the primary (or the replica); its rows, as text (names first)."""
        server = self._replica if replica or self._primary is None else self._primary
        try:
            result = subprocess.run(  # noqa: S603 - fixed argv of a client we located
                [
                    str(self._client),
                    "--no-defaults",
                    f"--host={_HOST}",
                    f"--port={server.port}",
                    "--user=root",
                    "--batch",
                    "--column-names" if names else "--skip-column-names",
                    f"--execute={sql}",
                ],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=_CLIENT_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise ServerUnavailable(f"could not run {self._client}: {error}") from error
        if result.returncode != 0:
            raise ServerUnavailable(f"{sql!r} failed on port {server.port}: {result.stderr}")
        return [line.split("\t") for line in result.stdout.splitlines()]

    def replica_status(self) -> dict[str, str]:
        """The replica's ``SHOW SLAVE STATUS``, by field."""
        rows = self.query("SHOW SLAVE STATUS", replica=True, names=True)
        return dict(zip(*rows, strict=True)) if len(rows) == 2 else {}

    def wait_until_applied(self) -> None:
        """Return once the replica has applied everything the primary wrote until now."""
        ((position,),) = self.query("SELECT @@gtid_binlog_pos")
        self.query(f"SELECT MASTER_GTID_WAIT('{position}', {_WAIT_TIMEOUT})", replica=True)

    def stop_replication(self) -> None:
        """The replica receives nothing the primary writes from now on."""
        self.query("STOP SLAVE IO_THREAD", replica=True)

    def crash_primary(self) -> None:
        """Kill the primary, as a machine that dies would."""
        if self._primary is not None:
            _stop(self._primary.process, signal.SIGKILL)
            self._primary = None

    def promote(self) -> None:
        """Make the replica the primary: it applies what it received, then takes writes."""
        self._wait(self._applied_all_received, "the replica to apply what it received")
        self.query("STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF", replica=True)

    def _applied_all_received(self) -> bool:
        status = self.replica_status()
        ((applied,),) = self.query("SELECT @@gtid_slave_pos", replica=True)
        return status.get("Gtid_IO_Pos", "") == applied

    def _wait(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.perf_counter() + _WAIT_TIMEOUT
        while not done():
            if time.perf_counter() > deadline:
                raise ServerUnavailable(f"waited {_WAIT_TIMEOUT:.0f} s for {what}")
            time.sleep(_POLL_INTERVAL)  # noqa: TID251 -- waiting for real servers


@contextlib.contextmanager
def mysql_replicas(*, semi_synchronous: bool = False) -> Iterator[MySQLReplicas]:
    """Yield a throwaway MariaDB primary and its replica, replicating.

    Raises:
        ServerUnavailable: no ``mariadbd`` (MySQL's is not supported here), no client, or a
            server would not start or replicate.
    """
    binary = _find(_SERVERS)
    client = _find(_CLIENTS)
    if binary is None or client is None:
        raise ServerUnavailable(
            "mariadbd and its client are not both installed (apt-get install mariadb-server)"
        )
    if "mariadb" not in _version(binary).lower():
        raise ServerUnavailable(f"{binary} is not MariaDB: the replicas need MariaDB")
    with _scratch_dir("leaselock-mysql-replicas-", None) as workdir:
        init_file = workdir / "init.sql"
        init_file.write_text(_INIT_SQL)
        primary_dir = workdir / "primary"
        _initialise(binary, primary_dir, workdir)
        # the same system tables on both: the replica starts where the primary started
        shutil.copytree(primary_dir, workdir / "replica")
        servers: list[_Server] = []
        try:
            for server_id, name in ((1, "primary"), (2, "replica")):
                servers.append(_start(name, _argv(binary, workdir, name, server_id, init_file),
                                      workdir, None, _mysql_ready))  # fmt: skip
            replicas = MySQLReplicas(client, servers[0], servers[1])
            replicas.query(
                f"CHANGE MASTER TO MASTER_HOST='{_HOST}', MASTER_PORT={servers[0].port}, "
                "MASTER_USER='root', MASTER_USE_GTID=slave_pos; START SLAVE",
                replica=True,
            )
            replicas._wait(
                lambda: replicas.replica_status().get("Slave_IO_Running") == "Yes",
                "the replica to connect to the primary",
            )
            if semi_synchronous:
                replicas.query(
                    "SET GLOBAL rpl_semi_sync_master_timeout = "
                    f"{_SEMI_SYNC_TIMEOUT_MS}; SET GLOBAL rpl_semi_sync_master_enabled = ON"
                )
                replicas._wait(
                    lambda: (
                        replicas.query("SHOW STATUS LIKE 'Rpl_semi_sync_master_status'")
                        == [["Rpl_semi_sync_master_status", "ON"]]
                    ),
                    "semi-synchronous replication to be on",
                )
            replicas.wait_until_applied()
            yield replicas
        finally:
            for server in servers:
                _stop(server.process, signal.SIGTERM)


def _argv(
    binary: Path, workdir: Path, name: str, server_id: int, init_file: Path
) -> Callable[[int], list[str]]:
    def argv(port: int) -> list[str]:
        return [
            str(binary),
            "--no-defaults",
            f"--datadir={workdir / name}",
            f"--socket={workdir / name}.sock",
            f"--pid-file={workdir / name}.pid",
            f"--tmpdir={workdir}",
            f"--bind-address={_HOST}",
            f"--port={port}",
            f"--init-file={init_file}",
            "--user=root",
            "--skip-name-resolve",
            f"--server-id={server_id}",
            f"--log-bin={workdir / name}-bin",
            "--binlog-format=ROW",
            "--log-slave-updates=ON",
            # what a crash keeps is what production keeps; the OS itself never crashes here
            "--innodb-flush-log-at-trx-commit=1",
            "--sync-binlog=1",
            "--innodb-buffer-pool-size=64M",
            "--rpl-semi-sync-slave-enabled=ON",
            "--rpl-semi-sync-master-wait-point=AFTER_SYNC",
        ]

    return argv


def _version(binary: Path) -> str:
    result = subprocess.run(  # noqa: S603 - fixed argv of a binary we located
        [str(binary), "--no-defaults", "--version"],
        capture_output=True,
        text=True,
        timeout=_CLIENT_TIMEOUT,
        check=False,
    )
    return result.stdout
