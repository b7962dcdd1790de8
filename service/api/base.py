"""What every resource blueprint shares."""

from __future__ import annotations

import json
import re
from typing import Any

import flask
import flask_smorest
from webargs.flaskparser import FlaskParser
from werkzeug.exceptions import NotFound
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


# What a path's id or slug names, by the route's argument (a slug by its blueprint's name as well), for the
# 404 of an id that is not even of the right form; a test holds every argument of every route named here.
PATH_RESOURCES = {
    "budget_id": "budget",
    "calibration_id": "calibration",
    "delivery_id": "delivery",
    "event_id": "event",
    "job_id": "fit job",
    "key_uuid": "API key",
    "plan_id": "plan",
    "usage_id": "usage record",
    "webhook_id": "webhook",
    "hardware.slug": "hardware profile",
    "offers.slug": "offer",
    "organizations.slug": "organization",
    "scaling-laws.slug": "scaling law",
}
# What the form of each converter's value is, said of a resource.
_PATH_FORMS = {
    "uuid": "{a} {resource} id is a UUID",
    "int": "{a} {resource} id is a whole number",
    "slug": "{a} {resource}'s slug is 2-63 lowercase letters, digits or inner hyphens",
}
_RULE_ARGUMENT = re.compile(r"<(?:(?P<converter>\w+)(?:\([^)]*\))?:)?(?P<name>\w+)>")
_SHOWN_LENGTH = 80  # of a value quoted back: a path may be kilobytes long


def path_resource(endpoint: str, argument: str) -> str:
    """The resource that `argument` of the route of `endpoint` (blueprint.view) names."""
    blueprint = endpoint.partition(".")[0]
    return PATH_RESOURCES.get(f"{blueprint}.{argument}") or PATH_RESOURCES[argument]


def describe_unrouted_path() -> None:
    """Before an API path's 404 is raised (a before_request hook): the 404 says what is wrong with the path,
    where Werkzeug's text speaks to a person who typed a URL into a browser. A path that is a route's but for
    an id or slug not of the route's form names the resource and the form, as the 404 of a well-formed id
    that names nothing names the resource ("No plan 'x': a plan id is a UUID."); a path that is no route's
    says where the API's paths are listed. The console's pages keep their own 404."""
    request = flask.request
    if not isinstance(request.routing_exception, NotFound) or not request.path.startswith("/v1/"):
        return
    request.routing_exception = NotFound(
        _malformed_argument(request.path)
        or f"Nothing is at {request.path}: the API's paths are listed at /openapi.json."
    )


def _malformed_argument(path: str) -> str | None:
    """Of the API route `path` would be but for an argument not of its converter's form, which resource
    that argument names and what form its values take; None when no route is."""
    app = flask.current_app
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/v1/") or not rule.arguments:
            continue
        arguments = list(_RULE_ARGUMENT.finditer(rule.rule))
        pattern, at = "", 0
        for argument in arguments:
            pattern += re.escape(rule.rule[at : argument.start()]) + f"(?P<{argument['name']}>[^/]+)"
            at = argument.end()
        matched = re.fullmatch(pattern + re.escape(rule.rule[at:]), path)
        if matched is None:
            continue
        for argument in arguments:
            converter = argument["converter"] or "default"
            value = matched[argument["name"]]
            if converter in _PATH_FORMS and not re.fullmatch(app.url_map.converters[converter].regex, value):
                resource = path_resource(rule.endpoint, argument["name"])
                a = "an" if resource[0].lower() in "aeio" else "a"
                shown = value if len(value) <= _SHOWN_LENGTH else value[:_SHOWN_LENGTH] + "..."
                form = _PATH_FORMS[converter].format(a=a, resource=resource)
                return f"No {resource} {shown!r}: {form}."
    return None


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
