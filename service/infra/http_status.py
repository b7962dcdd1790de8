"""Status names and titles as RFC 9110 has them, whatever the Python version.

Python 3.13 renamed a few `http.HTTPStatus` members to RFC 9110's names (422 Unprocessable Content, 413
Content Too Large, 416 Range Not Satisfiable). flask-smorest names OpenAPI response components after
`HTTPStatus`, so without this the generated description, and problem titles, would depend on the Python
that runs the service.
"""

from __future__ import annotations

from http import HTTPStatus

_RENAMED = {
    413: ("REQUEST_ENTITY_TOO_LARGE", "CONTENT_TOO_LARGE", "Request Entity Too Large", "Content Too Large"),
    416: (
        "REQUESTED_RANGE_NOT_SATISFIABLE",
        "RANGE_NOT_SATISFIABLE",
        "Requested Range Not Satisfiable",
        "Range Not Satisfiable",
    ),
    422: ("UNPROCESSABLE_ENTITY", "UNPROCESSABLE_CONTENT", "Unprocessable Entity", "Unprocessable Content"),
}
_NAMES = {old: new for old, new, _, _ in _RENAMED.values()}
_PHRASES = {old: new for _, _, old, new in _RENAMED.values()}


def title(status: int) -> str:
    """The RFC 9110 reason phrase."""
    phrase = HTTPStatus(status).phrase
    return _PHRASES.get(phrase, phrase)


def normalise_spec(node: object) -> object:
    """The OpenAPI document with RFC 9110 status names in component names, references and descriptions."""
    if isinstance(node, dict):
        return {_NAMES.get(key, key): _normalise_value(key, value) for key, value in node.items()}
    if isinstance(node, list):
        return [normalise_spec(item) for item in node]
    return node


def _normalise_value(key: str, value: object) -> object:
    if key == "$ref" and isinstance(value, str):
        prefix, _, name = value.rpartition("/")
        return f"{prefix}/{_NAMES.get(name, name)}"
    if key == "description" and isinstance(value, str):
        return _PHRASES.get(value, value)
    if isinstance(value, str) and value in _NAMES:  # a response given by name, e.g. responses: {422: NAME}
        return _NAMES[value]
    return normalise_spec(value)
