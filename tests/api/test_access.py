"""Keys: how they are sent, checked, revoked, expired, issued and bootstrapped, and what needs one.
(Which role may call which endpoint is tests/api/test_access_matrix.py.)"""

from __future__ import annotations

import io
import logging
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, text, update

from service import console, create_app
from service.data.models import ApiKey, AuditEntry
from service.infra.config import Config
from service.infra.db import get_db
from service.infra.logs import JsonFormatter
from tests.api.test_access_matrix import BUDGET
from tests.conftest import bearer
from tests.problems import assert_problem


def test_every_operation_but_the_probes_and_metrics_declares_a_security_requirement(client):
    spec = client.get("/openapi.json").get_json()
    assert spec["security"] == [{"bearerAuth": []}]
    assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            if method == "parameters":
                continue
            if path in ("/healthz", "/readyz", "/metrics"):
                assert operation["security"] == [], path
            else:
                assert "security" not in operation or operation["security"], (method, path)


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "Bearer not-a-key",
        "Bearer cpk_abcd",
        "Bearer cpk_zzzz_" + "x" * 43,
    ],
)
def test_missing_or_malformed_keys_are_401_with_a_challenge(client, authorization):
    headers = {"Authorization": authorization} if authorization is not None else {}
    client.environ_base.pop("HTTP_AUTHORIZATION", None)
    response = client.get("/v1/budgets", headers=headers)
    assert_problem(response, 401)
    assert response.headers["WWW-Authenticate"].startswith("Bearer realm=")


def test_a_truncated_or_altered_key_is_401(client, issue_key):
    key = issue_key("viewer", "acme")
    for broken in (key[:-1], key + "x", key[:-5] + "AAAAA"):
        assert_problem(client.get("/v1/budgets", headers=bearer(broken)), 401)
    assert client.get("/v1/budgets", headers=bearer(key)).status_code == 200


def test_a_revoked_key_stops_working_at_once(client, session, issue_key):
    key = issue_key("viewer", "acme")
    key_id = key.split("_")[1]
    record = session.scalars(select(ApiKey).where(ApiKey.key_id == key_id)).one()
    assert client.delete(f"/v1/keys/{record.id}").status_code == 204
    assert_problem(client.get("/v1/budgets", headers=bearer(key)), 401)


def test_an_expired_key_is_401(client, session, issue_key):
    key = issue_key("viewer", "acme")
    session.execute(
        update(ApiKey)
        .where(ApiKey.key_id == key.split("_")[1])
        .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
    )
    session.commit()
    assert_problem(client.get("/v1/budgets", headers=bearer(key)), 401)


def test_a_key_in_the_query_string_is_refused_even_when_valid(client, issue_key):
    key = issue_key("admin")
    client.environ_base.pop("HTTP_AUTHORIZATION", None)
    assert_problem(client.get(f"/v1/budgets?api_key={key}"), 401)
    assert_problem(client.get(f"/v1/budgets?access_token={key}", headers=bearer(key)), 401)


def test_role_escalation_is_refused(client, issue_key):
    planner = bearer(issue_key("planner", "acme"))
    assert_problem(client.post("/v1/keys", json={"name": "x", "role": "admin"}, headers=planner), 403)
    viewer = bearer(issue_key("viewer", "acme"))
    budget = {**BUDGET, "organization": "acme"}
    assert_problem(client.post("/v1/budgets", json=budget, headers=viewer), 403)


def test_a_key_is_shown_once_and_only_its_hash_is_stored(client, session, app):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logging.getLogger("service").addHandler(handler)
    try:
        client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"})
        created = client.post("/v1/keys", json={"name": "ci", "role": "planner", "organization": "acme"})
        assert created.status_code == 201
        key = created.get_json()["key"]
        secret = key.split("_", 2)[2]
        listed = client.get("/v1/keys").get_data(as_text=True)
        assert client.get("/v1/budgets", headers=bearer(key)).status_code == 200
    finally:
        logging.getLogger("service").removeHandler(handler)
    assert secret not in listed
    assert secret not in stream.getvalue()
    dumped = " ".join(
        str(row)
        for table in ("api_keys", "audit_log")
        for row in session.execute(text(f"SELECT * FROM {table}"))
    )
    assert secret not in dumped
    record = session.scalars(select(ApiKey).where(ApiKey.key_id == key.split("_")[1])).one()
    assert record.last_used_at is not None


def test_a_key_for_an_organisation_role_needs_an_organisation_and_an_admin_key_none(client):
    client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"})
    missing = client.post("/v1/keys", json={"name": "x", "role": "viewer"})
    assert assert_problem(missing, 422)["errors"][0]["pointer"] == "#/organization"
    admin_with_org = client.post("/v1/keys", json={"name": "x", "role": "admin", "organization": "acme"})
    assert assert_problem(admin_with_org, 422)["errors"][0]["pointer"] == "#/organization"
    bad_role = client.post("/v1/keys", json={"name": "x", "role": "root"})
    assert assert_problem(bad_role, 422)["errors"][0]["pointer"] == "#/role"


def test_mutations_are_audited_with_who_what_and_the_request_id(client, session, issue_key):
    finance = issue_key("finance", "acme")
    response = client.post(
        "/v1/budgets",
        json={**BUDGET, "organization": "acme"},
        headers={**bearer(finance), "X-Request-ID": "aud-1"},
    )
    assert response.status_code == 201
    entry = session.scalars(select(AuditEntry).where(AuditEntry.action == "budget.create")).one()
    assert entry.actor == finance.split("_")[1]
    assert entry.request_id == "aud-1"
    assert entry.object_id == response.get_json()["id"]
    assert "amount" in entry.fields
    assert entry.organization_id is not None
    listed = client.get("/v1/audit").get_json()["items"]
    assert any(item["request_id"] == "aud-1" for item in listed)


