"""Who may do what: every endpoint x role x own/other organisation, and the keys themselves."""

from __future__ import annotations

import copy
import functools
import io
import logging
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, text, update

from service import console, create_app
from service.config import Config
from service.db import get_db
from service.logs import JsonFormatter
from service.models import ApiKey, AuditEntry, FittedLaw, Organization
from service.services import laws
from service.services.catalog import load_builtin_hardware
from tests.conftest import bearer
from tests.problems import assert_problem

ROLES = ("admin", "planner", "finance", "viewer")
BUDGET = {
    "name": "b",
    "amount": "1000.00",
    "currency": "USD",
    "period_start": "2026-01-01T00:00:00Z",
    "period_end": "2027-01-01T00:00:00Z",
}
PLAN = {
    "params": 1e8,
    "tokens": 2e9,
    "hardware": "h100-sxm",
    "accelerators": 8,
    "start_at": "2026-06-01T00:00:00Z",
}
# Nine runs of a known law (3 sizes x 3 token counts): the least a fit takes.
RUNS = [
    {"params": n, "tokens": d, "loss": 1.82 + 480 / n**0.35 + 2100 / d**0.37}
    for n in (5e7, 5e8, 5e9)
    for d in (1e9, 1e10, 1e11)
]
# More bootstrap samples than a fit answered at once may have: queued as a job, which none runs here. Roles
# and organisations are checked alike either way, and a queued fit costs nothing, a fit ~2 s.
QUEUED_FIT = {"name": "Matrix fit", "runs": RUNS, "bootstrap": {"samples": laws.SYNC_MAX_BOOTSTRAP + 1}}
HARDWARE = {
    "name": "Custom",
    "vendor": "Us",
    "peak_flops": {"bf16": 1e15},
    "memory_bytes": 10**10,
    "memory_bandwidth_bytes_per_second": 10**12,
    "source": "lab",
}


@functools.cache
def _fitted_columns() -> dict:
    """What a fit of RUNS stores: computed once, then copied into each test's database."""
    return laws.fit_columns(
        {"runs": {name: [run[name] for run in RUNS] for name in ("params", "tokens", "loss")}}
    )


@pytest.fixture
def world(client, session, issue_key):
    """Two organisations with a budget, two plans, a fitted law and a queued fit job each, a custom profile,
    and a key per role in `acme`."""
    load_builtin_hardware(session)
    keys = {role: issue_key(role, None if role == "admin" else "acme") for role in ROLES}
    issue_key("viewer", "globex")  # creates the other organisation
    budgets, plans = {}, {}
    for organization in ("acme", "globex"):
        response = client.post("/v1/budgets", json={**BUDGET, "organization": organization})
        budgets[organization] = response.get_json()["id"]
        # Plans are charged to a budget of their own: a budget with plans is never deleted.
        charged = client.post("/v1/budgets", json={**BUDGET, "organization": organization}).get_json()["id"]
        plans[organization] = [
            client.post(
                "/v1/plans", json={**PLAN, "organization": organization, "budget_id": charged}
            ).get_json()["id"]
            for _ in range(2)
        ]
    fitted, fit_jobs = {}, {}
    for organization in ("acme", "globex"):
        # Stored directly: fitting them over HTTP would cost seconds in each of the matrix's cases.
        owner = session.scalars(select(Organization).where(Organization.slug == organization)).one()
        session.add(
            FittedLaw(
                organization_id=owner.id,
                slug=f"{organization}-law",
                name=f"{organization} law",
                created_by="test",
                **copy.deepcopy(_fitted_columns()),
            )
        )
        session.commit()
        fitted[organization] = f"{organization}-law"
        queued = client.post(
            "/v1/scaling-laws",
            json={"organization": organization, "name": f"{organization} job", "runs": RUNS},
            headers={"Prefer": "respond-async"},
        )
        assert queued.status_code == 202, queued.get_json()
        fit_jobs[organization] = queued.get_json()["id"]
    assert client.post("/v1/hardware", json={**HARDWARE, "slug": "custom-gpu"}).status_code == 201
    revocable = client.post("/v1/keys", json={"name": "spare", "role": "viewer", "organization": "acme"})
    return {
        "keys": keys,
        "budgets": budgets,
        "plans": plans,
        "laws": fitted,
        "fit_jobs": fit_jobs,
        "spare_key": revocable.get_json()["id"],
    }


