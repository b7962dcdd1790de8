"""RFC 9457 problem details: the one error shape of the API, registered in one place.

Every 4xx/5xx leaves the service as `application/problem+json` with `type`, `title`, `status`, `detail`,
`instance` and `request_id`; validation failures add `errors: [{pointer | parameter | header, detail}]`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

import flask
import marshmallow as ma
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.orm.exc import StaleDataError
from werkzeug.exceptions import HTTPException

from service.core.validation import InvalidInput
from service.infra import http_status, metrics
from service.infra.request_context import current_request_id
from service.services.errors import (
    ConflictError,
    InvalidFieldError,
    InvalidHeaderError,
    InvalidParameterError,
    KeyReusedError,
    NotFoundError,
    PreconditionFailedError,
    PreconditionRequiredError,
    ServiceError,
)

PROBLEM_CONTENT_TYPE = "application/problem+json"

log = logging.getLogger(__name__)

# Where webargs found the bad value -> which member of an error entry names it.
_LOCATION_KEYS = {"json": "pointer", "query": "parameter", "headers": "header", "path": "parameter"}

_SERVICE_ERROR_STATUS: dict[type[ServiceError], int] = {
    NotFoundError: 404,
    ConflictError: 409,
    InvalidHeaderError: 400,
    InvalidFieldError: 422,
    KeyReusedError: 422,
    PreconditionRequiredError: 428,
    PreconditionFailedError: 412,
}


class ProblemErrorSchema(ma.Schema):
    pointer = ma.fields.String(metadata={"description": "JSON Pointer (RFC 6901) into the request body"})
    parameter = ma.fields.String(metadata={"description": "Name of the query or path parameter"})
    header = ma.fields.String(metadata={"description": "Name of the request header"})
    detail = ma.fields.String(required=True)


class ProblemSchema(ma.Schema):
    """Documents the error body (RFC 9457); responses are built by `problem_response`."""

    class Meta:
        unknown = ma.INCLUDE  # problem types may add extension members

    type = ma.fields.String(required=True, metadata={"example": "about:blank"})
    title = ma.fields.String(required=True, metadata={"example": "Unprocessable Content"})
    status = ma.fields.Integer(required=True, metadata={"example": 422})
    detail = ma.fields.String()
    instance = ma.fields.String(metadata={"description": "The request path"})
    request_id = ma.fields.String(required=True)
    errors = ma.fields.List(ma.fields.Nested(ProblemErrorSchema))


def problem_document(
    status: int, detail: str | None = None, *, title: str | None = None
) -> dict[str, object]:
    """The members every problem has (RFC 9457), in order; `detail` only when there is one."""
    body: dict[str, object] = {
        "type": "about:blank",
        "title": title or http_status.title(status),
        "status": status,
    }
    if detail:
        body["detail"] = detail
    return body


def problem_response(
    status: int,
    detail: str | None = None,
    *,
    title: str | None = None,
    headers: Mapping[str, str] | None = None,
    extensions: Mapping[str, object] | None = None,
) -> flask.Response:
    """A problem response; `extensions` are members of the body after the standard ones (RFC 9457 §3.2)."""
    body = problem_document(status, detail, title=title)
    if flask.has_request_context():
        body["instance"] = flask.request.path
    body["request_id"] = current_request_id()
    body.update(extensions or {})
    response = flask.current_app.response_class(
        flask.json.dumps(body), status=status, mimetype=PROBLEM_CONTENT_TYPE
    )
    response.headers["Cache-Control"] = "no-store"
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def validation_errors(messages: Mapping[str, object]) -> list[dict[str, str]]:
    """Flatten webargs/marshmallow messages ({location: {field: [msg] | nested}}) into error entries."""
    return [
        _error_entry(location, path, detail)
        for location, tree in messages.items()
        for path, detail in _walk(tree, ())
    ]


def service_error_entry(error: InvalidFieldError) -> dict[str, str]:
    """The error entry of a use case's refusal of a field: where the field is (a JSON pointer into the body,
    a query parameter, a header), and why."""
    if isinstance(error, InvalidHeaderError):
        location = "headers"
    elif isinstance(error, InvalidParameterError):
        location = "query"
    else:
        location = "json"
    return _error_entry(location, error.field, error.detail)


def _error_entry(location: str, path: tuple[object, ...], detail: str) -> dict[str, str]:
    key = _LOCATION_KEYS.get(location, "pointer")
    if key == "pointer":
        where = "#" + "".join("/" + _escape_pointer(str(part)) for part in path)
    else:
        where = ".".join(str(part) for part in path)
    return {key: where, "detail": detail}


def _walk(tree: object, path: tuple[object, ...]) -> Iterator[tuple[tuple[object, ...], str]]:
    if isinstance(tree, Mapping):
        for name, sub in tree.items():
            # Schema-level errors belong to the object that holds them, not to a member called "_schema".
            yield from _walk(sub, path if name == "_schema" else (*path, name))
    elif isinstance(tree, list | tuple):
        for item in tree:
            yield from _walk(item, path)
    else:
        yield path, str(tree)


def _escape_pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _handle_http_exception(error: HTTPException) -> flask.Response:
    status = error.code or 500
    data = getattr(error, "data", None) or {}
    extensions: dict[str, object] = {}
    messages = data.get("messages")
    detail: str | None
    if status == 400 and messages:
        detail = "The request body is not valid JSON."
    elif messages:
        detail = "The request is not valid; see errors."
        extensions["errors"] = validation_errors(messages)
    else:
        detail = data.get("message") or error.description
    # Werkzeug puts protocol headers on the exception (Allow on 405, WWW-Authenticate on 401); keep them.
    headers = {k: v for k, v in error.get_headers() if k.lower() != "content-type"}
    headers.update(data.get("headers") or {})
    if status == 413:
        # The body was not read: what is left of it would be taken for the next request, so the server closes
        # the connection, and says so rather than "keep-alive" (a client's next request would fail, in doubt).
        headers["Connection"] = "close"
    return problem_response(status, detail, headers=headers, extensions=extensions)


def _handle_service_error(error: ServiceError) -> flask.Response:
    status = next(code for cls, code in _SERVICE_ERROR_STATUS.items() if isinstance(error, cls))
    if isinstance(error, InvalidFieldError):
        errors = [service_error_entry(error)]
        return problem_response(
            status, "The request is not valid; see errors.", extensions={"errors": errors}
        )
    headers = {} if error.retry_after is None else {"Retry-After": str(error.retry_after)}
    return problem_response(status, error.detail, headers=headers, extensions=error.extensions)


def _handle_invalid_document(error: ma.ValidationError) -> flask.Response:
    # A body validated by a use case rather than by webargs (a plan revision merged into its parent's).
    errors = validation_errors({"json": error.messages})
    return problem_response(422, "The request is not valid; see errors.", extensions={"errors": errors})


def _handle_core_refusal(error: InvalidInput) -> flask.Response:
    # Services point core refusals at the field they concern; this is the net under any they do not.
    return problem_response(
        422, "The request is not valid; see errors.", extensions={"errors": [{"detail": str(error)}]}
    )


def _handle_database_error(error: DBAPIError | PoolTimeoutError) -> flask.Response:
    # Unreachable, restarting, timed out, locked, or its connection lost mid-request: the request may well
    # succeed if retried shortly. Any other driver error is a bug (500).
    unavailable = isinstance(error, OperationalError | PoolTimeoutError) or error.connection_invalidated
    if not unavailable:
        return _handle_unexpected(error)
    error_type = type(getattr(error, "orig", None) or error).__name__
    metrics.DATABASE_ERRORS.labels(error=error_type).inc()
    log.warning("database unavailable", extra={"error_type": error_type})
    return problem_response(503, "The database is unavailable; retry shortly.", headers={"Retry-After": "1"})


def _handle_concurrent_update(error: StaleDataError) -> flask.Response:
    # Another request updated the row between our read (which passed If-Match) and our write.
    return problem_response(
        412, "The resource changed while this request was applied; read it again and retry."
    )


def _handle_unexpected(error: Exception) -> flask.Response:
    log.exception("unhandled exception", extra={"error_type": type(error).__name__})
    return problem_response(500, "An unexpected error occurred; quote the request_id when reporting it.")


def register_error_handlers(app: flask.Flask) -> None:
    app.register_error_handler(HTTPException, _handle_http_exception)
    for cls in _SERVICE_ERROR_STATUS:
        app.register_error_handler(cls, _handle_service_error)
    app.register_error_handler(InvalidInput, _handle_core_refusal)
    app.register_error_handler(ma.ValidationError, _handle_invalid_document)
    app.register_error_handler(DBAPIError, _handle_database_error)
    app.register_error_handler(PoolTimeoutError, _handle_database_error)
    app.register_error_handler(StaleDataError, _handle_concurrent_update)
    app.register_error_handler(Exception, _handle_unexpected)
