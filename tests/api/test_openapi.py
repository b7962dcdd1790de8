"""The API description is generated from the code, checked in, and honoured by the code."""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import tomllib
import uuid
from pathlib import Path

import jsonschema_rs
import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from service import create_app
from service.core import fit
from service.data.models import Plan
from service.infra.config import Config
from service.services.catalog import load_builtin_hardware
from service.services.feed import FEED_CURSOR_PATTERN
from service.services.pagination import CURSOR_PATTERN, Cursor
from tests import fuzzing
from tests.builders import usage_record, year_budget_body
from tests.problems import assert_problem

CHECKED_IN = Path(__file__).resolve().parents[2] / "openapi.yaml"
SCHEMATHESIS_TOML = CHECKED_IN.parent / "schemathesis.toml"
# The fuzzer checks the HTTP contract, not the fit: should it draw runs that can be fitted, a few L-BFGS
# starts instead of the 4 500 keep each example to milliseconds.
FITTING_OPERATIONS = {"POST /v1/scaling-laws"}
FEW_STARTS = fit.default_grid()[::500]


@pytest.fixture
def acme(client) -> str:
    assert client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"}).status_code == 201
    return "acme"


@functools.cache
def _description() -> dict:
    """The description the app serves, generated once (it is the code's, whatever the settings, as
    openapi.yaml is): flask-smorest takes a good part of a second for each."""
    app = create_app(Config(database_url="sqlite://", testing=True))
    return app.test_client().get("/openapi.json").get_json()


def _operations() -> list[str]:
    return [
        f"{method.upper()} {path}"
        for path, item in _description()["paths"].items()
        for method in item
        if method != "parameters"
    ]


def test_the_checked_in_openapi_yaml_matches_the_code(client):
    served = client.get("/openapi.json").get_json()
    checked_in = yaml.safe_load(CHECKED_IN.read_text())
    assert checked_in == served, "openapi.yaml is stale: run `make openapi` and commit the result"


def test_make_openapi_writes_exactly_the_checked_in_file(tmp_path):
    # What `make openapi` runs. The served JSON alone would not notice a value that YAML writes as a Python
    # object (an enum member, say) and safe_load then refuses.
    app = create_app(Config(database_url="sqlite://", testing=True))
    written = tmp_path / "openapi.yaml"
    result = app.test_cli_runner().invoke(args=["openapi", "write", "--format", "yaml", str(written)])
    assert result.exit_code == 0, result.output
    assert written.read_text() == CHECKED_IN.read_text()


OPERATION_ID = re.compile(r"[a-z]+(?:[A-Z][a-z0-9]*)+")  # camelCase, a verb then a noun: getPlan


def test_every_operation_has_an_operation_id_of_its_own():
    # What generators name methods by, and what planner_client's OPERATIONS maps to its methods
    # (tests/client/test_client_operations.py).
    ids: dict[str, list[str]] = {}
    for path, item in _description()["paths"].items():
        for method, operation in item.items():
            if method != "parameters":
                ids.setdefault(operation.get("operationId"), []).append(f"{method.upper()} {path}")
    assert None not in ids, f"operations without an operationId: {ids.get(None)}"
    assert {name: where for name, where in ids.items() if len(where) > 1} == {}, "operationIds shared"
    assert [name for name in ids if not OPERATION_ID.fullmatch(name)] == [], "not camelCase verbNoun"
    assert len(ids) == len(_operations())


def _references(node) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_references(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(_references(item) for item in node))
    return set()


def test_every_reference_in_the_description_resolves(client):
    spec = client.get("/openapi.json").get_json()

    def resolves(reference: str) -> bool:
        target = spec
        for part in reference.removeprefix("#/").split("/"):
            if not isinstance(target, dict) or part not in target:
                return False
            target = target[part]
        return True

    references = _references(spec)
    assert "#/components/responses/UNPROCESSABLE_CONTENT" in references
    assert sorted(reference for reference in references if not resolves(reference)) == []


def test_every_error_response_is_documented_as_problem_json(client):
    spec = client.get("/openapi.json").get_json()
    for name, response in spec["components"]["responses"].items():
        assert list(response["content"]) == ["application/problem+json"], name
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            if method == "parameters":
                continue
            assert "default" in operation["responses"], f"{method} {path} documents no error response"


def _operations_of(spec: dict):
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            if method != "parameters":
                yield f"{method.upper()} {path}", operation


