"""A throwaway three-member etcd cluster on loopback, for failover tests, without pytest.

:func:`etcd_cluster` starts three members of one cluster from the local ``etcd`` binary
(Debian: ``apt-get install etcd-server``), bootstrapped statically (``--initial-cluster``), on
free TCP ports of 127.0.0.1, with their data in a temporary directory removed at exit. The
:class:`EtcdCluster` it yields finds the leader (``/v3/maintenance/status`` of each member),
kills a member with SIGKILL and starts it again on its own data (as many times as a run
wants), and cuts a member off from the others.

**Partitions without root.** Every member advertises a peer URL that is a relay
(``tests/etcd_relays.py``) in front of its real peer port, so every byte of peer traffic
crosses a relay, which can hold a cut link's bytes both ways. Client traffic does not cross
the relays: a client still reaches an isolated member, the case a store must survive.

Anything that makes a cluster impossible to get raises :class:`servers.ServerUnavailable`.
"""

from __future__ import annotations

import collections
import contextlib
import json
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from etcd_relays import PeerRelays
from servers import ServerUnavailable

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

__all__ = ["EtcdCluster", "FailoverCycle", "Member", "etcd_cluster"]

_HOST: Final = "127.0.0.1"
_MEMBERS: Final = 3
# etcd's defaults: a leader is missed after 1 s without a heartbeat
HEARTBEAT_MS: Final = 100
ELECTION_MS: Final = 1000
_START_TIMEOUT: Final = 30.0
# a leader is elected within a few election timeouts, even on a loaded machine
_LEADER_TIMEOUT: Final = 30.0
_POLL_INTERVAL: Final = 0.05
_STATUS_TIMEOUT: Final = 1.0
_PORT_ATTEMPTS: Final = 3
_LOG_TAIL_CHARS: Final = 2000


@dataclass
class Member:
    """One member: its name, its client URL, its ports, and its process while it runs."""

    name: str
    client_port: int
    peer_port: int
    relay_port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    member_id: int = 0

    @property
    def client_url(self) -> str:
        """The client URL (``http://127.0.0.1:PORT``), which clients reach directly."""
        return f"http://{_HOST}:{self.client_port}"

    @property
    def advertised_peer_url(self) -> str:
        """The peer URL the others dial: this member's relay."""
        return f"http://{_HOST}:{self.relay_port}"

    @property
    def running(self) -> bool:
        """Whether its process runs."""
        return self.process is not None and self.process.poll() is None


