"""The shop's settings: read from the environment once, checked before anything starts.

A wrong value stops the start-up with a :class:`SettingsError` that names the variable, what is
wrong with it and how to fix it, rather than failing at 02:00 when the nightly export first runs.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Final, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

import leaselock
from leaselock import Locks, LocksConfigurationError

from .database import async_database_url
from .schedule import cron_trigger

DEFAULT_DATABASE_URL: Final = "sqlite:///shop.db"
MIN_ADMIN_TOKEN_LENGTH: Final = 16


S = TypeVar("S", bound="DatabaseSettings")


class SettingsError(Exception):
    """The environment does not describe a shop that can start; the message lists every fix."""


class DatabaseSettings(BaseSettings):
    """What migrations need: the database, and nothing the running shop alone needs."""

    # an exported but empty variable (`make demo` exports DATABASE_URL even when unset) is unset
    model_config = SettingsConfigDict(env_ignore_empty=True, extra="forbid")

    database_url: str = Field(
        default=DEFAULT_DATABASE_URL,
        description=(
            "where orders, products and (without REDIS_URL) the locks live: sqlite:///path.db "
            "or postgresql://user:password@host:5432/database"
        ),
    )

    @field_validator("database_url")
    @classmethod
    def _usable_database(cls, url: str) -> str:
        async_database_url(url)
        return url


class Settings(DatabaseSettings):
    """Everything the shop reads from its environment (variable names are the field names)."""

    admin_token: SecretStr = Field(
        description=(
            "the secret that POST /admin/invoice-exports expects in its x-admin-token header; "
            f"at least {MIN_ADMIN_TOKEN_LENGTH} characters, e.g. from `openssl rand -hex 32`"
        ),
    )
    redis_url: str | None = Field(
        default=None,
        description="keep the locks in Redis (redis://host:6379/0) instead of the database",
    )
    redis_lock_prefix: str = Field(
        default="shop:", description="the start of every Redis key the locks use; ends with ':'"
    )
    lock_ttl: str = Field(
        default="30s",
        description=(
            'how long a lease outlives its last renewal: "30s", "1500ms", "5m"; a crashed '
            "instance's jobs move to another instance after this long"
        ),
    )
    invoice_export_cron: str = Field(
        default="0 2 * * *",
        description="when the invoice export runs: crontab (minute hour day month day-of-week)",
    )
    stock_reconciliation_cron: str = Field(
        default="*/5 * * * *",
        description="when the stock is reconciled: crontab, or 6 fields with seconds first",
    )
    stock_reconciliation_expect_every: str = Field(
        default="20m",
        description=(
            "the reconciliation's dead-man's switch: when no run succeeded on any instance for "
            "this long, every instance logs a WARNING (job-overdue) until one does"
        ),
    )
    schedule_timezone: str = Field(
        default="Europe/Warsaw", description="the time zone of both cron expressions"
    )
    leaselock_jobs: bool = Field(
        default=True,
        description=(
            "false runs the jobs as plain cron, on every instance: the problem leaselock solves"
        ),
    )
    fenced_stock_writes: bool = Field(
        default=True,
        description=(
            "false writes stock counts unfenced(), without the fencing token: the late write "
            "of a paused instance then wins"
        ),
    )
    event_log: Path | None = Field(
        default=None,
        description=(
            "append leaselock's events to this JSON Lines file (leaselock timeline draws them)"
        ),
    )
    instance_name: str = Field(
        default_factory=socket.gethostname,
        description="this instance's name in logs and in the fake accounting ledger",
    )
    log_level: str = Field(
        default="INFO", description="level of the shop's and leaselock's logs (DEBUG shows skips)"
    )
    fake_accounting_ledger: Path | None = Field(
        default=None,
        description=(
            "a file where the stand-in accounting system also writes what it booked, so that "
            "several processes share one record (the demo)"
        ),
    )
    fake_warehouse_alert_every_s: float | None = Field(
        default=None,
        gt=0,
        description="the stand-in warehouse sends a low-stock alert this often (seconds)",
    )

    @field_validator("admin_token")
    @classmethod
    def _long_enough(cls, token: SecretStr) -> SecretStr:
        length = len(token.get_secret_value())
        if length < MIN_ADMIN_TOKEN_LENGTH:
            raise ValueError(
                f"it is {length} characters long, too easy to guess; use at least "
                f"{MIN_ADMIN_TOKEN_LENGTH}"
            )
        return token

    @field_validator("lock_ttl")
    @classmethod
    def _usable_ttl(cls, ttl: str) -> str:
        # leaselock publishes no duration parser: a Locks that is never started checks the ttl
        try:
            Locks(ttl=ttl)
        except LocksConfigurationError as error:
            raise ValueError(str(error)) from None
        return ttl

    @field_validator("stock_reconciliation_expect_every")
    @classmethod
    def _usable_expect_every(cls, expect_every: str) -> str:
        # checked by the decorator it is given to, which is built once per instance
        try:
            leaselock.on_one_instance(key="settings-check", expect_every=expect_every)
        except LocksConfigurationError as error:
            raise ValueError(str(error)) from None
        return expect_every

    @field_validator("invoice_export_cron", "stock_reconciliation_cron")
    @classmethod
    def _usable_cron(cls, expression: str) -> str:
        cron_trigger(expression, ZoneInfo("UTC"))
        return expression

    @field_validator("schedule_timezone")
    @classmethod
    def _known_timezone(cls, name: str) -> str:
        try:
            ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"{name!r} is not a time zone this machine knows; use an IANA name such as "
                '"Europe/Warsaw" or "UTC" (pip install tzdata where the system has none)'
            ) from None
        return name

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(
                "a Redis URL starts with redis://, rediss:// or unix://, e.g. "
                "redis://127.0.0.1:6379/0"
            )
        return url

    @property
    def timezone(self) -> ZoneInfo:
        """The time zone of the schedule."""
        return ZoneInfo(self.schedule_timezone)


def load_settings(kind: type[S]) -> S:
    """Read ``kind`` from the environment.

    Raises:
        SettingsError: a variable is missing or wrong; the message lists each one and its fix.
    """
    try:
        return kind()
    except ValidationError as error:
        raise SettingsError(_explain(kind, error)) from None


def _explain(kind: type[DatabaseSettings], error: ValidationError) -> str:
    lines = ["The shop cannot start: fix these environment variables and start it again."]
    for problem in error.errors():
        name = str(problem["loc"][0]) if problem["loc"] else "?"
        variable = name.upper()
        field = kind.model_fields.get(name)
        hint = field.description if field is not None and field.description else ""
        if problem["type"] == "missing":
            lines.append(f"  {variable} is not set.\n      {variable}: {hint}")
        elif problem["type"] == "extra_forbidden":
            lines.append(f"  {name} is not a setting of the shop; remove it")
        else:
            message = str(problem["msg"]).removeprefix("Value error, ")
            shown = "***" if name == "admin_token" else repr(problem.get("input"))
            lines.append(f"  {variable}={shown}: {message}\n      {variable}: {hint}")
    return "\n".join(lines)
