"""The service's JSON, written by orjson: Flask's encoder (the standard library's) took a quarter of the CPU
of a page of 100 plans and most of what a plan's documents cost to store (issue 24).

Responses (`OrjsonProvider`) mean what Flask's meant, value for value: members in the order written,
compact, and every type orjson does not know natively, or writes otherwise than Flask (dates,
dataclasses), through Flask's own `default` (a datetime as an HTTP date, a Decimal as a string). Two
spellings differ and are equally JSON (RFC 8259): floats below 1e-4 without an exponent's leading zero
(1.97e-5 rather than 1.97e-05), and text beyond ASCII as UTF-8 rather than as \\u escapes. The database's
JSON columns are written by orjson too (`store`).
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from flask.json.provider import DefaultJSONProvider

_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_NON_STR_KEYS


class OrjsonProvider(DefaultJSONProvider):
    """Flask's JSON provider (loads, the response helpers, `tojson`) with orjson's dumps."""

    sort_keys = False  # members in the order written: problem members in RFC order, bodies in schema order

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        options = _OPTIONS | (orjson.OPT_INDENT_2 if kwargs.get("indent") else 0)
        try:
            return orjson.dumps(obj, default=kwargs.get("default", self.default), option=options).decode()
        except orjson.JSONEncodeError:  # text only \u escapes can carry (a lone surrogate): Flask's, then
            return super().dumps(obj, **kwargs)


def load(text: str | bytes) -> Any:
    """A JSON column's value as the engines read it (their `json_deserializer`): orjson's, and the standard
    library's for what orjson refuses and `store` wrote nonetheless (a lone surrogate, an integer beyond 64
    bits): a plan's documents, read with each plan, parse several times faster (issue 24)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def store(document: Any) -> str:
    """A document as the database's JSON columns keep it (the engines' `json_serializer`): orjson's, which,
    like the standard library's before it, refuses what JSON has no type for (a Decimal, an object); the
    standard library's for text only \\u escapes carry (a lone surrogate)."""
    try:
        return orjson.dumps(document, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(document)
