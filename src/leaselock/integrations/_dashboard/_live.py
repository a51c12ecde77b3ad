"""The live part of each page, re-drawn from the snapshot at every change and pushed by stream.

Each function returns the HTML of one page's ``<section id="live">``: a line saying how fresh
the reading is (and, in one line, why a read failed), an empty state that says what to do, or
the table. Actions are links to their confirmation page, shown only to whoever may act.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, final
from urllib.parse import urlencode

from ..._jobs import JobStatus
from ..._timeline import render_svg
from ...stores._common._capabilities import RunRecord
from ._history import History
from ._text import esc, moment, relative, said
from ._watch import LISTING_LIMIT, Read, Seen, Snapshot

__all__ = ["MAX_LANES", "Viewer", "jobs_part", "locks_part", "timeline_part"]

MAX_LANES: Final = 40
MIN_SPAN: Final = timedelta(seconds=30)
MARGIN: Final = timedelta(seconds=2)
SHORT_OWNER: Final = 8


@final
@dataclass(frozen=True, slots=True)
class Viewer:
    """Who looks, and from where: what the live part may offer.

    Attributes:
        root: the mount point.
        may_act: whether this viewer may break, pause, resume and run.
        runnable: the jobs this process can run now (registered with its ``Locks``).
    """

    root: str
    may_act: bool
    runnable: frozenset[str] = frozenset()

    def confirm(self, action: str, target: str) -> str:
        """Return the URL of the confirmation of ``action`` on ``target``."""
        return f"{self.root}/confirm?{urlencode({'action': action, 'target': target})}"


READS_SAID: Final[dict[Read, str]] = {
    "locks": "the locks",
    "records": "the run records",
    "states": "the failure streaks",
    "pauses": "the pauses",
}


def _status(snapshot: Snapshot, reads: Sequence[Read], now: datetime, what: str) -> str:
    """The freshness line: when the oldest of ``reads`` was made, and what is not read yet.

    Then each read's error, one line each.
    """
    errors = [
        f'<p class="error" role="alert">{said(snapshot.errors[read])}</p>'
        for read in reads
        if read in snapshot.errors
    ]
    times = [snapshot.read_at[read] for read in reads if read in snapshot.read_at]
    pending = [READS_SAID[read] for read in reads if read not in snapshot.read_at]
    if not times:
        fresh = f"Reading {what} from the store…"
    else:
        fresh = f"{what.capitalize()} read {moment(min(times), now, 'ago')}"
        if pending:
            fresh += f"; still reading {esc(', '.join(pending))}…"
    return f'<p class="status">{fresh}</p>{"".join(errors)}'


# --- locks ----------------------------------------------------------------------------------


def locks_part(snapshot: Snapshot, viewer: Viewer, prefix: str, now: datetime) -> str:
    """Return the live part of the locks page: every live lock under ``prefix``."""
    status = _status(snapshot, ("locks",), now, "the locks")
    if "locks" not in snapshot.read_at:
        return status
    seen = sorted(
        (s for s in snapshot.locks.values() if s.info.key.startswith(prefix)),
        key=lambda s: s.info.key,
    )
    live = [s for s in seen if s.info.live]
    released = len(seen) - len(live)
    counts = _count(len(live), "live lock") + (
        f", {released} released (the store keeps their token)" if released else ""
    )
    more = (
        f'<p class="note">The store has more than {LISTING_LIMIT} locks: these are the first, '
        "by key. Narrow them with a prefix.</p>"
        if snapshot.truncated
        else ""
    )
    if not live:
        under = f" under <code>{esc(prefix)}</code>" if prefix else ""
        return (
            f'{status}<div class="empty"><p><b>No live lock{under}.</b></p><p>A lock shows here '
            "while an instance holds it (<code>async with locks.hold(key)</code>, a job's run, "
            "a leader's lease). Nothing yet? Check that this is the store, and the Redis "
            "prefix, your application uses.</p></div>"
        )
    rows = "".join(_lock_row(s, viewer, now) for s in live)
    return (
        f'{status}<p class="counts">{counts}</p>{more}<table class="locks"><thead><tr>'
        "<th>Key</th><th>Holder</th><th>Token</th><th>Time left</th><th>Owner id</th><th></th>"
        f"</tr></thead><tbody>{rows}</tbody></table>"
    )


def _lock_row(seen: Seen, viewer: Viewer, now: datetime) -> str:
    info = seen.info
    expires_at = seen.expires_at
    left = "-" if expires_at is None else moment(expires_at, now, "left")
    token = "-" if info.fencing_token is None else str(info.fencing_token)
    owner = (info.owner or "")[:SHORT_OWNER]
    act = (
        f'<a class="button small danger" href="{esc(viewer.confirm("break", info.key))}">Break…</a>'
        if viewer.may_act
        else ""
    )
    return (
        f'<tr data-key="{esc(info.key)}"><td data-label="Key"><code>{esc(info.key)}</code></td>'
        f'<td data-label="Holder">{esc(info.holder or "-")}</td>'
        f'<td data-label="Token" class="num">{esc(token)}</td>'
        f'<td data-label="Time left">{left}</td>'
        f'<td data-label="Owner id"><code title="{esc(info.owner or "")}">{esc(owner)}</code></td>'
        f'<td class="actions">{act}</td></tr>'
    )


# --- jobs -----------------------------------------------------------------------------------


def jobs_part(
    snapshot: Snapshot,
    statuses: Sequence[JobStatus],
    *,
    history: History,
    viewer: Viewer,
    notices: Sequence[str],
    now: datetime,
) -> str:
    """Return the live part of the jobs page: every job, its state, its recent runs."""
    status = _status(snapshot, ("records", "states", "pauses", "locks"), now, "the jobs")
    said_lines = "".join(f'<p class="flash" role="status">{said(line)}</p>' for line in notices)
    pauses = _pauses(snapshot, viewer, now)
    if not statuses:
        if "records" not in snapshot.read_at:
            return status + said_lines
        return (
            f'{status}{said_lines}<div class="empty"><p><b>No job has run records in this '
            "store yet.</b></p><p>A job shows here after its first run on any instance: "
            "decorate it with <code>@locks.on_one_instance</code> or "
            "<code>@locks.without_overlapping</code> and let its scheduler fire; the jobs "
            f"registered with the application that serves this page show at once.</p></div>{pauses}"
        )
    rows = "".join(_job_rows(job, history.runs(job.job), viewer, now) for job in statuses)
    return (
        f'{status}{said_lines}<table class="jobs"><thead><tr><th>Job</th><th>State</th>'
        "<th>Last run</th><th>Last success</th><th>Owner</th><th>Running on</th><th></th>"
        f"</tr></thead><tbody>{rows}</tbody></table>{pauses}"
    )


def _job_rows(job: JobStatus, runs: Sequence[RunRecord], viewer: Viewer, now: datetime) -> str:
    last, success = job.last_run, job.last_success
    actions = ""
    if viewer.may_act:
        if job.paused is not None and job.paused.target == job.job:
            actions += _button(viewer, "resume", job.job, "Resume…")
        else:
            actions += _button(viewer, "pause", job.job, "Pause…")
        if job.job in viewer.runnable:
            actions += _button(viewer, "run", job.job, "Run now…")
    runs_html = "".join(f"<li>{_run(run, now)}</li>" for run in runs) or "<li>none seen yet</li>"
    return (
        f'<tr data-job="{esc(job.job)}"><td data-label="Job"><code>{esc(job.job)}</code>'
        f"<details><summary>recent runs</summary><ul>{runs_html}</ul></details></td>"
        f'<td data-label="State">{_state(job, now)}</td>'
        f'<td data-label="Last run">{"-" if last is None else _run(last, now)}</td>'
        f'<td data-label="Last success">{"never" if success is None else _run(success, now)}</td>'
        f'<td data-label="Owner">{esc(job.owner or "-")}</td>'
        f'<td data-label="Running on">{esc(job.running_on or "-")}</td>'
        f'<td class="actions">{actions}</td></tr>'
    )


def _button(viewer: Viewer, action: str, target: str, label: str) -> str:
    kind = " danger" if action in ("pause", "run") else ""
    return f'<a class="button small{kind}" href="{esc(viewer.confirm(action, target))}">{label}</a>'


def _run(run: RunRecord, now: datetime) -> str:
    outcome = run.outcome + (f": {run.error}" if run.error else "")
    trigger = "" if run.trigger == "schedule" else f" ({run.trigger})"
    token = "" if run.fencing_token is None else f", token {run.fencing_token}"
    took = run.duration.total_seconds()
    return (
        f'<span class="outcome {esc(run.outcome)}">{said(outcome)}</span>{esc(trigger)} '
        f"{moment(run.ended_at, now, 'ago')} on {esc(run.instance)}, took {took:.1f} s{esc(token)}"
    )


def _state(job: JobStatus, now: datetime) -> str:
    said_parts = []
    if job.paused is not None:
        note = f": {job.paused.note}" if job.paused.note else ""
        until = (
            "" if job.paused.until is None else f", until {moment(job.paused.until, now, 'left')}"
        )
        by = esc(job.paused.paused_by)
        said_parts.append(f'<span class="tag paused">paused</span> by {by}{esc(note)}{until}')
    if job.overdue:
        said_parts.append('<span class="tag bad">overdue</span>')
    if job.failures:
        said_parts.append(f'<span class="tag bad">failing</span> {job.failures} in a row')
    if job.missed_at is not None:
        said_parts.append(
            f'<span class="tag warn">missed a tick</span> {moment(job.missed_at, now, "ago")}'
        )
    if job.last_run is not None and job.last_run.detected_by == "abandoned":
        said_parts.append(
            f'<span class="tag warn">abandoned</span> on {esc(job.last_run.instance)}'
        )
    if job.expect_every is not None and not job.overdue:
        every = job.expect_every.total_seconds()
        said_parts.append(f'<span class="tag ok">ok</span> expected every {every:g} s')
    said = "<br>".join(said_parts) or '<span class="tag ok">ok</span>'
    ticked = job.last_tick
    if ticked is not None:
        at = ticked.at.isoformat(timespec="seconds")
        said += f"<br>last tick {esc(at)} on {esc(ticked.instance)}"
    return said


def _pauses(snapshot: Snapshot, viewer: Viewer, now: datetime) -> str:
    rows = "".join(
        f"<li><code>{esc(pause.target)}</code> paused by {esc(pause.paused_by)}"
        f"{esc(': ' + pause.note if pause.note else '')} {moment(pause.paused_at, now, 'ago')}"
        + (_button(viewer, "resume", pause.target, "Resume…") if viewer.may_act else "")
        + "</li>"
        for pause in snapshot.pauses
        if pause.live(now)
    )
    kept = f'<ul class="pauses">{rows}</ul>' if rows else "<p>No pause is kept.</p>"
    form = ""
    if viewer.may_act:
        form = (
            f'<form class="inline" method="get" action="{esc(viewer.root)}/confirm">'
            '<input type="hidden" name="action" value="pause">'
            '<label>Pause every job under <input name="target" placeholder="reports:*" required '
            'pattern=".*\\*$" title="a prefix ending in *"></label><button>Pause…</button></form>'
        )
    return f"<h2>Pauses</h2>{kept}{form}"


# --- timeline -------------------------------------------------------------------------------


def timeline_part(snapshot: Snapshot, history: History, prefix: str, now: datetime) -> str:
    """Return the live part of the timeline page: who held which lock in the last minutes."""
    status = _status(snapshot, ("locks",), now, "the locks")
    window_s = history.window.total_seconds()
    leases = history.leases(now, prefix)
    if not leases:
        span = relative(now - history.window, now, "ago").removesuffix(" ago")
        return (
            f'{status}<div class="empty"><p><b>No lease in the last {esc(span)}.</b></p><p>A '
            "lease shows here from the reading that first sees it (a second or two apart) or, "
            "for this application's own locks, from the moment it takes them.</p></div>"
        )
    latest: dict[str, datetime] = {}
    for lease in leases:
        latest[lease.key] = max(latest.get(lease.key, lease.start), lease.end)
    keys = sorted(latest, key=lambda key: latest[key], reverse=True)[:MAX_LANES]
    drawn = [lease for lease in leases if lease.key in set(keys)]
    more = (
        f'<p class="note">The {MAX_LANES} keys held most recently of {len(latest)}: narrow them '
        "with a prefix.</p>"
        if len(latest) > MAX_LANES
        else ""
    )
    # the window, or less while less has been seen: a lease seen a second ago is no sliver
    since = max(now - history.window, min(lease.start for lease in drawn) - MARGIN)
    svg = render_svg(drawn, span=(min(since, now - MIN_SPAN), now))
    return (
        f'{status}<p class="counts">Up to the last {window_s / 60:g} min: '
        f"{_count(len(drawn), 'lease')} on {_count(min(len(latest), MAX_LANES), 'key')}. Hover a "
        "bar for its holder, token and times.</p>"
        f'{more}<div class="timeline">{svg}</div>'
    )


def _count(number: int, thing: str) -> str:
    return f"{number} {thing}{'s' * (number != 1)}"
