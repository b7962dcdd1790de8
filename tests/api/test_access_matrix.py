"""Who may do what: every endpoint x role x own/other organisation, as the matrix below says.

One world (organisations, keys, budgets, plans, laws, jobs) serves all of the module's cases: it is built
once per database, and each test runs in a SAVEPOINT that is rolled back afterwards.
"""

from __future__ import annotations

import copy
import functools
import uuid

import pytest
from sqlalchemy import select

from service.data.models import (
    AuditEntry,
    Calibration,
    FittedLaw,
    HardwareProfile,
    Organization,
    WebhookDelivery,
)
from service.infra.db import get_db
from service.services import events, laws
from service.services.catalog import load_builtin_hardware
from tests.conftest import bearer, build_app, issue_key_in, on_transaction, sessions_on
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
WEBHOOK = {"url": "http://hooks.internal/planner"}
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
        laws.Fit(
            runs=laws.Runs(**{name: [run[name] for run in RUNS] for name in ("params", "tokens", "loss")})
        )
    )


@pytest.fixture(scope="module")
def world(database_url, module_connection):
    """Two organisations with a budget, two plans, a fitted law and a queued fit job each, a custom profile,
    and a key per role in `acme`: built once for the module, whose tests each run in a SAVEPOINT on it."""
    sessions = sessions_on(module_connection)
    app = on_transaction(build_app(database_url), sessions)
    try:
        with sessions() as session:
            return _build_world(app, session)
    finally:
        get_db(app).engine.dispose()


@pytest.fixture
def connection(module_connection, world):
    """The test's transaction: a SAVEPOINT on the module's, after the world is built; it sees the world and
    leaves nothing behind for the next test."""
    savepoint = module_connection.begin_nested()
    yield module_connection
    if savepoint.is_active:
        savepoint.rollback()


def _build_world(app, session) -> dict:
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {issue_key_in(session, 'admin')}"
    load_builtin_hardware(session)
    keys = {role: issue_key_in(session, role, None if role == "admin" else "acme") for role in ROLES}
    issue_key_in(session, "viewer", "globex")  # creates the other organisation
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
    calibrations = {}
    for organization in ("acme", "globex"):
        # Stored directly: the world has no measured runs to fit on.
        owner = session.scalars(select(Organization).where(Organization.slug == organization)).one()
        hardware = session.scalars(select(HardwareProfile).where(HardwareProfile.slug == "h100-sxm")).one()
        calibration = Calibration(
            organization_id=owner.id,
            hardware_id=hardware.id,
            matmul_efficiency=0.5,
            runs=[],
            fit={},
            created_by="test",
        )
        session.add(calibration)
        session.commit()
        calibrations[organization] = str(calibration.id)
    assert client.post("/v1/hardware", json={**HARDWARE, "slug": "custom-gpu"}).status_code == 201
    assert client.post("/v1/offers", json={**OFFER, "slug": "an-offer"}).status_code == 201
    revocable = client.post("/v1/keys", json={"name": "spare", "role": "viewer", "organization": "acme"})
    events_, webhooks_, deliveries = {}, {}, {}
    for organization in ("acme", "globex"):
        created = client.post("/v1/webhooks", json={**WEBHOOK, "organization": organization}).get_json()
        webhooks_[organization] = created["id"]
        owner = session.scalars(select(Organization).where(Organization.slug == organization)).one()
        event = events.publish(
            session,
            organization_id=owner.id,
            type="plan.failed",
            subject_type="plan",
            subject_id="p",
            data={},
        )
        assert event is not None
        events_[organization] = event.id
        session.commit()
        delivery = session.scalars(
            select(WebhookDelivery).where(WebhookDelivery.webhook_id == uuid.UUID(created["id"]))
        ).one()
        delivery.status = "failed"  # so that it may be retried
        deliveries[organization] = str(delivery.id)
        session.commit()
    return {
        "events": events_,
        "webhooks": webhooks_,
        "deliveries": deliveries,
        "keys": keys,
        "budgets": budgets,
        "plans": plans,
        "laws": fitted,
        "fit_jobs": fit_jobs,
        "spare_key": revocable.get_json()["id"],
        "calibrations": calibrations,
    }