def _headers_of(operation: dict) -> dict[str, dict]:
    return {p["name"]: p for p in operation.get("parameters", []) if p["in"] == "header"}


def test_every_precondition_is_documented_with_the_answers_it_gives(client):
    spec = client.get("/openapi.json").get_json()
    writes = readings = 0
    for label, operation in _operations_of(spec):
        headers = _headers_of(operation)
        if headers.get("If-Match", {}).get("required"):
            writes += 1
            assert {"412", "428"} <= set(operation["responses"]), label
        answers_an_etag = "ETag" in operation["responses"].get("200", {}).get("headers", {})
        if label.startswith("GET ") and answers_an_etag:
            readings += 1
            assert "If-None-Match" in headers, label
            assert not headers["If-None-Match"]["required"], label
            assert "304" in operation["responses"], label
    # PUT, PATCH and DELETE of hardware and budgets, PATCH and DELETE of webhooks and offers, DELETE of laws;
    # GET of each kind of single resource that changes.
    assert (writes, readings) == (11, 7)


def test_schemathesis_is_told_the_precondition_answers_of_exactly_the_operations_that_give_them(client):
    # 428 for a missing If-Match and 412 for a stale one are documented, but not among the statuses
    # schemathesis expects by default: schemathesis.toml lists them, for those operations only.
    spec = client.get("/openapi.json").get_json()
    preconditioned = sorted(
        label
        for label, operation in _operations_of(spec)
        if _headers_of(operation).get("If-Match", {}).get("required")
    )
    conditional = sorted(
        label for label, operation in _operations_of(spec) if "If-Match" in _headers_of(operation)
    )
    config = tomllib.loads(SCHEMATHESIS_TOML.read_text())
    [told] = [entry for entry in config["operations"] if "missing_required_header" in entry.get("checks", {})]
    assert sorted(told["include-name"]) == preconditioned
    assert "428" in told["checks"]["missing_required_header"]["expected-statuses"]
    answers = _accepted_by_operation(config)
    # A stale ETag is a 412 wherever If-Match is taken, required or not (rotating a webhook's secret).
    assert sorted(label for label, statuses in answers.items() if "412" in statuses) == conditional


# Operations whose description states a rule no JSON Schema can (words in their descriptions, each a 422
# naming the field): what must exist, what the egress policy allows, a CSV of runs, the engine's limits.
UNSTATABLE = {
    "POST /v1/allocations",
    "POST /v1/calibrations",
    "POST /v1/comparisons",
    "POST /v1/keys",
    "POST /v1/offers",
    "POST /v1/offers/import",
    "PATCH /v1/offers/{slug}",
    "POST /v1/scaling-laws",
    "GET /v1/scaling-laws/{slug}/isoflop",
    "POST /v1/webhooks",
    "PATCH /v1/webhooks/{webhook_id}",
}


def test_schemathesis_is_told_a_valid_request_may_be_refused_only_where_a_rule_no_schema_states_says_so(
    client,
):
    # An order between two values (x-greater-than, x-not-less-than) and the rules above are a 422 for a
    # request JSON Schema admits: schemathesis.toml says so for those operations, and for no other.
    spec = client.get("/openapi.json").get_json()
    ordered = {label for label, operation in _operations_of(spec) if _orders(spec, operation)}
    config = tomllib.loads(SCHEMATHESIS_TOML.read_text())

    refusable = {label for label, statuses in _accepted_by_operation(config).items() if "422" in statuses}
    # And an Idempotency-Key used before for another request is a 422 wherever the header is taken.
    idempotent = {
        label for label, operation in _operations_of(spec) if "Idempotency-Key" in _headers_of(operation)
    }

    assert len(ordered) >= 10
    assert refusable == ordered | UNSTATABLE | idempotent


def _orders(spec: dict, operation: dict) -> bool:
    def ordered(schema: dict) -> bool:
        return any(key in schema for key in ("x-greater-than", "x-not-less-than"))

    if any(ordered(parameter.get("schema", {})) for parameter in operation.get("parameters", [])):
        return True
    schemas = spec["components"]["schemas"]
    for content in operation.get("requestBody", {}).get("content", {}).values():
        name = content.get("schema", {}).get("$ref", "").rsplit("/", 1)[-1]
        if any(ordered(member) for member in schemas.get(name, {}).get("properties", {}).values()):
            return True
    return False


