"""The timeline of three real OS processes, one of them SIGKILLed while it owned the job.

Each process is an instance of an application with a scheduler (``tick_a_job``): its own
``Locks`` on one SQLite file, writing its own event log. The owner is killed with SIGKILL; a
survivor takes the job over once its lease expired, and reports the tick the dead owner never
ran (``job-missed``, naming it): the line that once made the dead owner's bar overlap its
successor's. The two survivors then shut down gracefully, and ``leaselock timeline --json``
reads the three logs.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from helpers import leaselock_command, unique_key, until_real
from process_worker import tick_a_job

INSTANCES = ("proc-0", "proc-1", "proc-2")
# a survivor reports the missed tick only for a skip more than a second after the dead owner's
# last run (two instances' ticks within a second are one tick); its lease lives 2 s to 3 s on
TTL = "3s"
TTL_MS = 3000
# generous: three interpreters start on a loaded 2-core machine, then a ttl passes
WITHIN_S = 60.0


def lines(log: Path) -> list[dict[str, Any]]:
    """The lines written so far to ``log`` (none if it is not there yet)."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


def of_type(log: Path, kind: str) -> list[dict[str, Any]]:
    return [line for line in lines(log) if line["type"] == kind]


def moment(iso: str) -> datetime:
    return datetime.fromisoformat(iso)


async def kill_the_owner(tmp_path: Path, key: str) -> tuple[str, list[str], dict[str, Path]]:
    """Run the three instances, SIGKILL the owner, and stop the survivors once one took over.

    Returns the killed instance, the survivors, and every instance's event log.
    """
    logs = {name: tmp_path / f"{name}.jsonl" for name in INSTANCES}
    context = multiprocessing.get_context("spawn")
    processes = {
        name: context.Process(
            target=tick_a_job, args=(str(tmp_path / "locks.db"), key, name, str(log), TTL)
        )
        for name, log in logs.items()
    }
    for process in processes.values():
        process.start()

    def owner() -> str | None:
        return next((name for name, log in logs.items() if of_type(log, "lease-acquired")), None)

    def everyone_ticks() -> bool:
        found = owner()
        skipping = [of_type(log, "tick-skipped") for name, log in logs.items() if name != found]
        return found is not None and all(skipping)

    try:
        await until_real(everyone_ticks, within_s=WITHIN_S)
        killed = owner()
        assert killed is not None
        survivors = [name for name in INSTANCES if name != killed]
        processes[killed].kill()
        processes[killed].join(WITHIN_S)
        # a survivor took the job over, and reported the tick the dead owner never ran
        await until_real(
            lambda: any(of_type(logs[name], "job-missed") for name in survivors),
            within_s=WITHIN_S,
        )
        for name in survivors:
            processes[name].terminate()
        for name in survivors:
            processes[name].join(WITHIN_S)
        assert [processes[name].exitcode for name in survivors] == [0, 0], "graceful"
    finally:
        for process in processes.values():
            if process.is_alive():
                process.kill()
    return killed, survivors, logs


async def test_a_sigkilled_owners_lease_expires_before_its_successors_and_no_lane_overlaps(
    tmp_path: Path,
):
    key = unique_key("reconcile")
    killed, survivors, logs = await kill_the_owner(tmp_path, key)

    missed = next(line for name in survivors for line in of_type(logs[name], "job-missed"))
    assert missed["holder"] == killed, "the survivor's line names the dead owner"
    assert missed["by"] in survivors
    assert missed["instance"] == missed["by"], "a job's alert is about the instance reporting it"
    drawn = leaselock_command("timeline", "--json", *map(str, logs.values()))
    assert drawn.returncode == 0, drawn.stderr
    leases = json.loads(drawn.stdout)

    for lane, same_key in itertools.groupby(leases, key=lambda lease: lease["key"]):
        ordered = sorted(same_key, key=lambda lease: lease["fencing_token"])
        for earlier, later in itertools.pairwise(ordered):
            assert moment(earlier["end"]) <= moment(later["start"]), f"{lane}: {earlier}, {later}"

    dead, successor = [lease for lease in leases if lease["key"] == f"{key}:owner"]
    assert (dead["instance"], dead["ended"]) == (killed, "expired")
    assert successor["instance"] in survivors
    assert moment(dead["end"]) <= moment(successor["start"])
    # held up to the last line the killed process wrote itself, and over a ttl later at most
    last_own_line = max(moment(line["at"]) for line in lines(logs[killed]))
    assert moment(dead["held_until"]) == last_own_line
    assert moment(dead["end"]) <= last_own_line + timedelta(milliseconds=TTL_MS)