# (method, path, body, {role: status for an object of the caller's own organisation},
#  {role: status for another organisation's object}); "*" stands for every role.
OWN, OTHER = "acme", "globex"
OFFER = {
    "hardware": "h100-sxm",
    "pricing": "on_demand",
    "provider": "lambda",
    "source": "x",
    "price_per_hour": "3.99",
    "currency": "USD",
}
OFFER_IMPORT = {
    "catalog": "InstanceType,AcceleratorName,AcceleratorCount,Price,SpotPrice,Region\n"
    "p5.48xlarge,H100,8,55.04,,us-east-1\n",
    "provider": "aws",
    "source": "x",
}
RUN_BY_PLANNERS = ({"admin": 409, "planner": 409, "*": 403}, {"admin": 409, "planner": 404, "*": 403})
USAGE = {
    "reporter": "slurm",
    "period_start": "2026-11-01T00:00:00Z",
    "period_end": "2026-11-01T01:00:00Z",
    "accelerator_hours": 8,
}
NO_USAGE = "00000000-0000-4000-8000-000000000000"  # a record that does not exist

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
    ("GET", "/v1/offers", None, {"*": 200}, None),
    ("GET", "/v1/offers/an-offer", None, {"*": 200}, None),
    ("GET", "/v1/offers/an-offer/prices", None, {"*": 200}, None),
    ("POST", "/v1/offers", {**OFFER, "slug": "more-offer"}, {"admin": 201, "*": 403}, None),
    ("PATCH", "/v1/offers/an-offer", {"note": "x"}, {"admin": 200, "*": 403}, None),
    ("DELETE", "/v1/offers/an-offer", None, {"admin": 204, "*": 403}, None),
    ("POST", "/v1/offers/import", OFFER_IMPORT, {"admin": 200, "*": 403}, None),
    ("POST", "/v1/comparisons", {"params": 1e9, "tokens": 2e10, "days": 30}, {"*": 200}, None),
    ("GET", "/v1/grid-intensities", None, {"*": 200}, None),
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
    ("GET", "/v1/reports/focus?from=2026-01-01T00:00:00Z&to=2027-01-01T00:00:00Z", None, {"*": 200}, None),
    (
        "GET",
        "/v1/reports/model-accuracy?detail=true&organization={org}",
        None,
        {"*": 200},
        None,
    ),
    ("GET", "/v1/calibrations", None, {"*": 200}, None),
    # No measured run in the world: a planner of the organisation gets as far as the fit's 422 (#/hardware),
    # of another the organisation's (#/organization); the stored ones are read by id.
    (
        "POST",
        "/v1/calibrations",
        {"organization": "{org}", "hardware": "h100-sxm"},
        {"admin": 422, "planner": 422, "finance": 422, "*": 403},
        {"admin": 422, "planner": 422, "finance": 422, "*": 403},
    ),
    ("GET", "/v1/calibrations/{calibration}", None, {"*": 200}, {"admin": 200, "*": 404}),
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
    # The world's plans are drafts: finance or an admin is told it is not pending approval (409).
    (
        "POST",
        "/v1/plans/{plan}/approve",
        {},
        {"admin": 409, "finance": 409, "*": 403},
        {"admin": 409, "finance": 404, "*": 403},
    ),
    (
        "POST",
        "/v1/plans/{plan}/reject",
        {"note": "No."},
        {"admin": 409, "finance": 409, "*": 403},
        {"admin": 409, "finance": 404, "*": 403},
    ),
    (
        "POST",
        "/v1/plans/{plan}/revise",
        {"accelerators": 16},
        {"admin": 201, "planner": 201, "*": 403},
        {"admin": 201, "planner": 404, "*": 403},
    ),
    # The world's plans are drafts: a caller allowed to move one is told it is not running (409).
    ("POST", "/v1/plans/{plan}/start", {}, *RUN_BY_PLANNERS),
    ("POST", "/v1/plans/{plan}/usage", USAGE, *RUN_BY_PLANNERS),
    ("POST", "/v1/plans/{plan}/complete", None, *RUN_BY_PLANNERS),
    ("POST", "/v1/plans/{plan}/fail", None, *RUN_BY_PLANNERS),
    (
        "POST",
        "/v1/plans/{plan}/usage/{usage}/reverse",
        {},
        {"admin": 409, "planner": 409, "finance": 409, "*": 403},
        {"admin": 409, "planner": 404, "finance": 404, "*": 403},
    ),
    ("GET", "/v1/plans/{plan}/usage", None, {"*": 200}, {"admin": 200, "*": 404}),
    ("GET", "/v1/plans/{plan}/usage/{usage}", None, {"*": 404}, {"*": 404}),
    ("GET", "/v1/budgets/{budget}/forecast", None, {"*": 200}, {"admin": 200, "*": 404}),
]
MANAGERS = {"admin": 200, "planner": 200, "finance": 200, "*": 403}
HIDDEN = {"admin": 200, "planner": 404, "finance": 404, "*": 403}
MATRIX += [
    ("GET", "/v1/events", None, {"*": 200}, None),
    ("GET", "/v1/events/{event}", None, {"*": 200}, {"admin": 200, "*": 404}),
    ("GET", "/v1/webhooks", None, MANAGERS, None),
    (
        "POST",
        "/v1/webhooks",
        {**WEBHOOK, "organization": "{org}"},
        {**MANAGERS, "admin": 201, "planner": 201, "finance": 201},
        {"admin": 201, "planner": 422, "finance": 422, "*": 403},
    ),
    ("GET", "/v1/webhooks/{webhook}", None, MANAGERS, HIDDEN),
    ("PATCH", "/v1/webhooks/{webhook}", {"description": "x"}, MANAGERS, HIDDEN),
    (
        "DELETE",
        "/v1/webhooks/{webhook}",
        None,
        {**MANAGERS, "admin": 204, "planner": 204, "finance": 204},
        {**HIDDEN, "admin": 204},
    ),
    ("POST", "/v1/webhooks/{webhook}/rotate-secret", None, MANAGERS, HIDDEN),
    ("GET", "/v1/webhooks/{webhook}/deliveries", None, MANAGERS, HIDDEN),
    ("POST", "/v1/webhooks/{webhook}/deliveries/{delivery}/retry", None, MANAGERS, HIDDEN),
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
        event=world["events"][organization],
        webhook=world["webhooks"][organization],
        delivery=world["deliveries"][organization],
        calibration=world["calibrations"][organization],
        usage=NO_USAGE,
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
        "{event}": "{event_id}",
        "{webhook}": "{webhook_id}",
        "{delivery}": "{delivery_id}",
        "{calibration}": "{calibration_id}",
        "{usage}": "{usage_id}",
        "h100-sxm": "{slug}",
        "custom-gpu": "{slug}",
        "an-offer": "{slug}",
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