# (method, path, body, {role: status for an object of the caller's own organisation},
#  {role: status for another organisation's object}); "*" stands for every role.
OWN, OTHER = "acme", "globex"
MATRIX = [
    ("GET", "/v1/organizations", None, {"*": 200}, None),
    ("POST", "/v1/organizations", {"slug": "new-org", "name": "N"}, {"admin": 201, "*": 403}, None),
    ("GET", "/v1/organizations/{org}", None, {"*": 200}, {"admin": 200, "*": 404}),
    ("GET", "/v1/hardware", None, {"*": 200}, None),
    ("GET", "/v1/hardware/h100-sxm", None, {"*": 200}, None),
    ("GET", "/v1/hardware/h100-sxm/prices", None, {"*": 200}, None),
    ("POST", "/v1/hardware", {**HARDWARE, "slug": "more-gpu"}, {"admin": 201, "*": 403}, None),
    ("PUT", "/v1/hardware/custom-gpu", HARDWARE, {"admin": 200, "*": 403}, None),
    ("PATCH", "/v1/hardware/custom-gpu", {"name": "x"}, {"admin": 200, "*": 403}, None),
    ("DELETE", "/v1/hardware/custom-gpu", None, {"admin": 204, "*": 403}, None),
    ("GET", "/v1/scaling-laws", None, {"*": 200}, None),
    ("GET", "/v1/scaling-laws/epoch-2024", None, {"*": 200}, None),
    ("GET", "/v1/scaling-laws/epoch-2024/isoflop?flops=1e21", None, {"*": 200}, None),
    ("GET", "/v1/scaling-laws/epoch-2024/frontier?min_flops=1e20&max_flops=1e22", None, {"*": 200}, None),
    (
        "POST",
        "/v1/scaling-laws",
        {**QUEUED_FIT, "organization": "{org}"},
        {"admin": 202, "planner": 202, "*": 403},
        {"admin": 202, "planner": 422, "*": 403},
    ),
    ("GET", "/v1/scaling-laws/{law}", None, {"*": 200}, {"admin": 200, "*": 404}),
    ("GET", "/v1/scaling-laws/{law}/isoflop?flops=1e21", None, {"*": 200}, {"admin": 200, "*": 404}),
    (
        "GET",
        "/v1/scaling-laws/{law}/frontier?min_flops=1e20&max_flops=1e22",
        None,
        {"*": 200},
        {"admin": 200, "*": 404},
    ),
    (
        "DELETE",
        "/v1/scaling-laws/{law}",
        None,
        {"admin": 204, "planner": 204, "*": 403},
        {"admin": 204, "planner": 404, "*": 403},
    ),
    ("GET", "/v1/fit-jobs/{fit_job}", None, {"*": 200}, {"admin": 200, "*": 404}),
    ("POST", "/v1/allocations", {"flops": 1e22}, {"*": 200}, None),
    (
        "POST",
        "/v1/estimates",
        {"params": 1e9, "tokens": 2e10, "hardware": "h100-sxm", "accelerators": 8},
        {"*": 200},
        None,
    ),
    ("GET", "/v1/budgets", None, {"*": 200}, None),
    (
        "POST",
        "/v1/budgets",
        {**BUDGET, "organization": "{org}"},
        {"admin": 201, "finance": 201, "*": 403},
        {"admin": 201, "finance": 422, "*": 403},
    ),
    ("GET", "/v1/budgets/{budget}", None, {"*": 200}, {"admin": 200, "*": 404}),
    (
        "PUT",
        "/v1/budgets/{budget}",
        {**BUDGET, "organization": "{org}"},
        {"admin": 200, "finance": 200, "*": 403},
        {"admin": 200, "finance": 404, "*": 403},
    ),
    (
        "PATCH",
        "/v1/budgets/{budget}",
        {"name": "renamed"},
        {"admin": 200, "finance": 200, "*": 403},
        {"admin": 200, "finance": 404, "*": 403},
    ),
    (
        "DELETE",
        "/v1/budgets/{budget}",
        None,
        {"admin": 204, "finance": 204, "*": 403},
        {"admin": 204, "finance": 404, "*": 403},
    ),
    (
        "POST",
        "/v1/keys",
        {"name": "k", "role": "viewer", "organization": "acme"},
        {"admin": 201, "*": 403},
        None,
    ),
    ("GET", "/v1/keys", None, {"admin": 200, "*": 403}, None),
    ("DELETE", "/v1/keys/{spare_key}", None, {"admin": 204, "*": 403}, None),
    ("GET", "/v1/audit", None, {"admin": 200, "*": 403}, None),
    ("GET", "/v1/budgets/{budget}/ledger", None, {"*": 200}, {"admin": 200, "*": 404}),
    ("GET", "/v1/budgets/{budget}/utilization", None, {"*": 200}, {"admin": 200, "*": 404}),
    (
        "GET",
        "/v1/reports/costs?from=2026-01-01T00:00:00Z&to=2027-01-01T00:00:00Z&group_by=budget",
        None,
        {"*": 200},
        None,
    ),
    ("GET", "/v1/plans", None, {"*": 200}, None),
    (
        "POST",
        "/v1/plans",
        {**PLAN, "organization": "{org}"},
        {"admin": 201, "planner": 201, "*": 403},
        {"admin": 201, "planner": 422, "*": 403},
    ),
    ("GET", "/v1/plans/{plan}", None, {"*": 200}, {"admin": 200, "*": 404}),
    ("GET", "/v1/plans/compare?ids={plan},{plan2}", None, {"*": 200}, {"admin": 200, "*": 404}),
    (
        "POST",
        "/v1/plans/{plan}/commit",
        None,
        {"admin": 200, "planner": 200, "finance": 200, "*": 403},
        {"admin": 200, "planner": 404, "finance": 404, "*": 403},
    ),
    (
        "POST",
        "/v1/plans/{plan}/cancel",
        None,
        {"admin": 200, "planner": 200, "finance": 200, "*": 403},
        {"admin": 200, "planner": 404, "finance": 404, "*": 403},
    ),
    (
        "POST",
        "/v1/plans/{plan}/revise",
        {"accelerators": 16},
        {"admin": 201, "planner": 201, "*": 403},
        {"admin": 201, "planner": 404, "*": 403},
    ),
]
CASES = [
    pytest.param(
        method,
        path,
        body,
        role,
        organization,
        expected[role] if role in expected else expected["*"],
        id=f"{method} {path} {role} {'own' if organization == OWN else 'other'}",
    )
    for method, path, body, own, other in MATRIX
    for organization, expected in ((OWN, own), (OTHER, other))
    if expected is not None
    for role in ROLES
]


