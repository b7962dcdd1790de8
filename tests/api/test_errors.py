"""Every error leaves the service as application/problem+json (RFC 9457), with a request id."""

from __future__ import annotations

import pytest

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
