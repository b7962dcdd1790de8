"""What the service relies on in flask-smorest, apispec, webargs and marshmallow beyond their public API.

Each test names one behaviour that docs/decisions/0001-flask-smorest-private-methods.md lists, and fails with
a pointer to that record: an upgrade that breaks one is met by reading the record, not by loosening the test.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from http import HTTPStatus
from types import SimpleNamespace
from typing import Any

import apispec
import flask
import marshmallow as ma
import pytest
import yaml
from apispec.ext.marshmallow import MarshmallowPlugin
from flask_smorest import Api
from flask_smorest.error_handler import ErrorHandlerMixin
from flask_smorest.spec import APISpecMixin
from flask_smorest.utils import prepare_response
from webargs.core import Parser
from werkzeug.exceptions import HTTPException

from service.api import OPENAPI_SETTINGS, PlannerApi, init_api
from service.api.base import Blueprint
from service.web.problems import PROBLEM_CONTENT_TYPE

RECORD = "docs/decisions/0001-flask-smorest-private-methods.md"


def relied_on(test: Callable[..., None]) -> Callable[..., None]:
    """Whatever fails in `test` (an assertion, a method gone, a signature changed) fails with the pointer."""

    @functools.wraps(test)
    def checked(*args: Any, **kwargs: Any) -> None:
        try:
            test(*args, **kwargs)
        except Exception as error:
            what = str(error) if isinstance(error, AssertionError) else f"{type(error).__name__}: {error}"
            raise AssertionError(
                f"{what}\n\nAn upgrade changed what the service relies on in "
                f"flask-smorest, apispec, webargs or marshmallow beyond their public API. Read {RECORD} "
                "(what it relies on, and what to do on an upgrade) before changing code or this test."
            ) from error

    return checked


def _parameters(owner: type, name: str) -> list[str]:
    function = inspect.getattr_static(owner, name, None)
    assert callable(function), f"{owner.__module__}.{owner.__qualname__}.{name} is gone"
    return list(inspect.signature(function).parameters)


def _probe_api() -> tuple[flask.Flask, PlannerApi, list[tuple[str, bool]]]:
    """The service's Api on a bare app, recording when flask-smorest calls the hooks it overrides (and
    whether the spec exists by then)."""
    calls: list[tuple[str, bool]] = []

    class Probe(PlannerApi):
        def _register_error_handlers(self) -> None:
            calls.append(("_register_error_handlers", self.spec is not None))
            super()._register_error_handlers()

        def _register_responses(self) -> None:
            calls.append(("_register_responses", self.spec is not None))
            super()._register_responses()

    app = flask.Flask("contract")
    app.config.update(OPENAPI_SETTINGS)
    return app, Probe(app), calls


def _registered_responses(register: Callable[[Any], None]) -> dict[str, dict[str, Any]]:
    """The response components a `_register_responses` registers, by name."""
    spec = apispec.APISpec("probe", "1", "3.0.3", plugins=[MarshmallowPlugin()])
    registered: dict[str, dict[str, Any]] = {}

    def record(component_id: str, component: dict[str, Any] | None = None, **_: Any) -> None:
        registered[component_id] = component or {}

    spec.components.response = record
    register(
        SimpleNamespace(
            spec=spec,
            ERROR_SCHEMA=PlannerApi.ERROR_SCHEMA,
            DEFAULT_RESPONSE_CONTENT_TYPE=Api.DEFAULT_RESPONSE_CONTENT_TYPE,
        )
    )
    return registered


@relied_on
def test_flask_smorest_calls_the_two_hooks_the_service_overrides_once_each_with_the_spec_built():
    assert _parameters(ErrorHandlerMixin, "_register_error_handlers") == ["self"]
    assert _parameters(APISpecMixin, "_register_responses") == ["self"]

    app, api, calls = _probe_api()

    assert sorted(calls) == [("_register_error_handlers", True), ("_register_responses", True)]
    assert api._app is app  # what PlannerApi._register_error_handlers hands to service.web.problems


@relied_on
def test_no_http_error_is_answered_by_flask_smorest_s_own_handler():
    app, api, _ = _probe_api()

    handlers = [handler for by_code in app.error_handler_spec[None].values() for handler in by_code.values()]
    assert api.handle_http_exception not in handlers
    assert app.error_handler_spec[None][None][HTTPException].__module__ == "service.web.problems"


@relied_on
def test_the_service_documents_every_response_flask_smorest_would_and_errors_as_problem_json():
    smorest = _registered_responses(APISpecMixin._register_responses)
    ours = _registered_responses(PlannerApi._register_responses)

    # flask-smorest's blueprints refer to these by name: 422 for arguments, 304/412/428 for ETags, default.
    assert set(smorest) <= set(ours)
    assert Api.DEFAULT_ERROR_RESPONSE_NAME in ours
    assert {HTTPStatus(status).name for status in (304, 412, 422, 428)} <= set(ours)
    for name, response in ours.items():
        if name == Api.DEFAULT_ERROR_RESPONSE_NAME or HTTPStatus[name] >= 400:
            assert list(response["content"]) == [PROBLEM_CONTENT_TYPE], name


@relied_on
def test_prepare_response_puts_a_schema_under_the_content_type_it_is_given():
    spec = apispec.APISpec("probe", "1", "3.0.3", plugins=[MarshmallowPlugin()])
    response: dict[str, Any] = {"description": "Not Found", "schema": "ProblemSchema"}

    prepare_response(response, spec, PROBLEM_CONTENT_TYPE)

    assert response == {
        "description": "Not Found",
        "content": {PROBLEM_CONTENT_TYPE: {"schema": "ProblemSchema"}},
    }


@relied_on
def test_every_way_flask_smorest_hands_out_the_description_goes_through_spec_to_dict(tmp_path):
    assert _parameters(apispec.APISpec, "to_dict") == ["self"]  # the service's replacement takes none
    app = flask.Flask("contract")
    api = init_api(app)
    sentinel = {"openapi": "3.0.3", "x-through": "spec.to_dict"}
    api.spec.to_dict = lambda: sentinel
    written = tmp_path / "openapi.yaml"

    served = app.test_client().get("/openapi.json").get_json()
    printed = app.test_cli_runner().invoke(args=["openapi", "print"])
    wrote = app.test_cli_runner().invoke(args=["openapi", "write", "--format", "yaml", str(written)])

    assert served == sentinel
    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.output) == sentinel
    assert wrote.exit_code == 0, wrote.output  # as `make openapi` writes openapi.yaml
    assert yaml.safe_load(written.read_text()) == sentinel


def _json_request(body: str) -> flask.ctx.RequestContext:
    return flask.Flask("contract").test_request_context(
        "/", method="POST", data=body, content_type="application/json"
    )


@relied_on
@pytest.mark.parametrize(
    "body",
    ["[" * 100_000 + "]" * 100_000, "1" * 5_000],
    ids=["nested too deeply for json.loads", "an integer of more digits than int() reads"],
)
def test_webargs_hands_the_service_s_parser_the_body_to_load_and_its_invalid_json_to_refuse(body):
    assert _parameters(Parser, "_raw_load_json") == ["self", "req"]
    assert _parameters(Parser, "_handle_invalid_json_error")[:3] == ["self", "error", "req"]

    with _json_request(body), pytest.raises(HTTPException) as refused:
        Blueprint.ARGUMENTS_PARSER.load_json(flask.request, ma.Schema())

    assert refused.value.code == 400


class _Recording:
    """A marshmallow number field whose `_validated` records what it was handed."""

    handed: list[object]

    def _validated(self, value: object) -> Any:
        self.handed.append(value)
        return super()._validated(value)


class _Float(_Recording, ma.fields.Float):
    handed: list[object] = []


class _Integer(_Recording, ma.fields.Integer):
    handed: list[object] = []


@relied_on
def test_marshmallow_hands_number_fields_validated_the_raw_input():
    assert _parameters(ma.fields.Number, "_validated") == ["self", "value"]
    assert _parameters(ma.fields.Integer, "_validated") == ["self", "value"]
    _Float.handed, _Integer.handed = [], []

    assert _Float().deserialize("2.5") == 2.5
    assert _Integer(strict=True).deserialize(8) == 8
    with pytest.raises(ma.ValidationError):
        _Integer(strict=True).deserialize(8.0)  # the strict check is in Integer._validated

    assert _Float.handed == [
        "2.5"
    ]  # as given, not yet converted: service/schemas/fields.py refuses text there
    assert _Integer.handed == [8, 8.0]
