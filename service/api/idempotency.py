"""The Idempotency-Key header on the requests that create plans or move them through their lifecycle."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

import flask

from service.data.models import utcnow
from service.infra.db import get_session, reading_session
from service.services import idempotency, transactions
from service.services.errors import InvalidHeaderError
from service.web.auth import current_principal

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
_KEPT_HEADERS = ("Location", "ETag", "Content-Type", "Retry-After", "Preference-Applied")

IDEMPOTENCY_KEY_PARAMETER = {
    "in": "header",
    "name": HEADER,
    "required": False,
    "schema": {"type": "string", "pattern": f"^[!-~]{{1,{idempotency.MAX_KEY_LENGTH}}}$"},
    "description": (
        "A unique value (e.g. a UUID) that makes retries safe: a retry with the same key and body gets the "
        f"first response again (with `{REPLAYED_HEADER}: true`); the same key with another body is a 422; "
        "a retry while the first is still running is a 409. Keys are scoped to your API key and expire after "
        "24 hours. Failed requests are not remembered: their retry is evaluated afresh."
    ),
}


REPLAYED_HEADER_DOC = {
    REPLAYED_HEADER: {
        "description": "`true` when this is the stored response to an earlier request with the same "
        "Idempotency-Key.",
        "schema": {"type": "string", "enum": ["true"]},
    }
}


def idempotent(
    blueprint,
    parameters: tuple[dict, ...] = (),
    prepare: Callable[..., Any] | None = None,
    *,
    peek: bool = True,
) -> Callable:
    """Run the view as one transaction (services/transactions.run_once), committed together with the
    response when the request came with an Idempotency-Key.

    Goes above `@blp.response`, so that the response stored is the one the view's decorators made, and
    above `@blp.arguments`, so that a replay answers before the body is parsed, unless `prepare` needs the
    parsed arguments. `parameters` documents the operation's other header parameters (flask-smorest
    replaces, rather than extends, a list documented twice).

    `prepare(reads, *arguments)` does the request's work that writes nothing (a fit, a plan's evaluation)
    before the key is claimed, since on SQLite the claim takes the database's write lock, which every other
    writer would wait on meanwhile; `reads` is db.reading_session's. Its result reaches the view as
    `prepared`. With `peek`, a finished response to replay is looked for first, without a lock: worth a
    statement when `prepare` is slow.
    """

    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def wrapper(*args, **kwargs):
            key = _key()
            if prepare is not None:
                with reading_session() as reads:
                    if peek and key is not None:
                        stored = idempotency.stored_response(reads, key, utcnow())
                        if stored is not None:
                            return _replay(stored)
                    kwargs["prepared"] = prepare(reads, *args, **kwargs)
            return transactions.run_once(
                get_session(),
                lambda: view(*args, **kwargs),
                key=key,
                record=_record,
                replay=_replay,
            )

        wrapper = blueprint.doc(parameters=[IDEMPOTENCY_KEY_PARAMETER, *parameters])(wrapper)
        wrapper = blueprint.alt_response(400, response="BAD_REQUEST")(wrapper)
        wrapper = blueprint.alt_response(409, response="CONFLICT")(wrapper)
        return blueprint.alt_response(422, response="UNPROCESSABLE_ENTITY")(wrapper)

    return decorate


def _key() -> idempotency.RequestKey | None:
    """The request's Idempotency-Key, the caller's, for this request (method, path and body)."""
    raw = flask.request.headers.get(HEADER)
    if raw is None:
        return None
    # The draft sends the key as a structured-field string ("..."); plain tokens are common too.
    key = raw[1:-1] if len(raw) > 2 and raw[0] == raw[-1] == '"' else raw
    if not idempotency.is_valid_key(key):
        raise InvalidHeaderError(
            HEADER, f"Must be 1 to {idempotency.MAX_KEY_LENGTH} visible ASCII characters, e.g. a UUID."
        )
    request = flask.request
    fingerprint = idempotency.fingerprint(request.method, request.path, request.get_data(cache=True))
    return idempotency.RequestKey(current_principal().key_id, key, fingerprint)


def _record(response: flask.Response) -> idempotency.StoredResponse:
    kept = {name: response.headers[name] for name in _KEPT_HEADERS if name in response.headers}
    return idempotency.StoredResponse(response.status_code, response.get_data(as_text=True), kept)


def _replay(stored: idempotency.StoredResponse) -> flask.Response:
    response = flask.current_app.response_class(stored.body, status=stored.status_code)
    for name, value in stored.headers.items():
        response.headers[name] = value
    response.headers[REPLAYED_HEADER] = "true"
    return response
