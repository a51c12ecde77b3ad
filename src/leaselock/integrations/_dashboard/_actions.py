"""What an operator does from the dashboard: break a lock, pause, resume, run a job now.

Each action takes two steps: a confirmation page (a GET that changes nothing) saying what will
happen and to whom, then a POST of its form, carrying the session's CSRF token. The POST acts
through the ``Locks`` operator calls with ``by="<operator> (dashboard)"``, so each one is an
``operator-acted`` event and a WARNING line in the application's log (the audit trail), and
logs the client's address on ``leaselock.dashboard`` too. What it changed shows at once: the
snapshot is corrected without waiting for the next reading.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal, final

from ..._clock import utc_now
from ..._errors import LockError
from ..._jobs import JobStatus
from ..._locks import Locks
from ..._redact import redact_secrets
from ...stores._common._capabilities import LockInfo
from ...stores._common._job_control import pause_matches
from ._text import esc, moment
from ._watch import Seen, Watch

__all__ = ["ACTIONS", "Action", "Actions", "Outcome", "Proposal"]

Action = Literal["break", "pause", "resume", "run"]
ACTIONS: Final[frozenset[str]] = frozenset({"break", "pause", "resume", "run"})
MAX_NOTE_CHARS: Final = 500
NOTICES_KEPT: Final = 5

_log = logging.getLogger("leaselock.dashboard")


@final
@dataclass(frozen=True, slots=True)
class Proposal:
    """A confirmation to show: what will happen, and the button that does it.

    ``refusal`` is set instead when there is nothing to do (no live lock, no such job).
    """

    heading: str
    explain: tuple[str, ...] = ()
    inputs: str = ""
    confirm: str = ""
    back: str = "/"
    refusal: str | None = None


@final
@dataclass(frozen=True, slots=True)
class Outcome:
    """What an action did, in one line, and the page to go back to."""

    said: str
    back: str


@final
class Actions:
    """Proposes and carries out the operator's actions for one dashboard.

    Args:
        locks: returns the started ``Locks`` to act through.
        watch: the snapshot that shows an action's effect at once.
        statuses: the jobs' statuses now, to name what a pause would stop.
        runnable: the jobs this process can run now.
    """

    __slots__ = ("_locks", "_runnable", "_runs", "_statuses", "_watch", "notices")

    def __init__(
        self,
        locks: Callable[[], Awaitable[Locks]],
        watch: Watch,
        statuses: Callable[[], Sequence[JobStatus]],
        runnable: Callable[[], frozenset[str]],
    ) -> None:
        """Act through ``locks``; see the class."""
        self._locks = locks
        self._watch = watch
        self._statuses = statuses
        self._runnable = runnable
        self._runs: set[asyncio.Task[None]] = set()
        self.notices: deque[str] = deque(maxlen=NOTICES_KEPT)

    # --- step one: what will happen -------------------------------------------------------

    async def propose(self, action: Action, target: str) -> Proposal:
        """Return the confirmation of ``action`` on ``target``; it changes nothing.

        Raises:
            LockError: the store could not be read.
        """
        if action == "break":
            return await self._propose_break(target)
        if action == "pause":
            return self._propose_pause(target)
        if action == "resume":
            return self._propose_resume(target)
        return await self._propose_run(target)

    async def _propose_break(self, target: str) -> Proposal:
        held = await (await self._locks()).read_lock(target)
        if held is None or not held.live:
            return Proposal(
                "Break a lock", refusal=f"No live lock holds {target!r}; nothing to break."
            )
        left = "" if held.expires_in_ms is None else f", {held.expires_in_ms / 1000:.1f} s left"
        token = "" if held.fencing_token is None else f" (fencing token {held.fencing_token}"
        return Proposal(
            "Break a lock",
            (
                (
                    f"Break the lock on <code>{esc(target)}</code> held by "
                    f"<b>{esc(held.holder)}</b>{esc(token)}{esc(left)}{')' if token else ''}?"
                ),
                (
                    "The next acquire anywhere takes it at once, with a greater fencing token, "
                    "so a late write of this holder is refused by fencing. The holder finds out "
                    "at its next renewal: its signal aborts, detected by renewal."
                ),
                (
                    "Break a lock whose holder is stuck or gone: a healthy holder just loses its "
                    "lease, and its work is cut short."
                ),
            ),
            confirm="Break the lock",
            back="/",
        )

    def _propose_pause(self, target: str) -> Proposal:
        statuses = self._statuses()
        named = [s.job for s in statuses if pause_matches(target, s.job)]
        if not named:
            known = ", ".join(s.job for s in statuses) or "none yet"
            return Proposal(
                "Pause jobs",
                refusal=f"{target!r} names no job this dashboard knows (its jobs: {known}).",
                back="/jobs",
            )
        jobs = f"{len(named)} job{'s' * (len(named) != 1)}"
        return Proposal(
            "Pause jobs",
            (
                f"Pause <code>{esc(target)}</code>: {jobs} ({esc(', '.join(named))})?",
                (
                    "Every instance skips their ticks from the next one, saying who paused them "
                    "and why, until they are resumed (or until the time given). A run in "
                    "progress finishes. Their overdue alerts are silenced meanwhile."
                ),
            ),
            inputs=(
                f'<label>Why (shown with every skipped tick) <input name="note" '
                f'maxlength="{MAX_NOTE_CHARS}" placeholder="stock-taking in aisle 7"></label>'
                '<label>For how long (empty: until resumed) <input name="until" '
                'placeholder="2h"></label>'
            ),
            confirm="Pause",
            back="/jobs",
        )

    def _propose_resume(self, target: str) -> Proposal:
        pause = next((p for p in self._watch.snapshot.pauses if p.target == target), None)
        paused = ""
        if pause is not None:
            when = moment(pause.paused_at, utc_now(), "ago")
            note = esc(": " + pause.note if pause.note else "")
            paused = f" (paused by {esc(pause.paused_by)} {when}{note})"
        return Proposal(
            "Resume jobs",
            (
                f"Resume <code>{esc(target)}</code>{paused}?",
                "Its next tick runs, on whichever instance owns it. Paused ticks are not replayed.",
            ),
            confirm="Resume",
            back="/jobs",
        )

    async def _propose_run(self, target: str) -> Proposal:
        if target not in self._runnable():
            return Proposal(
                "Run a job now",
                refusal=(
                    f"{target!r} cannot run from here: only a dashboard mounted in an application "
                    "that registers the job can run it (leaselock run --job module:attribute runs "
                    "it from a shell)."
                ),
                back="/jobs",
            )
        instance = (await self._locks()).instance
        return Proposal(
            "Run a job now",
            (
                (
                    f"Run <code>{esc(target)}</code> once, now, here on <b>{esc(instance)}</b>, "
                    "whatever its pause?"
                ),
                (
                    "It runs under its run lock, so never beside another run of it: refused "
                    "while one is in progress. Its run is recorded as manual."
                ),
            ),
            confirm="Run now",
            back="/jobs",
        )

    # --- step two: do it ------------------------------------------------------------------

    async def carry_out(
        self, action: Action, target: str, fields: Mapping[str, str], operator: str, client: str
    ) -> Outcome:
        """Do ``action`` on ``target`` for ``operator``; say what happened.

        Raises:
            LockError: the store refused or failed, or an argument is wrong (a pause's
                ``until``); the message says why.
        """
        by = f"{operator} (dashboard)"
        _log.warning("Dashboard: %s from %s asks to %s %r", operator, client, action, target)
        locks = await self._locks()
        if action == "break":
            broken = await locks.break_lock(target, by=by)
            if broken is None:
                return Outcome(f"No live lock held {target!r}; nothing was broken.", "/")
            self._show_free(broken)
            token = (
                "" if broken.fencing_token is None else f", fencing token {broken.fencing_token}"
            )
            return Outcome(
                f"Broke the lock on {target!r}: it was held by {broken.holder}{token}. The next "
                "acquire takes it with a greater token; the holder finds out at its next renewal.",
                "/",
            )
        if action == "pause":
            note = fields.get("note", "")[:MAX_NOTE_CHARS]
            until = fields.get("until", "").strip() or None
            pause = await locks.pause(target, note=note, until=until, by=by)
            snapshot = self._watch.snapshot
            snapshot.pauses = [p for p in snapshot.pauses if p.target != target] + [pause]
            self._watch.bump()
            return Outcome(
                f"Paused {target!r}: every instance skips its ticks from the next one.", "/jobs"
            )
        if action == "resume":
            removed = await locks.resume(target, by=by)
            snapshot = self._watch.snapshot
            snapshot.pauses = [p for p in snapshot.pauses if p.target != target]
            self._watch.bump()
            if removed is None:
                return Outcome(f"{target!r} was not paused; nothing changed.", "/jobs")
            return Outcome(f"Resumed {target!r}: it runs from its next tick.", "/jobs")
        self._run_in_the_background(locks, target, by)
        return Outcome(
            f"Running {target!r} now on {locks.instance}; its run shows under its recent runs "
            "when it ends.",
            "/jobs",
        )

    def _show_free(self, broken: LockInfo) -> None:
        seen = self._watch.snapshot.locks.get(broken.key)
        if seen is not None and seen.info.owner == broken.owner:
            free = replace(seen.info, owner=None, expires_in_ms=None)
            self._watch.snapshot.locks[broken.key] = Seen(free, utc_now())
        self._watch.bump()

    def _run_in_the_background(self, locks: Locks, job: str, by: str) -> None:
        async def run() -> None:
            try:
                await locks.run_now(job, by=by)
            except LockError as error:
                self.notices.append(f"The run of {job!r} asked for by {by} did not run: {error}")
            except Exception as error:  # noqa: BLE001 -- the job's own failure: shown, and in its record
                self.notices.append(
                    redact_secrets(f"The run of {job!r} raised {type(error).__name__}: {error}")
                )
            self._watch.bump()

        # the page answers at once; a long job goes on after the request, as its ticks do
        task = asyncio.get_running_loop().create_task(run())
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)

    async def aclose(self) -> None:
        """Wait for runs asked for from the page to end (a ``Locks`` closing waits for them too)."""
        await asyncio.gather(*self._runs, return_exceptions=True)
