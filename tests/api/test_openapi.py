"""The API description is generated from the code, checked in, and honoured by the code."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from service import create_app
from service.config import Config
from service.core import fit
from service.services.catalog import load_builtin_hardware

CROSS_FIELD_RULES = {
    "POST /v1/allocations",
    "POST /v1/estimates",
    "GET /v1/scaling-laws/{slug}/frontier",  # max_flops > min_flops
    "GET /v1/scaling-laws/{slug}/isoflop",  # flops and span together must stay within the sizes answered for
    # Budgets name an organisation and hardware that must exist; label keys follow a pattern OpenAPI 3.0
    # cannot state (no propertyNames).
    "POST /v1/budgets",
    # A price needs its currency (and vice versa for the price's date and source).
    "POST /v1/hardware",
    "PUT /v1/hardware/{slug}",
    "PATCH /v1/hardware/{slug}",
    # Organisation keys need an organisation that exists; admin keys must not have one.
    "POST /v1/keys",
    "PUT /v1/budgets/{budget_id}",
    "PATCH /v1/budgets/{budget_id}",
    # Plans: allocation rules as above, an organisation, budget and hardware that must exist; a revision is
    # only valid merged into its parent's request.
    "POST /v1/plans",
    "POST /v1/plans/{plan_id}/revise",
    "GET /v1/plans/compare",  # the plans must exist
    "GET /v1/plans",  # times within 1970-9998, which OpenAPI's date-time cannot bound
    # Runs the schema accepts may still not make a law (too few sizes, repeats, losses that do not fall with
    # scale), and the organisation must exist.
    "POST /v1/scaling-laws",
    "GET /v1/reports/costs",  # `to` after `from`, each group once
}
CHECKED_IN = Path(__file__).resolve().parents[2] / "openapi.yaml"
# The fuzzer checks the HTTP contract, not the fit: should it draw runs that can be fitted, a few L-BFGS
# starts instead of the 4 500 keep each example to milliseconds.
FITTING_OPERATIONS = {"POST /v1/scaling-laws"}
FEW_STARTS = fit.default_grid()[::500]


def _operations() -> list[str]:
    spec = (
        create_app(Config(database_url="sqlite://", testing=True))
        .test_client()
        .get("/openapi.json")
        .get_json()
    )
    return [
        f"{method.upper()} {path}"
        for path, item in spec["paths"].items()
        for method in item
        if method != "parameters"
    ]


def test_the_checked_in_openapi_yaml_matches_the_code(client):
    served = client.get("/openapi.json").get_json()
    checked_in = yaml.safe_load(CHECKED_IN.read_text())
    assert checked_in == served, "openapi.yaml is stale: run `make openapi` and commit the result"


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


@pytest.mark.parametrize("operation", _operations())
def test_the_api_conforms_to_its_description_under_fuzzing(app, session, issue_key, monkeypatch, operation):
    load_builtin_hardware(session)  # so that the fuzzer's hardware slugs can name something
    if operation in FITTING_OPERATIONS:
        monkeypatch.setattr(fit, "default_grid", lambda: FEW_STARTS)
    # As an admin, with If-Match: * so that updates and deletes get past their preconditions.
    headers = {"Authorization": f"Bearer {issue_key('admin')}", "If-Match": "*"}
    method, path = operation.split(" ")
    schema = schemathesis.openapi.from_wsgi("/openapi.json", app)
    strategy = schema[path][method].as_strategy()

    @given(case=strategy)
    @settings(
        max_examples=int(os.environ.get("FUZZ_EXAMPLES", "40")),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def conforms(case):
        # Some 422s answer "schema-valid" requests by design, because no schema can express the rule: an
        # opaque cursor the service did not issue, a slug that names nothing, a budget that needs a field
        # given elsewhere. Every other check (no 5xx, documented status, content type, body) still runs.
        made_up_cursor = "cursor" in (case.query or {})
        semantic = made_up_cursor or operation in CROSS_FIELD_RULES
        case.call_and_validate(
            headers=headers, excluded_checks=[positive_data_acceptance] if semantic else None
        )

    conforms()
