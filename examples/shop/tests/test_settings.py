"""Settings: the real schedule by default, and a clear error naming every wrong variable."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from shop.schedule import cron_trigger
from shop.settings import Settings, SettingsError, load_settings

SHOP_VARIABLES = [name.upper() for name in Settings.model_fields]
ADMIN_TOKEN = "test-admin-token-0123456789"


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The process environment without any of the shop's variables."""
    for name in SHOP_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_defaults_are_the_real_schedule_in_warsaw_on_a_sqlite_file(
    environment: pytest.MonkeyPatch,
) -> None:
    environment.setenv("ADMIN_TOKEN", ADMIN_TOKEN)
    settings = load_settings(Settings)
    assert settings.database_url == "sqlite:///shop.db"
    assert settings.redis_url is None
    assert settings.invoice_export_cron == "0 2 * * *"
    assert settings.stock_reconciliation_cron == "*/5 * * * *"
    warsaw = ZoneInfo("Europe/Warsaw")
    assert settings.timezone == warsaw
    after = datetime(2026, 11, 29, 2, 0, 1, tzinfo=warsaw)
    export = cron_trigger(settings.invoice_export_cron, warsaw)
    reconciliation = cron_trigger(settings.stock_reconciliation_cron, warsaw)
    assert export.get_next_fire_time(None, after) == datetime(2026, 11, 30, 2, 0, tzinfo=warsaw)
    assert reconciliation.get_next_fire_time(None, after) == after.replace(minute=5, second=0)


def test_cron_expressions_come_from_the_environment_and_may_have_seconds(
    environment: pytest.MonkeyPatch,
) -> None:
    environment.setenv("ADMIN_TOKEN", ADMIN_TOKEN)
    environment.setenv("STOCK_RECONCILIATION_CRON", "*/3 * * * * *")
    settings = load_settings(Settings)
    every_three_seconds = cron_trigger(settings.stock_reconciliation_cron, settings.timezone)
    after = datetime(2026, 11, 29, 12, 0, 1, tzinfo=settings.timezone)
    assert every_three_seconds.get_next_fire_time(None, after) == after.replace(second=3)


def test_wrong_settings_stop_the_start_up_naming_each_variable_and_its_fix(
    environment: pytest.MonkeyPatch,
) -> None:
    environment.setenv("INVOICE_EXPORT_CRON", "0 2 * *")
    environment.setenv("STOCK_RECONCILIATION_CRON", "*/5 * * * 1-5")
    environment.setenv("LOCK_TTL", "30 seconds")
    environment.setenv("SCHEDULE_TIMEZONE", "Europe/Warszawa")
    environment.setenv("DATABASE_URL", "mysql://shop@db/shop")
    with pytest.raises(SettingsError) as refused:
        load_settings(Settings)
    message = str(refused.value)
    assert "ADMIN_TOKEN is not set" in message
    assert "INVOICE_EXPORT_CRON='0 2 * *': '0 2 * *' has 4 fields; write 5" in message
    assert 'use names such as "mon-fri"' in message
    assert "LOCK_TTL='30 seconds': ttl='30 seconds' is not a duration" in message
    assert "SCHEDULE_TIMEZONE='Europe/Warszawa'" in message
    assert "DATABASE_URL='mysql://shop@db/shop': the shop runs on SQLite or PostgreSQL" in message


def test_a_short_admin_token_is_refused_without_showing_it(
    environment: pytest.MonkeyPatch,
) -> None:
    environment.setenv("ADMIN_TOKEN", "hunter2")
    with pytest.raises(SettingsError) as refused:
        load_settings(Settings)
    assert "ADMIN_TOKEN=***: it is 7 characters long" in str(refused.value)
    assert "hunter2" not in str(refused.value)