def _accepted_by_operation(config: dict) -> dict[str, list[str]]:
    """What schemathesis accepts for a valid request on each operation schemathesis.toml names: the first
    entry naming it that sets the statuses (schemathesis reads the entries in that order)."""
    answers: dict[str, list[str]] = {}
    for entry in config["operations"]:
        for label in entry["include-name"]:
            if fuzzing.accepted(entry):
                answers.setdefault(label, fuzzing.accepted(entry))
    return answers


@pytest.mark.parametrize(
    ("if_match", "well_formed"),
    [
        ("*", True),
        ('"1"', True),
        ('W/"1"', True),
        (' "1" , W/"x-2"', True),
        ("", False),
        ("1", False),
        ('"1",', False),
        ('"a" "b"', False),
    ],
)
def test_the_if_match_the_description_admits_is_the_one_the_server_evaluates(
    client, acme, if_match, well_formed
):
    spec = client.get("/openapi.json").get_json()
    pattern = _headers_of(spec["paths"]["/v1/budgets/{budget_id}"]["patch"])["If-Match"]["schema"]["pattern"]
    budget = client.post("/v1/budgets", json=year_budget_body(acme)).get_json()

    response = client.patch(
        f"/v1/budgets/{budget['id']}", json={"name": "Renamed"}, headers={"If-Match": if_match}
    )

    assert bool(re.search(pattern, if_match)) == well_formed
    if well_formed:  # evaluated: the current version (or any, for *) passes, another is stale
        assert response.status_code in (200, 412), response.get_json()
    else:
        assert assert_problem(response, 400)["errors"][0]["header"] == "If-Match"


def _examples_of(node, name: str):
    """Every example the description gives a property called `name` (in schemas and in parameters)."""
    if isinstance(node, dict):
        for key, value in node.items():
            named = value.get(name) if key == "properties" and isinstance(value, dict) else None
            if isinstance(named, dict) and "example" in named:
                yield named["example"]
            if key == "parameters" and isinstance(value, list):
                yield from (p["example"] for p in value if p.get("name") == name and "example" in p)
            yield from _examples_of(value, name)
    elif isinstance(node, list):
        for item in node:
            yield from _examples_of(item, name)


def test_every_organisation_an_example_names_is_the_one_the_organisation_example_creates(client):
    # Examples are requests a reader (and schemathesis' examples phase) sends as they are: one naming an
    # organisation no example creates is refused 422 ("No organization").
    spec = client.get("/openapi.json").get_json()
    created = spec["components"]["schemas"]["Organization"]["properties"]["slug"]["example"]

    named = set(_examples_of(spec, "organization"))

    assert named == {created}


def test_a_get_with_the_current_etag_is_answered_304_as_documented(client, acme):
    tag = client.get("/v1/organizations/acme").headers["ETag"]
    response = client.get("/v1/organizations/acme", headers={"If-None-Match": tag})
    assert (response.status_code, response.headers["ETag"], response.data) == (304, tag, b"")


def _pages(spec: dict) -> set[str]:
    """The operations that answer a page: their 200 schema has a next_cursor."""
    schemas = spec["components"]["schemas"]
    pages = set()
    for name, operation in _operations_of(spec):
        content = operation.get("responses", {}).get("200", {}).get("content", {})
        reference = content.get("application/json", {}).get("schema", {}).get("$ref", "")
        if "next_cursor" in schemas.get(reference.rsplit("/", 1)[-1], {}).get("properties", {}):
            pages.add(name)
    return pages


def test_a_cursor_is_described_as_the_server_reads_it(client):
    spec = client.get("/openapi.json").get_json()
    cursors = {
        name: parameter["schema"]
        for name, operation in _operations_of(spec)
        for parameter in operation.get("parameters", [])
        if parameter["name"] == "cursor"
    }
    assert set(cursors) == _pages(spec)
    assert len(cursors) >= 10
    feed = cursors.pop("GET /v1/events")
    assert feed == {"type": "string", "pattern": FEED_CURSOR_PATTERN}
    assert all(cursor == {"type": "string", "pattern": CURSOR_PATTERN} for cursor in cursors.values())
    for made_up in ("", "0", "not a cursor", "bm90IGpzb24", "A" * 33):  # base64 of "not json"; one too long
        assert not re.search(CURSOR_PATTERN, made_up)
        body = assert_problem(client.get("/v1/organizations", query_string={"cursor": made_up}), 422)
        assert body["errors"] == [{"parameter": "cursor", "detail": "Not a valid cursor."}]


