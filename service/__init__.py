"""Compute Planner: plan LLM training runs from a compute budget."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from flask import Flask
from sqlalchemy import Engine, inspect
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.middleware.proxy_fix import ProxyFix

from service import cli, console
from service.api import init_api
from service.data.models import ApiKey
from service.infra import actors, request_context
from service.infra.config import Config, ConfigError
from service.infra.db import Database, create_db_engine, create_readiness_engine, get_db
from service.infra.json_provider import OrjsonProvider
from service.infra.logs import configure_logging
from service.services import keys
from service.services.health import expected_head
from service.web import auth, ratelimit
from service.workers import idempotency_purger, jobs, webhook_sender


def _shared_limits(config: Config, engine: Engine) -> Engine | None:
    """The database that keeps the rate limits' buckets for every process and host, or None: each process
    keeps its own (RATE_LIMIT_STORE)."""
    postgresql = engine.dialect.name == "postgresql"
    if config.rate_limit_store == "database" and not postgresql:
        raise ConfigError("RATE_LIMIT_STORE=database needs PostgreSQL; SQLite keeps them in each process.")
    wanted = config.rate_limit_store == "database" or (config.rate_limit_store == "auto" and postgresql)
    return engine if wanted else None


def create_app(config: Config | Mapping[str, object] | None = None) -> Flask:
    """Build the application. `config` is a Config, overrides of the environment's Config, or None."""
    if not isinstance(config, Config):
        config = Config.from_env().with_overrides(config or {})
    configure_logging(config.log_level)

    app = Flask(__name__)
    app.config.update(
        MAX_CONTENT_LENGTH=config.max_content_length,
        TESTING=config.testing,
        MAX_FIT_UPLOAD_LENGTH=config.max_fit_upload_length,
    )
    app.json = OrjsonProvider(app)
    app.extensions["planner.config"] = config
    app.extensions["planner.schema_head"] = expected_head(config.migrations_dir)

    engine = create_db_engine(config)
    Database(engine, create_readiness_engine(config)).init_app(app)
    request_context.init_app(app)
    auth.init_app(app)  # after the request id is set, before any body is looked at
    ratelimit.init_app(  # the per-key limit runs once the key is known
        app,
        config.rate_limit_per_minute,
        config.rate_limit_burst,
        config.auth_failures_per_minute,
        shared=_shared_limits(config, engine),
    )
    if config.trusted_proxy_hops:
        # The client's address, for the failure limit, as the last that many proxies forwarded it; what
        # came before them in X-Forwarded-For anyone may have written. gunicorn already reads their
        # X-Forwarded-Proto (FORWARDED_ALLOW_IPS).
        # Flask's documented way to add WSGI middleware, which its annotation (a method) cannot express.
        app.wsgi_app = ProxyFix(  # type: ignore[method-assign]
            app.wsgi_app, x_for=config.trusted_proxy_hops, x_proto=0
        )
    init_api(app)
    console.init_app(app)
    jobs.init_app(app)
    webhook_sender.init_app(app)
    idempotency_purger.init_app(app)
    cli.init_app(app)
    if config.admin_key:
        _bootstrap_admin_key(app, config.admin_key)
    return app


def _bootstrap_admin_key(app: Flask, key: str) -> None:
    """PLANNER_ADMIN_KEY names an admin key that must exist (hashed); `flask setup` makes sure of it too.
    A database that is not migrated yet is left alone, without a warning: that is how `make run` first
    starts, just before `flask setup` migrates it (and /readyz reports it meanwhile)."""
    database = get_db(app)
    try:
        if not inspect(database.engine).has_table(ApiKey.__tablename__):
            logging.getLogger(__name__).info("admin key bootstrapped once the database is migrated")
            return
        with database.sessionmaker() as session:
            keys.ensure_bootstrap_admin_key(actors.act_as(session, "bootstrap"), key)
    except SQLAlchemyError as error:
        logging.getLogger(__name__).warning(
            "admin key not bootstrapped", extra={"error_type": type(error).__name__}
        )
