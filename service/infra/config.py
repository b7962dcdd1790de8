"""The one place that reads the environment.

Every setting the service understands is a field of `Config`, documented in the README's configuration
table. Other modules receive a `Config`; none of them read `os.environ`, but for prometheus_client's own
PROMETHEUS_MULTIPROC_DIR, which gunicorn.conf.py sets and service/infra/metrics.py reads as the library does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATABASE_URL = "sqlite:///var/planner.db"


class ConfigError(ValueError):
    """A setting in the environment cannot be used; the message names the variable."""


def _int(environ: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    return value


RATE_LIMIT_STORES = ("auto", "database", "process")


def _choice(environ: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = (environ.get(name) or "").strip().lower()
    if raw == "":
        return default
    if raw not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {environ[name]!r}")
    return raw


def _bool(environ: Mapping[str, str], name: str, default: bool) -> bool:
    raw = (environ.get(name) or "").strip().lower()
    if raw == "":
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name} must be true or false, got {environ[name]!r}")


@dataclass(frozen=True)
class Config:
    database_url: str = DEFAULT_DATABASE_URL
    host: str = "127.0.0.1"
    port: int = 8000
    log_level: str = "INFO"
    max_content_length: int = 1024 * 1024
    max_fit_upload_length: int = 16 * 1024 * 1024  # runs for POST /v1/scaling-laws: 100 000 take ~6 MB
    fit_jobs_in_process: bool = True
    fit_job_lease_seconds: int = 120
    webhooks_in_process: bool = True  # each API process sends due webhook deliveries from a thread
    webhook_timeout_seconds: int = 10  # per POST to a webhook's URL
    webhook_max_attempts: int = (
        8  # the last is about 22 h after the first (service/workers/webhook_sender.py)
    )
    # Deliveries go to public addresses only, unless named here: networks (10.1.0.0/16) or host names,
    # comma-separated (service/infra/egress.py).
    webhook_allowed_networks: str = ""
    webhook_secret_overlap_seconds: int = 86_400  # a rotated secret signs beside the new one this long
    webhook_concurrency: int = 8  # deliveries in flight at once, per process (threads waiting on receivers)
    webhook_concurrency_per_endpoint: int = 2  # of which to one webhook
    sqlite_busy_timeout_ms: int = 5000
    db_pool_size: int = 5
    db_pool_timeout_seconds: int = 10  # waiting for a pooled connection before answering 503
    db_connect_timeout_seconds: int = 5  # PostgreSQL: an unreachable server is a quick 503, not a hang
    db_statement_timeout_ms: int = 30_000  # PostgreSQL: a statement running longer is cancelled (503)
    rate_limit_per_minute: int = 0  # requests per API key and minute; 0 turns the limit off
    rate_limit_burst: int = 0  # requests a key may send at once; 0: a tenth of a minute's worth
    # Where rate-limit buckets live: auto (the database on PostgreSQL, shared by every host; each process on
    # SQLite), database (PostgreSQL only) or process.
    rate_limit_store: str = "auto"
    # Failed authentications per client address and minute (and at once); on by default, 0 turns it off.
    auth_failures_per_minute: int = 30
    trusted_proxy_hops: int = 0  # reverse proxies in front that append the client to X-Forwarded-For
    # gunicorn: sized for 2 cores (bench/RESULTS.md, fourteenth session). One worker more than the cores
    # keeps both busy while a worker is held up: a worker's threads share one interpreter lock, a client's
    # kept-alive connections stay with the worker that accepted them, and a recycled worker starts with none.
    # Two threads let a worker compute while a request waits on the database; more contend for its lock.
    web_concurrency: int = 3
    threads: int = 2
    migrations_dir: Path = field(default=PROJECT_ROOT / "migrations")
    testing: bool = False
    # Never logged or shown: repr=False keeps it out of any printed Config.
    admin_key: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
        env = os.environ if environ is None else environ
        default = cls()
        return cls(
            database_url=env.get("DATABASE_URL") or default.database_url,
            host=env.get("HOST") or default.host,
            port=_int(env, "PORT", default.port, minimum=1),
            log_level=(env.get("LOG_LEVEL") or default.log_level).upper(),
            max_content_length=_int(env, "MAX_CONTENT_LENGTH", default.max_content_length, minimum=1),
            max_fit_upload_length=_int(
                env, "MAX_FIT_UPLOAD_LENGTH", default.max_fit_upload_length, minimum=1
            ),
            fit_jobs_in_process=_bool(env, "FIT_JOBS_IN_PROCESS", default.fit_jobs_in_process),
            fit_job_lease_seconds=_int(
                env, "FIT_JOB_LEASE_SECONDS", default.fit_job_lease_seconds, minimum=4
            ),
            webhooks_in_process=_bool(env, "WEBHOOKS_IN_PROCESS", default.webhooks_in_process),
            webhook_timeout_seconds=_int(
                env, "WEBHOOK_TIMEOUT_SECONDS", default.webhook_timeout_seconds, minimum=1
            ),
            webhook_max_attempts=_int(env, "WEBHOOK_MAX_ATTEMPTS", default.webhook_max_attempts, minimum=1),
            webhook_allowed_networks=env.get("WEBHOOK_ALLOWED_NETWORKS") or default.webhook_allowed_networks,
            webhook_secret_overlap_seconds=_int(
                env, "WEBHOOK_SECRET_OVERLAP_SECONDS", default.webhook_secret_overlap_seconds
            ),
            webhook_concurrency=_int(env, "WEBHOOK_CONCURRENCY", default.webhook_concurrency, minimum=1),
            webhook_concurrency_per_endpoint=_int(
                env, "WEBHOOK_CONCURRENCY_PER_ENDPOINT", default.webhook_concurrency_per_endpoint, minimum=1
            ),
            sqlite_busy_timeout_ms=_int(env, "SQLITE_BUSY_TIMEOUT_MS", default.sqlite_busy_timeout_ms),
            db_pool_size=_int(env, "DB_POOL_SIZE", default.db_pool_size, minimum=1),
            db_pool_timeout_seconds=_int(
                env, "DB_POOL_TIMEOUT_SECONDS", default.db_pool_timeout_seconds, minimum=1
            ),
            db_connect_timeout_seconds=_int(
                env, "DB_CONNECT_TIMEOUT_SECONDS", default.db_connect_timeout_seconds, minimum=1
            ),
            db_statement_timeout_ms=_int(env, "DB_STATEMENT_TIMEOUT_MS", default.db_statement_timeout_ms),
            rate_limit_per_minute=_int(env, "RATE_LIMIT_PER_MINUTE", default.rate_limit_per_minute),
            rate_limit_burst=_int(env, "RATE_LIMIT_BURST", default.rate_limit_burst),
            rate_limit_store=_choice(env, "RATE_LIMIT_STORE", default.rate_limit_store, RATE_LIMIT_STORES),
            auth_failures_per_minute=_int(env, "AUTH_FAILURES_PER_MINUTE", default.auth_failures_per_minute),
            trusted_proxy_hops=_int(env, "TRUSTED_PROXY_HOPS", default.trusted_proxy_hops),
            web_concurrency=_int(env, "WEB_CONCURRENCY", default.web_concurrency, minimum=1),
            threads=_int(env, "THREADS", default.threads, minimum=1),
            admin_key=env.get("PLANNER_ADMIN_KEY") or None,
        )

    def with_overrides(self, overrides: Mapping[str, Any]) -> Config:
        known = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"unknown configuration keys: {', '.join(unknown)}")
        return replace(self, **overrides)
