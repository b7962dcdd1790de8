"""Running the service: metrics, rate limits and database trouble, as an operator sees them."""

from __future__ import annotations

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from service.infra.config import Config
from service.infra.db import create_db_engine
from service.web.ratelimit import TokenBuckets
from tests.api.test_plans import create_plan, make_budget, plan_body, post_plan, transition
from tests.api.test_plans import world as world  # noqa: PLC0414 -- the fixture, re-exported
from tests.conftest import POSTGRES_URL, bearer
from tests.problems import assert_problem

UNREACHABLE_DATABASE = "postgresql+psycopg://nobody@127.0.0.1:1/nothing?connect_timeout=2"


def sample(client, name: str, **labels: str) -> float:
    """The value of one series on /metrics (0 when it has not been counted yet)."""
    response = client.get("/metrics")
    assert response.status_code == 200
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        for found in family.samples:
            if found.name == name and all(found.labels.get(k) == v for k, v in labels.items()):
                return found.value
    return 0.0


# --- Metrics -----------------------------------------------------------------------------------------------


def test_metrics_need_no_key_and_are_in_the_prometheus_text_format(app):
    response = app.test_client().get("/metrics")
    assert response.status_code == 200
    assert response.mimetype == "text/plain"
    assert "version=" in response.headers["Content-Type"]
    names = {family.name for family in text_string_to_metric_families(response.get_data(as_text=True))}
    assert {
        "planner_http_requests",
        "planner_http_request_duration_seconds",
        "planner_plans_created",
        "planner_plans_committed",
        "planner_budget_conflicts",
        "planner_fit_jobs",
        "planner_database_errors",
        "planner_rate_limited",
    } <= names


def test_requests_are_counted_and_timed_by_route_template_and_status(client):
    labels = {"method": "GET", "route": "/v1/organizations/<slug:slug>", "status": "404"}
    before = sample(client, "planner_http_requests_total", **labels)
    timed = sample(client, "planner_http_request_duration_seconds_count", **labels)
    for slug in ("nobody", "no-one"):
        client.get(f"/v1/organizations/{slug}")
    assert sample(client, "planner_http_requests_total", **labels) == before + 2
    assert sample(client, "planner_http_request_duration_seconds_count", **labels) == timed + 2


def test_paths_that_match_no_route_share_one_label(client):
    labels = {"method": "GET", "route": "unmatched", "status": "404"}
    before = sample(client, "planner_http_requests_total", **labels)
    client.get("/v1/no-such-thing/1")
    client.get("/v1/no-such-thing/2")
    assert sample(client, "planner_http_requests_total", **labels) == before + 2


def test_plans_created_and_committed_are_counted_once_stored(client, world):
    created = sample(client, "planner_plans_created_total")
    committed = sample(client, "planner_plans_committed_total")
    budget = make_budget(client)
    plan = create_plan(client, budget_id=budget["id"])
    create_plan(client)
    assert transition(client, plan["id"], "commit").status_code == 200
    assert sample(client, "planner_plans_created_total") == created + 2
    assert sample(client, "planner_plans_committed_total") == committed + 1


def test_a_plan_refused_before_it_is_stored_is_not_counted(client, world):
    created = sample(client, "planner_plans_created_total")
    assert post_plan(client, plan_body(accelerators=0)).status_code == 422
    assert sample(client, "planner_plans_created_total") == created


def test_a_commit_the_budget_refuses_is_a_budget_conflict_by_limit(client, world):
    budget = make_budget(client, amount="100.00")  # the plan costs 500.00
    plan = create_plan(client, budget_id=budget["id"])
    before = sample(client, "planner_budget_conflicts_total", limit="amount")
    committed = sample(client, "planner_plans_committed_total")
    assert transition(client, plan["id"], "commit").status_code == 409
    assert sample(client, "planner_budget_conflicts_total", limit="amount") == before + 1
    assert sample(client, "planner_plans_committed_total") == committed


# --- Logs --------------------------------------------------------------------------------------------------


def test_the_access_log_names_the_key_and_its_organisation_but_never_the_secret(
    app, issue_key, world, service_log
):
    key = issue_key("viewer", "acme")
    app.test_client().get("/v1/plans", headers={**bearer(key), "X-Request-ID": "req-who"})
    [line] = [entry for entry in service_log() if entry.get("request_id") == "req-who"]
    key_id = key.split("_")[1]
    assert line["key_id"] == key_id
    assert line["organization"] is not None
    assert key.split("_", 2)[2] not in str(service_log())


# --- Rate limits -------------------------------------------------------------------------------------------


