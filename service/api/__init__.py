"""HTTP layer: the flask-smorest Api, its error shape in the OpenAPI description, and the blueprints."""

from __future__ import annotations

import importlib.metadata
from http import HTTPStatus

import flask
from apispec.ext.marshmallow import MarshmallowPlugin
from apispec.ext.marshmallow.common import resolve_schema_instance
from apispec.ext.marshmallow.openapi import OpenAPIConverter
from flask_smorest import Api
from flask_smorest.utils import prepare_response
from swagger_ui_bundle import swagger_ui_path
from werkzeug.exceptions import RequestEntityTooLarge, UnsupportedMediaType

from service.api import (
    budgets,
    calibrations,
    comparisons,
    events,
    grid,
    hardware,
    health,
    keys,
    laws,
    offers,
    organizations,
    planning,
    plans,
    reports,
    webhooks,
)
from service.api.base import SlugConverter, describe_unrouted_path
from service.infra import http_status
from service.schemas.budgets import BUDGET_PATCH
from service.schemas.common import StrictSchema, greater_than_to_property, rules_document
from service.schemas.fields import (
    SLUG_PATTERN,
    MoneyField,
    nullable_nested_to_property,
    slug_or_object_to_property,
)
from service.schemas.hardware import HARDWARE_PATCH, HARDWARE_REPLACE
from service.schemas.laws import FitRequestSchema
from service.schemas.offers import OFFER_PATCH, OfferImportSchema
from service.schemas.planning import InlineHardwareSchema, InlineLawSchema, InlineServingHardwareSchema
from service.schemas.reports import CostReportSchema, CostRowSchema, CostTotalsSchema
from service.schemas.webhooks import WEBHOOK_PATCH
from service.web.auth import SECURITY_SCHEME
from service.web.problems import PROBLEM_CONTENT_TYPE, ProblemSchema, register_error_handlers

# The release's version (README, Versions): the installed distribution's, as pyproject.toml gives it.
API_VERSION = importlib.metadata.version("compute-planner")
API_PREFIX = "/v1/"

OPENAPI_SETTINGS = {
    "API_TITLE": "Compute Planner",
    "API_VERSION": API_VERSION,
    "OPENAPI_VERSION": "3.0.3",
    "OPENAPI_URL_PREFIX": "/",
    "OPENAPI_JSON_PATH": "openapi.json",
    "OPENAPI_SWAGGER_UI_PATH": "/docs",
    # Served by this app from the swagger-ui-bundle package: the docs page works with no internet access.
    "OPENAPI_SWAGGER_UI_URL": "/docs/static/",
    "API_SPEC_OPTIONS": {
        # Every operation needs a key unless it says otherwise (the probes do).
        "security": [{"bearerAuth": []}],
        "components": {"securitySchemes": {"bearerAuth": SECURITY_SCHEME}},
        "info": {
            "description": (
                "Plan the training of large language models: from a compute budget to model size, "
                "tokens, predicted loss, time and cost. Every error is application/problem+json (RFC 9457). "
                "People may use the web console the same server serves at / (HTML pages, not described here)."
            )
        },
    },
}

# What any /v1 operation may answer besides its own responses: a rate limit (the key's, or failed
# authentications from the address), database trouble.
COMMON_RESPONSES = {"429": "TOO_MANY_REQUESTS", "503": "SERVICE_UNAVAILABLE"}
RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "integer", "minimum": 1},
    }
}

# Variants for PUT and PATCH, named for the OpenAPI description (apispec would otherwise invent names).
NAMED_VARIANTS = {
    "HardwareReplace": HARDWARE_REPLACE,
    "HardwarePatch": HARDWARE_PATCH,
    "OfferPatch": OFFER_PATCH,
    "BudgetPatch": BUDGET_PATCH,
    "WebhookPatch": WEBHOOK_PATCH,
}

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# Operations that take training runs: bodies up to MAX_FIT_UPLOAD_LENGTH, as JSON or a multipart CSV upload.
UPLOAD_ENDPOINTS = frozenset({"scaling-laws.fit_law", "offers.import_offers"})


class _Converter(OpenAPIConverter):
    def schema2jsonschema(self, schema):
        jsonschema = super().schema2jsonschema(schema)
        instance = resolve_schema_instance(schema)
        return jsonschema | (rules_document(instance) if isinstance(instance, StrictSchema) else {})


class _MarshmallowPlugin(MarshmallowPlugin):
    """Components state their schema's rules between fields (see service/schemas/common.py)."""

    Converter = _Converter


class PlannerApi(Api):
    """flask-smorest's Api with RFC 9457 problem details instead of its own error shape.

    Its two methods override private ones, as does the `spec.to_dict` wrapper in init_api: why, and what
    to do when an upgrade changes them, in docs/decisions/0001-flask-smorest-private-methods.md."""

    ERROR_SCHEMA = ProblemSchema

    def _register_error_handlers(self):
        register_error_handlers(self._app)

    def _register_responses(self):
        # flask-smorest documents error responses as application/json; ours are application/problem+json.
        for status in HTTPStatus:
            response: dict[str, object] = {"description": status.phrase}
            if status >= 400:
                response["schema"] = self.ERROR_SCHEMA
            if status in (429, 503):
                response["headers"] = RETRY_AFTER
            prepare_response(response, self.spec, PROBLEM_CONTENT_TYPE)
            self.spec.components.response(status.name, response, lazy=True)
        response = {"description": "Error (application/problem+json)", "schema": self.ERROR_SCHEMA}
        prepare_response(response, self.spec, PROBLEM_CONTENT_TYPE)
        self.spec.components.response("DEFAULT_ERROR", response, lazy=True)


