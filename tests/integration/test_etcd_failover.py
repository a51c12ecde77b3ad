"""Mutual exclusion and fencing on a three-member etcd while its leader is killed again and again.

leaselock.testing's torture check (what `leaselock check` runs) with one more fault between
the pauses and kills of holders: a failover of the cluster. By default each failover kills
the leader with SIGKILL, waits for the others to elect a new one, and starts the old one again
on its own data. Raft makes every write linearizable and etcd extends every lease when a new
leader takes over, so no rule may ever break: not one violation of any.

The CI run is short; the long one is driven by the environment:

    LEASELOCK_FAILOVER_SECONDS=900 LEASELOCK_FAILOVER_COUNT=20 \\
    LEASELOCK_ETCD_FAULTS=kill,isolate-leader,kill,isolate-follower \\
        .venv/bin/pytest tests/integration/test_etcd_failover.py -s

``LEASELOCK_FAILOVER_COUNT`` is the number of leader kills the run must make at least;
``LEASELOCK_ETCD_FAULTS`` the faults it takes turns among (``kill``, ``isolate-leader``,
``isolate-follower``: a member cut off from the others, then healed).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from etcd_cluster import EtcdCluster, FailoverCycle, etcd_cluster
from leaselock.testing.check import check_store
from servers import ServerUnavailable

WORKERS = 4
SECONDS = float(os.environ.get("LEASELOCK_FAILOVER_SECONDS", "25"))
KILLS = int(os.environ.get("LEASELOCK_FAILOVER_COUNT", "1"))
FAULTS = tuple(os.environ.get("LEASELOCK_ETCD_FAULTS", "kill").split(","))


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Iterator[EtcdCluster]:
    """Three members of a cluster of this test's own."""
    try:
        with etcd_cluster() as started:
            yield started
    except ServerUnavailable as unavailable:
        if request.config.getoption("--require-servers"):
            pytest.fail(f"--require-servers: no throwaway etcd cluster: {unavailable}")
        pytest.skip(f"no throwaway etcd cluster: {unavailable}")


@pytest.mark.etcd
@pytest.mark.nemesis
@pytest.mark.timeout(SECONDS + 120)
def test_no_two_holders_no_token_back_no_stale_write_while_the_leader_is_killed(
    cluster: EtcdCluster, tmp_path: Path
) -> None:
    failover = FailoverCycle(cluster, FAULTS)
    result = check_store(
        cluster.url,
        seconds=SECONDS,
        at_most=SECONDS * 3,
        workers=WORKERS,
        ttl="1s",
        failover=failover,
        directory=tmp_path,
    )
    made = ", ".join(f"{count} {kind}" for kind, count in sorted(failover.made.items()))
    print(f"\netcd, three members ({made}):\n{result.summary()}")  # noqa: T201 -- the run's counts
    # Raft promises linearizable writes: every rule holds, through every change of leader
    assert result.report.violations == [], result.summary()
    assert result.ok, result.summary()
    assert failover.made["kill"] >= KILLS, made
    assert result.report.acquisitions >= 10, result.summary()
    assert result.report.writes_accepted >= 5, result.summary()
