"""Who may call what: bearer API keys, roles, and each organisation seeing only its own objects.

Every /v1 request must carry `Authorization: Bearer <key>` (never a query parameter); the web console's
pages take the key from their session cookie instead. The probes, the OpenAPI document and the docs page
are open. A view declares the roles it admits with `@requires(...)`;
admins are admitted everywhere. Services receive a `Scope`: the organisation whose objects the caller may
see, or None for an admin, who sees all.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

import flask
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.datastructures import WWWAuthenticate
from werkzeug.exceptions import Forbidden, Unauthorized

from service.infra.actors import act_as
from service.infra.db import get_db, reading_session
from service.services import keys
from service.services.keys import Principal
from service.web import ratelimit

# Everything else needs a key, including paths that match no route (no hint of what exists).
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"})
OPEN_PREFIXES = ("/docs/static/",)
SECURITY_SCHEME = {"type": "http", "scheme": "bearer", "description": "An API key: cpk_<id>_<secret>."}
READERS = ("planner", "finance", "viewer")
# The web console (service/console) signs people in with a key kept in this cookie instead of the header.
CONSOLE_BLUEPRINT = "console"
CONSOLE_STATIC = f"{CONSOLE_BLUEPRINT}.static"
CONSOLE_COOKIE = "planner_key"

log = logging.getLogger(__name__)

Params = ParamSpec("Params")
Result = TypeVar("Result")


def _unauthorized(detail: str, error: str | None = None) -> Unauthorized:
    parameters: dict[str, str | None] = {"realm": "compute-planner", **({"error": error} if error else {})}
    return Unauthorized(detail, www_authenticate=WWWAuthenticate("Bearer", parameters))


def _authenticate() -> None:
    path = flask.request.path
    if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
        return
    if flask.request.blueprint == CONSOLE_BLUEPRINT:
        # The web console's key travels in its session cookie; without a valid one the console sends the
        # browser to its sign-in page (a redirect, not a 401 a person could do nothing with). Its stylesheet
        # is public (the sign-in page uses it): a page's styles never wait on the database for the key.
        key = flask.request.cookies.get(CONSOLE_COOKIE)
        if key and flask.request.endpoint != CONSOLE_STATIC:
            admit(key)
        return
    if any(
        name.lower() in ("api_key", "apikey", "key", "access_token", "token") for name in flask.request.args
    ):
        raise _unauthorized(
            "Send the API key in the Authorization header, never in the URL.", "invalid_request"
        )
    header = flask.request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    if not header:
        raise _unauthorized("Send an API key: Authorization: Bearer <key>.")
    if scheme.lower() != "bearer" or not key.strip():
        raise _unauthorized("Use the Bearer scheme: Authorization: Bearer <key>.", "invalid_request")
    if admit(key.strip()) is None:
        raise _unauthorized(
            "The API key is not valid (malformed, unknown, revoked or expired).", "invalid_token"
        )


def admit(key: str) -> Principal | None:
    """Make the holder of `key` this request's principal; None (and nobody admitted) when it is not valid.
    Too many failures from the client's address lately: 429, and `key` is not even looked up."""
    # A malformed key is refused by its shape, at no cost; only a well-formed one could be a guess.
    found = ratelimit.limit_failures(key, lambda: _look_up(key)) if keys.parse(key) else None
    if found is None:
        return None
    principal, stale = found
    if stale:
        flask.g.touch_key = principal.key_id
    flask.g.principal = principal
    if "db_session" in flask.g:
        act_as(flask.g.db_session, principal.key_id, flask.g.get("request_id"))
    return principal


def _look_up(key: str) -> tuple[Principal, bool] | None:
    # Where a write's transaction would hold SQLite's write lock, apart, so that only an admitted request
    # waits for that lock; elsewhere in the request's own (a checkout with its ping, a BEGIN fewer).
    with reading_session() as session:
        return keys.authenticate(session, key)


def _touch_after_response(response: flask.Response) -> flask.Response:
    """Record last_used_at once the response is on its way: bookkeeping never delays or fails a request
    (on SQLite the write may wait for the lock)."""
    key_id = flask.g.pop("touch_key", None)
    if key_id is not None:
        database = get_db()

        def touch() -> None:
            try:
                with database.sessionmaker() as session:
                    keys.touch(session, key_id)
            except SQLAlchemyError as error:
                log.warning("last_used_at not recorded", extra={"error_type": type(error).__name__})

        response.call_on_close(touch)
    return response


def current_principal() -> Principal:
    principal: Principal = flask.g.principal  # flask.g is untyped: admit() sets this
    return principal


def scope() -> uuid.UUID | None:
    """The organisation the caller may see, or None for an admin (everything)."""
    principal = current_principal()
    return None if principal.is_admin else principal.organization_id


def requires(*roles: str) -> Callable[[Callable[Params, Result]], Callable[Params, Result]]:
    """Admit callers with one of `roles` (admins always)."""

    def decorate(view: Callable[Params, Result]) -> Callable[Params, Result]:
        @wraps(view)
        def guarded(*args: Params.args, **kwargs: Params.kwargs) -> Result:
            principal = current_principal()
            if not principal.is_admin and principal.role not in roles:
                allowed = ", ".join(("admin", *roles))
                raise Forbidden(f"A {principal.role} key may not do this (allowed: {allowed}).")
            return view(*args, **kwargs)

        return guarded

    return decorate


def init_app(app: flask.Flask) -> None:
    app.before_request(_authenticate)
    app.after_request(_touch_after_response)
