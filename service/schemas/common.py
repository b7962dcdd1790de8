"""What every schema shares: unknown fields refused, rules between fields (checked, and stated in the
OpenAPI description), lists and their pages, caveats."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import marshmallow as ma
from marshmallow import validate

from service.core.validation import InvalidInput
from service.schemas.fields import CursorField
from service.services.changes import Changes
from service.services.pagination import CURSOR_PATTERN, DEFAULT_LIMIT, MAX_LIMIT

# A schema's RULES are checked by its validator and stated in JSON Schema in the OpenAPI description (an allOf
# that service/api adds to the schema's component), both from the one declaration: the document says what the
# server does. An order between two values, which JSON Schema cannot state, is declared on the later field as
# metadata `x-greater-than` (the other field's name): the validator checks it and the description carries it.
GREATER_THAN = "x-greater-than"
# The same order, equality allowed: the end of a half-open window of a query (`to`, `created_to`, `max_flops`)
# may be its start, an empty window (or a single budget), answered as such rather than refused.
NOT_LESS_THAN = "x-not-less-than"


@dataclass(frozen=True)
class Rule:
    """Which fields must or must not be given together."""

    # Of the request's values by name (None: not given): the error (message, field it names), if broken.
    broken: Callable[[Mapping[str, Any]], tuple[str, str] | None]
    schema: Callable[[Callable[[str], dict], Callable[..., dict]], dict]  # of JSON Schema: given, absent
    text: str  # the rule in words, for the description


def _names(fields: tuple[str, ...]) -> str:
    return ", ".join(f"`{name}`" for name in fields)


def requires(
    fields: str | tuple[str, ...], other: str, message: str | None = None, *, at: str | None = None
) -> Rule:
    """Each of `fields` needs `other` ("Required with <the first given>." at `other` by default)."""
    fields = (fields,) if isinstance(fields, str) else fields

    def broken(value):
        first = next((name for name in fields if value[name] is not None), None)
        if first is not None and value[other] is None:
            return message or f"Required with {first}.", at or other
        return None

    return Rule(
        broken=broken,
        schema=lambda given, absent: {"anyOf": [absent(*fields), given(other)]},
        text=f"{_names(fields)} {'needs' if len(fields) == 1 else 'need'} `{other}`",
    )


def excludes(field: str, others: str | tuple[str, ...], message: str, *, at: str | None = None) -> Rule:
    """`field` goes with none of `others` (the error at the first of them given, or at `at`)."""
    others = (others,) if isinstance(others, str) else others

    def broken(value):
        first = next((name for name in others if value[name] is not None), None)
        if value[field] is not None and first is not None:
            return message, at or first
        return None

    return Rule(
        broken=broken,
        schema=lambda given, absent: {"anyOf": [absent(field), absent(*others)]},
        text=f"`{field}` with none of {_names(others)}",
    )


def given_when(field: str, key: str, value: str, *, required: bool = True) -> Rule:
    """`field` only where `key` is `value` (and, `required`, always there): a spot offer's preemption rate."""

    def broken(values):
        if values[field] is not None and values[key] != value:
            return f"Only with {key} {value}.", field
        if required and values[field] is None and values[key] == value:
            return f"Required with {key} {value}.", field
        return None

    def schema(given, absent):
        this = {"required": [key], "properties": {key: {"enum": [value]}}}
        if required:
            present = given(field)
            this = {
                "required": [key, field],
                "properties": {**present.get("properties", {}), **this["properties"]},
            }
        elsewhere = absent(field)
        elsewhere["properties"][key] = {"not": {"enum": [value]}}
        return {"anyOf": [this, elsewhere]}

    return Rule(
        broken=broken,
        schema=schema,
        text=f"`{field}` {'exactly' if required else 'only'} when `{key}` is {value}",
    )


def one_at_least(fields: tuple[str, ...], message: str, *, at: str = "_schema") -> Rule:
    return Rule(
        broken=lambda value: None if any(value[name] is not None for name in fields) else (message, at),
        schema=lambda given, absent: {"anyOf": [given(name) for name in fields]},
        text=f"one of {_names(fields)} at least",
    )


def _must_follow(field: ma.fields.Field, other: str, *, strictly: bool = True) -> str:
    """What a field marked `x-greater-than` (or, not `strictly`, `x-not-less-than`) must be, in the words of
    its error and of the description."""
    time = isinstance(field, ma.fields.DateTime)
    if strictly:
        return f"Must be {'after' if time else 'greater than'} {other}."
    return f"Must not be {'before' if time else 'less than'} {other}."


def rules_document(schema: StrictSchema) -> dict:
    """The schema's RULES in JSON Schema, for its OpenAPI component: an allOf, and the rules in words."""
    nullable = {field.data_key or name for name, field in schema.load_fields.items() if field.allow_none}
    return rules_json(schema.RULES, nullable)


def rules_json(rules: tuple[Rule, ...], nullable: set[str] | frozenset[str] = frozenset()) -> dict:
    """`rules` as an allOf, and in words; `nullable`: the fields for which null is not given."""

    def given(key: str) -> dict:
        not_null = {"properties": {key: {"not": {"enum": [None]}}}} if key in nullable else {}
        return {"required": [key], **not_null}

    def absent(*keys: str) -> dict:  # or null, where null is allowed
        null = {"nullable": True, "enum": [None]}
        return {"properties": {key: null if key in nullable else {"not": {}} for key in keys}}

    def typed(rule: Rule) -> dict:
        # Each branch says it is an object, as the schema around it does already: without it, schemathesis'
        # coverage phase took null for a valid nested object whose component has rules (a model's `shape`).
        return {"anyOf": [{"type": "object", **branch} for branch in rule.schema(given, absent)["anyOf"]]}

    if not rules:
        return {}
    return {
        "allOf": [typed(rule) for rule in rules],
        "description": "Rules between fields: " + "; ".join(rule.text for rule in rules) + ".",
    }


