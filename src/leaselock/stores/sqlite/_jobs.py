"""The job-control half of SQLiteLockStore: pauses, open runs, failure streaks, ticks, in SQL.

Every function here runs on the store's worker thread inside the one ``BEGIN IMMEDIATE``
transaction of its call, so a read and the write it decides are atomic across processes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Final, final

from .._common._capabilities import RunRecord, epoch_ms, from_epoch_ms, run_from_row
from .._common._job_control import (
    JobPause,
    JobState,
    RunStart,
    RunStartAnswer,
    open_run_from_json,
    open_run_json,
    pause_from_json,
    pause_json,
    pause_matches,
    refusing_tick,
    tick_run_from_json,
    tick_run_json,
)
from .._common._protocol import Acquired, NotAcquired

__all__ = ["COLUMNS_ADDED", "CREATE_JOBS", "SQLiteJobControl", "add_missing_columns"]

# -> nothing; per job its open run, failure streak and last started tick (tick_run_json), and
# per pause target its pause
CREATE_JOBS: Final = """
CREATE TABLE IF NOT EXISTS {jobs} (
    name         TEXT    NOT NULL PRIMARY KEY,
    pause        TEXT,
    open_run     TEXT,
    failures     INTEGER NOT NULL DEFAULT 0,
    missed_at_ms INTEGER,
    buffered     INTEGER NOT NULL DEFAULT 0,
    last_tick    TEXT
) WITHOUT ROWID
"""

# columns that tables made by an earlier leaselock lack, by table ("runs", "jobs" of the
# store's names): (name, definition)
COLUMNS_ADDED: Final[Mapping[str, tuple[tuple[str, str], ...]]] = {
    "runs": (("trigger", "TEXT NOT NULL DEFAULT 'schedule'"), ("detected_by", "TEXT")),
    "jobs": (("last_tick", "TEXT"),),
}

# -> (name, pause) of every pause kept
_PAUSES: Final = "SELECT name, pause FROM {jobs} WHERE pause IS NOT NULL ORDER BY name"

# :job -> (open_run, failures, missed_at_ms, buffered, last_tick) or nothing
_STATE: Final = """
SELECT open_run, failures, missed_at_ms, buffered, last_tick FROM {jobs} WHERE name = :job
"""

# -> (name, open_run, failures, missed_at_ms, last_tick) of every row, pause targets' too
_STATES: Final = (
    "SELECT name, open_run, failures, missed_at_ms, last_tick FROM {jobs} ORDER BY name"
)

# :job -> the job's last run: (job, instance, fencing_token, started_at_ms, ended_at_ms,
# outcome, error, trigger, detected_by) or nothing
_LAST_RUN: Final = """
SELECT job, instance, fencing_token, started_at_ms, ended_at_ms, outcome, error, trigger,
       detected_by
FROM {runs} WHERE job = :job AND kind = 'last'
"""

# :job :open_run :last_tick -> nothing; a noted trigger is served by this run, and a start
# with no tick (NULL) keeps the last started one
_OPEN: Final = """
INSERT INTO {jobs} (name, open_run, last_tick) VALUES (:job, :open_run, :last_tick)
ON CONFLICT (name) DO UPDATE SET
    open_run = excluded.open_run,
    buffered = 0,
    last_tick = coalesce(excluded.last_tick, {jobs}.last_tick)
"""

# :job :open_run :failures :buffered -> nothing
_ENDED: Final = """
INSERT INTO {jobs} (name, open_run, failures, buffered)
VALUES (:job, :open_run, :failures, :buffered)
ON CONFLICT (name) DO UPDATE SET
    open_run = excluded.open_run, failures = excluded.failures, buffered = excluded.buffered
