"""The schedule: cron expressions from the settings, fired by one APScheduler per instance.

Every instance runs the same scheduler with the same jobs, as replicas of one application do:
whether a tick runs, and where, is leaselock's decision (or nobody's, with plain cron).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final
from zoneinfo import ZoneInfo

from apscheduler.schedulers.asyncio import AsyncIOScheduler  # type: ignore[import-untyped]
from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped]

INVOICE_EXPORT_JOB: Final = "invoice-export"
STOCK_RECONCILIATION_JOB: Final = "stock-reconciliation"

CRONTAB_FIELDS: Final = 5
CRONTAB_FIELDS_WITH_SECONDS: Final = 6

# a tick that starts late (a busy loop, a slow start) still runs within this many seconds
MISFIRE_GRACE_S: Final = 60

Tick = Callable[[], Awaitable[object]]


def cron_trigger(expression: str, timezone: ZoneInfo) -> CronTrigger:
    """Return the trigger of a crontab expression, with an optional leading seconds field.

    ``"0 2 * * *"`` is 02:00 every day; ``"*/3 * * * * *"`` (six fields) every three seconds.

    Raises:
        ValueError: the expression is not one; the message says how to write it.
    """
    fields = expression.split()
    if len(fields) == CRONTAB_FIELDS:
        second, (minute, hour, day, month, day_of_week) = "0", fields
    elif len(fields) == CRONTAB_FIELDS_WITH_SECONDS:
        second, minute, hour, day, month, day_of_week = fields
    else:
        raise ValueError(
            f"{expression!r} has {len(fields)} fields; write 5 (minute hour day month "
            'day-of-week, e.g. "0 2 * * *") or 6 with seconds first (e.g. "*/3 * * * * *")'
        )
    if any(character.isdigit() for character in day_of_week):
        # APScheduler 3 counts weekdays from Monday = 0, crontab from Sunday = 0: names are safe
        raise ValueError(
            f"{expression!r} names the day of week by number, which APScheduler 3 reads "
            'differently from crontab; use names such as "mon-fri" or "sun"'
        )
    try:
        return CronTrigger(
            second=second,
            minute=minute,
            hour=hour,
            day=day,
            month=month,
            day_of_week=day_of_week,
            timezone=timezone,
        )
    except ValueError as error:
        raise ValueError(f"{expression!r} is not a cron expression: {error}") from None


def start_scheduler(
    timezone: ZoneInfo, *, export_invoices: tuple[str, Tick], reconcile_stock: tuple[str, Tick]
) -> AsyncIOScheduler:
    """Start an ``AsyncIOScheduler`` on the running loop with the shop's two jobs.

    Args:
        timezone: the time zone of both cron expressions.
        export_invoices: the cron expression of the invoice export and what each tick calls.
        reconcile_stock: the same for the stock reconciliation.

    Returns:
        The started scheduler; ``shutdown()`` it when the application stops.
    """
    scheduler = AsyncIOScheduler(
        timezone=timezone,
        # coalesce: ticks missed while the loop was busy run once, not once each
        job_defaults={"coalesce": True, "misfire_grace_time": MISFIRE_GRACE_S},
    )
    for job_id, (expression, tick) in (
        (INVOICE_EXPORT_JOB, export_invoices),
        (STOCK_RECONCILIATION_JOB, reconcile_stock),
    ):
        scheduler.add_job(tick, cron_trigger(expression, timezone), id=job_id, name=job_id)
    scheduler.start()
    return scheduler
