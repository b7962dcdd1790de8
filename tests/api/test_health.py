"""Probes: /healthz needs nothing; /readyz needs the database, migrated to head."""

from __future__ import annotations

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
