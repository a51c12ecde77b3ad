"""A real etcd server for the test suite, without pytest.

:func:`etcd_server` yields a client URL. When ``LEASELOCK_TEST_ETCD_URL`` is set, that URL is
yielded unchanged and nothing is started. Otherwise a throwaway single-member etcd is started
from the local ``etcd`` binary (Debian: ``apt-get install etcd-server``) on free TCP ports of
127.0.0.1 (client and peer), with its data in a temporary directory removed at exit.

Anything that makes a server impossible to get raises :class:`servers.ServerUnavailable`,
whose message says why, so a fixture can turn it into a skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from servers import ServerUnavailable

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["ETCD_URL_ENV", "etcd_server"]

ETCD_URL_ENV = "LEASELOCK_TEST_ETCD_URL"

_HOST = "127.0.0.1"
_NAME = "leaselock-test"
_START_TIMEOUT = 30.0
_STOP_TIMEOUT = 10.0
_POLL_INTERVAL = 0.05
_PORT_ATTEMPTS = 3
_LOG_TAIL_CHARS = 2000


@contextlib.contextmanager
def etcd_server() -> Iterator[str]:
    """Yield the client URL (``http://127.0.0.1:PORT``) of a live etcd server.

    Raises:
        ServerUnavailable: ``LEASELOCK_TEST_ETCD_URL`` is unset and no throwaway server could
            be started (no ``etcd`` binary, or it failed to start).
    """
    url = os.environ.get(ETCD_URL_ENV)
    if url:
        yield url
        return
    executable = shutil.which("etcd")
    if executable is None:
        raise ServerUnavailable(
            f"{ETCD_URL_ENV} is not set and there is no etcd binary on PATH to start a "
            "throwaway server; install one (apt-get install etcd-server) or set the variable"
        )
    workdir = Path(tempfile.mkdtemp(prefix="leaselock-etcd-"))
    try:
        process, url = _start(executable, workdir)
        try:
            yield url
        finally:
            _stop(process)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _start(executable: str, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start etcd on free ports; retry on others if it dies at start (a port taken meanwhile)."""
    log_path = workdir / "etcd.log"
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        client, peer = _free_port(), _free_port()
        url, peer_url = f"http://{_HOST}:{client}", f"http://{_HOST}:{peer}"
        shutil.rmtree(workdir / "data", ignore_errors=True)
        argv = [
            executable,
            "--name", _NAME,
            "--data-dir", str(workdir / "data"),
            "--listen-client-urls", url,
            "--advertise-client-urls", url,
            "--listen-peer-urls", peer_url,
            "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"{_NAME}={peer_url}",
            "--initial-cluster-state", "new",
            "--logger", "zap",
            "--log-outputs", "stderr",
            "--log-level", "warn",
        ]  # fmt: skip
        try:
            with log_path.open("ab") as log:
                process = subprocess.Popen(  # noqa: S603 - fixed argv of a binary we located
                    argv,
                    cwd=workdir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as error:
            raise ServerUnavailable(f"could not start {executable}: {error}") from error
        deadline = time.perf_counter() + _START_TIMEOUT
        while True:
            try:
                code = process.wait(timeout=_POLL_INTERVAL)
            except subprocess.TimeoutExpired:
                if _ready(url):
                    return process, url
                if time.perf_counter() > deadline:
                    _stop(process)
                    raise ServerUnavailable(
                        f"etcd did not answer within {_START_TIMEOUT:.0f}s:\n{_log_tail(log_path)}"
                    ) from None
                continue
            if attempt == _PORT_ATTEMPTS:
                raise ServerUnavailable(
                    f"etcd exited with {code} during start-up:\n{_log_tail(log_path)}"
                )
            break
    raise AssertionError  # pragma: no cover - the loop returns or raises


def _ready(url: str) -> bool:
    """Tell whether the etcd at ``url`` has a leader and serves reads (its /health says true)."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1.0) as answer:  # noqa: S310 - our own http URL
            health = json.loads(answer.read())
    except (OSError, urllib.error.URLError, ValueError):
        return False
    return isinstance(health, dict) and health.get("health") == "true"


def _free_port() -> int:
    """Return a TCP port of 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((_HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop etcd with SIGTERM (it shuts down cleanly); kill its process group if it lingers."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _log_tail(path: Path) -> str:
    """Return the end of the server's log, for error messages."""
    try:
        return path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
    except OSError as error:
        return f"(no log: {error})"
