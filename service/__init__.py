"""Compute Planner: plan LLM training runs from a compute budget."""

from __future__ import annotations

from collections.abc import Mapping

from flask import Flask

from service import cli, request_context
from service.api import init_api
from service.config import Config
from service.db import Database, create_db_engine
from service.logs import configure_logging
from service.services.health import expected_head


def create_app(config: Config | Mapping[str, object] | None = None) -> Flask:
    """Build the application. `config` is a Config, overrides of the environment's Config, or None."""
    if not isinstance(config, Config):
        config = Config.from_env().with_overrides(config or {})
    configure_logging(config.log_level)

    app = Flask(__name__)
    app.config.update(
        MAX_CONTENT_LENGTH=config.max_content_length,
        TESTING=config.testing,
    )
    app.json.sort_keys = False  # problem members in RFC order; bodies in schema order
    app.extensions["planner.config"] = config
    app.extensions["planner.schema_head"] = expected_head(config.migrations_dir)

    Database(create_db_engine(config)).init_app(app)
    request_context.init_app(app)
    init_api(app)
    cli.init_app(app)
    return app
