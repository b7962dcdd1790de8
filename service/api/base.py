"""What every resource blueprint shares."""

from __future__ import annotations

import json
from typing import Any

import flask
import flask_smorest
from webargs.flaskparser import FlaskParser
from werkzeug.routing import BaseConverter

from service.schemas.fields import SLUG_PATTERN
from service.services.pagination import Page
from service.services.preconditions import IF_MATCH_PATTERN, etag

LINK_HEADER = {
    "Link": {
        "description": 'RFC 8288 link to the next page (rel="next"), absent on the last page.',
        "schema": {"type": "string"},
    }
}
LOCATION_HEADER = {"Location": {"description": "Path of the created resource.", "schema": {"type": "string"}}}
ETAG_HEADER = {"ETag": {"description": "Version of the resource (strong).", "schema": {"type": "string"}}}


def _header_parameter(name: str, description: str, *, required: bool, pattern: str | None = None) -> dict:
    return {
        "in": "header",
        "name": name,
        "required": required,
        "schema": {"type": "string", **({"pattern": pattern} if pattern else {})},
        "description": description,
    }


IF_MATCH_PARAMETER = _header_parameter(
    "If-Match",
    "The ETag of your last read (or `*`: whatever the current version): 428 without it, 412 when the "
    "resource has changed since, 400 when it is neither `*` nor a list of ETags.",
    required=True,
    pattern=IF_MATCH_PATTERN,
)
IF_NONE_MATCH_PARAMETER = _header_parameter(
    "If-None-Match",
    "The ETag of your copy: 304 with no body when the resource has not changed since.",
    required=False,
)
NOT_MODIFIED = {"description": "Not Modified: your copy is current.", "headers": ETAG_HEADER}


def conditional_write(blueprint: flask_smorest.Blueprint):
    """Document an update or delete that needs If-Match (and its 412/428 answers)."""

    def decorate(view):
        view = blueprint.doc(parameters=[IF_MATCH_PARAMETER])(view)
        view = blueprint.alt_response(412, response="PRECONDITION_FAILED")(view)
        return blueprint.alt_response(428, response="PRECONDITION_REQUIRED")(view)

    return decorate


def conditional_read(blueprint: flask_smorest.Blueprint):
    """Document a GET that honours If-None-Match (its 304; see service/api/__init__.py)."""
    return blueprint.doc(parameters=[IF_NONE_MATCH_PARAMETER], responses={"304": NOT_MODIFIED})


def if_match() -> str | None:
    return flask.request.headers.get("If-Match")


def etag_header(resource) -> dict[str, str]:
    return {"ETag": etag(resource.version)}


class SlugConverter(BaseConverter):
    """`<slug:name>` in a route: anything that is not a slug is a 404 before any query runs (a NUL byte in
    a path would otherwise reach PostgreSQL, which refuses it)."""

    regex = SLUG_PATTERN.removeprefix("^").removesuffix("$")


class _Parser(FlaskParser):
    # webargs' private hooks (docs/decisions/0001-flask-smorest-private-methods.md).
    def _raw_load_json(self, req):
        try:
            return super()._raw_load_json(req)
        except (RecursionError, ValueError):
            # json.loads gives up on absurdly deep nesting with RecursionError, and on integers of over 4 300
            # digits with a plain ValueError; webargs treats neither as invalid JSON.
            return self._handle_invalid_json_error(json.JSONDecodeError("nested too deeply", "", 0), req)


class Blueprint(flask_smorest.Blueprint):
    # webargs ignores unknown query parameters by default; leave it to each schema (ours raise), so that a
    # misspelt `limt=5` is an error rather than silently the default.
    ARGUMENTS_PARSER = _Parser(unknown=None)

    def route(self, rule, *, operation_id: str, parameters=None, tags=None, **options):
        """flask-smorest's (and so `get`, `post`...), with the operation's `operationId` required beside its
        method and path: the public name that clients and code generators use. Stated, not derived from the
        view's Python name, so that renaming a function never changes it; tests/api/test_openapi.py holds
        every one camelCase and unique."""
        register = super().route(rule, parameters=parameters, tags=tags, **options)
        return lambda view: register(self.doc(operationId=operation_id)(view))

    def arguments(self, schema, **kwargs):
        """flask-smorest's, with one instance of a schema class for every request: given the class, webargs
        makes an instance per request, and marshmallow deep-copies every field of it (1.5 ms of a plan
        request's CPU). A schema keeps nothing between loads, so threads share it."""
        return super().arguments(schema() if isinstance(schema, type) else schema, **kwargs)


def page_response(page: Page, limit: int) -> tuple[dict, dict[str, str]]:
    """The list convention: `items`, `next_cursor` in the body and an RFC 8288 `Link: rel="next"`."""
    return {"items": page.items, "next_cursor": page.next_cursor}, _next_link(page, limit)


def _next_link(page: Page, limit: int) -> dict[str, str]:
    if not page.next_cursor:
        return {}
    endpoint = flask.request.endpoint
    assert endpoint is not None, "a page answers a request that a view matched"
    args: dict[str, Any] = {**flask.request.args.to_dict(), "limit": limit, "cursor": page.next_cursor}
    # A relative reference (RFC 8288 allows it): never built from the client's Host header.
    url = flask.url_for(endpoint, **(flask.request.view_args or {}), **args)
    return {"Link": f'<{url}>; rel="next"'}
