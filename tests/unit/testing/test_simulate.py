import logging
import os
import re
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

import leaselock
import leaselock._clock
from leaselock import LocksConfigurationError, current_lock
from leaselock.testing import (
    Faults,
    SimulatedInstance,
    SimulationRecord,
    at_most_once,
    check_seeds,
    leaders_never_overlap,
    no_stale_writes,
    simulate,
)
from sim_jobs import EXPORTED, fenced_export, unfenced_export

EXPORTED_ONCE = [at_most_once(EXPORTED), no_stale_writes(EXPORTED)]
TESTS = Path(__file__).resolve().parents[2]


def first_failure(setup, seeds=200, **options):
    with pytest.raises(AssertionError) as failure:
        check_seeds(setup, seeds, **options)
    return str(failure.value)


def events_of(report, instance):
    return [event for event in report.trace if event.instance == instance]


def first_seed(condition, setup=fenced_export, seeds=200, **options):
    """The first seed whose report meets ``condition``, and that report."""
    for seed in range(seeds):
        report = simulate(setup, seed=seed, **options)
        if condition(report):
            return report
    raise AssertionError(f"no seed of {seeds} met the condition")


def test_an_unfenced_export_writes_a_ticks_effect_twice_within_200_seeds():
    message = first_failure(unfenced_export, invariants=[at_most_once(EXPORTED)])
    assert "each tick's effect at most once" in message
    assert "written to 'exported' twice" in message


def test_a_failing_seed_is_printed_with_the_regression_line_to_paste():
    message = first_failure(unfenced_export, invariants=EXPORTED_ONCE)
    seed = int(re.search(r"^Seed (\d+):", message, re.MULTILINE)[1])
    assert f"seeds passed before seed {seed} failed" in message
    assert message.rstrip().endswith(
        f"assert simulate(unfenced_export, seed={seed}, invariants=[at_most_once('exported'), "
        "no_stale_writes('exported')]).ok"
    )


def test_rerunning_the_printed_seed_gives_the_identical_report():
    message = first_failure(unfenced_export, invariants=EXPORTED_ONCE)
    replay = message.rstrip().splitlines()[-1].strip().removeprefix("assert ").removesuffix(".ok")
    names = {
        "simulate": simulate,
        "unfenced_export": unfenced_export,
        "at_most_once": at_most_once,
        "no_stale_writes": no_stale_writes,
    }
    first, again = eval(replay, names), eval(replay, names)  # noqa: S307 -- our own replay line
    assert not first.ok
    assert again == first
    assert again.digest == first.digest
    assert first.summary() in message


# CPU-bound, about 13 s alone: a loaded machine stretches it past the unit tests' hang guard
@pytest.mark.timeout(180)
def test_the_fenced_export_keeps_every_invariant_for_100_seeds(caplog: pytest.LogCaptureFixture):
    # benchmarks/bench_simulate.py runs 1,000 (under 60 s on two cores); the faults make the
    # library warn, and capturing each line would double the run's time
    caplog.set_level(logging.CRITICAL, logger="leaselock")
    check_seeds(fenced_export, 100, invariants=EXPORTED_ONCE)


class RefusedDatetime(datetime):
    @classmethod
    def now(cls, tz=None):
        raise AssertionError("the simulation read the system's wall clock")


class LocalSocket(socket.socket):
    """A socket of this host only: an event loop's self-pipe is one, a connection is not."""

    def __init__(self, family=-1, type=-1, proto=-1, fileno=None):  # noqa: A002 -- socket's own
        if fileno is None and family != socket.AF_UNIX:
            raise AssertionError("the simulation opened a network socket")
        super().__init__(family, type, proto, fileno)


