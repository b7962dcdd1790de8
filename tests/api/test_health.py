"""Probes: /healthz needs nothing; /readyz needs the database, migrated to head."""

from __future__ import annotations

import pytest

from service import create_app
from service.infra.config import Config
from service.infra.db import get_db
from service.services.health import expected_head
from tests.problems import assert_problem

UNREACHABLE_DATABASE = "postgresql+psycopg://nobody@127.0.0.1:1/nothing?connect_timeout=2"


def test_healthz_answers_without_touching_the_database(make_app):
    client = make_app(UNREACHABLE_DATABASE).test_client()
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok"}


def test_readyz_reports_the_schema_revision_when_the_database_is_at_head(client, app):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.get_json() == {
        "status": "ok",
        "database": "ok",
        "schema_revision": expected_head(app.extensions["planner.config"].migrations_dir),
    }


def test_readyz_is_a_503_problem_with_retry_after_when_the_database_is_unreachable(make_app):
    client = make_app(UNREACHABLE_DATABASE).test_client()
    response = client.get("/readyz")
    body = assert_problem(response, 503)
    assert response.headers["Retry-After"] == "5"
    assert "unreachable" in body["detail"]


def test_readyz_is_a_503_problem_when_the_schema_is_not_migrated(make_app, empty_database_url):
    client = make_app(empty_database_url).test_client()
    body = assert_problem(client.get("/readyz"), 503)
    assert "expected" in body["detail"]


def test_readyz_answers_while_requests_hold_every_pooled_connection(database_url):
    """On PostgreSQL /readyz connects on its own: it never waits DB_POOL_TIMEOUT_SECONDS behind requests."""
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite's probe reads like any request; it has no pool to wait for")
    app = create_app(Config(database_url=database_url, testing=True, db_pool_size=1))
    engine = get_db(app).engine
    try:
        with engine.connect(), engine.connect():  # the pool's one connection and its one overflow
            response = app.test_client().get("/readyz")
        assert response.status_code == 200, response.get_data(as_text=True)
    finally:
        engine.dispose()
