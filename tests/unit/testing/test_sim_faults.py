import itertools
import random

from leaselock.testing import Faults
from leaselock.testing._sim_faults import plan_faults

INSTANCES = ["instance-1", "instance-2", "instance-3"]


def plan(seed, faults=None):
    return plan_faults(
        random.Random(seed),  # noqa: S311 -- the simulation's own chance
        faults or Faults(pauses=6, kills=3, restarts=3),
        instances=INSTANCES,
        duration_ms=600_000,
        ttl_ms=30_000,
    )


def test_the_same_seed_draws_the_same_faults():
    assert plan(7) == plan(7)
    assert plan(7) != plan(8)


def test_faults_of_one_instance_never_overlap():
    for seed in range(200):
        by_instance: dict[str, list[tuple[int, int]]] = {}
        for fault in plan(seed):
            if fault.instance in INSTANCES:
                by_instance.setdefault(fault.instance, []).append((fault.at_ms, fault.lasting_ms))
        for spans in by_instance.values():
            for (start, lasting), (next_start, _) in itertools.pairwise(spans):
                assert next_start > start + lasting


def test_pauses_outlast_the_ttl():
    pauses = [fault for seed in range(50) for fault in plan(seed) if fault.kind == "pause"]
    assert pauses
    assert all(30_000 < fault.lasting_ms <= 90_000 for fault in pauses)


def test_faults_fall_inside_the_run():
    assert all(30_000 <= fault.at_ms <= 540_000 for seed in range(50) for fault in plan(seed))


def test_no_faults_plan_nothing():
    assert plan(1, Faults.none()) == []
