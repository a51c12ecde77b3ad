"""The admin endpoints: export invoices, see every job's runs, steer the jobs, pause a scheduler.

The export runs under the nightly run's lock; the runs come from the lock store's run records;
a job paused here is paused on every instance (the pause is kept in the lock store). The same
ADMIN_TOKEN opens the operator's dashboard at ``/admin/locks`` (see ``app.py``): a browser
cannot send the ``x-admin-token`` header, so there an operator signs in with it.
"""

from __future__ import annotations

import hmac
from datetime import datetime
from typing import Annotated, Final, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Request, status
from pydantic import BaseModel

from leaselock import LockNotAcquiredError, LocksConfigurationError
from leaselock.stores import JobPause, RunRecord

from .jobs import INVOICE_EXPORT_KEY, ExportResult
from .state import shop_of

# a manual export waits this long for a run in progress (scheduled or manual) to finish
EXPORT_WAIT: Final = "2s"

router = APIRouter()


def require_admin_token(
    request: Request, x_admin_token: Annotated[str | None, Header()] = None
) -> None:
    """Refuse the request unless its ``x-admin-token`` header is the shop's ``ADMIN_TOKEN``.

    Raises:
        HTTPException: 403 when the header is missing or wrong.
    """
    expected = shop_of(request.app).settings.admin_token.get_secret_value()
    # constant time: how long the comparison takes must not tell how much of a guess was right
    if x_admin_token is None or not hmac.compare_digest(x_admin_token.encode(), expected.encode()):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            detail="Send the shop's ADMIN_TOKEN in the x-admin-token header",
        )


@router.post("/admin/invoice-exports", dependencies=[Depends(require_admin_token)])
async def export_invoices(request: Request) -> ExportResult:
    """Export every placed order without an invoice now.

    Takes the lock of the nightly export, so a manual export and a scheduled one never run at
    once, on any instance: it waits up to 2 s for one in progress, then answers 409.
    """
    shop = shop_of(request.app)
    try:
        return await shop.locks.with_lock(
            INVOICE_EXPORT_KEY, shop.invoice_export.export, wait=EXPORT_WAIT
        )
    except LockNotAcquiredError as error:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            detail=(
                f"An invoice export is already running (lock {error.key!r} stayed held for "
                f"{error.waited_ms / 1000:g} s); its orders are being exported, try again once "
                "it has finished"
            ),
        ) from error


class JobRun(BaseModel):
    """One run of a job, as the lock store keeps it."""

    instance: str
    outcome: str
    error: str | None
    started_at: datetime
    seconds: float
    fencing_token: int | None


class Pause(BaseModel):
    """A pause of a job (or of every job under a prefix ending in ``*``) on every instance."""

    target: str
    note: str
    paused_by: str
    paused_at: datetime
    until: datetime | None


class PauseRequest(BaseModel):
    """Why the job is paused, and for how long (``"2h"``; none: until resumed)."""

    note: str = ""
    until: str | None = None


class JobState(BaseModel):
    """A job's last run, last success, where it runs now, and what an operator should know."""

    job: str
    last_run: JobRun | None
    last_success: JobRun | None
    owner: str | None
    running_on: str | None
    overdue: bool
    paused: Pause | None
    failures: int
    missed_at: datetime | None


def _pause(pause: JobPause | None) -> Pause | None:
    if pause is None:
        return None
    return Pause(
        target=pause.target,
        note=pause.note,
        paused_by=pause.paused_by,
        paused_at=pause.paused_at,
        until=pause.until,
    )


def _run(record: RunRecord | None) -> JobRun | None:
    if record is None:
        return None
    return JobRun(
        instance=record.instance,
        outcome=record.outcome,
        error=record.error,
        started_at=record.started_at,
        seconds=record.duration.total_seconds(),
        fencing_token=record.fencing_token,
    )


@router.get("/admin/jobs", dependencies=[Depends(require_admin_token)])
async def jobs(request: Request) -> list[JobState]:
    """Every job's last run and last success, from any instance, and where it runs now."""
    return [
        JobState(
            job=status.job,
            last_run=_run(status.last_run),
            last_success=_run(status.last_success),
            owner=status.owner,
            running_on=status.running_on,
            overdue=status.overdue,
            paused=_pause(status.paused),
            failures=status.failures,
            missed_at=status.missed_at,
        )
        for status in await shop_of(request.app).locks.jobs()
    ]


@router.post("/admin/jobs/{key}/pause", dependencies=[Depends(require_admin_token)])
async def pause_job(request: Request, key: str, asked: PauseRequest) -> Pause:
    """Pause the job ``key`` (or every job under ``prefix*``) on every instance.

    Every instance skips its ticks from the next one, saying who paused it and why, until
    ``/resume`` (or ``until``); its overdue alert is silenced meanwhile. 404 for a key (or a
    prefix) that names none of this shop's jobs, as ``/run`` answers: a typo must not look
    like a pause.
    """
    locks = shop_of(request.app).locks
    jobs = [status.job for status in await locks.jobs()]
    named = (
        [job for job in jobs if job.startswith(key[:-1])]
        if key.endswith("*")
        else [key] * (key in jobs)
    )
    if not named:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            detail=f"{key!r} names no job of this shop; its jobs are {', '.join(sorted(jobs))}",
        )
    try:
        pause = await locks.pause(key, note=asked.note, until=asked.until, by="admin API")
    except LocksConfigurationError as error:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=str(error)) from error
    paused = _pause(pause)
    assert paused is not None  # noqa: S101 -- a pause was just made
    return paused


@router.post("/admin/jobs/{key}/resume", dependencies=[Depends(require_admin_token)])
async def resume_job(request: Request, key: str) -> dict[str, Pause | None]:
    """Resume ``key`` (as it was paused): it runs from its next tick, no backlog replayed."""
    return {"resumed": _pause(await shop_of(request.app).locks.resume(key))}


@router.post("/admin/jobs/{key}/run", dependencies=[Depends(require_admin_token)])
async def run_job(request: Request, key: str) -> dict[str, str]:
    """Run the job ``key`` once, now, on this instance, even while it is paused.

    It runs under its run lock, so never beside a scheduled run of it: 409 while one is in
    progress; 404 for a job this shop does not have.
    """
    try:
        result = await shop_of(request.app).locks.run_now(key)
    except LockNotAcquiredError as error:
        raise HTTPException(status.HTTP_409_CONFLICT, detail=str(error)) from error
    except LocksConfigurationError as error:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=str(error)) from error
    return {"job": key, "ran": "ok", "result": repr(result)}


@router.post("/admin/scheduler/{action}", dependencies=[Depends(require_admin_token)])
async def control_scheduler(request: Request, action: Literal["pause", "resume"]) -> dict[str, str]:
    """Pause or resume this instance's scheduler while the process (and its leases) live on.

    What a scheduler that stopped firing looks like: the demo pauses the owner's, and leaselock
    hands the job over once no tick came for its ``owner_idle``.
    """
    scheduler = shop_of(request.app).scheduler
    if scheduler is None:
        raise HTTPException(status.HTTP_409_CONFLICT, detail="The scheduler is not running")
    if action == "pause":
        scheduler.pause()
    else:
        scheduler.resume()
    return {"scheduler": "paused" if action == "pause" else "running"}