def test_the_simulation_never_reads_the_system_clocks_nor_opens_a_connection(monkeypatch):
    expected = [simulate(unfenced_export, seed=seed, invariants=EXPORTED_ONCE) for seed in (0, 12)]

    def refused(*args, **kwargs):
        raise AssertionError("the simulation read the system's clock, or waited for real")

    for name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "sleep"):
        monkeypatch.setattr(time, name, refused)
    monkeypatch.setattr(leaselock._clock, "datetime", RefusedDatetime)
    monkeypatch.setattr(socket, "socket", LocalSocket)
    monkeypatch.setattr(socket, "create_connection", refused)
    monkeypatch.setattr(socket, "getaddrinfo", refused)
    # the logging module stamps each record with time.time_ns(): that is the logger's clock,
    # for people, not the simulation's (its events and run records read the simulated one)
    logging.disable(logging.CRITICAL)
    try:
        reports = [
            simulate(unfenced_export, seed=seed, invariants=EXPORTED_ONCE) for seed in (0, 12)
        ]
    finally:
        logging.disable(logging.NOTSET)
    assert reports == expected


def test_a_seed_replays_the_same_trace_in_another_process_with_another_hash_seed():
    program = (
        "from leaselock.testing import simulate; from sim_jobs import unfenced_export; "
        "print(simulate(unfenced_export, seed=12).digest)"
    )
    here = simulate(unfenced_export, seed=12).digest
    finished = subprocess.run(  # noqa: S603 -- our own interpreter and program
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(TESTS)},
        timeout=60,
    )
    assert finished.stdout.strip() == here


def test_no_faults_and_no_offsets_make_the_instances_fire_each_tick_together():
    report = simulate(fenced_export, seed=3, faults=Faults.none(), invariants=EXPORTED_ONCE)
    assert report.ok
    assert report.faults == ()
    ticks = [event for event in report.trace if event.what == "tick export#4"]
    assert [(event.at_ms, event.instance) for event in ticks] == [
        (240_000, "instance-1"),
        (240_000, "instance-2"),
        (240_000, "instance-3"),
    ]


def test_an_instance_whose_clock_is_ahead_fires_each_tick_that_much_sooner():
    report = simulate(
        fenced_export, seed=3, faults=Faults(**{**vars(Faults.none()), "clock_offset": "500ms"})
    )
    ahead = {
        event.instance: int(event.what.split()[1])
        for event in report.trace
        if event.what.startswith("clock ")
    }
    fired = {event.instance: event.at_ms for event in report.trace if event.what == "tick export#4"}
    assert max(ahead.values()) > 0
    assert fired == {instance: 240_000 - ahead[instance] for instance in ahead}


def test_a_paused_instance_does_nothing_until_it_resumes_and_then_loses_its_lease():
    only_pauses = Faults(**{**vars(Faults.none()), "pauses": 1})
    report = first_seed(
        lambda report: any("lock-lost" in event.what for event in report.trace),
        faults=only_pauses,
    )
    (paused,) = [event for event in report.trace if event.what.startswith("paused for")]
    resumed = next(
        event
        for event in report.trace
        if event.instance == paused.instance and event.what == "resumed"
    )
    during = [
        event
        for event in events_of(report, paused.instance)
        if paused.at_ms < event.at_ms < resumed.at_ms
    ]
    assert during == []
    after = [
        event.what for event in events_of(report, paused.instance) if event.at_ms >= resumed.at_ms
    ]
    assert any("detected_by=deadline" in what for what in after)


def test_a_killed_instance_hands_nothing_back_and_another_takes_over_after_the_ttl():
    only_kills = Faults(**{**vars(Faults.none()), "kills": 1})

    def owner_killed(report):
        kill = next(event for event in report.trace if event.what.startswith("killed"))
        owners = [
            event
            for event in report.trace
            if event.what.startswith("lease-acquired") and event.at_ms < kill.at_ms
        ]
        return owners and owners[-1].instance == kill.instance

    report = first_seed(owner_killed, faults=only_kills)
    kill = next(event for event in report.trace if event.what.startswith("killed"))
    handed_back = [
        event
        for event in events_of(report, kill.instance)
        if event.at_ms >= kill.at_ms and "handed-back" in event.what
    ]
    assert handed_back == []
    takeover = next(
        event
        for event in report.trace
        if event.what.startswith("lease-acquired") and event.at_ms > kill.at_ms
    )
    assert takeover.instance != kill.instance
    assert takeover.at_ms - kill.at_ms >= 30_000 - 10_000  # a ttl after its last renewal