def test_the_admin_key_from_the_environment_is_bootstrapped_idempotently(make_app, empty_database_url):
    admin_key = "cpk_bootstrap1_" + "b" * 40
    setup = make_app(empty_database_url).test_cli_runner().invoke(args=["setup"])
    assert setup.exit_code == 0, setup.output
    for _ in range(2):
        app = create_app(Config(database_url=empty_database_url, testing=True, admin_key=admin_key))
        try:
            response = app.test_client().get("/v1/organizations", headers=bearer(admin_key))
            assert response.status_code == 200
            with get_db(app).sessionmaker() as session:
                assert (
                    session.scalars(select(ApiKey).where(ApiKey.key_id == "bootstrap1")).one().role == "admin"
                )
        finally:
            get_db(app).engine.dispose()


def test_the_cli_issues_keys(app):
    runner = app.test_cli_runner()
    result = runner.invoke(args=["keys", "create", "--role", "admin", "--name", "ops"])
    assert result.exit_code == 0, result.output
    key = result.output.strip()
    assert key.startswith("cpk_")
    assert app.test_client().get("/v1/keys", headers=bearer(key)).status_code == 200
    refused = runner.invoke(
        args=["keys", "create", "--role", "viewer", "--name", "x", "--organization", "nope"]
    )
    assert refused.exit_code != 0
    assert "No organization" in refused.output


def test_a_revoked_bootstrap_key_stays_revoked_when_the_service_restarts(make_app, empty_database_url):
    admin_key = "cpk_bootstrap2_" + "c" * 40
    assert make_app(empty_database_url).test_cli_runner().invoke(args=["setup"]).exit_code == 0
    first = create_app(Config(database_url=empty_database_url, testing=True, admin_key=admin_key))
    try:
        with get_db(first).sessionmaker() as session:
            record = session.scalars(select(ApiKey).where(ApiKey.key_id == "bootstrap2")).one()
            record.revoked_at = datetime.now(UTC)
            session.commit()
    finally:
        get_db(first).engine.dispose()
    again = create_app(Config(database_url=empty_database_url, testing=True, admin_key=admin_key))
    try:
        assert_problem(again.test_client().get("/v1/keys", headers=bearer(admin_key)), 401)
    finally:
        get_db(again).engine.dispose()


def test_every_route_but_the_open_ones_needs_a_key(app):
    client = app.test_client()
    open_paths = {"/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/docs/static/<path:filename>"}
    for rule in app.url_map.iter_rules():
        if (
            rule.rule in open_paths
            or rule.rule.startswith("/static")
            or rule.endpoint in console.PUBLIC_ENDPOINTS
        ):
            continue  # the console's sign-in page and style sheet are open too
        path = rule.rule.replace("<slug:slug>", "ab").replace("<any(commit, cancel):action>", "commit")
        ids = (
            "budget_id",
            "key_uuid",
            "plan_id",
            "job_id",
            "calibration_id",
            "usage_id",
            "webhook_id",
            "delivery_id",
        )
        for argument in ids:
            path = path.replace(f"<uuid:{argument}>", str(uuid.uuid4()))
        path = path.replace("<int:event_id>", "1")
        assert "<" not in path, f"teach this test the arguments of {rule.rule}"
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            response = client.open(path, method=method)
            if rule.endpoint.startswith("console."):  # a person is sent to sign in rather than told 401
                assert response.status_code == 302, (method, rule.rule)
                assert response.headers["Location"].startswith("/sign-in?next="), (method, rule.rule)
            else:
                assert response.status_code == 401, (method, rule.rule)
    assert client.get("/no-such-page").status_code == 401  # nothing about what exists leaks out
    assert client.get("/docsanything").status_code == 401


def test_a_new_key_is_never_cached_and_cannot_be_born_expired(client):
    client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"})
    issued = client.post("/v1/keys", json={"name": "k", "role": "viewer", "organization": "acme"})
    assert issued.headers["Cache-Control"] == "no-store"
    past = client.post("/v1/keys", json={"name": "k", "role": "admin", "expires_at": "2020-01-01T00:00:00Z"})
    assert assert_problem(past, 422)["errors"][0]["pointer"] == "#/expires_at"
    overflowing = client.post(
        "/v1/keys", json={"name": "k", "role": "admin", "expires_at": "9999-12-31T23:00:00-05:00"}
    )
    assert assert_problem(overflowing, 422)["errors"][0]["pointer"] == "#/expires_at"


def test_an_admin_key_on_a_database_not_yet_migrated_waits_for_setup_without_a_warning(
    make_app, empty_database_url, service_log
):
    # `make run` builds the app before `flask setup` migrates: that first start is no trouble to warn of.
    admin_key = "cpk_bootstrap3_" + "d" * 40
    app = create_app(Config(database_url=empty_database_url, testing=True, admin_key=admin_key))
    get_db(app).engine.dispose()
    assert [entry for entry in service_log() if entry["level"] in ("WARNING", "ERROR")] == []
    assert make_app(empty_database_url).test_cli_runner().invoke(args=["setup"]).exit_code == 0
    migrated = create_app(Config(database_url=empty_database_url, testing=True, admin_key=admin_key))
    try:
        assert migrated.test_client().get("/v1/organizations", headers=bearer(admin_key)).status_code == 200
    finally:
        get_db(migrated).engine.dispose()
