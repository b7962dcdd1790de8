"""Every error leaves the service as application/problem+json (RFC 9457), with a request id."""

from __future__ import annotations

import pytest

from service.services.catalog import load_builtin_hardware
from tests.builders import gpu_body, year_budget_body
from tests.problems import assert_problem

WELL_FORMED_KEY = "cpk_abcd1234_" + "s" * 43
VALID_ORGANIZATION = {"slug": "acme-research", "name": "Acme Research"}


def test_an_unknown_route_is_a_404_problem(client):
    body = assert_problem(client.get("/v1/no-such-thing"), 404)
    assert body["instance"] == "/v1/no-such-thing"
    assert body["title"] == "Not Found"


def test_a_wrong_method_is_a_405_problem_that_says_which_methods_are_allowed(client):
    response = client.delete("/healthz")
    assert_problem(response, 405)
    assert set(response.headers["Allow"].split(", ")) == {"GET", "HEAD", "OPTIONS"}


def test_malformed_json_is_a_400_problem(client):
    response = client.post("/v1/organizations", data='{"slug": ', content_type="application/json")
    body = assert_problem(response, 400)
    assert "not valid JSON" in body["detail"]


def test_absurdly_deep_json_is_a_400_problem(client):
    response = client.post(
        "/v1/organizations", data="[" * 100_000 + "]" * 100_000, content_type="application/json"
    )
    assert_problem(response, 400)


def test_a_wrong_method_or_path_wins_over_a_wrong_content_type(client):
    assert_problem(client.post("/healthz", data="x=1", content_type="application/x-www-form-urlencoded"), 405)
    assert_problem(client.post("/v1/nothing", data="x", content_type="text/plain"), 404)


def test_an_unreachable_database_is_a_503_problem_with_retry_after(make_app):
    client = make_app("postgresql+psycopg://nobody@127.0.0.1:1/nothing?connect_timeout=2").test_client()
    response = client.get("/v1/organizations", headers={"Authorization": f"Bearer {WELL_FORMED_KEY}"})
    assert_problem(response, 503)
    assert response.headers["Retry-After"] == "1"


def test_a_body_over_one_mebibyte_is_a_413_problem(client):
    padding = "x" * (1024 * 1024)
    response = client.post("/v1/organizations", json={**VALID_ORGANIZATION, "name": padding})
    assert_problem(response, 413)


def test_a_body_that_is_not_json_is_a_415_problem(client):
    response = client.post(
        "/v1/organizations", data="slug=acme", content_type="application/x-www-form-urlencoded"
    )
    body = assert_problem(response, 415)
    assert "application/json" in body["detail"]


def test_a_missing_field_is_a_422_problem_pointing_at_it(client):
    response = client.post("/v1/organizations", json={"slug": "acme"})
    body = assert_problem(response, 422)
    assert body["errors"] == [{"pointer": "#/name", "detail": "Missing data for required field."}]


def test_an_unknown_field_is_rejected_with_a_pointer_to_it(client):
    response = client.post("/v1/organizations", json={**VALID_ORGANIZATION, "colour": "blue"})
    body = assert_problem(response, 422)
    assert body["errors"] == [{"pointer": "#/colour", "detail": "Unknown field."}]


def test_a_value_of_the_wrong_type_is_a_422_problem(client):
    response = client.post("/v1/organizations", json={**VALID_ORGANIZATION, "name": 12})
    body = assert_problem(response, 422)
    assert body["errors"] == [{"pointer": "#/name", "detail": "Not a valid string."}]


INLINE_GPU = {"peak_flops": {"bf16": 1e15}, "memory_bytes": 8e10}
INLINE_LAW = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
ESTIMATE = {"params": 7e9, "tokens": 1.4e11, "hardware": INLINE_GPU, "accelerators": 8}
SHAPE = {"layers": 32, "d_model": 4096, "heads": 32, "sequence_length": 4096}
FIT = {
    "organization": "acme",
    "name": "Sweep",
    "runs": [{"params": 5e7 * size, "tokens": 1e9, "loss": 4 - size / 10} for size in range(1, 6)],
}

# A body valid as far as its schema goes, and the path to one of its numbers.
NUMBER_MEMBERS = {
    "pf_days": ("/v1/allocations", {"pf_days": 6000}, ("pf_days",)),
    "mfu": (
        "/v1/allocations",
        {"pf_days": 6000, "hardware": INLINE_GPU, "accelerators": 8, "mfu": 0.5},
        ("mfu",),
    ),
    "accelerators": (
        "/v1/allocations",
        {"pf_days": 6000, "hardware": "h100-sxm", "accelerators": 8},
        ("accelerators",),
    ),
    "inline law": ("/v1/allocations", {"pf_days": 6000, "law": INLINE_LAW}, ("law", "alpha")),
    "params": ("/v1/estimates", ESTIMATE, ("params",)),
    "inline hardware": ("/v1/estimates", ESTIMATE, ("hardware", "memory_bytes")),
    "shape": ("/v1/estimates", {**ESTIMATE, "shape": SHAPE}, ("shape", "layers")),
    "hardware memory": ("/v1/hardware", gpu_body(), ("memory_bytes",)),
    "hardware peak": ("/v1/hardware", gpu_body(), ("peak_flops", "bf16")),
    "budget cap": ("/v1/budgets", {**year_budget_body(), "max_flops": 1e24}, ("max_flops",)),
    "plan accelerators": (
        "/v1/plans",
        {"organization": "acme", "pf_days": 6000, "hardware": "h100-sxm", "accelerators": 8},
        ("accelerators",),
    ),
    "fit run": ("/v1/scaling-laws", FIT, ("runs", 0, "params")),
    "bootstrap samples": (
        "/v1/scaling-laws",
        {**FIT, "bootstrap": {"samples": 20}},
        ("bootstrap", "samples"),
    ),
}