class EtcdCluster:
    """Three members of one etcd cluster, and the faults a test makes them suffer."""

    def __init__(self, executable: str, workdir: Path) -> None:
        """Choose ports and directories; :meth:`start` starts the members."""
        self._executable = executable
        self._workdir = workdir
        self._token = f"leaselock-{uuid.uuid4().hex[:12]}"
        self.relays = PeerRelays(_MEMBERS)
        self.members = [
            Member(
                name=f"member-{index + 1}",
                client_port=_free_port(),
                peer_port=_free_port(),
                relay_port=self.relays.ports[index],
                data_dir=workdir / f"member-{index + 1}",
                log_path=workdir / f"member-{index + 1}.log",
            )
            for index in range(_MEMBERS)
        ]

    @property
    def url(self) -> str:
        """The store URL of every member: ``etcd://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3``."""
        return "etcd://" + ",".join(f"{_HOST}:{member.client_port}" for member in self.members)

    @property
    def client_urls(self) -> list[str]:
        """Each member's client URL, in member order."""
        return [member.client_url for member in self.members]

    def start(self) -> None:
        """Start every member at once (a new cluster needs a majority to elect a leader)."""
        self.relays.start([member.peer_port for member in self.members])
        for index in range(_MEMBERS):
            self._spawn(index)
        for index in range(_MEMBERS):
            self.wait_healthy(index)
        for member in self.members:
            member.member_id = int(_status(member.client_url)["header"]["member_id"])

    def _spawn(self, index: int) -> None:
        member = self.members[index]
        initial = ",".join(f"{m.name}={m.advertised_peer_url}" for m in self.members)
        argv = [
            self._executable,
            "--name", member.name,
            "--data-dir", str(member.data_dir),
            "--listen-client-urls", member.client_url,
            "--advertise-client-urls", member.client_url,
            "--listen-peer-urls", f"http://{_HOST}:{member.peer_port}",
            "--initial-advertise-peer-urls", member.advertised_peer_url,
            "--initial-cluster", initial,
            "--initial-cluster-state", "new",
            "--initial-cluster-token", self._token,
            "--heartbeat-interval", str(HEARTBEAT_MS),
            "--election-timeout", str(ELECTION_MS),
            "--logger", "zap",
            "--log-outputs", "stderr",
            "--log-level", "warn",
        ]  # fmt: skip
        try:
            with member.log_path.open("ab") as log:
                member.process = subprocess.Popen(  # noqa: S603 - fixed argv of a binary we located
                    argv,
                    cwd=self._workdir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as error:
            raise ServerUnavailable(f"could not start {self._executable}: {error}") from error
        self.relays.member_started(index, member.process.pid)

    def wait_healthy(self, index: int) -> None:
        """Wait until member ``index`` runs and sees a leader (its ``/health`` says true).

        Raises:
            ServerUnavailable: it exited, or did not become healthy in time.
        """
        member = self.members[index]
        deadline = time.perf_counter() + _START_TIMEOUT
        while not _healthy(member.client_url):
            if not member.running:
                raise ServerUnavailable(
                    f"etcd {member.name} exited during start-up:\n{_log_tail(member.log_path)}"
                )
            if time.perf_counter() > deadline:
                raise ServerUnavailable(
                    f"etcd {member.name} did not become healthy within {_START_TIMEOUT:.0f}s:\n"
                    f"{_log_tail(member.log_path)}"
                )
            _pause()

    def leader(self, among: Sequence[int] | None = None) -> int:
        """Return the index of the leader that a majority of the running members agree on.

        Waits for one (an election in progress); ``among`` limits which members may be it.

        Raises:
            AssertionError: no leader within the timeout.
        """
        candidates = range(_MEMBERS) if among is None else among
        deadline = time.perf_counter() + _LEADER_TIMEOUT
        while time.perf_counter() < deadline:
            votes: dict[int, int] = {}
            for member in self.members:
                if not member.running:
                    continue
                with contextlib.suppress(OSError, ValueError, KeyError):
                    leader_id = int(_status(member.client_url)["leader"])
                    votes[leader_id] = votes.get(leader_id, 0) + 1
            for leader_id, count in votes.items():
                index = self._index_of(leader_id)
                if count * 2 > _MEMBERS and index in candidates and self.members[index].running:
                    return index
            _pause()
        raise AssertionError(f"no leader among members {list(candidates)} in {_LEADER_TIMEOUT}s")

    def _index_of(self, member_id: int) -> int:
        for index, member in enumerate(self.members):
            if member.member_id == member_id:
                return index
        return -1

    def kill(self, index: int) -> None:
        """SIGKILL member ``index`` (no shutdown, no flush beyond what etcd already synced)."""
        process = self.members[index].process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGKILL)
        process.wait()

    def restart(self, index: int) -> None:
        """Start a stopped member again on its own data; return once it sees a leader."""
        self._spawn(index)
        self.wait_healthy(index)

    def kill_leader_and_restart(self) -> None:
        """Kill the leader, wait until the others elect a new one, then restart the old one.

        The failover of ``check_store(failover=...)``: every call is a change of leader, and the
        cluster has all three members again when it returns, ready for the next.
        """
        old = self.leader()
        self.kill(old)
        self.leader(among=[index for index in range(_MEMBERS) if index != old])
        self.restart(old)

    def isolate(self, index: int) -> None:
        """Cut member ``index`` off from the other members (clients still reach it)."""
        for other in range(_MEMBERS):
            if other != index:
                self.relays.cut(index, other)

    def heal(self) -> None:
        """Undo every cut."""
        self.relays.heal()

    def has_leader(self, index: int) -> bool:
        """Whether member ``index`` answers and names a leader."""
        try:
            return int(str(_status(self.members[index].client_url).get("leader", 0))) != 0
        except (OSError, ValueError):
            return False

    def isolate_leader_then_heal(self) -> None:
        """Cut the leader off until the others elect a new one and it knows it is alone; heal.

        A failover of ``check_store(failover=...)``: for a while the old leader still believes
        it leads, and clients that reach it are refused or held, never granted.
        """
        old = self.leader()
        self.isolate(old)
        try:
            self.leader(among=[index for index in range(_MEMBERS) if index != old])
            self._await(lambda: not self.has_leader(old), f"{self.members[old].name} alone")
        finally:
            self.heal()
        self.await_all_healthy()

    def isolate_follower_then_heal(self) -> None:
        """Cut a follower off until it knows it is alone (it names no leader); heal."""
        leader = self.leader()
        follower = next(index for index in range(_MEMBERS) if index != leader)
        self.isolate(follower)
        try:
            self._await(
                lambda: not self.has_leader(follower), f"{self.members[follower].name} alone"
            )
        finally:
            self.heal()
        self.await_all_healthy()

    def await_all_healthy(self) -> None:
        """Wait until every member runs, sees a leader, and a majority agrees on it."""
        for index in range(_MEMBERS):
            self.wait_healthy(index)
        self.leader()

    def _await(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.perf_counter() + _LEADER_TIMEOUT
        while not condition():
            if time.perf_counter() > deadline:
                raise AssertionError(f"not within {_LEADER_TIMEOUT}s: {what}")
            _pause()

    def stop(self) -> None:
        """Kill every member (their data goes with the directory), then the relays.

        Not SIGTERM: a leader stopping gracefully hands its leadership over first, and the
        last two members wait for a quorum that is leaving; seconds for nothing.
        """
        for index in range(_MEMBERS):
            self.kill(index)
        self.relays.close()


class FailoverCycle:
    """A failover for ``check_store(failover=...)`` that takes turns among the cluster's faults.

    Each call makes the next fault of ``kinds`` (``"kill"``: the leader is killed and
    restarted; ``"isolate-leader"``, ``"isolate-follower"``: a member is cut off, then healed)
    and counts it in :attr:`made`.
    """

    def __init__(self, cluster: EtcdCluster, kinds: Sequence[str] = ("kill",)) -> None:
        """Make ``kinds`` in turn on ``cluster``."""
        self._cluster = cluster
        self._kinds = tuple(kinds)
        self.made: collections.Counter[str] = collections.Counter()

    def __call__(self) -> None:
        """Make the next fault; return once the cluster has all three members again."""
        kind = self._kinds[sum(self.made.values()) % len(self._kinds)]
        faults = {
            "kill": self._cluster.kill_leader_and_restart,
            "isolate-leader": self._cluster.isolate_leader_then_heal,
            "isolate-follower": self._cluster.isolate_follower_then_heal,
        }
        faults[kind]()
        self.made[kind] += 1


@contextlib.contextmanager
def etcd_cluster() -> Iterator[EtcdCluster]:
    """Yield a started three-member cluster of throwaway etcd servers; stop it at exit.

    Raises:
        ServerUnavailable: there is no ``etcd`` binary, or the cluster did not start.
    """
    executable = shutil.which("etcd")
    if executable is None:
        raise ServerUnavailable(
            "there is no etcd binary on PATH to start a throwaway cluster; "
            "install one (apt-get install etcd-server)"
        )
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        workdir = Path(tempfile.mkdtemp(prefix="leaselock-etcd-cluster-"))
        cluster = EtcdCluster(executable, workdir)
        try:
            try:
                cluster.start()
            except ServerUnavailable:
                # a port taken between choosing and binding it: try others
                if attempt == _PORT_ATTEMPTS:
                    raise
                continue
            yield cluster
            return
        finally:
            cluster.stop()
            shutil.rmtree(workdir, ignore_errors=True)


def _pause() -> None:
    time.sleep(_POLL_INTERVAL)  # noqa: TID251 -- polling real servers, whose time is real


def _status(client_url: str) -> dict[str, Any]:
    """POST /v3/maintenance/status: the member's id (``header.member_id``) and ``leader``."""
    request = urllib.request.Request(  # noqa: S310 - our own http URL
        f"{client_url}/v3/maintenance/status", data=b"{}", method="POST"
    )
    with urllib.request.urlopen(request, timeout=_STATUS_TIMEOUT) as answer:  # noqa: S310
        status: dict[str, Any] = json.loads(answer.read())
    return status


def _healthy(client_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{client_url}/health", timeout=_STATUS_TIMEOUT) as answer:  # noqa: S310 - our own http URL
            health = json.loads(answer.read())
    except (OSError, urllib.error.URLError, ValueError):
        return False
    return isinstance(health, dict) and health.get("health") == "true"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((_HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _log_tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
    except OSError as error:
        return f"(no log: {error})"