def test_token_buckets_admit_a_burst_then_the_rate():
    now = [0.0]
    buckets = TokenBuckets(per_minute=60, burst=3, clock=lambda: now[0])
    assert [buckets.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a") == pytest.approx(1.0)  # one a second
    assert buckets.take("b") == 0.0  # every key has its own bucket
    now[0] = 0.5
    assert buckets.take("a") == pytest.approx(0.5)
    now[0] = 1.0
    assert buckets.take("a") == 0.0
    now[0] = 100.0
    assert [buckets.take("a") for _ in range(4)][-1] > 0  # refilled to the burst, no further


@pytest.fixture
def limited_app(app_with):
    return app_with(rate_limit_per_minute=60, rate_limit_burst=2)


def test_a_key_over_its_rate_gets_429_with_retry_after_and_other_keys_do_not(limited_app, issue_key):
    client = limited_app.test_client()
    first, second = bearer(issue_key("viewer", "acme")), bearer(issue_key("viewer", "acme"))
    assert [client.get("/v1/organizations", headers=first).status_code for _ in range(2)] == [200, 200]
    refused = client.get("/v1/organizations", headers=first)
    body = assert_problem(refused, 429)
    assert refused.headers["Retry-After"] == "1"
    assert "rate limit" in body["detail"]
    assert client.get("/v1/organizations", headers=second).status_code == 200
    assert sample(client, "planner_rate_limited_total") >= 1


def test_probes_and_metrics_are_never_rate_limited(limited_app):
    client = limited_app.test_client()
    for path in ("/healthz", "/readyz", "/metrics"):
        assert {client.get(path).status_code for _ in range(5)} == {200}


def test_rate_limiting_is_off_unless_configured(client):
    assert {client.get("/v1/organizations").status_code for _ in range(30)} == {200}


# --- Database trouble --------------------------------------------------------------------------------------


def test_an_unreachable_database_is_a_503_with_retry_after_while_healthz_stays_200(make_app):
    client = make_app(UNREACHABLE_DATABASE).test_client()
    before = sample(client, "planner_database_errors_total", error="OperationalError")
    response = client.get("/v1/organizations", headers=bearer("cpk_wellformed_" + "s" * 43))
    body = assert_problem(response, 503)
    assert response.headers["Retry-After"] == "1"
    assert "database" in body["detail"]
    assert client.get("/readyz").status_code == 503
    assert client.get("/healthz").status_code == 200
    assert sample(client, "planner_database_errors_total", error="OperationalError") == before + 1


def test_a_request_whose_database_dropped_it_at_the_end_keeps_its_answer(client, monkeypatch):
    """The rollback that closes a request's session fails when the database restarted meanwhile: the
    answer already made stands (found by tests/reliability: it was a 500)."""

    def close_on_a_dropped_connection(_session):
        raise OperationalError("ROLLBACK", {}, Exception("server closed the connection unexpectedly"))

    monkeypatch.setattr(Session, "close", close_on_a_dropped_connection)
    assert client.get("/v1/organizations").status_code == 200


@pytest.mark.skipif(not POSTGRES_URL, reason="PostgreSQL's statement_timeout; set TEST_DATABASE_URL")
def test_a_statement_that_runs_past_the_timeout_is_cancelled():
    engine = create_db_engine(Config(database_url=POSTGRES_URL, db_statement_timeout_ms=200))
    try:
        with engine.connect() as connection, pytest.raises(OperationalError, match="statement timeout"):
            connection.execute(text("SELECT pg_sleep(2)"))
    finally:
        engine.dispose()


@pytest.mark.skipif(not POSTGRES_URL, reason="PostgreSQL's statement_timeout; set TEST_DATABASE_URL")
def test_an_answer_that_never_comes_is_given_up_after_the_statement_timeout_and_2_s():
    """What ends a statement on a frozen database, whose own statement_timeout cannot fire (tests/reliability
    freezes one): here the server's timeout is off, so that only the client's bound can end the wait.

    The contract test of psycopg's private `errors._WaitTimeout`, which `infra/db._BoundedConnection` catches
    (docs/decisions/0002-write-path.md, "Private APIs")."""
    assert hasattr(psycopg.errors, "_WaitTimeout"), "renamed: see docs/decisions/0002-write-path.md"
    engine = create_db_engine(Config(database_url=POSTGRES_URL, db_statement_timeout_ms=200))
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("SET statement_timeout = 0")
            with pytest.raises(OperationalError, match=r"did not answer within 2\.2 s") as given_up:
                connection.execute(text("SELECT pg_sleep(5)"))
            assert given_up.value.connection_invalidated  # never used again
        with engine.connect() as connection:  # the pool connects afresh
            assert connection.scalar(text("SELECT 1")) == 1
    finally:
        engine.dispose()