def fill(template, world, organization):
    if isinstance(template, dict):
        return {key: fill(value, world, organization) for key, value in template.items()}
    if not isinstance(template, str):
        return template
    plan, plan2 = world["plans"][organization]
    return template.format(
        org=organization,
        budget=world["budgets"][organization],
        plan=plan,
        plan2=plan2,
        law=world["laws"][organization],
        fit_job=world["fit_jobs"][organization],
        spare_key=world["spare_key"],
    )


@pytest.mark.parametrize(("method", "path", "body", "role", "organization", "expected"), CASES)
def test_every_endpoint_answers_each_role_as_the_matrix_says(
    client, world, method, path, body, role, organization, expected
):
    headers = bearer(world["keys"][role])
    if method in ("PUT", "PATCH", "DELETE"):
        headers["If-Match"] = "*"
    response = client.open(
        fill(path, world, organization), method=method, json=fill(body, world, organization), headers=headers
    )
    assert response.status_code == expected, response.get_json()


def as_documented(path: str) -> str:
    """The matrix's concrete path in the OpenAPI description's terms."""
    path = path.split("?", maxsplit=1)[0]
    for concrete, parameter in {
        "{org}": "{slug}",
        "{budget}": "{budget_id}",
        "{plan}": "{plan_id}",
        "{spare_key}": "{key_uuid}",
        "{law}": "{slug}",
        "{fit_job}": "{job_id}",
        "h100-sxm": "{slug}",
        "custom-gpu": "{slug}",
        "epoch-2024": "{slug}",
    }.items():
        path = path.replace(concrete, parameter)
    return path