@pytest.mark.parametrize("cursor", ["0" * 32, "A" * 32, "_" * 32, "-" * 32, "f" * 32, "z9" * 16])
def test_every_cursor_of_the_described_shape_is_a_position_the_lists_take(client, acme, cursor):
    # Before every item, after every item, or between: times beyond what a datetime holds are its bounds.
    assert re.search(CURSOR_PATTERN, cursor)
    for path in ("/v1/organizations", "/v1/budgets", "/v1/plans", "/v1/audit"):
        response = client.get(path, query_string={"cursor": cursor})
        assert response.status_code == 200, (path, response.get_json())


def test_a_list_still_reads_a_cursor_of_its_earlier_form(client, acme, session):
    for name in ("beta-org", "gamma-org"):
        assert client.post("/v1/organizations", json={"slug": name, "name": name}).status_code == 201
    first = client.get("/v1/organizations", query_string={"limit": 1}).get_json()
    position = Cursor.decode(first["next_cursor"])
    earlier = json.dumps([position.created_at.isoformat(), str(position.id)]).encode()
    legacy = base64.urlsafe_b64encode(earlier).decode().rstrip("=")

    again = client.get("/v1/organizations", query_string={"limit": 1, "cursor": legacy})
    now = client.get("/v1/organizations", query_string={"limit": 1, "cursor": first["next_cursor"]})

    assert re.search(CURSOR_PATTERN, first["next_cursor"])
    assert not re.search(CURSOR_PATTERN, legacy)
    assert again.status_code == now.status_code == 200
    assert again.get_json()["items"] == now.get_json()["items"] != first["items"]


# Bodies the server refuses (422 at `pointer`) or accepts (None) for how their fields go together, which the
# description's JSON Schema must judge the same way.
COMBINATIONS = [
    ("/v1/allocations", "AllocationRequest", {"pf_days": 6000}, None),
    ("/v1/allocations", "AllocationRequest", {"law": "chinchilla-2022"}, "#"),
    ("/v1/allocations", "AllocationRequest", {"flops": 1e22, "pf_days": 10}, "#/pf_days"),
    ("/v1/allocations", "AllocationRequest", {"target_loss": 2.5, "flops": 1e22}, "#/flops"),
    ("/v1/allocations", "AllocationRequest", {"days": 30}, "#/hardware"),
    ("/v1/allocations", "AllocationRequest", {"pf_days": 10, "hardware": "h100-sxm"}, None),
    (
        "/v1/estimates",
        "EstimateRequest",
        {"params": 1e9, "tokens": 2e10, "hardware": "h100-sxm", "days": 30},
        None,
    ),
    (
        "/v1/estimates",
        "EstimateRequest",
        {"params": 1e9, "tokens": 2e10, "hardware": "h100-sxm", "days": 30, "accelerators": 8},
        "#/days",
    ),
    ("/v1/allocations", "AllocationRequest", {"pf_days": 10, "mfu": 0.5}, "#/hardware"),
    (
        "/v1/allocations",
        "AllocationRequest",
        {"cost": "100.00", "hardware": "h100-sxm", "accelerators": 8},
        "#/currency",
    ),
    ("/v1/allocations", "AllocationRequest", {"pf_days": 10, "inference_tokens": 1e12}, None),
    ("/v1/allocations", "AllocationRequest", {"pf_days": 10, "inference_batch": 8}, "#/inference_tokens"),
    (
        "/v1/allocations",
        "AllocationRequest",
        {"pf_days": 10, "inference_tokens": 1e12, "unique_tokens": 1e12},
        "#/unique_tokens",
    ),
    (
        "/v1/allocations",
        "AllocationRequest",
        {"pf_days": 10, "tokens_per_param": 20, "unique_tokens": 1e12},
        "#/tokens_per_param",
    ),
    ("/v1/allocations", "AllocationRequest", {"target_loss": 2.5, "unique_tokens": 1e12}, "#/unique_tokens"),
    ("/v1/hardware/no-such-gpu", "HardwarePatch", {"currency": "USD"}, "#/price_per_hour"),
    ("/v1/keys", "ApiKey", {"name": "k", "role": "admin", "organization": "acme"}, "#/organization"),
    ("/v1/keys", "ApiKey", {"name": "k", "role": "viewer"}, "#/organization"),
    ("/v1/keys", "ApiKey", {"name": "k", "role": "viewer", "organization": "acme"}, None),
]