def _with_common_responses(spec: dict) -> dict:
    for path, operations in spec["paths"].items():
        if path.startswith(API_PREFIX):
            for method, operation in operations.items():
                if method != "parameters":
                    for status, name in COMMON_RESPONSES.items():
                        operation["responses"].setdefault(status, {"$ref": f"#/components/responses/{name}"})
    return spec


def _check_body() -> None:
    request = flask.request
    if request.routing_exception is not None or request.method not in _BODY_METHODS:
        return  # 404 and 405 come first
    if not request.path.startswith(API_PREFIX):
        return  # only the API takes bodies as JSON (the console's pages post HTML forms)
    chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    if chunked and len(request.get_data(cache=True)) >= (request.max_content_length or float("inf")):
        # Werkzeug stops reading a chunked body at the limit without saying so; it would parse as bad JSON.
        raise RequestEntityTooLarge()
    uploads = request.endpoint in UPLOAD_ENDPOINTS
    if uploads:
        request.max_content_length = flask.current_app.config["MAX_FIT_UPLOAD_LENGTH"]
    if (request.content_length or chunked) and not (
        request.is_json or (uploads and request.mimetype == "multipart/form-data")
    ):
        raise UnsupportedMediaType(
            "Send the request body as application/json" + (" or multipart/form-data." if uploads else ".")
        )


def _conditional_get(response: flask.Response) -> flask.Response:
    """If-None-Match on a GET of a resource with an ETag: 304 when the client's copy is current (weak
    comparison, RFC 9110 §13.1.2). If-Match is only for writes here (see services/preconditions.py)."""
    if flask.request.method not in ("GET", "HEAD") or response.status_code != 200:
        return response
    tag, _ = response.get_etag()
    if tag and flask.request.if_none_match.contains_weak(tag):
        not_modified = flask.current_app.response_class(status=304)
        for header in ("ETag", "X-Request-ID", "Cache-Control"):
            if header in response.headers:
                not_modified.headers[header] = response.headers[header]
        return not_modified
    return response


def _swagger_ui_static(filename: str) -> flask.Response:
    return flask.send_from_directory(swagger_ui_path, filename, max_age=86400)


def init_api(app: flask.Flask) -> Api:
    app.config.update(OPENAPI_SETTINGS)
    app.url_map.converters["slug"] = SlugConverter
    api = PlannerApi(app, spec_kwargs={"marshmallow_plugin": _MarshmallowPlugin()})
    api.register_field(MoneyField, "string", None)  # a decimal string, never a JSON number
    api.register_converter(SlugConverter, lambda _converter: {"type": "string", "pattern": SLUG_PATTERN})
    # One place through which both /openapi.json and `flask openapi write` get the document.
    raw_to_dict = api.spec.to_dict
    api.spec.to_dict = lambda: http_status.normalise_spec(_with_common_responses(raw_to_dict()))
    # Before any component is described: each is converted as it is registered.
    api.ma_plugin.converter.add_attribute_function(slug_or_object_to_property)
    api.ma_plugin.converter.add_attribute_function(greater_than_to_property)
    api.ma_plugin.converter.add_attribute_function(nullable_nested_to_property)
    for name in COMMON_RESPONSES.values():
        api.spec.components.get_ref("response", name)  # registers the lazily described response
    api.spec.components.schema("InlineHardware", schema=InlineHardwareSchema)
    api.spec.components.schema("InlineServingHardware", schema=InlineServingHardwareSchema)
    api.spec.components.schema("InlineLaw", schema=InlineLawSchema)
    api.spec.components.schema("FitRequest", schema=FitRequestSchema)
    api.spec.components.schema("OfferImport", schema=OfferImportSchema)
    api.spec.components.schema("CostRow", schema=CostRowSchema)
    api.spec.components.schema("CostTotals", schema=CostTotalsSchema)
    api.spec.components.schema("CostReport", schema=CostReportSchema)
    for name, schema in NAMED_VARIANTS.items():
        api.spec.components.schema(name, schema=schema)
    app.before_request(describe_unrouted_path)
    app.before_request(_check_body)
    app.after_request(_conditional_get)
    app.add_url_rule("/docs/static/<path:filename>", "swagger_ui_static", _swagger_ui_static)
    api.register_blueprint(health.blp)
    api.register_blueprint(organizations.blp)
    api.register_blueprint(planning.blp)
    api.register_blueprint(laws.blp)
    api.register_blueprint(laws.jobs_blp)
    api.register_blueprint(hardware.blp)
    api.register_blueprint(offers.blp)
    api.register_blueprint(comparisons.blp)
    api.register_blueprint(grid.blp)
    api.register_blueprint(budgets.blp)
    api.register_blueprint(plans.blp)
    api.register_blueprint(reports.blp)
    api.register_blueprint(calibrations.accuracy_blp)
    api.register_blueprint(calibrations.blp)
    api.register_blueprint(keys.blp)
    api.register_blueprint(events.blp)
    api.register_blueprint(webhooks.blp)
    return api