class StrictSchema(ma.Schema):
    """Rejects unknown fields: a misspelt field must fail loudly, not be silently ignored. Checks the
    schema's RULES and the order of the fields marked `x-greater-than`. Loads into its REQUEST, the use
    case's request value (a frozen dataclass), when it has one: a service never sees a request's dict."""

    RULES: tuple[Rule, ...] = ()
    REQUEST: ClassVar[type | None] = None

    class Meta:
        unknown = ma.RAISE

    @ma.validates_schema
    def _follows_its_rules(self, data, **kwargs):
        # Rules name fields as requests do; `data` has them by attribute. Null is not given (PATCH clears).
        value = {key: data.get(attribute) for key, attribute in self._request_names}
        for rule in self.RULES:
            if (error := rule.broken(value)) is not None:
                raise ma.ValidationError(*error)
        for key, other, field, strictly in self._in_order:
            if None in (value[key], value[other]):
                continue
            if value[key] < value[other] or (strictly and value[key] == value[other]):
                raise ma.ValidationError(_must_follow(field, other, strictly=strictly), key)

    # What the checks above and below read of the schema's fields, found once per schema (an instance serves
    # every request of its endpoint: api/base.py), not on each request.

    @functools.cached_property
    def _request_names(self) -> tuple[tuple[str, str | None], ...]:
        """(name in requests, attribute) of each field a request may give."""
        return tuple(
            (field.data_key or name, field.attribute or field.name)
            for name, field in self.load_fields.items()
        )

    @functools.cached_property
    def _in_order(self) -> tuple[tuple[str, str, ma.fields.Field, bool], ...]:
        """(name, the name it must follow, field, strictly) of each field marked GREATER_THAN (strictly) or
        NOT_LESS_THAN."""
        return tuple(
            (field.data_key or name, field.metadata[marker], field, marker == GREATER_THAN)
            for name, field in self.load_fields.items()
            for marker in (GREATER_THAN, NOT_LESS_THAN)
            if marker in field.metadata
        )

    @functools.cached_property
    def _read_only_names(self) -> tuple[str, ...]:
        """The fields the service sets, in the schema's order."""
        return tuple(field.data_key or name for name, field in self.dump_fields.items() if field.dump_only)

    @ma.post_load
    def _as_request(self, data, **kwargs):
        if self.REQUEST is None:
            return data
        if issubclass(self.REQUEST, Changes):  # a PATCH sets only the fields it gives
            return self.REQUEST(**data, given=frozenset(data))
        return self.REQUEST(**data)

    @ma.pre_load
    def _refuse_read_only(self, data, **kwargs):
        # A field the service sets (id, created_at, committed, ...) is not unknown: say what it is.
        if isinstance(data, dict):
            given = [name for name in self._read_only_names if name in data]
            if given:
                message = "Read-only: set by the service, not by requests."
                raise ma.ValidationError({name: [message] for name in given})
        return data


def core_value(make: Callable[..., Any], data: dict[str, Any]) -> Any:
    """A core value made from a request's `data`, its refusal a validation error of the field it names (the
    schema checks the same bounds first: this is the net under them)."""
    try:
        return make(**data)
    except InvalidInput as error:
        raise ma.ValidationError(error.sentence, error.argument) from None


class DocumentSchema(ma.Schema):
    """Describes a document the use cases make (a plan's result, which POST /v1/allocations shows too): its
    fields document it, and `document` makes it from what the view returns, so that what the API shows and
    what a plan stores cannot differ."""

    document: ClassVar[Callable[[Any], dict[str, Any]]]

    def dump(self, obj: Any, *, many: bool | None = None) -> Any:
        make = type(self).document
        return [make(item) for item in obj] if (self.many if many is None else many) else make(obj)


def greater_than_to_property(self, field, ret, **kwargs) -> dict:
    """apispec attribute function: say in words the order `x-greater-than` (or `x-not-less-than`) declares."""
    strictly = GREATER_THAN in field.metadata
    other = field.metadata.get(GREATER_THAN if strictly else NOT_LESS_THAN)
    if other is None:
        return {}
    said = _must_follow(field, f"`{other}`", strictly=strictly)
    return {"description": f"{ret['description']} {said}" if ret.get("description") else said}


class ListQuerySchema(StrictSchema):
    limit = ma.fields.Integer(
        load_default=DEFAULT_LIMIT,
        validate=validate.Range(min=1, max=MAX_LIMIT),
        metadata={"description": f"Items per page (at most {MAX_LIMIT})."},
    )
    cursor = CursorField(
        load_default=lambda: None,  # a callable: the description shows no default (null is no query value)
        metadata={
            "description": "The `next_cursor` of the previous page (a position in the list: 32 base64url "
            "characters); omit for the newest items. A value of another shape is a 422."
        },
    )


class PageSchema(ma.Schema):
    next_cursor = ma.fields.String(
        allow_none=True,
        required=True,
        metadata={
            "pattern": CURSOR_PATTERN,
            "description": "Pass as `cursor` to get the next page; null on the last page.",
        },
    )


class CaveatSchema(ma.Schema):
    code = ma.fields.String(
        required=True,
        metadata={
            "description": "Stable code: extrapolation, repeated_data, repetition_without_gain, "
            "repetition_constants_from_c4, does_not_fit_memory, binding_limit, unusual_mfu, calibrated; of "
            "fitted laws: not_converged, unstable_bootstrap, influential_runs, not_an_isoflop_sweep."
        },
    )
    message = ma.fields.String(required=True)
    details = ma.fields.Dict(required=True)