def test_the_matrix_covers_every_operation_in_the_openapi_description(client):
    spec = client.get("/openapi.json").get_json()
    documented = {
        (method.upper(), path)
        for path, item in spec["paths"].items()
        for method in item
        if method != "parameters" and path.startswith("/v1/")
    }
    covered = {(method, as_documented(path)) for method, path, *_ in MATRIX}
    assert documented <= covered, documented - covered


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


def test_lists_only_hold_the_callers_organisation(client, world):
    viewer = bearer(world["keys"]["viewer"])
    budgets = client.get("/v1/budgets", headers=viewer).get_json()["items"]
    assert {b["organization"] for b in budgets} == {"acme"}
    assert client.get("/v1/budgets?organization=globex", headers=viewer).get_json()["items"] == []
    organizations = client.get("/v1/organizations", headers=viewer).get_json()["items"]
    assert [o["slug"] for o in organizations] == ["acme"]
    fitted = client.get("/v1/scaling-laws?kind=fitted", headers=viewer).get_json()["items"]
    assert [law["slug"] for law in fitted] == ["acme-law"]
    assert client.get("/v1/scaling-laws?organization=globex", headers=viewer).get_json()["items"] == []


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
        for argument in ("budget_id", "key_uuid", "plan_id", "job_id"):
            path = path.replace(f"<uuid:{argument}>", str(uuid.uuid4()))
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


def test_another_organisations_slug_answers_exactly_like_a_missing_one(client, world):
    finance = bearer(world["keys"]["finance"])
    theirs = client.post("/v1/budgets", json={**BUDGET, "organization": "globex"}, headers=finance)
    nobodys = client.post("/v1/budgets", json={**BUDGET, "organization": "nobody"}, headers=finance)
    their_errors = assert_problem(theirs, 422)["errors"]
    assert their_errors == [{"pointer": "#/organization", "detail": "No organization 'globex'."}]
    assert assert_problem(nobodys, 422)["errors"] == [
        {"pointer": "#/organization", "detail": "No organization 'nobody'."}
    ]
    hidden = client.get(f"/v1/budgets/{world['budgets']['globex']}", headers=finance)
    missing = client.get(f"/v1/budgets/{uuid.uuid4()}", headers=finance)
    assert assert_problem(hidden, 404)["title"] == assert_problem(missing, 404)["title"]


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


def test_updates_are_audited_with_the_names_of_what_changed(client, session, world):
    budget_id = world["budgets"]["acme"]
    changed = client.patch(
        f"/v1/budgets/{budget_id}", json={"allowed_hardware": ["h100-sxm"]}, headers={"If-Match": "*"}
    )
    assert changed.status_code == 200
    entry = session.scalars(
        select(AuditEntry).where(AuditEntry.action == "budget.update", AuditEntry.object_id == budget_id)
    ).one()
    assert entry.fields == ["allowed_hardware"]
    client.patch(
        "/v1/hardware/custom-gpu",
        json={"price_per_hour": "1.00", "currency": "USD"},
        headers={"If-Match": "*"},
    )
    price = session.scalars(select(AuditEntry).where(AuditEntry.action == "hardware_price.create")).all()
    assert "custom-gpu" in [entry.object_id for entry in price]
