import pytest

from leaselock import LocksConfigurationError
from leaselock.testing import (
    Effect,
    SimulationRecord,
    Tick,
    at_most_once,
    leaders_never_overlap,
    no_stale_writes,
)
from leaselock.testing._sim_invariants import as_invariant


def write(value, token, at_ms, *, instance="instance-1", key="job", kind="write", accepted=True):
    return Effect(
        resource="list",
        kind=kind,
        value=value,
        at_ms=at_ms,
        instance=instance,
        tick=Tick("job", 1),
        fencing_token=token,
        lock_key=key,
        fenced=False,
        accepted=accepted,
    )


def record(*effects):
    return SimulationRecord(effects=effects)


def test_values_written_twice_by_the_same_two_runs_are_one_violation():
    effects = [
        write(1, 5, 10),
        write(2, 5, 11),
        write(1, 7, 20, instance="instance-2"),
        write(2, 7, 21, instance="instance-2"),
    ]
    (violation,) = at_most_once("list").violations(record(*effects))
    assert violation.rule == "each tick's effect at most once"
    assert violation.detail.startswith("1, 2 were written to 'list' twice: by instance-1")
    assert violation.effects == (effects[0], effects[2])


def test_a_refused_write_is_no_effect():
    effects = [write(1, 5, 10), write(1, 4, 20, accepted=False)]
    assert at_most_once("list").violations(record(*effects)) == []


def test_at_most_once_compares_what_its_key_returns():
    effects = [write({"order": 1}, 5, 10), write({"order": 1}, 7, 20)]
    found = at_most_once("list", key=lambda value: value["order"]).violations(record(*effects))  # type: ignore[index]
    assert len(found) == 1


def test_an_unhashable_value_without_a_key_is_refused_naming_the_fix():
    with pytest.raises(LocksConfigurationError, match="pass key="):
        at_most_once("list").violations(record(write({"order": 1}, 5, 10)))


def test_an_older_write_after_a_newer_run_read_the_resource_is_stale():
    effects = [write(None, 7, 10, kind="read"), write(1, 5, 20)]
    (violation,) = no_stale_writes("list").violations(record(*effects))
    assert "took 1 from instance-1 with token 5" in violation.detail
    assert violation.detail.endswith("had read it")


def test_an_older_write_before_the_newer_run_came_is_not_stale():
    effects = [write(1, 5, 10), write(None, 7, 20, kind="read"), write(2, 7, 30)]
    assert no_stale_writes("list").violations(record(*effects)) == []


def test_tokens_of_different_locks_are_not_compared():
    effects = [write(1, 9, 10, key="other"), write(2, 5, 20)]
    assert no_stale_writes("list").violations(record(*effects)) == []


def test_a_term_writing_after_the_next_term_wrote_overlaps_it():
    effects = [
        write(1, 3, 10, key="feed"),
        write(2, 8, 20, key="feed"),
        write(3, 3, 30, key="feed"),
    ]
    (violation,) = leaders_never_overlap("feed").violations(record(*effects))
    assert "the term with token 3 (instance-1) wrote" in violation.detail


def test_leaders_never_overlap_reads_only_writes_under_its_key():
    effects = [write(1, 8, 10, key="other"), write(2, 3, 20, key="feed")]
    assert leaders_never_overlap("feed").violations(record(*effects)) == []


def test_an_invariant_reads_as_the_code_that_makes_it():
    assert repr([at_most_once("a"), no_stale_writes("b"), leaders_never_overlap("c")]) == (
        "[at_most_once('a'), no_stale_writes('b'), leaders_never_overlap('c')]"
    )


def test_something_not_callable_is_no_invariant():
    with pytest.raises(LocksConfigurationError, match="is not callable"):
        as_invariant("unique")  # type: ignore[arg-type]


def test_a_record_names_the_shared_objects_it_has_when_asked_for_another():
    with pytest.raises(LocksConfigurationError, match="it has 'orders'"):
        SimulationRecord(effects=(), objects={"orders": []}).shared("stock")
