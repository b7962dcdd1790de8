"""Request ids and the one log line per request.

The id comes from the caller's `X-Request-ID` when it is a sane token, otherwise it is generated; it is
echoed on every response, carried by every log line written while serving the request, and put into every
problem body, so that a client's report can be matched to the server's logs.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

import flask

from service.infra import metrics

REQUEST_ID_HEADER = "X-Request-ID"
_ACCEPTABLE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

access_log = logging.getLogger("service.access")


def current_request_id() -> str | None:
    if flask.has_request_context():
        request_id: str | None = flask.g.get("request_id")
        return request_id
    return None


def _start_request() -> None:
    offered = flask.request.headers.get(REQUEST_ID_HEADER, "")
    flask.g.request_id = offered if _ACCEPTABLE_REQUEST_ID.match(offered) else uuid.uuid4().hex
    flask.g.request_started = time.perf_counter()


def _finish_request(response: flask.Response) -> flask.Response:
    request_id = current_request_id()
    if request_id:
        response.headers[REQUEST_ID_HEADER] = request_id
    seconds = time.perf_counter() - flask.g.get("request_started", time.perf_counter())
    metrics.observe_request(response, seconds)
    rule = flask.request.url_rule
    principal = flask.g.get("principal")  # who called, by key id: never the key itself
    access_log.info(
        "request",
        extra={
            "method": flask.request.method,
            "path": flask.request.path,
            "route": rule.rule if rule else None,
            "status": response.status_code,
            "duration_ms": round(seconds * 1000, 3),
            "key_id": principal.key_id if principal else None,
            "organization": str(principal.organization_id)
            if principal and principal.organization_id
            else None,
        },
    )
    return response


def init_app(app: flask.Flask) -> None:
    app.before_request(_start_request)
    app.after_request(_finish_request)
