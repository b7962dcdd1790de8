"""planner_client covers the API: every operation of openapi.yaml (by its operationId) has a method of
PlannerClient in planner_client.client.OPERATIONS, the table names no operation the API lacks and no method
the client lacks, and each method sends the request of the operation it is listed for."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
import yaml
from requests.structures import CaseInsensitiveDict

from planner_client import PlannerClient
from planner_client.client import OPERATIONS

SPEC = yaml.safe_load((Path(__file__).resolve().parents[2] / "openapi.yaml").read_text())
# Public methods that are not an operation of their own: the transport, and a variant of one.
VARIANTS = {"request": None, "cost_report_csv": "getCostReport"}


def _spec_operations() -> dict[str, tuple[str, str]]:
    """operationId -> (METHOD, path template)."""
    return {
        operation["operationId"]: (method.upper(), path)
        for path, item in SPEC["paths"].items()
        for method, operation in item.items()
        if method != "parameters"
    }


def _public_methods() -> set[str]:
    return {
        name for name, _ in inspect.getmembers(PlannerClient, inspect.isfunction) if not name.startswith("_")
    }


def test_every_operation_of_the_api_has_a_client_method_and_every_method_an_operation():
    spec = set(_spec_operations())
    assert sorted(spec - set(OPERATIONS)) == [], "operations the client lacks: add each to OPERATIONS"
    assert sorted(set(OPERATIONS) - spec) == [], "OPERATIONS names operations that openapi.yaml lacks"
    methods = list(OPERATIONS.values())
    assert sorted(name for name in set(methods) if methods.count(name) > 1) == [], "one method, one operation"
    assert sorted(set(methods) - _public_methods()) == [], "OPERATIONS names methods PlannerClient lacks"
    unlisted = _public_methods() - set(methods) - set(VARIANTS)
    assert sorted(unlisted) == [], "methods of PlannerClient that OPERATIONS does not list"


class Recorder(requests.Session):
    """Answers every request with 200 and a body that suits any method, and keeps what was sent."""

    def __init__(self):
        super().__init__()
        self.sent: list[tuple[str, str]] = []

    def request(self, method, url, **kwargs):
        self.sent.append((method, urlsplit(url).path))
        response = requests.Response()
        response.status_code = 200
        response.headers = CaseInsensitiveDict({"ETag": '"1"', "Content-Type": "application/json"})
        response._content = json.dumps({"items": [], "next_cursor": None, "status": "ok"}).encode()
        return response


def _arguments(method) -> tuple[list, dict]:
    """Placeholders for the method's required parameters (and an If-Match, so that it sends one request)."""
    positional: list = []
    keywords: dict = {}
    for name, parameter in inspect.signature(method).parameters.items():
        if name == "self" or parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
            continue
        annotation = str(parameter.annotation)
        value = {} if annotation.startswith("Mapping") else [] if annotation.startswith("list") else "x"
        if name == "if_match":
            keywords[name] = '"1"'
        elif parameter.default is not parameter.empty:
            continue
        elif parameter.kind == parameter.KEYWORD_ONLY:
            keywords[name] = value
        else:
            positional.append(value)
    return positional, keywords


def _operation_of(method: str, path: str) -> str | None:
    """The operation a request is for: of the templates it matches, the most literal (/v1/plans/compare)."""
    matching = [
        (template.count("{"), operation_id)
        for operation_id, (verb, template) in _spec_operations().items()
        if verb == method and re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), path)
    ]
    return min(matching)[1] if matching else None


@pytest.mark.parametrize("name", sorted([*OPERATIONS.values(), *(m for m, op in VARIANTS.items() if op)]))
def test_each_method_sends_the_request_of_its_operation(name):
    expected = {method: operation_id for operation_id, method in OPERATIONS.items()} | VARIANTS
    recorder = Recorder()
    client = PlannerClient("http://planner.test", "cpk_test", session=recorder, retries=0)
    positional, keywords = _arguments(getattr(PlannerClient, name))
    answer = getattr(client, name)(*positional, **keywords)
    if inspect.isgenerator(answer):
        list(answer)
    assert [_operation_of(*sent) for sent in recorder.sent] == [expected[name]], recorder.sent


def test_the_client_readme_lists_every_operation_with_its_request_and_method():
    readme = (Path(__file__).resolve().parents[2] / "clients/python/README.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| `(\w+ \S+)` \| `(\w+)` \|$", readme, flags=re.MULTILINE)
    operations = _spec_operations()
    assert [(operation_id, method) for operation_id, _, method in rows] == list(OPERATIONS.items())
    assert [request for _, request, _ in rows] == [" ".join(operations[op]) for op in OPERATIONS]