@pytest.mark.parametrize(("path", "component", "body", "pointer"), COMBINATIONS)
def test_the_description_and_the_server_agree_on_which_fields_go_together(
    client, session, acme, path, component, body, pointer
):
    load_builtin_hardware(session)
    spec = client.get("/openapi.json").get_json()
    described = jsonschema_rs.Draft4Validator(
        {"components": spec["components"], "$ref": f"#/components/schemas/{component}"}
    )
    send = client.patch if component == "HardwarePatch" else client.post
    response = send(path, json=body, headers={"If-Match": "*"})
    assert described.is_valid(body) == (pointer is None)
    if pointer is None:
        assert response.status_code in (200, 201), response.get_data(as_text=True)
    else:
        assert [error["pointer"] for error in assert_problem(response, 422)["errors"]] == [pointer]


def test_a_time_is_taken_by_the_year_it_is_written_in_as_the_description_says(client, acme):
    spec = client.get("/openapi.json").get_json()
    pattern = spec["components"]["schemas"]["Budget"]["properties"]["period_start"]["pattern"]
    # 1970 where it is written, 1969 in UTC: the description's pattern admits it, and so does the server.
    earliest = "1970-01-01T00:00:00+01:00"
    response = client.post("/v1/budgets", json={**year_budget_body(), "period_start": earliest})
    assert re.match(pattern, earliest)
    assert response.status_code == 201, response.get_data(as_text=True)
    assert response.get_json()["period_start"] == "1969-12-31T23:00:00+00:00"
    latest = "9999-01-01T00:00:00+14:00"  # 9998 in UTC, but written in 9999
    response = client.post("/v1/budgets", json={**year_budget_body(), "period_end": latest})
    assert not re.match(pattern, latest)
    assert [error["pointer"] for error in assert_problem(response, 422)["errors"]] == ["#/period_end"]


def test_every_training_precision_the_description_offers_is_one_the_engine_trains_at(client):
    spec = client.get("/openapi.json").get_json()
    offered = spec["components"]["schemas"]["EstimateRequest"]["properties"]["precision"]["enum"]
    assert "int8" not in offered  # profiles quote int8 OP/s for inference; no run trains at it
    peaks = dict.fromkeys(("fp32", "tf32", "bf16", "fp16", "fp8", "int8"), 1e15)
    hardware = {"peak_flops": peaks, "memory_bytes": 8e10}
    for precision in offered:
        body = {"params": 7e9, "tokens": 1.4e11, "hardware": hardware, "accelerators": 8}
        response = client.post("/v1/estimates", json={**body, "precision": precision})
        assert response.status_code == 200, precision


def test_the_docs_page_is_served_with_its_assets_from_this_server(client):
    page = client.get("/docs")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets, html
    for asset in assets:
        assert asset.startswith("/docs/static/"), f"{asset} is not served locally"
        with client.get(asset) as response:
            assert response.status_code == 200, asset
            assert len(response.data) > 1000
    assert '"/openapi.json"' in html


@pytest.fixture
def world(client, session, acme) -> fuzzing.World:
    """What requests may name: the catalog, an organisation, its budget and a plan with a measured run."""
    load_builtin_hardware(session)
    budget = client.post("/v1/budgets", json=year_budget_body(acme))
    assert budget.status_code == 201
    plan = client.post("/v1/plans", json={**fuzzing.MEASURED_PLAN, "organization": acme})
    assert plan.status_code == 201, plan.get_json()
    row = session.get(Plan, uuid.UUID(plan.get_json()["id"]))
    session.add(usage_record(row, start=row.start_at, hours=1, tokens_per_second=1e5))
    session.commit()
    return fuzzing.World(organization=acme, budget_id=budget.get_json()["id"], measured_plan_id=str(row.id))


@pytest.mark.parametrize("operation", _operations())
def test_the_api_conforms_to_its_description_under_fuzzing(app, client, world, monkeypatch, operation):
    if operation in FITTING_OPERATIONS:
        monkeypatch.setattr(fit, "default_grid", lambda: FEW_STARTS)
    # As an admin. If-Match is drawn as the description states it (fuzzing.py makes half of the drawn ones
    # `*`, so that updates and deletes get past their preconditions too); schemathesis.toml says 412 and 428.
    headers = {"Authorization": client.environ_base["HTTP_AUTHORIZATION"]}
    method, path = operation.split(" ")
    schema = fuzzing.loaded(_description(), world)
    schema.app = app

    @given(case=schema[path][method].as_strategy())
    @settings(
        max_examples=int(os.environ.get("FUZZ_EXAMPLES", "25")),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def conforms(case):
        case.call_and_validate(headers=headers)  # every check: none excluded

    conforms()
