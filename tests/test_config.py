"""Settings come from the environment once, with defaults, and a bad value names its variable."""

from __future__ import annotations

import pytest

from service.infra.config import Config, ConfigError


def test_defaults_leave_rate_limiting_off_and_bound_every_database_wait():
    config = Config.from_env({})
    assert config.rate_limit_per_minute == 0
    assert (config.db_pool_timeout_seconds, config.db_connect_timeout_seconds) == (10, 5)
    assert config.db_statement_timeout_ms == 30_000


def test_operating_settings_are_read_from_the_environment():
    config = Config.from_env(
        {
            "RATE_LIMIT_PER_MINUTE": "600",
            "RATE_LIMIT_BURST": "50",
            "DB_POOL_TIMEOUT_SECONDS": "3",
            "DB_CONNECT_TIMEOUT_SECONDS": "2",
            "DB_STATEMENT_TIMEOUT_MS": "0",
        }
    )
    assert (config.rate_limit_per_minute, config.rate_limit_burst) == (600, 50)
    assert (config.db_pool_timeout_seconds, config.db_connect_timeout_seconds) == (3, 2)
    assert config.db_statement_timeout_ms == 0


def test_webhook_sending_is_set_from_the_environment():
    default = Config.from_env({})
    assert (default.webhooks_in_process, default.webhook_timeout_seconds, default.webhook_max_attempts) == (
        True,
        10,
        8,
    )
    config = Config.from_env(
        {"WEBHOOKS_IN_PROCESS": "false", "WEBHOOK_TIMEOUT_SECONDS": "3", "WEBHOOK_MAX_ATTEMPTS": "2"}
    )
    assert (config.webhooks_in_process, config.webhook_timeout_seconds, config.webhook_max_attempts) == (
        False,
        3,
        2,
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("RATE_LIMIT_PER_MINUTE", "lots"),
        ("RATE_LIMIT_BURST", "-1"),
        ("DB_POOL_TIMEOUT_SECONDS", "0"),
        ("DB_STATEMENT_TIMEOUT_MS", "1.5"),
        ("WEBHOOKS_IN_PROCESS", "maybe"),
        ("WEBHOOK_TIMEOUT_SECONDS", "0"),
        ("WEBHOOK_MAX_ATTEMPTS", "0"),
    ],
)
def test_a_bad_value_is_refused_naming_its_variable(variable, value):
    with pytest.raises(ConfigError, match=variable):
        Config.from_env({variable: value})