def test_a_graceful_restart_hands_the_lease_back_and_the_instance_comes_back():
    only_restarts = Faults(**{**vars(Faults.none()), "restarts": 1})

    def owner_restarted(report):
        return any(
            event.what.startswith("lock-handed-back 'tick-export:owner'") for event in report.trace
        )

    report = first_seed(owner_restarted, faults=only_restarts)
    restart = next(event for event in report.trace if event.what.startswith("restarted"))
    later = [
        event.what for event in events_of(report, restart.instance) if event.at_ms >= restart.at_ms
    ]
    assert any(what.startswith("lock-handed-back 'tick-export:owner'") for what in later)
    assert "started (life 2)" in later
    assert report.ok


def test_every_life_of_an_instance_runs_the_setup_afresh():
    lives: list[tuple[str, int]] = []

    def setup(instance: SimulatedInstance) -> None:
        lives.append((instance.name, instance.life))
        fenced_export(instance)

    report = simulate(setup, seed=1, faults=Faults(**{**vars(Faults.none()), "kills": 1}))
    (kill,) = report.faults
    assert lives == [
        ("instance-1", 1),
        ("instance-2", 1),
        ("instance-3", 1),
        (kill.instance, 2),
    ]


def test_an_async_setup_is_awaited():
    async def setup(instance: SimulatedInstance) -> None:
        await instance.sleep(0)
        fenced_export(instance)

    assert simulate(setup, seed=0, faults=Faults.none()).effects


def test_a_sync_job_is_refused_by_every_naming_why():
    def setup(instance: SimulatedInstance) -> None:
        instance.every("1m", lambda: None)  # type: ignore[arg-type, return-value]

    with pytest.raises(LocksConfigurationError, match="pass an async job"):
        simulate(setup, seed=0)


async def test_simulate_refuses_to_run_inside_a_running_event_loop():
    with pytest.raises(LocksConfigurationError, match="from a plain def"):
        simulate(fenced_export, seed=0)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"seed": "7"}, "seed='7'"),
        ({"seed": 1, "instances": 0}, "instances=0"),
        ({"seed": 1, "faults": "none"}, "faults='none'"),
        ({"seed": 1, "duration": -1}, "duration"),
        ({"seed": 1, "invariants": ["unique"]}, "invariant 'unique'"),
    ],
)
def test_a_bad_argument_is_refused_naming_it(arguments, named):
    with pytest.raises(LocksConfigurationError, match=re.escape(named)):
        simulate(fenced_export, **arguments)


def test_a_bad_fault_count_is_refused_naming_it():
    with pytest.raises(LocksConfigurationError, match=re.escape("Faults(pauses=-1)")):
        Faults(pauses=-1)


def test_faults_show_only_what_differs_from_the_defaults():
    assert repr(Faults(kills=3)) == "Faults(kills=3)"


def test_a_plain_function_is_an_invariant_named_by_its_name():
    def never_more_than_five(record: SimulationRecord) -> list[str]:
        written = record.writes(EXPORTED)
        return [f"{len(written)} writes"] if len(written) > 5 else []

    report = simulate(fenced_export, seed=0, invariants=[never_more_than_five])
    assert [violation.rule for violation in report.violations] == ["never more than five"]
    assert report.replay == "simulate(fenced_export, seed=0, invariants=[never_more_than_five])"