"""

# :job -> nothing; one trigger noted while the run lock is held
_BUFFER: Final = """
INSERT INTO {jobs} (name, buffered) VALUES (:job, 1)
ON CONFLICT (name) DO UPDATE SET buffered = 1
"""

# :job :missed_at_ms -> nothing
_MISSED: Final = """
INSERT INTO {jobs} (name, missed_at_ms) VALUES (:job, :missed_at_ms)
ON CONFLICT (name) DO UPDATE SET missed_at_ms = excluded.missed_at_ms
"""

# :key :now_ms -> nothing; a live lock ends now (its holder's renewals fail), its row stays
_EXPIRE: Final = "UPDATE {locks} SET expires_at_ms = :now_ms WHERE key = :key"

# :target :pause -> nothing
_PAUSE: Final = """
INSERT INTO {jobs} (name, pause) VALUES (:target, :pause)
ON CONFLICT (name) DO UPDATE SET pause = excluded.pause
"""

# :target -> changes() 1 if a pause was removed
_RESUME: Final = "UPDATE {jobs} SET pause = NULL WHERE name = :target AND pause IS NOT NULL"

# :target -> (pause,) or nothing
_PAUSE_OF: Final = "SELECT pause FROM {jobs} WHERE name = :target AND pause IS NOT NULL"

Take = Callable[[sqlite3.Connection, int, str, str, int], "int | NotAcquired"]


@final
class SQLiteJobControl:
    """The job-control statements of one store's tables, run on its worker thread."""

    __slots__ = ("_expire_sql", "_sql")

    def __init__(self, names: dict[str, str]) -> None:
        """Fill in the quoted ``locks``, ``jobs`` and ``runs`` table names of ``names``."""
        self._expire_sql = _EXPIRE.format_map(names)
        self._sql = {
            name: sql.format_map(names)
            for name, sql in {
                "pauses": _PAUSES,
                "state": _STATE,
                "states": _STATES,
                "last_run": _LAST_RUN,
                "open": _OPEN,
                "ended": _ENDED,
                "buffer": _BUFFER,
                "missed": _MISSED,
                "pause": _PAUSE,
                "resume": _RESUME,
                "pause_of": _PAUSE_OF,
            }.items()
        }

    def start(
        self, db: sqlite3.Connection, now_ms: int, start: RunStart, take: Take
    ) -> RunStartAnswer:
        """Start a run unless paused or its tick ran, taking its lock with ``take`` when asked.

        A tick at or before the job's last started tick (compared in milliseconds, as kept)
        is refused before anything is taken; racing starts of one tick are decided by the
        transaction's write lock, taken before the last tick is read.
        """
        state = db.execute(self._sql["state"], {"job": start.job}).fetchone()
        open_run = None if state is None else open_run_from_json(state[0])
        failures = 0 if state is None else int(state[1])
        ran = None if state is None else tick_run_from_json(state[4])
        row = db.execute(self._sql["last_run"], {"job": start.job}).fetchone()
        last_run = None if row is None else run_from_row(row)
        if not start.ignore_pause:
            for target, kept in db.execute(self._sql["pauses"]).fetchall():
                pause = pause_from_json(target, kept)
                if pause_matches(target, start.job) and pause.live(start.open_run.started_at):
                    return RunStartAnswer(None, pause, open_run, last_run, failures)
        if refusing_tick(start, ran) is not None:
            return RunStartAnswer(None, None, open_run, last_run, failures, tick_ran=ran)
        taken = None
        token = start.open_run.fencing_token
        if start.take_key is not None:
            result = take(db, now_ms, start.take_key, start.owner, start.ttl_ms)
            if isinstance(result, NotAcquired) and start.when_busy == "replace":
                # expired by hand: the row and its token stay, the floor of the next one
                db.execute(self._expire_sql, {"key": start.take_key, "now_ms": now_ms})
                result = take(db, now_ms, start.take_key, start.owner, start.ttl_ms)
            if isinstance(result, NotAcquired):
                if start.when_busy == "buffer":
                    db.execute(self._sql["buffer"], {"job": start.job})
                return RunStartAnswer(result, None, open_run, last_run, failures)
            taken, token = Acquired(result), result
        ticked = (
            None
            if start.tick is None
            else tick_run_json(start.tick, start.open_run.instance, token)
        )
        db.execute(
            self._sql["open"],
            {
                "job": start.job,
                "open_run": open_run_json(start.open_run, token),
                "last_tick": ticked,
            },
        )
        return RunStartAnswer(taken, None, open_run, last_run, failures)

    def end(self, db: sqlite3.Connection, run: RunRecord) -> bool:
        """Close ``run`` if it is the open run, and count it in the failure streak.

        The run itself is recorded by the caller, in the same transaction. Returns whether a
        trigger was noted while it was the open run (cleared now).
        """
        state = db.execute(self._sql["state"], {"job": run.job}).fetchone()
        kept = None if state is None else state[0]
        failures = 0 if state is None else int(state[1])
        buffered = state is not None and bool(state[3])
        opened = open_run_from_json(kept)
        served = False
        if (
            opened is not None
            and opened.fencing_token == run.fencing_token
            and opened.started_at == run.started_at
        ):
            kept, served, buffered = None, buffered, False
        failures = {"ok": 0, "error": failures + 1}.get(run.outcome, failures)
        db.execute(
            self._sql["ended"],
            {"job": run.job, "open_run": kept, "failures": failures, "buffered": int(buffered)},
        )
        return served

    def note_missed(self, db: sqlite3.Connection, job: str, missed_at: datetime) -> None:
        """Record the missed tick of ``job``."""
        db.execute(self._sql["missed"], {"job": job, "missed_at_ms": epoch_ms(missed_at)})

    def pause(self, db: sqlite3.Connection, pause: JobPause) -> None:
        """Keep ``pause``."""
        db.execute(self._sql["pause"], {"target": pause.target, "pause": pause_json(pause)})

    def resume(self, db: sqlite3.Connection, target: str) -> JobPause | None:
        """Remove the pause of ``target``; return it."""
        row = db.execute(self._sql["pause_of"], {"target": target}).fetchone()
        if row is None:
            return None
        db.execute(self._sql["resume"], {"target": target})
        return pause_from_json(target, row[0])

    def pauses(self, db: sqlite3.Connection) -> list[JobPause]:
        """Return every pause kept, by target."""
        return [pause_from_json(target, kept) for target, kept in db.execute(self._sql["pauses"])]

    def states(self, db: sqlite3.Connection, jobs: Sequence[str] | None) -> list[JobState]:
        """Return the states worth listing of ``jobs`` (all when ``None``), by job."""
        wanted = None if jobs is None else set(jobs)
        found = (
            JobState(
                str(name),
                open_run_from_json(open_run),
                int(failures),
                None if missed_at_ms is None else from_epoch_ms(int(missed_at_ms)),
                tick_run_from_json(last_tick),
            )
            for name, open_run, failures, missed_at_ms, last_tick in db.execute(self._sql["states"])
            if wanted is None or name in wanted
        )
        # a pause target's row has no state: the contract's own test leaves it out
        return [state for state in found if state.worth_listing]


def add_missing_columns(db: sqlite3.Connection, names: Mapping[str, str]) -> None:
    """Add to the tables of ``names`` (quoted) the :data:`COLUMNS_ADDED` they lack.

    Call it inside a ``BEGIN IMMEDIATE`` transaction: SQLite has no ``ADD COLUMN IF NOT
    EXISTS``, and the write lock keeps another process that opens the file at once from adding
    a column between this one's check and its ``ALTER TABLE``.
    """
    for kind, added in COLUMNS_ADDED.items():
        table = names[kind]
        present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for name, definition in added:
            if name not in present:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {definition}")
