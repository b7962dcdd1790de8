"""Request values as the JSON documents kept of them, and back: a plan's `inputs`, a fit job's `request`.

Both ways follow the dataclasses' fields and their types, so that a field added to a request is stored and
read back with no list to update. A document holds the fields given: None is left out, so that a plan made
before a field existed reads as it did. Money is a decimal string (`format_money`), numbers JSON numbers,
nested values objects, a union of a slug and an object either.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, TypeVar

T = TypeVar("T")
# A JSON object as it is stored or sent: a plan's inputs or snapshot, a fit job's request, a merge patch.
JsonObject = Mapping[str, Any]


def format_money(amount: Decimal) -> str:
    """At least the cents, and every further digit that is not a trailing zero: 6.88, 0.10, 0.000123."""
    cents = amount.quantize(Decimal("0.01"))
    return f"{cents:f}" if cents == amount else f"{amount.normalize():f}"


def format_optional_money(amount: Decimal | None) -> str | None:
    """format_money, or None for an amount that is not there (a plan without a price has no cost)."""
    return None if amount is None else format_money(amount)


def to_document(value: Any) -> Any:
    """`value` as JSON: a dataclass as an object of its fields that are not None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: to_document(item)
            for field in dataclasses.fields(value)
            if (item := getattr(value, field.name)) is not None
        }
    if isinstance(value, Decimal):
        return format_money(value)
    if isinstance(value, Mapping):
        return {key: to_document(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_document(item) for item in value]
    return value


def from_document(cls: type[T], document: JsonObject) -> T:
    """The `cls` (a dataclass) that `document` holds, each member read as its field's type says."""
    types_ = typing.get_type_hints(cls)
    return cls(**{name: _read(types_[name], value) for name, value in document.items()})


def _read(kind: Any, value: Any) -> Any:  # noqa: PLR0911 -- one return per kind of type
    if value is None:
        return None
    origin, arguments = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):
        # A slug (str) or an object, or a value or None: the one type that fits what the document holds.
        choices = [choice for choice in arguments if choice is not type(None)]
        if str in choices and isinstance(value, str):
            return value
        (kind,) = [choice for choice in choices if choice is not str]
        return _read(kind, value)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return from_document(kind, value)
    if origin in (Mapping, dict):
        return {key: _read(arguments[1], item) for key, item in value.items()}
    if origin is tuple:
        return tuple(_read(arguments[0], item) for item in value)
    if kind in (float, int, Decimal):
        return kind(value)
    return value