def _replaced(document, path: tuple, value):
    """`document` (JSON) with the member at `path` replaced by `value`."""
    if not path:
        return value
    head, *rest = path
    copy = list(document) if isinstance(document, list) else dict(document)
    copy[head] = _replaced(document[head], tuple(rest), value)
    return copy


def _member(document, path: tuple):
    for step in path:
        document = document[step]
    return document


@pytest.mark.parametrize("target", list(NUMBER_MEMBERS.values()), ids=list(NUMBER_MEMBERS))
def test_a_number_sent_as_a_string_is_a_422_naming_the_field(client, session, target):
    load_builtin_hardware(session)
    assert client.post("/v1/organizations", json={"slug": "acme", "name": "Acme"}).status_code == 201
    path, body, member = target
    numeral = str(_member(body, member))  # "6000", "0.5", "1e+24": what a careless client quotes
    response = client.post(path, json=_replaced(body, member, numeral))
    errors = assert_problem(response, 422)["errors"]
    assert [error["pointer"] for error in errors] == ["#/" + "/".join(map(str, member))]
    assert "not a string" in errors[0]["detail"]


def test_an_integer_written_with_a_fraction_of_zero_is_that_integer(client):
    # JSON Schema: an integer is any number with a zero fractional part, 80000000000.0 and 8e10 alike.
    body = {**gpu_body(), "memory_bytes": 80000000000.0, "memory_bandwidth_bytes_per_second": 2e12}
    response = client.post("/v1/hardware", json=body)
    assert response.status_code == 201, response.get_data(as_text=True)
    created = response.get_json()
    stored = (created["memory_bytes"], created["memory_bandwidth_bytes_per_second"])
    assert stored == (8 * 10**10, 2 * 10**12)
    assert all(isinstance(number, int) for number in stored)  # written back as integers, not 8e10


@pytest.mark.parametrize("value", [8.5, True, 1e400])
def test_an_integer_field_refuses_fractions_booleans_and_infinity(client, value):
    body = {"pf_days": 6000, "hardware": INLINE_GPU, "accelerators": value}
    errors = assert_problem(client.post("/v1/allocations", json=body), 422)["errors"]
    assert [error["pointer"] for error in errors] == ["#/accelerators"]


@pytest.mark.parametrize("name", ["nul\u0000byte", "bell\u0007", "new\nline", "lone\ud800surrogate"])
def test_control_characters_in_a_name_are_a_422_problem(client, name):
    response = client.post("/v1/organizations", json={**VALID_ORGANIZATION, "name": name})
    body = assert_problem(response, 422)
    detail = "Must not contain control characters or unpaired surrogates."
    assert body["errors"] == [{"pointer": "#/name", "detail": detail}]


def test_a_body_that_is_not_an_object_is_a_422_problem_about_the_whole_body(client):
    response = client.post("/v1/organizations", json=["acme"])
    body = assert_problem(response, 422)
    assert body["errors"] == [{"pointer": "#", "detail": "Invalid input type."}]


def test_a_bad_query_parameter_is_a_422_problem_naming_the_parameter(client):
    body = assert_problem(client.get("/v1/organizations?limit=101"), 422)
    assert [error["parameter"] for error in body["errors"]] == ["limit"]


def test_an_unknown_query_parameter_is_rejected(client):
    body = assert_problem(client.get("/v1/organizations?colour=blue"), 422)
    assert body["errors"] == [{"parameter": "colour", "detail": "Unknown field."}]


@pytest.fixture
def failing_client(app_with, client_of):
    def explode():
        raise RuntimeError("secret internal detail")

    app = app_with()
    app.add_url_rule("/explode", "explode", explode)
    return client_of(app)


def test_an_unexpected_exception_is_a_500_problem_without_internals_and_is_logged_with_its_id(
    failing_client, service_log
):
    client = failing_client
    response = client.get("/explode", headers={"X-Request-ID": "req-123"})
    body = assert_problem(response, 500)
    text = response.get_data(as_text=True)
    assert "secret internal detail" not in text
    assert "Traceback" not in text
    assert body["request_id"] == "req-123"
    errors = [entry for entry in service_log() if entry["level"] == "ERROR"]
    assert len(errors) == 1
    assert errors[0]["request_id"] == "req-123"
    assert "secret internal detail" in errors[0]["exception"]


def test_the_callers_request_id_is_echoed(client):
    response = client.get("/healthz", headers={"X-Request-ID": "trace-abc.1"})
    assert response.headers["X-Request-ID"] == "trace-abc.1"


@pytest.mark.parametrize("offered", ["", "has space", "x" * 129, 'quote"d'])
def test_an_unusable_request_id_is_replaced_by_a_generated_one(client, offered):
    response = client.get("/healthz", headers={"X-Request-ID": offered})
    generated = response.headers["X-Request-ID"]
    assert generated != offered
    assert len(generated) == 32


def test_every_request_is_logged_as_one_json_line_with_its_id_route_and_status(client, service_log):
    client.get("/v1/organizations/nobody", headers={"X-Request-ID": "req-log"})
    lines = [entry for entry in service_log() if entry["logger"] == "service.access"]
    assert lines == [
        {
            "time": lines[0]["time"],
            "level": "INFO",
            "logger": "service.access",
            "message": "request",
            "request_id": "req-log",
            "method": "GET",
            "path": "/v1/organizations/nobody",
            "route": "/v1/organizations/<slug:slug>",
            "status": 404,
            "duration_ms": lines[0]["duration_ms"],
            "key_id": lines[0]["key_id"],  # the admin key's id (see test_operations.py)
            "organization": None,  # an admin's key belongs to no organisation
        }
    ]