@leaselock.leader_election("feed")
class Feed:
    """A leader's duty: every 10 s, append its term's token to the feed, fenced or not."""

    def __init__(self, instance: SimulatedInstance, *, fenced: bool) -> None:
        self.instance = instance
        self.fenced = fenced
        self.feed = instance.resource("feed")

    async def on_leadership_acquired(self, lock: leaselock.Lock) -> None:
        while True:
            await self.instance.sleep("10s")
            token = lock.fencing_token if self.fenced else None
            self.feed.write(lock.fencing_token, fencing_token=token)

    async def on_leadership_lost(self, lock: leaselock.Lock) -> None:
        pass


def feed_leader(fenced):
    def setup(instance: SimulatedInstance) -> None:
        instance.locks.register(Feed(instance, fenced=fenced))

    setup.__name__ = f"{'fenced' if fenced else 'unfenced'}_feed"
    return setup


def test_leaders_never_overlap_catches_a_leader_that_writes_after_its_term_ended():
    message = first_failure(
        feed_leader(fenced=False), 100, invariants=[leaders_never_overlap("feed")]
    )
    assert "a leader's side effects never overlapping" in message


def test_a_fenced_leader_keeps_its_side_effects_apart_from_the_next_leaders():
    check_seeds(feed_leader(fenced=True), 10, invariants=[leaders_never_overlap("feed")])


def test_the_run_reads_a_wall_clock_of_its_own_that_starts_the_same_in_every_run():
    seen: list[datetime] = []

    def setup(instance: SimulatedInstance) -> None:
        instance.locks.events.subscribe(lambda event: seen.append(event.at))
        fenced_export(instance)

    simulate(setup, seed=0, faults=Faults.none(), duration="2m")
    # the first event is the first tick's, a minute in; nothing is late, nothing offset
    assert min(seen) == datetime(2030, 1, 1, 0, 1, tzinfo=UTC)


def test_a_write_outside_any_lock_is_recorded_as_unfenced_and_lockless():
    def setup(instance: SimulatedInstance) -> None:
        if instance.name == "instance-1":
            assert current_lock() is None
            instance.resource("notes").write("hello")

    report = simulate(setup, seed=0, faults=Faults.none(), duration="1m")
    (effect,) = report.effects
    assert (effect.instance, effect.lock_key, effect.fenced, effect.tick) == (
        "instance-1",
        None,
        False,
        None,
    )


def test_a_setup_that_raises_fails_the_simulation_with_its_error():
    def setup(instance: SimulatedInstance) -> None:
        raise RuntimeError(f"{instance.name} has no database")

    with pytest.raises(RuntimeError, match="instance-1 has no database"):
        simulate(setup, seed=0)


def test_a_report_says_what_it_injected_and_how_to_replay_it():
    only_a_pause = Faults(pauses=1, kills=0, restarts=0, outages=0, slow_store=0, lost_answers=0)
    summary = simulate(fenced_export, seed=5, faults=only_a_pause).summary()
    assert summary.startswith("Seed 5: 3 instances, 10 min simulated, 1 fault,")
    assert "every invariant held" in summary
    assert re.search(r"instance-\d +paused for \d+ ms", summary)
    assert summary.endswith(
        "replay: simulate(fenced_export, seed=5, faults=Faults(pauses=1, kills=0, restarts=0, "
        "outages=0, slow_store=0, lost_answers=0))"
    )


def test_the_docs_page_shows_what_its_program_prints():
    # the failing seed, its report and its digest on docs/simulate.md are what its code prints
    # (tests/test_docs.py runs the program itself)
    page = (TESTS.parent / "docs" / "simulate.md").read_text()
    program = page.split("```python\n", 1)[1].split("```", 1)[0]
    shown = page.split("```text\n", 1)[1].split("```", 1)[0]
    page_code: dict[str, object] = {"__name__": "docs_simulate"}
    exec(compile(program, "docs/simulate.md", "exec"), page_code)  # noqa: S102 -- our own docs
    with pytest.raises(AssertionError) as failure:
        check_seeds(page_code["unfenced_shop"], 200, invariants=[no_stale_writes("products")])
    assert shown == f"{failure.value}\nshop: 100 seeds, no stale count written\n"
