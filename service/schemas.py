"""marshmallow schemas, named by role. The same schemas validate requests and generate `openapi.yaml`."""

from __future__ import annotations

import copy
import re
import secrets
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date
from decimal import Decimal
from typing import Any

import marshmallow as ma
import pycountry
from marshmallow import validate
from webargs.fields import DelimitedList

from service.catalog import PRECISIONS
from service.core import fit
from service.core.cluster import (
    DECODING_BOUNDS,
    MAX_INFERENCE_BATCH,
    MAX_MEMORY_BYTES,
    MAX_SHAPE_DIMENSION,
    OPTIMIZER_STATE_BYTES,
    RECOMPUTATION_MODES,
    SERVING_BYTES_PER_PARAM,
)
from service.core.engine import ENGINE_VERSION
from service.core.hyper import FLOPS_DEFINITIONS
from service.core.units import (
    MAX_ACCELERATORS,
    MAX_FLOPS,
    MAX_PARAMS,
    MAX_PEAK_FLOPS_PER_SECOND,
    MAX_TOKENS,
    MIN_FLOPS,
    MIN_TOKENS,
    PF_DAY_FLOPS,
)
from service.models import PLAN_STATUSES
from service.services.keys import ROLES as KEY_ROLES
from service.services.pagination import DEFAULT_LIMIT, MAX_LIMIT, Cursor

SLUG_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])$"
# What the engine's memory model trains at (core/cluster.py): every catalog precision but int8, which
# profiles quote for inference.
TRAINING_PRECISIONS = tuple(precision for precision in PRECISIONS if precision != "int8")


# --- Rules between fields -----------------------------------------------------------------------------------
# A schema's RULES are checked by its validator and stated in JSON Schema in the OpenAPI description (an allOf
# that service/api adds to the schema's component), both from the one declaration: the document says what the
# server does. An order between two values, which JSON Schema cannot state, is declared on the later field as
# metadata `x-greater-than` (the other field's name): the validator checks it and the description carries it.

GREATER_THAN = "x-greater-than"


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


def one_at_least(fields: tuple[str, ...], message: str, *, at: str = "_schema") -> Rule:
    return Rule(
        broken=lambda value: None if any(value[name] is not None for name in fields) else (message, at),
        schema=lambda given, absent: {"anyOf": [given(name) for name in fields]},
        text=f"one of {_names(fields)} at least",
    )


def _must_follow(field: ma.fields.Field, other: str) -> str:
    """What a field marked `x-greater-than` must be, in the words of its error and of the description."""
    return f"Must be {'after' if isinstance(field, ma.fields.DateTime) else 'greater than'} {other}."


def rules_document(schema: ma.Schema) -> dict:
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

    if not rules:
        return {}
    return {
        "allOf": [rule.schema(given, absent) for rule in rules],
        "description": "Rules between fields: " + "; ".join(rule.text for rule in rules) + ".",
    }


class StrictSchema(ma.Schema):
    """Rejects unknown fields: a misspelt field must fail loudly, not be silently ignored. Checks the
    schema's RULES and the order of the fields marked `x-greater-than`."""

    RULES: tuple[Rule, ...] = ()

    class Meta:
        unknown = ma.RAISE

    @ma.validates_schema
    def _follows_its_rules(self, data, **kwargs):
        # Rules name fields as requests do; `data` has them by attribute. Null is not given (PATCH clears).
        fields = {field.data_key or name: field for name, field in self.load_fields.items()}
        value = {key: data.get(field.attribute or field.name) for key, field in fields.items()}
        for rule in self.RULES:
            if (error := rule.broken(value)) is not None:
                raise ma.ValidationError(*error)
        for key, field in fields.items():
            other = field.metadata.get(GREATER_THAN)
            if other is not None and None not in (value[key], value[other]) and value[key] <= value[other]:
                raise ma.ValidationError(_must_follow(field, other), key)

    @ma.pre_load
    def _refuse_read_only(self, data, **kwargs):
        # A field the service sets (id, created_at, committed, ...) is not unknown: say what it is.
        if isinstance(data, dict):
            read_only = {
                field.data_key or name: ["Read-only: set by the service, not by requests."]
                for name, field in self.dump_fields.items()
                if field.dump_only and (field.data_key or name) in data
            }
            if read_only:
                raise ma.ValidationError(read_only)
        return data


def _no_lone_surrogates(text: str) -> None:
    # "\ud800" is a valid JSON escape but not encodable text; kept out of the pattern, which JSON Schema
    # tools read as UTF-16 regexes and mangle.
    if any("\ud800" <= char <= "\udfff" for char in text):
        raise ma.ValidationError("Must not contain control characters or unpaired surrogates.")


class Text(ma.fields.String):
    """A string that can be stored anywhere: PostgreSQL text cannot hold NUL, and no name needs control codes.

    A pattern rather than custom code, so that the OpenAPI description carries the rule too.
    """

    def __init__(self, **kwargs):
        no_control_codes = validate.Regexp(
            r"^[^\x00-\x1f\x7f]*$", error="Must not contain control characters or unpaired surrogates."
        )
        extra = kwargs.pop("validate", None)
        validators = [no_control_codes, _no_lone_surrogates, *([extra] if callable(extra) else extra or [])]
        super().__init__(validate=validators, **kwargs)


# The years a time may be written in: what the pattern below says, and what UtcDateTime checks.
FIRST_YEAR, LAST_YEAR = 1970, 9998
YEAR_PATTERN = r"^(19[7-9][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])-"


class UtcDateTime(ma.fields.AwareDateTime):
    """An ISO 8601 time with an offset, loaded as UTC. Its year as written is 1970-9998 (a pattern the
    OpenAPI description can state), so that converting it to UTC never overflows."""

    def __init__(self, **kwargs):
        metadata = {"pattern": YEAR_PATTERN, **kwargs.pop("metadata", {})}
        super().__init__(metadata=metadata, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        moment = super()._deserialize(value, attr, data, **kwargs)
        if not FIRST_YEAR <= moment.year <= LAST_YEAR:
            raise ma.ValidationError(f"Must be between the years {FIRST_YEAR} and {LAST_YEAR}.")
        return moment.astimezone(UTC)


class CursorField(ma.fields.String):
    """An opaque pagination cursor (base64url, as `next_cursor` gives it); loads into a `Cursor`."""

    PATTERN = r"^[A-Za-z0-9_-]+$"

    def __init__(self, **kwargs):
        metadata = {"minLength": 1, "pattern": self.PATTERN, **kwargs.pop("metadata", {})}
        super().__init__(metadata=metadata, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        token = super()._deserialize(value, attr, data, **kwargs)
        try:
            if not re.fullmatch(self.PATTERN, token):  # so not empty either
                raise ValueError("Not a valid cursor.")
            return Cursor.decode(token)
        except ValueError as exc:
            raise ma.ValidationError(str(exc)) from exc


class ListQuerySchema(StrictSchema):
    limit = ma.fields.Integer(
        load_default=DEFAULT_LIMIT,
        validate=validate.Range(min=1, max=MAX_LIMIT),
        metadata={"description": f"Items per page (at most {MAX_LIMIT})."},
    )
    cursor = CursorField(
        load_default=lambda: None,  # a callable: the description shows no default (null is no query value)
        metadata={
            "description": "The `next_cursor` of the previous page; omit for the newest items. A cursor "
            "this service did not issue is a 422."
        },
    )


class PageSchema(ma.Schema):
    next_cursor = ma.fields.String(
        allow_none=True,
        required=True,
        metadata={"description": "Pass as `cursor` to get the next page; null on the last page."},
    )


class OrganizationSchema(StrictSchema):
    id = ma.fields.UUID(dump_only=True)
    slug = ma.fields.String(
        required=True,
        validate=validate.Regexp(
            SLUG_PATTERN, error="Must be 2-63 lowercase letters, digits or inner hyphens."
        ),
        metadata={"example": "acme-research"},
    )
    name = Text(required=True, validate=validate.Length(min=1, max=200))
    created_at = ma.fields.AwareDateTime(dump_only=True)


class OrganizationPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(OrganizationSchema), required=True)


class HealthSchema(ma.Schema):
    status = ma.fields.String(required=True, metadata={"example": "ok"})


class ReadinessSchema(HealthSchema):
    database = ma.fields.String(required=True, metadata={"example": "ok"})
    schema_revision = ma.fields.String(allow_none=True)


# --- Planning ----------------------------------------------------------------------------------------------


def _currency_codes() -> frozenset[str]:
    # ISO 4217 active codes, less XXX ("no currency") and XTS ("for testing").
    return frozenset(c.alpha_3 for c in pycountry.currencies) - {"XXX", "XTS"}


CURRENCY_CODES = _currency_codes()


class _NoText:
    """Refuses text where a request body wants a JSON number: "100" is not 100 (the OpenAPI type is number).
    Query parameters, form fields and CSV cells are text by nature: they use marshmallow's own fields, or go
    through `numeral` first."""

    def _validated(self, value):
        if isinstance(value, str):
            # "100" is told why it is refused; "lots" is simply not a number.
            raise self.make_error("invalid" if isinstance(numeral(value), str) else "text")
        return super()._validated(value)


class Number(_NoText, ma.fields.Float):
    """A finite JSON number in a request body: NaN and Infinity refused (Python's JSON parser reads them)."""

    default_error_messages = {"text": "Must be a number, not a string."}

    def __init__(self, **kwargs):
        kwargs["allow_nan"] = False
        super().__init__(**kwargs)


class WholeNumber(_NoText, ma.fields.Integer):
    """A JSON integer in a request body. As JSON Schema has it, any number whose fraction is zero is one:
    80000000000.0 and 8e10 are 80000000000; 8.5, true and "8" are refused."""

    default_error_messages = {"text": "Must be an integer, not a string."}

    def __init__(self, **kwargs):
        super().__init__(strict=True, **kwargs)

    def _validated(self, value):
        if isinstance(value, float) and value.is_integer():  # False for NaN and the infinities
            value = int(value)
        return super()._validated(value)


class JsonBoolean(ma.fields.Boolean):
    """JSON true or false only: marshmallow's Boolean also reads 1, "yes" or "on" as true."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, bool):
            raise self.make_error("invalid", input=value)
        return value


def numeral(text: str) -> int | float | str:
    """A form field or a CSV cell as the JSON number it spells ("8" -> 8, "5e7" -> 5e7), so that it loads as
    a JSON body would; other text stays text, for the schema to refuse naming the field."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def positive_float(maximum: float, description: str, **kwargs) -> Number:
    """A finite number > 0 and <= maximum."""
    return Number(
        validate=validate.Range(min=0, min_inclusive=False, max=maximum),
        # apispec renders min_inclusive=False as an inclusive minimum; say it explicitly (OpenAPI 3.0 form).
        metadata={"description": description, "exclusiveMinimum": True, **kwargs.pop("metadata", {})},
        **kwargs,
    )


def budget_float(description: str, *, field: type[ma.fields.Float] = Number, **kwargs) -> ma.fields.Float:
    """A compute budget in FLOPs, within what the engine answers for; query parameters (text) pass
    `field=ma.fields.Float`, which reads numerals."""
    return field(
        allow_nan=False,  # for ma.fields.Float (Number always refuses NaN)
        validate=validate.Range(min=MIN_FLOPS, max=MAX_FLOPS),
        metadata={"description": description, **kwargs.pop("metadata", {})},
        **kwargs,
    )


def format_money(amount: Decimal) -> str:
    """At least the cents, and every further digit that is not a trailing zero: 6.88, 0.10, 0.000123."""
    cents = amount.quantize(Decimal("0.01"))
    return f"{cents:f}" if cents == amount else f"{amount.normalize():f}"


class MoneyField(ma.fields.Decimal):
    """Money as a decimal string ("1234.56"), never a JSON number, which would pass through a float."""

    def __init__(self, *, allow_zero: bool = False, **kwargs):
        self.allow_zero = allow_zero
        metadata = {
            "example": "1234.56",
            "pattern": r"^\d{1,12}(\.\d{1,6})?$",
            # What a request may send; what the service answers may be zero ("committed": "0.00").
            **({} if allow_zero or kwargs.get("dump_only") else {"not": {"pattern": r"^0+(\.0+)?$"}}),
            **kwargs.pop("metadata", {}),
        }
        super().__init__(as_string=True, allow_nan=False, metadata=metadata, **kwargs)

    def _serialize(self, value, attr, obj, **kwargs):
        return None if value is None else format_money(value)

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, str):
            raise ma.ValidationError('Must be a decimal string such as "1234.56", not a number.')
        if not re.fullmatch(r"\d{1,12}(\.\d{1,6})?", value):
            raise ma.ValidationError("Must be a non-negative decimal with at most 12 digits and 6 decimals.")
        amount = super()._deserialize(value, attr, data, **kwargs)
        if amount == 0 and not self.allow_zero:
            raise ma.ValidationError("Must be greater than 0.")
        return amount


def _is_currency(code: str) -> None:
    if code not in CURRENCY_CODES:
        raise ma.ValidationError("Must be an ISO 4217 currency code such as USD or EUR.")


class CurrencyField(ma.fields.String):
    def __init__(self, **kwargs):
        super().__init__(
            validate=_is_currency,
            metadata={
                "description": "ISO 4217 currency code.",
                "example": "USD",
                "enum": sorted(CURRENCY_CODES),
            },
            **kwargs,
        )


class SlugOrObject(ma.fields.Field):
    """Either a slug naming a stored object or an inline object described by `schema`."""

    def __init__(self, schema: type[ma.Schema], slug_description: str, **kwargs):
        self.schema_class = schema
        self.slug_description = slug_description
        super().__init__(**kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, str):
            if not re.fullmatch(SLUG_PATTERN, value):
                raise ma.ValidationError(
                    "Must be a slug (lowercase letters, digits, inner hyphens) or an object."
                )
            return value
        if isinstance(value, dict):
            return self.schema_class().load(value)
        raise ma.ValidationError("Must be a slug or an object.")

    def _serialize(self, value, attr, obj, **kwargs):
        return value if value is None or isinstance(value, str) else self.schema_class().dump(value)


def greater_than_to_property(self, field, ret, **kwargs) -> dict:
    """apispec attribute function: say in words the order `x-greater-than` declares."""
    other = field.metadata.get(GREATER_THAN)
    if other is None:
        return {}
    said = _must_follow(field, f"`{other}`")
    return {"description": f"{ret['description']} {said}" if ret.get("description") else said}


def slug_or_object_to_property(self, field, **kwargs) -> dict:
    """apispec attribute function: document a SlugOrObject as oneOf a slug string and the inline schema."""
    if not isinstance(field, SlugOrObject):
        return {}
    name = field.schema_class.__name__.removesuffix("Schema")
    return {
        "oneOf": [
            {"type": "string", "pattern": SLUG_PATTERN, "description": field.slug_description},
            {"$ref": f"#/components/schemas/{name}"},
        ]
    }


class PeakFlopsSchema(StrictSchema):
    """Dense (not 2:4 sparse) peak FLOP/s by precision; at least one."""

    fp32 = positive_float(MAX_PEAK_FLOPS_PER_SECOND, "FP32 (non-tensor) peak FLOP/s.")
    tf32 = positive_float(MAX_PEAK_FLOPS_PER_SECOND, "TF32 tensor peak FLOP/s.")
    bf16 = positive_float(MAX_PEAK_FLOPS_PER_SECOND, "BF16 peak FLOP/s.", metadata={"example": 989.4e12})
    fp16 = positive_float(MAX_PEAK_FLOPS_PER_SECOND, "FP16 peak FLOP/s.")
    fp8 = positive_float(MAX_PEAK_FLOPS_PER_SECOND, "FP8 peak FLOP/s.")
    int8 = positive_float(MAX_PEAK_FLOPS_PER_SECOND, "INT8 peak OP/s.")

    @ma.validates_schema
    def _at_least_one(self, data, **kwargs):
        if not data:
            raise ma.ValidationError("Give the peak at one precision at least.")


class InlineHardwareSchema(StrictSchema):
    name = Text(load_default="custom hardware", validate=validate.Length(min=1, max=200))
    peak_flops = ma.fields.Nested(PeakFlopsSchema, required=True, metadata={"minProperties": 1})
    memory_bytes = positive_float(MAX_MEMORY_BYTES, "Memory of one accelerator.", required=True)
    memory_bandwidth_bytes_per_second = positive_float(1e16, "Memory bandwidth of one accelerator.")
    price_per_hour = MoneyField(allow_zero=True, metadata={"description": "Price per accelerator-hour."})
    currency = CurrencyField()

    RULES = (requires("price_per_hour", "currency"),)


class InlineServingHardwareSchema(InlineHardwareSchema):
    """Inline hardware to serve on: decoding is bound by its memory bandwidth, so that is required."""

    memory_bandwidth_bytes_per_second = positive_float(
        1e16, "Memory bandwidth of one accelerator: decoding reads every weight once per step.", required=True
    )


class InlineLawSchema(StrictSchema):
    E = positive_float(100, "Irreducible loss (nats/token).", required=True)
    A = positive_float(1e12, "Coefficient of the parameter term.", required=True)
    B = positive_float(1e12, "Coefficient of the data term.", required=True)
    alpha = positive_float(3, "Exponent of the parameter term.", required=True)
    beta = positive_float(3, "Exponent of the data term.", required=True)


class ModelShapeSchema(StrictSchema):
    layers = WholeNumber(required=True, validate=validate.Range(1, MAX_SHAPE_DIMENSION))
    d_model = WholeNumber(required=True, validate=validate.Range(1, MAX_SHAPE_DIMENSION))
    heads = WholeNumber(required=True, validate=validate.Range(1, MAX_SHAPE_DIMENSION))
    sequence_length = WholeNumber(required=True, validate=validate.Range(1, MAX_SHAPE_DIMENSION))
    micro_batch = WholeNumber(load_default=1, validate=validate.Range(1, MAX_SHAPE_DIMENSION))

    @ma.validates_schema
    def _heads_divide_width(self, data, **kwargs):
        if {"heads", "d_model"} <= set(data) and data["d_model"] % data["heads"]:
            raise ma.ValidationError("Must divide d_model.", "heads")


class ClusterFieldsSchema(StrictSchema):
    """Where and how a run is trained; shared by allocations and estimates."""

    hardware = SlugOrObject(
        InlineHardwareSchema,
        "Slug of a hardware profile (GET /v1/hardware), e.g. h100-sxm.",
        metadata={"example": "h100-sxm"},
    )
    accelerators = WholeNumber(validate=validate.Range(1, MAX_ACCELERATORS))
    mfu = Number(
        validate=validate.Range(min=0, max=1, min_inclusive=False),
        metadata={"description": "Model FLOPs utilisation, (0, 1]; default 0.4.", "exclusiveMinimum": True},
    )
    precision = ma.fields.String(
        validate=validate.OneOf(TRAINING_PRECISIONS),
        metadata={"description": "Training precision; default bf16. The hardware must have a peak at it."},
    )
    price_per_hour = MoneyField(
        allow_zero=True, metadata={"description": "Overrides the hardware's price per accelerator-hour."}
    )
    currency = CurrencyField()
    zero_stage = WholeNumber(
        validate=validate.Range(0, 3), metadata={"description": "ZeRO stage; default 0."}
    )
    optimizer = ma.fields.String(validate=validate.OneOf(sorted(OPTIMIZER_STATE_BYTES)))
    recomputation = ma.fields.String(validate=validate.OneOf(RECOMPUTATION_MODES))
    tensor_parallel = WholeNumber(validate=validate.Range(1, MAX_ACCELERATORS))
    sequence_parallel = JsonBoolean(
        metadata={
            "description": "Megatron sequence parallelism alongside tensor parallelism: splits the layer "
            "norm and dropout activations too (Korthikanti et al. 2022); default true."
        },
    )
    shape = ma.fields.Nested(
        ModelShapeSchema,
        metadata={"description": "Transformer shape: attention FLOPs and activation memory."},
    )

    CLUSTER_OPTIONS = (
        "accelerators",
        "mfu",
        "precision",
        "zero_stage",
        "optimizer",
        "recomputation",
        "tensor_parallel",
        "sequence_parallel",
        "shape",
    )

    RULES = (
        requires(CLUSTER_OPTIONS, "hardware"),
        requires("hardware", "accelerators"),
        requires("price_per_hour", "currency"),
    )


BUDGET_FIELDS = ("flops", "pf_days", "target_loss", "cost", "accelerator_hours", "days")
RULE_FIELDS = ("tokens_per_param", "unique_tokens", "inference_tokens")  # how a budget is allocated
SERVING_FIELDS = ("inference_hardware", "inference_batch")  # how the inference tokens are served
ALLOCATES_NOTHING = "A plan for a given params and tokens allocates nothing."


def allocation_rules(budgets: tuple[str, ...], *, or_a_model: bool = False) -> tuple[Rule, ...]:
    """An allocation request's rules, given the fields that count as its budget (a plan's "budget" is one);
    `or_a_model`: a plan may give the model instead (`params` and `tokens`), and then no budget or rule."""
    model = (
        (
            requires("params", "tokens"),
            requires("tokens", "params"),
            excludes("params", (*BUDGET_FIELDS, *RULE_FIELDS), ALLOCATES_NOTHING),
        )
        if or_a_model
        else ()
    )
    fixed_ratio_only = (
        "A fixed ratio cannot honour target_loss, unique_tokens or inference_tokens; give a law instead."
    )
    return (
        *model,
        one_at_least(
            (*budgets, *(["params"] if or_a_model else [])),
            "Give a budget: flops, pf_days, target_loss, cost, accelerator_hours or days.",
        ),
        excludes("flops", "pf_days", "Give the compute budget once: flops or pf_days."),
        excludes(
            "target_loss",
            tuple(name for name in budgets if name != "target_loss"),
            "A target loss cannot be combined with another budget.",
        ),
        requires(("cost", "accelerator_hours", "days"), "hardware"),
        requires("cost", "currency"),
        excludes("tokens_per_param", "law", "Give either tokens_per_param or law.", at="tokens_per_param"),
        # The engine refuses these too; stated here, they are in the description.
        excludes(
            "tokens_per_param",
            ("target_loss", "unique_tokens", "inference_tokens"),
            fixed_ratio_only,
            at="tokens_per_param",
        ),
        excludes("target_loss", "unique_tokens", "Not with target_loss: give a compute budget instead."),
        excludes(
            "inference_tokens",
            "unique_tokens",
            "Not with inference_tokens: inference-aware plans assume fresh data.",
        ),
        requires(SERVING_FIELDS, "inference_tokens"),
    )


class AllocationRequestSchema(ClusterFieldsSchema):
    flops = budget_float("Training compute budget in FLOPs.", metadata={"example": 1e23})
    pf_days = Number(
        validate=validate.Range(min=MIN_FLOPS / PF_DAY_FLOPS, max=MAX_FLOPS / PF_DAY_FLOPS),
        metadata={"description": "Training compute budget in PF-days (8.64e19 FLOPs each).", "example": 6000},
    )
    target_loss = positive_float(100, "Reach this loss (nats/token) with the least compute; needs a law.")
    cost = MoneyField(metadata={"description": "Money budget (decimal string); with hardware and currency."})
    accelerator_hours = positive_float(1e15, "Accelerator-hours budget; with hardware.")
    days = positive_float(36_500, "Wall-clock deadline in days; with hardware and accelerators.")
    tokens_per_param = positive_float(1e6, "Fixed tokens-per-parameter rule (default 20 without a law).")
    law = SlugOrObject(
        InlineLawSchema,
        "Slug of a scaling law (GET /v1/scaling-laws), e.g. chinchilla-2022.",
        metadata={"example": "chinchilla-2022"},
    )
    unique_tokens = Number(
        validate=validate.Range(min=MIN_TOKENS, max=MAX_TOKENS),
        metadata={"description": "Unique tokens available (at least one): data-constrained allocation."},
    )
    inference_tokens = positive_float(
        MAX_TOKENS * 1e3,
        "Lifetime inference tokens: inference-aware allocation, the model cheapest in training plus "
        "inference FLOPs for the target_loss, or for the loss the compute budget reaches "
        "(Sardana et al. 2024).",
    )
    inference_hardware = SlugOrObject(
        InlineServingHardwareSchema,
        "Slug of the hardware profile to serve the inference tokens on (default: `hardware`), e.g. l40s.",
        metadata={"example": "l40s"},
    )
    inference_batch = WholeNumber(
        validate=validate.Range(1, MAX_INFERENCE_BATCH),
        metadata={
            "description": "Sequences decoded together when serving (default 1); they share each read "
            "of the weights."
        },
    )

    RULES = ClusterFieldsSchema.RULES + allocation_rules(BUDGET_FIELDS)


class EstimateRequestSchema(ClusterFieldsSchema):
    params = positive_float(MAX_PARAMS, "Model parameters.", required=True, metadata={"example": 7e9})
    tokens = positive_float(MAX_TOKENS, "Training tokens.", required=True, metadata={"example": 1.4e11})
    hardware = SlugOrObject(
        InlineHardwareSchema,
        "Slug of a hardware profile (GET /v1/hardware), e.g. h100-sxm.",
        required=True,
        metadata={"example": "h100-sxm"},
    )
    law = SlugOrObject(
        InlineLawSchema,
        "Slug of a scaling law: the response then predicts the loss of this model.",
        metadata={"example": "chinchilla-2022"},
    )


class CaveatSchema(ma.Schema):
    code = ma.fields.String(
        required=True,
        metadata={
            "description": "Stable code: extrapolation, repeated_data, repetition_without_gain, "
            "repetition_constants_from_c4, does_not_fit_memory, binding_limit, unusual_mfu; of fitted laws: "
            "not_converged, unstable_bootstrap, influential_runs, not_an_isoflop_sweep."
        },
    )
    message = ma.fields.String(required=True)
    details = ma.fields.Dict(required=True)


class FittedRangeSchema(ma.Schema):
    min_params = ma.fields.Float(allow_none=True)
    max_params = ma.fields.Float(allow_none=True)
    min_tokens = ma.fields.Float(allow_none=True)
    max_tokens = ma.fields.Float(allow_none=True)
    min_flops = ma.fields.Float(allow_none=True)
    max_flops = ma.fields.Float(allow_none=True)


class LawSchema(ma.Schema):
    slug = ma.fields.String(allow_none=True)
    name = ma.fields.String(allow_none=True)
    source = ma.fields.String(allow_none=True)
    note = ma.fields.String(allow_none=True)
    E = ma.fields.Float(attribute="law.E")
    A = ma.fields.Float(attribute="law.A")
    B = ma.fields.Float(attribute="law.B")
    alpha = ma.fields.Float(attribute="law.alpha")
    beta = ma.fields.Float(attribute="law.beta")
    a = ma.fields.Float(attribute="law.a", metadata={"description": "N_opt ∝ C^a"})
    b = ma.fields.Float(attribute="law.b", metadata={"description": "D_opt ∝ C^b"})
    G = ma.fields.Float(attribute="law.G", metadata={"description": "N_opt = G·(C/6)^a"})
    fitted_range = ma.fields.Nested(FittedRangeSchema, allow_none=True)


# --- Fitted laws ---------------------------------------------------------------------------------------

MAX_FIT_RUNS = fit.MAX_RUNS
MAX_BOOTSTRAP_SAMPLES = 5_000
MAX_BOOTSTRAP_WORK = 20_000_000  # samples x runs: a bootstrap job of a few minutes at most


class FitRunSchema(StrictSchema):
    """One training run: the model's size, its tokens (or its compute), and the loss it reached."""

    params = positive_float(MAX_PARAMS, "Parameters of the model trained.", required=True)
    tokens = positive_float(MAX_TOKENS, "Tokens it was trained on (or give flops).")
    flops = positive_float(MAX_FLOPS, "Its training compute, 6·params·tokens (instead of tokens).")
    loss = positive_float(100, "Final loss (nats per token) on held-out data.", required=True)

    RULES = (
        one_at_least(("tokens", "flops"), "Give either tokens or flops.", at="tokens"),
        excludes("tokens", "flops", "Give either tokens or flops.", at="tokens"),
    )


class BootstrapRequestSchema(StrictSchema):
    samples = WholeNumber(
        required=True,
        validate=validate.Range(10, MAX_BOOTSTRAP_SAMPLES),
        metadata={"description": "Resamples of the runs to fit; 1 000 is usual.", "example": 1000},
    )
    seed = WholeNumber(
        validate=validate.Range(0, 2**32 - 1),
        metadata={"description": "Seed of the resampling (reported back; chosen at random if omitted)."},
    )


class FitRequestSchema(StrictSchema):
    organization = ma.fields.String(
        required=True,
        validate=validate.Regexp(SLUG_PATTERN),
        metadata={"description": "Slug of the (existing) organisation the law is for.", "example": "acme"},
    )
    name = Text(
        required=True, validate=validate.Length(min=1, max=200), metadata={"example": "Acme 2026 sweep"}
    )
    slug = ma.fields.String(
        validate=validate.Regexp(
            SLUG_PATTERN, error="Must be 2-63 lowercase letters, digits or inner hyphens."
        ),
        metadata={"description": "How plans name the law; made from the name if omitted."},
    )
    runs = ma.fields.List(
        ma.fields.Nested(FitRunSchema),
        required=True,
        validate=validate.Length(
            min=fit.MIN_RUNS,
            max=MAX_FIT_RUNS,
            error=f"Give at least {fit.MIN_RUNS} runs, at most {MAX_FIT_RUNS}.",
        ),
        metadata={
            "description": f"At least {fit.MIN_RUNS} runs of at least {fit.MIN_MODEL_SIZES} model sizes, "
            f"{fit.MIN_RUNS} of them at distinct (params, tokens), with losses that fall with scale "
            f"(params x tokens); at most {MAX_FIT_RUNS}."
        },
    )
    bootstrap = ma.fields.Nested(BootstrapRequestSchema)

    @ma.validates_schema
    def _bounded_bootstrap(self, data, **kwargs):
        samples = data.get("bootstrap", {}).get("samples", 0)
        if samples * len(data.get("runs", [])) > MAX_BOOTSTRAP_WORK:
            raise ma.ValidationError(
                f"Too much work: samples x runs must be at most {MAX_BOOTSTRAP_WORK:,}.", "bootstrap"
            )

    @ma.post_load
    def _as_columns(self, data, **kwargs):
        """Runs as columns of params, tokens (from flops where given) and loss, as fits read them."""
        runs = data["runs"]
        data["runs"] = {
            "params": [run["params"] for run in runs],
            "tokens": [
                run["tokens"] if "tokens" in run else run["flops"] / (6 * run["params"]) for run in runs
            ],
            "loss": [run["loss"] for run in runs],
        }
        if "bootstrap" in data and "seed" not in data["bootstrap"]:
            data["bootstrap"]["seed"] = secrets.randbits(32)
        return data


class PairField(ma.fields.List):
    """[low, high]."""

    def __init__(self, **kwargs):
        super().__init__(ma.fields.Float(), **kwargs)


class CoefficientIntervalsSchema(ma.Schema):
    E = PairField()
    A = PairField()
    B = PairField()
    alpha = PairField()
    beta = PairField()
    a = PairField()
    b = PairField()


class BootstrapSchema(ma.Schema):
    samples = ma.fields.Integer()
    seed = ma.fields.Integer()
    confidence = ma.fields.Float(metadata={"example": 0.95})
    unusable = ma.fields.Integer(metadata={"description": "Resamples whose fit failed; left out."})
    intervals = ma.fields.Nested(
        CoefficientIntervalsSchema, metadata={"description": "Percentile interval [low, high] of each."}
    )


class RatioSchema(ma.Schema):
    flops = ma.fields.Float()
    tokens_per_param = ma.fields.Float()


class FitStatisticsSchema(ma.Schema):
    method = ma.fields.String(metadata={"example": "huber-lbfgs"})
    huber_delta = ma.fields.Float()
    starts = ma.fields.Integer(
        metadata={"description": "L-BFGS starts of the grid; the best end point is kept."}
    )
    runs = ma.fields.Integer()
    objective = ma.fields.Float(metadata={"description": "Summed Huber loss of log-loss residuals."})
    converged = ma.fields.Boolean()
    rmse_log_loss = ma.fields.Float()
    max_abs_log_residual = ma.fields.Float()
    tokens_per_param = ma.fields.List(
        ma.fields.Nested(RatioSchema),
        metadata={"description": "D_opt/N_opt the law implies at a few budgets."},
    )


class IsoflopBudgetSchema(ma.Schema):
    flops = ma.fields.Float()
    optimal_params = ma.fields.Float()
    optimal_tokens = ma.fields.Float()
    optimal_loss = ma.fields.Float()
    runs = ma.fields.Integer()


class SkippedBudgetSchema(ma.Schema):
    flops = ma.fields.Float()
    runs = ma.fields.Integer()
    reason = ma.fields.String()


class IsoflopFitSchema(ma.Schema):
    """Chinchilla's Approach 2 on the same runs: a parabola of loss in ln N per budget, then power laws."""

    available = ma.fields.Boolean()
    reason = ma.fields.String(metadata={"description": "Why the runs do not allow it (when unavailable)."})
    a = ma.fields.Float(metadata={"description": "N_opt ∝ C^a"})
    b = ma.fields.Float(metadata={"description": "D_opt ∝ C^b"})
    params_coefficient = ma.fields.Float(metadata={"description": "N_opt = params_coefficient·C^a"})
    tokens_coefficient = ma.fields.Float(metadata={"description": "D_opt = tokens_coefficient·C^b"})
    budgets = ma.fields.List(ma.fields.Nested(IsoflopBudgetSchema))
    skipped = ma.fields.List(ma.fields.Nested(SkippedBudgetSchema))
    tokens_per_param = ma.fields.List(ma.fields.Nested(RatioSchema))


class ScalingLawSchema(LawSchema):
    """A published law, or one fitted to an organisation's runs (which adds how it was fitted)."""

    kind = ma.fields.String(metadata={"enum": ["published", "fitted"]})
    id = ma.fields.UUID(allow_none=True)
    organization = ma.fields.String(allow_none=True)
    fit = ma.fields.Nested(FitStatisticsSchema, allow_none=True)
    bootstrap = ma.fields.Nested(BootstrapSchema, allow_none=True)
    isoflop = ma.fields.Nested(IsoflopFitSchema, allow_none=True)
    warnings = ma.fields.List(ma.fields.Nested(CaveatSchema))
    created_by = ma.fields.String(allow_none=True)
    created_at = ma.fields.AwareDateTime(allow_none=True)


class LawPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(ScalingLawSchema), required=True)


class LawQuerySchema(ListQuerySchema):
    organization = ma.fields.String(
        validate=validate.Regexp(SLUG_PATTERN),
        metadata={"description": "Only this organisation's fitted laws."},
    )
    kind = ma.fields.String(validate=validate.OneOf(["published", "fitted"]))


FIT_JOB_STATUSES = ("queued", "running", "succeeded", "failed")


class FitJobSchema(ma.Schema):
    id = ma.fields.UUID()
    organization = ma.fields.String(attribute="organization_slug")
    slug = ma.fields.String(metadata={"description": "The slug the law will have."})
    status = ma.fields.String(metadata={"enum": list(FIT_JOB_STATUSES)})
    law = ma.fields.Function(
        lambda job: f"/v1/scaling-laws/{job.slug}" if job.status == "succeeded" and job.law_id else None,
        allow_none=True,
        metadata={"type": "string", "description": "Path of the law once the job has succeeded."},
    )
    error = ma.fields.Dict(
        allow_none=True, metadata={"description": "Problem details saying why a failed job failed."}
    )
    attempt = ma.fields.Integer(
        metadata={"description": "Runs so far (a job whose process stopped is resumed)."}
    )
    created_by = ma.fields.String()
    created_at = ma.fields.AwareDateTime()
    started_at = ma.fields.AwareDateTime(allow_none=True)
    finished_at = ma.fields.AwareDateTime(allow_none=True)


class MemorySchema(ma.Schema):
    zero_stage = ma.fields.Integer()
    data_parallel = ma.fields.Integer()
    tensor_parallel = ma.fields.Integer()
    sequence_parallel = ma.fields.Boolean()
    bytes_per_param = ma.fields.Float()
    model_states_bytes = ma.fields.Float()
    activations_bytes = ma.fields.Float()
    total_bytes = ma.fields.Float()
    capacity_bytes = ma.fields.Float()
    fits = ma.fields.Boolean()
    min_accelerators = ma.fields.Integer(
        allow_none=True,
        metadata={"description": "Fewest accelerators that fit at this ZeRO stage; null if none."},
    )


class EstimateHardwareSchema(ma.Schema):
    slug = ma.fields.String(allow_none=True)
    name = ma.fields.String()
    peak_flops = ma.fields.Nested(PeakFlopsSchema)
    memory_bytes = ma.fields.Float()


class EstimateSchema(ma.Schema):
    params = ma.fields.Float()
    tokens = ma.fields.Float()
    flops = ma.fields.Float(
        attribute="runtime.flops", metadata={"description": "Model FLOPs (what MFU counts)."}
    )
    hardware_flops = ma.fields.Float(metadata={"description": "Including activation recomputation."})
    pf_days = ma.fields.Float(attribute="runtime.pf_days")
    seconds = ma.fields.Float(attribute="runtime.seconds")
    days = ma.fields.Float(attribute="runtime.days")
    accelerator_hours = ma.fields.Float(attribute="runtime.accelerator_hours")
    hardware = ma.fields.Nested(EstimateHardwareSchema, attribute="cluster.hardware")
    accelerators = ma.fields.Integer(attribute="cluster.accelerators")
    mfu = ma.fields.Float(attribute="cluster.mfu")
    precision = ma.fields.String(attribute="cluster.precision")
    peak_flops_per_second = ma.fields.Float(attribute="cluster.peak_flops_per_second")
    price_per_hour = MoneyField(dump_only=True, allow_none=True)
    cost = MoneyField(
        dump_only=True, allow_none=True, metadata={"description": "Rounded half-up to the cent."}
    )
    currency = ma.fields.String(allow_none=True)
    memory = ma.fields.Nested(MemorySchema)
    predicted_loss = ma.fields.Float(allow_none=True, metadata={"description": "With a law in the request."})
    warnings = ma.fields.List(ma.fields.Nested(CaveatSchema), attribute="caveats")


class LimitSchema(ma.Schema):
    kind = ma.fields.String(metadata={"description": "The request field that set the limit."})
    flops = ma.fields.Float()
    binding = ma.fields.Boolean()


class AllocationPointSchema(ma.Schema):
    params = ma.fields.Float()
    tokens = ma.fields.Float()
    flops = ma.fields.Float()
    tokens_per_param = ma.fields.Float()
    predicted_loss = ma.fields.Float(allow_none=True)


class ServingHardwareSchema(ma.Schema):
    slug = ma.fields.String(allow_none=True)
    name = ma.fields.String()
    memory_bandwidth_bytes_per_second = ma.fields.Float()


class ServingSchema(ma.Schema):
    """Serving the inference tokens: decoding reads every weight once per step (2 bytes each) and gives the
    batch's sequences a token each, at most peak / (2·params) tokens per second (the roofline)."""

    hardware = ma.fields.Nested(ServingHardwareSchema)
    batch = ma.fields.Integer(attribute="decoding.batch")
    bytes_per_param = ma.fields.Constant(SERVING_BYTES_PER_PARAM)
    tokens_per_second = ma.fields.Float(
        attribute="decoding.tokens_per_second", metadata={"description": "Of one accelerator."}
    )
    bound = ma.fields.String(
        attribute="decoding.bound",
        metadata={"enum": list(DECODING_BOUNDS), "description": "What limits the tokens per second."},
    )
    accelerator_hours = ma.fields.Float(attribute="decoding.accelerator_hours")
    price_per_hour = MoneyField(dump_only=True, allow_none=True)
    cost = MoneyField(
        dump_only=True,
        allow_none=True,
        metadata={"description": "Of serving, in its own currency; never added to training's."},
    )
    currency = ma.fields.String(allow_none=True)


class InferenceSchema(ma.Schema):
    minimised = ma.fields.Constant(
        "lifetime_flops", metadata={"description": "What the inference-aware allocation minimises."}
    )
    constraint = ma.fields.String(
        metadata={
            "enum": ["target_loss", "budget"],
            "description": "What it is minimised at: target_loss, the predicted loss the request asks for; "
            "budget, the loss at which the lifetime-cheapest model's training is the compute budget.",
        }
    )
    inference_tokens = ma.fields.Float()
    inference_flops = ma.fields.Float(metadata={"description": "2·N·inference_tokens"})
    lifetime_flops = ma.fields.Float(metadata={"description": "6·N·D + 2·N·inference_tokens"})
    compute_optimal = ma.fields.Nested(
        AllocationPointSchema, metadata={"description": "The compute-optimal model of the same loss."}
    )
    compute_optimal_lifetime_flops = ma.fields.Float()
    fraction_saved = ma.fields.Float(
        metadata={"description": "Share of compute_optimal's lifetime FLOPs this model saves."}
    )
    compute_optimal_at_budget = ma.fields.Nested(
        AllocationPointSchema,
        allow_none=True,
        metadata={"description": "With a compute budget: its compute-optimal model (a lower loss)."},
    )
    serving = ma.fields.Nested(
        ServingSchema,
        allow_none=True,
        metadata={"description": "On inference_hardware, or hardware when its memory bandwidth is known."},
    )


class HyperparametersSchema(ma.Schema):
    batch_tokens = ma.fields.Float()
    learning_rate = ma.fields.Float()
    source = ma.fields.String()
    flops = ma.fields.Float(metadata={"description": "The compute C the power laws were evaluated at."})
    flops_definition = ma.fields.String(
        metadata={
            "enum": list(FLOPS_DEFINITIONS),
            "description": "Which C: MD is DeepSeek's own, M·D with M = 72·layers·d_model² + "
            "12·layers·d_model·sequence_length non-embedding FLOPs per token (attention included), used "
            "when a shape is given; 6ND is the plan's 6·N·D standing in for it otherwise.",
        }
    )
    note = ma.fields.Constant("A starting point fitted on small budgets, not a prescription.")


class IntervalsSchema(ma.Schema):
    confidence = ma.fields.Float(metadata={"example": 0.95})
    samples = ma.fields.Integer(metadata={"description": "Bootstrap fits that allocated the budget."})
    params = PairField(allow_none=True, metadata={"description": "[low, high]; null for a model given."})
    tokens = PairField(allow_none=True, metadata={"description": "[low, high]; null for a model given."})
    predicted_loss = PairField()


class AllocationSchema(ma.Schema):
    method = ma.fields.String(
        metadata={"description": "fixed-ratio, compute-optimal, data-constrained or inference-aware"}
    )
    params = ma.fields.Float(attribute="allocation.params")
    tokens = ma.fields.Float(attribute="allocation.tokens")
    tokens_per_param = ma.fields.Float(attribute="allocation.tokens_per_param")
    flops = ma.fields.Float(attribute="allocation.flops")
    pf_days = ma.fields.Float()
    predicted_loss = ma.fields.Float(attribute="allocation.predicted_loss", allow_none=True)
    unique_tokens = ma.fields.Float(attribute="allocation.unique_tokens", allow_none=True)
    epochs = ma.fields.Float(attribute="allocation.epochs", allow_none=True)
    limits = ma.fields.List(ma.fields.Nested(LimitSchema))
    law = ma.fields.Nested(LawSchema, allow_none=True)
    inference = ma.fields.Nested(InferenceSchema, allow_none=True)
    estimate = ma.fields.Nested(EstimateSchema, allow_none=True)
    hyperparameters = ma.fields.Nested(HyperparametersSchema)
    warnings = ma.fields.List(ma.fields.Nested(CaveatSchema), attribute="caveats")
    intervals = ma.fields.Nested(
        IntervalsSchema,
        allow_none=True,
        metadata={
            "description": "With a fitted law that was bootstrapped: the allocation under each bootstrap "
            "fit, as percentile intervals."
        },
    )
    engine_version = ma.fields.Constant(ENGINE_VERSION)


class IsoflopQuerySchema(StrictSchema):
    flops = budget_float("The fixed budget.", field=ma.fields.Float, required=True)
    points = ma.fields.Integer(load_default=41, validate=validate.Range(3, 401))
    span = ma.fields.Float(
        load_default=10.0,
        allow_nan=False,
        validate=validate.Range(1, 1e4, min_inclusive=False),
        metadata={"description": "Sizes from N_opt/span to N_opt·span.", "exclusiveMinimum": True},
    )


class IsoflopSchema(ma.Schema):
    law = ma.fields.String()
    flops = ma.fields.Float()
    optimal = ma.fields.Nested(AllocationPointSchema)
    points = ma.fields.List(ma.fields.Nested(AllocationPointSchema))


class FrontierQuerySchema(StrictSchema):
    min_flops = budget_float("Smallest budget.", field=ma.fields.Float, required=True)
    max_flops = budget_float(
        "Largest budget.",
        field=ma.fields.Float,
        required=True,
        metadata={GREATER_THAN: "min_flops"},
    )
    points = ma.fields.Integer(load_default=21, validate=validate.Range(2, 401))


class FrontierSchema(ma.Schema):
    law = ma.fields.String()
    points = ma.fields.List(ma.fields.Nested(AllocationPointSchema))


# --- Hardware catalog ---------------------------------------------------------------------------------------

ISO_DATE_PATTERN = r"^\d{4}(-\d{2}(-\d{2})?)?$"
# What _is_reduced_iso_date admits, as the description states it: a year (not 0000), a month of it, or a date.
_YEAR, _MONTH = "([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])", "(0[1-9]|1[0-2])"
REDUCED_ISO_DATE = [
    {"pattern": f"^{_YEAR}$"},
    {"pattern": f"^{_YEAR}-{_MONTH}$"},
    {"pattern": f"^{_YEAR}-", "format": "date"},
]


def _is_reduced_iso_date(text: str) -> None:
    """An ISO 8601 calendar date, possibly of reduced precision (2026, 2026-09, 2026-09-15), that exists."""
    error = ma.ValidationError("Must be an ISO 8601 date that exists: YYYY, YYYY-MM or YYYY-MM-DD.")
    if not re.fullmatch(ISO_DATE_PATTERN, text):
        raise error
    padded = {4: "-01-01", 7: "-01", 10: ""}[len(text)]
    try:
        date.fromisoformat(text + padded)
    except ValueError:
        raise error from None


class HardwareSchema(StrictSchema):
    """A hardware profile. Writes: POST (all required fields), PUT (the whole profile), PATCH (some)."""

    slug = ma.fields.String(
        required=True,
        validate=validate.Regexp(
            SLUG_PATTERN, error="Must be 2-63 lowercase letters, digits or inner hyphens."
        ),
        metadata={"example": "our-h100"},
    )
    name = Text(required=True, validate=validate.Length(min=1, max=200))
    vendor = Text(required=True, validate=validate.Length(min=1, max=100), metadata={"example": "NVIDIA"})
    peak_flops = ma.fields.Nested(PeakFlopsSchema, required=True, metadata={"minProperties": 1})
    memory_bytes = WholeNumber(
        required=True,
        validate=validate.Range(1, int(MAX_MEMORY_BYTES)),
        metadata={"example": 80e9},
    )
    memory_bandwidth_bytes_per_second = WholeNumber(
        required=True, validate=validate.Range(1, 10**16), metadata={"example": 3.35e12}
    )
    interconnect_bandwidth_bytes_per_second = WholeNumber(
        allow_none=True,
        validate=validate.Range(1, 10**16),
        metadata={"description": "Scale-up link, bidirectional total as vendors quote it."},
    )
    interconnect = Text(allow_none=True, validate=validate.Length(max=100), metadata={"example": "NVLink 4"})
    tdp_watts = WholeNumber(allow_none=True, validate=validate.Range(1, 100_000))
    source = Text(
        required=True, validate=validate.Length(min=1, max=500), metadata={"example": "our datasheet"}
    )
    note = Text(allow_none=True, validate=validate.Length(max=1000))
    price_per_hour = MoneyField(
        allow_zero=True,
        allow_none=True,
        metadata={
            "description": "Current price per accelerator-hour; a new value is added to the price history."
        },
    )
    currency = CurrencyField(allow_none=True)
    price_as_of = ma.fields.String(
        allow_none=True,
        validate=_is_reduced_iso_date,
        metadata={
            "description": "When the price was quoted (ISO 8601, year or month precision allowed).",
            "anyOf": REDUCED_ISO_DATE,
        },
    )
    price_source = Text(allow_none=True, validate=validate.Length(max=500))
    price_effective_at = ma.fields.AwareDateTime(dump_only=True, allow_none=True)
    built_in = ma.fields.Boolean(dump_only=True)
    created_at = ma.fields.AwareDateTime(dump_only=True)
    updated_at = ma.fields.AwareDateTime(dump_only=True)

    RULES = (
        requires("price_per_hour", "currency"),
        requires(("currency", "price_as_of", "price_source"), "price_per_hour"),
    )


class HardwarePageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(HardwareSchema), required=True)


class HardwareQuerySchema(ListQuerySchema):
    vendor = Text(validate=validate.Length(min=1, max=100), metadata={"description": "e.g. NVIDIA"})
    precision = ma.fields.String(
        validate=validate.OneOf(PRECISIONS), metadata={"description": "Only profiles with a peak at it."}
    )


class HardwarePriceSchema(ma.Schema):
    price_per_hour = MoneyField(dump_only=True)
    currency = ma.fields.String()
    as_of = ma.fields.String(allow_none=True)
    source = ma.fields.String(allow_none=True)
    effective_at = ma.fields.AwareDateTime(
        metadata={"description": "In force from this time until the next."}
    )


class HardwarePricePageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(HardwarePriceSchema), required=True)


# --- Budgets ------------------------------------------------------------------------------------------------

LABEL_KEY_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
MAX_LABELS = 50


def labels_field(description: str, example: dict[str, str]) -> ma.fields.Dict:
    """Free key/value pairs (at most 50) on budgets and plans: lowercase keys, short texts."""
    return ma.fields.Dict(
        keys=ma.fields.String(
            validate=validate.Regexp(
                LABEL_KEY_PATTERN, error="Must be 1-63 of a-z, 0-9, _ . - (starting a-z0-9)."
            )
        ),
        values=Text(validate=validate.Length(max=200)),
        validate=_at_most_50_labels,
        metadata={
            "description": f"{description} At most {MAX_LABELS}; keys are 1-63 of a-z, 0-9, _ . - (starting "
            "a-z0-9).",
            "example": example,
            "maxProperties": MAX_LABELS,
            # OpenAPI 3.0 has no propertyNames (JSON Schema 2020-12 does): the keys' rule as an extension.
            "x-propertyNames": {"pattern": LABEL_KEY_PATTERN},
        },
    )


def _at_most_50_labels(labels: dict) -> None:
    # A function, not validate.Length, which apispec would describe as a string's maxLength.
    if len(labels) > MAX_LABELS:
        raise ma.ValidationError(f"At most {MAX_LABELS} labels.")


class BudgetSchema(StrictSchema):
    """A budget. Writes: POST (all required fields), PUT (the whole budget), PATCH (some fields)."""

    id = ma.fields.UUID(dump_only=True)
    organization = ma.fields.String(
        required=True,
        attribute="organization_slug",
        validate=validate.Regexp(SLUG_PATTERN, error="Must be an organization slug."),
        metadata={"description": "Slug of the (existing) organisation it belongs to.", "example": "acme"},
    )
    name = Text(
        required=True, validate=validate.Length(min=1, max=200), metadata={"example": "Q1 pretraining"}
    )
    amount = MoneyField(allow_zero=True, required=True, metadata={"example": "2500000.00"})
    currency = CurrencyField(required=True)
    period_start = UtcDateTime(
        required=True, metadata={"description": "Start of the period (inclusive), ISO 8601 with offset."}
    )
    period_end = UtcDateTime(
        required=True,
        metadata={"description": "End of the period (exclusive).", GREATER_THAN: "period_start"},
    )
    max_flops = positive_float(MAX_FLOPS, "Optional cap on committed training FLOPs.", allow_none=True)
    max_accelerator_hours = positive_float(
        1e15, "Optional cap on committed accelerator-hours.", allow_none=True
    )
    allowed_hardware = ma.fields.List(
        ma.fields.String(validate=validate.Regexp(SLUG_PATTERN, error="Must be a hardware slug.")),
        attribute="allowed_hardware_slugs",
        validate=validate.Length(max=100),
        metadata={"description": "Slugs of (existing) profiles plans may use; empty or absent: any."},
    )
    labels = labels_field("Free key/value pairs, e.g. cost centres.", {"cost_center": "ml-42"})
    committed = MoneyField(dump_only=True, metadata={"description": "Committed by plans."})
    remaining = MoneyField(dump_only=True)
    committed_flops = ma.fields.Float(dump_only=True, metadata={"description": "Training FLOPs committed."})
    committed_accelerator_hours = ma.fields.Float(dump_only=True)
    utilization = ma.fields.Float(dump_only=True, metadata={"description": "committed / amount"})
    created_at = ma.fields.AwareDateTime(dump_only=True)
    updated_at = ma.fields.AwareDateTime(dump_only=True)


class BudgetPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(BudgetSchema), required=True)


class BudgetQuerySchema(ListQuerySchema):
    organization = ma.fields.String(
        validate=validate.Regexp(SLUG_PATTERN), metadata={"description": "Only this organisation's budgets."}
    )


# Variants for PUT and PATCH, named for the OpenAPI description (apispec would otherwise invent names).
HARDWARE_REPLACE = HardwareSchema(exclude=("slug",))
HARDWARE_PATCH = HardwareSchema(exclude=("slug",), partial=True)
BUDGET_PATCH = BudgetSchema(partial=True)
NAMED_VARIANTS = {
    "HardwareReplace": HARDWARE_REPLACE,
    "HardwarePatch": HARDWARE_PATCH,
    "BudgetPatch": BUDGET_PATCH,
}


# --- API keys and the audit log -----------------------------------------------------------------------------


def _organization_by_role() -> tuple[Rule, ...]:
    """Admin keys belong to no organisation; every other role's key to one."""
    admin = {"properties": {"role": {"enum": ["admin"]}}}
    not_admin = {"properties": {"role": {"not": {"enum": ["admin"]}}}}
    return (
        Rule(
            broken=lambda value: (
                ("Admin keys belong to no organization; leave it out.", "organization")
                if value["role"] == "admin" and value["organization"] is not None
                else None
            ),
            schema=lambda given, absent: {"anyOf": [not_admin, absent("organization")]},
            text="an admin key has no `organization`",
        ),
        Rule(
            broken=lambda value: (
                (f"Required for a {value['role']} key.", "organization")
                if value["role"] != "admin" and value["organization"] is None
                else None
            ),
            schema=lambda given, absent: {"anyOf": [admin, given("organization")]},
            text="a planner, finance or viewer key needs `organization`",
        ),
    )


class ApiKeySchema(StrictSchema):
    id = ma.fields.UUID(dump_only=True)
    key_id = ma.fields.String(dump_only=True, metadata={"description": "The public part of the key."})
    name = Text(required=True, validate=validate.Length(min=1, max=200), metadata={"example": "ci pipeline"})
    role = ma.fields.String(required=True, validate=validate.OneOf(KEY_ROLES))
    organization = ma.fields.String(
        attribute="organization_slug",
        allow_none=True,
        validate=validate.Regexp(SLUG_PATTERN, error="Must be an organization slug."),
        metadata={
            "description": "An existing organisation's slug: required for planner, finance and viewer keys, "
            "absent for admin keys."
        },
    )
    expires_at = UtcDateTime(
        allow_none=True, metadata={"description": "When the key stops working; in the future."}
    )
    created_at = ma.fields.AwareDateTime(dump_only=True)
    revoked_at = ma.fields.AwareDateTime(dump_only=True, allow_none=True)
    last_used_at = ma.fields.AwareDateTime(
        dump_only=True, allow_none=True, metadata={"description": "To the minute."}
    )

    RULES = _organization_by_role()


class IssuedKeySchema(ApiKeySchema):
    key = ma.fields.String(
        dump_only=True,
        metadata={
            "description": "The full key, cpk_<key_id>_<secret>. Shown this once; only a hash is kept."
        },
    )


class ApiKeyPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(ApiKeySchema), required=True)


class AuditEntrySchema(ma.Schema):
    id = ma.fields.UUID()
    created_at = ma.fields.AwareDateTime()
    actor = ma.fields.String(metadata={"description": "Key id of the caller (never a secret), or system."})
    organization_id = ma.fields.UUID(allow_none=True)
    action = ma.fields.String(metadata={"example": "budget.update"})
    object_type = ma.fields.String()
    object_id = ma.fields.String()
    request_id = ma.fields.String(allow_none=True)
    fields = ma.fields.List(
        ma.fields.String(), metadata={"description": "Names of the fields set or changed."}
    )


class AuditPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(AuditEntrySchema), required=True)


# --- Plans --------------------------------------------------------------------------------------------------


class PlanInputsSchema(AllocationRequestSchema):
    """What a plan evaluates: an allocation request, or `params` and `tokens` of a model already chosen.

    Plans always name their cluster (`hardware` and `accelerators`): a plan says how long and at what cost.
    """

    params = positive_float(MAX_PARAMS, "Model parameters, for a model already chosen (with tokens).")
    tokens = positive_float(MAX_TOKENS, "Training tokens, for a model already chosen (with params).")
    hardware = SlugOrObject(
        InlineHardwareSchema,
        "Slug of a hardware profile (GET /v1/hardware), e.g. h100-sxm.",
        required=True,
        metadata={"example": "h100-sxm"},
    )
    accelerators = WholeNumber(
        required=True, validate=validate.Range(1, MAX_ACCELERATORS), metadata={"example": 1024}
    )

    RULES = ClusterFieldsSchema.RULES + allocation_rules(BUDGET_FIELDS, or_a_model=True)


class PlanRequestSchema(PlanInputsSchema):
    """POST /v1/plans: the inputs, and where the plan belongs."""

    organization = ma.fields.String(
        required=True,
        validate=validate.Regexp(SLUG_PATTERN, error="Must be an organization slug."),
        metadata={"description": "Slug of the (existing) organisation it belongs to.", "example": "acme"},
    )
    budget_id = ma.fields.UUID(
        metadata={"description": "The budget the plan is charged to when committed (same organisation)."}
    )
    budget = ma.fields.String(
        validate=validate.OneOf(["remaining"]),
        metadata={"description": '"remaining": the budget\'s remaining amount is the money budget (cost).'},
    )
    name = Text(validate=validate.Length(min=1, max=200), metadata={"example": "7B on 1T tokens"})
    labels = labels_field(
        "Free key/value pairs to find plans by (GET /v1/plans?label=team:alpha).", {"team": "alpha"}
    )
    start_at = UtcDateTime(
        metadata={
            "description": "When the run is to start (default: now); a budget admits runs that start and "
            "end within its period."
        }
    )

    # "budget": "remaining" is a money budget (cost), whose amount the budget supplies.
    RULES = (
        *ClusterFieldsSchema.RULES,
        *allocation_rules((*BUDGET_FIELDS, "budget"), or_a_model=True),
        requires("budget", "budget_id"),
        excludes("budget", "cost", 'Give cost or "budget": "remaining", not both.', at="cost"),
        excludes("budget", "params", ALLOCATES_NOTHING, at="budget"),
    )


def _revision_fields() -> dict[str, ma.fields.Field]:
    """Every request field, optional and nullable: null removes an input of the parent. Members that are
    objects (labels, shape, inline hardware or law) merge into the parent's, so only the merged request is
    validated for them."""
    fields = {}
    for name, field in PlanRequestSchema().fields.items():
        if isinstance(field, ma.fields.Dict | ma.fields.Nested | SlugOrObject):
            description = "Merged into the parent's (a slug or a member replaces; null removes a member)."
            fields[name] = ma.fields.Raw(allow_none=True, metadata={"description": description})
            continue
        optional = copy.copy(field)
        optional.required = False
        optional.allow_none = True
        fields[name] = optional
    return fields


PlanRevisionSchema = StrictSchema.from_dict(_revision_fields(), name="PlanRevisionSchema")
PlanRevisionSchema.__doc__ = (
    "Changes to a plan's request, as a JSON merge patch (RFC 7396): a member replaces the parent's, "
    "null removes it."
)


class StoredDocument(ma.fields.Nested):
    """A document stored already serialised (a plan's result): shown as stored, documented by its schema."""

    def _serialize(self, value, attr, obj, **kwargs):
        return value


class PlanSummarySchema(ma.Schema):
    """A plan's figures and status, as lists show it; GET /v1/plans/{id} adds its documents."""

    id = ma.fields.UUID()
    organization = ma.fields.String(attribute="organization_slug")
    budget_id = ma.fields.UUID(allow_none=True)
    parent_id = ma.fields.UUID(allow_none=True, metadata={"description": "The plan this one revises."})
    name = ma.fields.String(allow_none=True)
    labels = ma.fields.Dict(keys=ma.fields.String(), values=ma.fields.String())
    status = ma.fields.String(metadata={"enum": list(PLAN_STATUSES)})
    hardware = ma.fields.String(
        attribute="hardware_slug", allow_none=True, metadata={"description": "Null for inline hardware."}
    )
    method = ma.fields.String(
        metadata={
            "description": "fixed (params and tokens given), fixed-ratio, compute-optimal, "
            "data-constrained or inference-aware"
        }
    )
    params = ma.fields.Float()
    tokens = ma.fields.Float()
    flops = ma.fields.Float()
    predicted_loss = ma.fields.Float(allow_none=True)
    accelerators = ma.fields.Integer()
    days = ma.fields.Float(metadata={"description": "Wall-clock training time."})
    accelerator_hours = ma.fields.Float()
    cost = MoneyField(dump_only=True, allow_none=True)
    currency = ma.fields.String(allow_none=True)
    start_at = ma.fields.AwareDateTime()
    end_at = ma.fields.AwareDateTime()
    created_by = ma.fields.String(metadata={"description": "Key id of the creator."})
    created_at = ma.fields.AwareDateTime()
    committed_at = ma.fields.AwareDateTime(allow_none=True)
    cancelled_at = ma.fields.AwareDateTime(allow_none=True)


class PlanSchema(PlanSummarySchema):
    """A plan: the record an organisation acts on. Immutable but for its status."""

    inputs = ma.fields.Dict(metadata={"description": "The request evaluated (PlanInputs), as stored."})
    snapshot = ma.fields.Dict(
        metadata={"description": "What the evaluation used: hardware figures and price, law, engine version."}
    )
    result = StoredDocument(AllocationSchema, metadata={"description": "All outputs, as evaluated."})


class PlanPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(PlanSummarySchema), required=True)


LABEL_FILTER_VALUE = r"[^\x00-\x1f\x7f]{0,200}"  # a value as labels hold them (see Text)


class LabelFilterField(ma.fields.String):
    """`key:value`, loaded as a (key, value) pair."""

    def _deserialize(self, value, attr, data, **kwargs):
        text = super()._deserialize(value, attr, data, **kwargs)
        key, colon, wanted = text.partition(":")
        if (
            not colon
            or not re.fullmatch(LABEL_KEY_PATTERN, key)
            or not re.fullmatch(LABEL_FILTER_VALUE, wanted)
        ):
            raise ma.ValidationError("Must be key:value, e.g. team:alpha (no control characters).")
        return key, wanted


class PlanQuerySchema(ListQuerySchema):
    organization = ma.fields.String(validate=validate.Regexp(SLUG_PATTERN))
    budget_id = ma.fields.UUID()
    hardware = ma.fields.String(validate=validate.Regexp(SLUG_PATTERN))
    status = ma.fields.String(validate=validate.OneOf(PLAN_STATUSES))
    label = LabelFilterField(
        metadata={
            "description": "key:value; only plans with this label.",
            "pattern": LABEL_KEY_PATTERN.removesuffix("$") + ":" + LABEL_FILTER_VALUE + "$",
        }
    )
    created_from = UtcDateTime(metadata={"description": "Created at or after (inclusive)."})
    created_to = UtcDateTime(
        metadata={"description": "Created before (exclusive).", GREATER_THAN: "created_from"}
    )


MAX_COMPARED = 10


class PlanIdsField(DelimitedList):
    """2 to 10 plan ids, each once: comma-separated in a query (an array, style form, in the description)."""

    def __init__(self, **kwargs):
        limits = {"minItems": 2, "maxItems": MAX_COMPARED, "uniqueItems": True}
        super().__init__(ma.fields.UUID(), metadata={**limits, **kwargs.pop("metadata", {})}, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, str):
            raise self.make_error("invalid")
        parts = [part.strip() for part in value.split(",")]
        try:
            ids = [uuid.UUID(part) for part in parts]
        except ValueError:
            raise ma.ValidationError("Must be plan ids separated by commas.") from None
        if not 2 <= len(ids) <= MAX_COMPARED:
            raise ma.ValidationError(f"Give 2 to {MAX_COMPARED} plan ids.")
        if len(set(ids)) != len(ids):
            raise ma.ValidationError("Each plan once.")
        return ids


class CompareQuerySchema(StrictSchema):
    ids = PlanIdsField(required=True, metadata={"description": "2 to 10 plan ids, comma-separated."})


class ComparedPlanSchema(ma.Schema):
    id = ma.fields.UUID()
    name = ma.fields.String(allow_none=True)
    status = ma.fields.String()
    hardware = ma.fields.String(attribute="hardware_slug", allow_none=True)
    accelerators = ma.fields.Integer()
    method = ma.fields.String()
    params = ma.fields.Float()
    tokens = ma.fields.Float()
    flops = ma.fields.Float()
    predicted_loss = ma.fields.Float(allow_none=True)
    days = ma.fields.Float()
    accelerator_hours = ma.fields.Float()
    cost = MoneyField(dump_only=True, allow_none=True)
    currency = ma.fields.String(allow_none=True)


class DifferenceSchema(ma.Schema):
    field = ma.fields.String(metadata={"description": "An input or output that differs, e.g. accelerators."})
    values = ma.fields.List(
        ma.fields.Raw(allow_none=True), metadata={"description": "One per plan, in order."}
    )
    relative = ma.fields.List(
        ma.fields.Float(allow_none=True),
        allow_none=True,
        metadata={"description": "Numbers only: each value divided by the first plan's."},
    )


class ComparisonSchema(ma.Schema):
    plans = ma.fields.List(ma.fields.Nested(ComparedPlanSchema))
    differences = ma.fields.List(ma.fields.Nested(DifferenceSchema))


class LedgerEntrySchema(ma.Schema):
    id = ma.fields.UUID()
    budget_id = ma.fields.UUID()
    plan_id = ma.fields.UUID()
    entry = ma.fields.String(metadata={"description": "commit (reserves) or release (gives back)"})
    amount = MoneyField(
        dump_only=True,
        metadata={"description": "Signed: negative for a release.", "pattern": r"^-?\d{1,12}(\.\d{1,6})?$"},
    )
    currency = ma.fields.String()
    flops = ma.fields.Float()
    accelerator_hours = ma.fields.Float()
    actor = ma.fields.String(metadata={"description": "Key id of the caller."})
    request_id = ma.fields.String(allow_none=True)
    created_at = ma.fields.AwareDateTime()


class LedgerPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(LedgerEntrySchema), required=True)


# --- Reports --------------------------------------------------------------------------------------------

REPORT_GRANULARITIES = ("day", "week", "month", "none")
REPORT_GROUPS = ("organization", "budget", "hardware", "status")
MAX_REPORT_GROUPS = 3
_GROUP = "(organization|budget|hardware|status|label:" + LABEL_KEY_PATTERN.strip("^$") + ")"


class GroupByField(DelimitedList):
    """One to three of organization, budget, hardware, status and label:<key>, each once: comma-separated in
    a query (an array, style form, in the description)."""

    def __init__(self, **kwargs):
        limits = {"minItems": 1, "maxItems": MAX_REPORT_GROUPS, "uniqueItems": True}
        group = ma.fields.String(metadata={"pattern": f"^{_GROUP}$"})
        super().__init__(group, metadata={**limits, **kwargs.pop("metadata", {})}, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, str):
            raise self.make_error("invalid")
        names = tuple(part.strip() for part in value.split(","))
        for name in names:
            label = name.startswith("label:") and re.fullmatch(LABEL_KEY_PATTERN, name.removeprefix("label:"))
            if name not in REPORT_GROUPS and not label:
                raise ma.ValidationError(
                    f"Unknown group {name!r}: use organization, budget, hardware, status or label:<key>."
                )
        if len(set(names)) != len(names):
            raise ma.ValidationError("Each group once.")
        if len(names) > MAX_REPORT_GROUPS:
            raise ma.ValidationError(f"At most {MAX_REPORT_GROUPS} groups.")
        return names


class CostReportQuerySchema(StrictSchema):
    from_ = UtcDateTime(
        data_key="from",
        required=True,
        metadata={"description": "Plans starting at or after (inclusive), ISO 8601 with an offset."},
    )
    to = UtcDateTime(
        required=True,
        metadata={"description": "Plans starting before (exclusive).", GREATER_THAN: "from"},
    )
    granularity = ma.fields.String(
        load_default="none",
        validate=validate.OneOf(REPORT_GRANULARITIES),
        metadata={"description": "Rows per UTC day, ISO week (from Monday) or month; none: one per group."},
    )
    group_by = GroupByField(
        load_default=tuple,  # a callable: the description shows no default (none is no query value)
        metadata={
            "description": "Up to 3 of organization, budget, hardware, status, label:<key>; comma-separated.",
            "example": ["budget", "label:team"],
        },
    )
    organization = ma.fields.String(validate=validate.Regexp(SLUG_PATTERN))
    budget_id = ma.fields.UUID()
    hardware = ma.fields.String(validate=validate.Regexp(SLUG_PATTERN))
    status = ma.fields.String(
        load_default="committed",
        validate=validate.OneOf(PLAN_STATUSES),
        metadata={"description": "Plans in this status (default committed)."},
    )
    format = ma.fields.String(
        validate=validate.OneOf(["json", "csv"]),
        metadata={"description": "csv for text/csv (as with Accept: text/csv); json by default."},
    )


class CostRowSchema(ma.Schema):
    """One group in one period. Group columns (organization, budget, hardware, status, label:<key>) appear
    when grouped by, period_start and period_end with a granularity."""

    class Meta:
        ordered = True

    period_start = ma.fields.String(metadata={"description": "First day of the period (UTC), ISO date."})
    period_end = ma.fields.String(metadata={"description": "Day after its last (exclusive)."})
    organization = ma.fields.String(allow_none=True)
    budget = ma.fields.String(allow_none=True, metadata={"description": "Budget id; null for plans without."})
    hardware = ma.fields.String(allow_none=True, metadata={"description": "Slug; null for inline hardware."})
    status = ma.fields.String()
    currency = ma.fields.String(allow_none=True, metadata={"description": "Null for plans with no price."})
    plans = ma.fields.Integer()
    accelerator_hours = ma.fields.Float()
    flops = ma.fields.Float()
    cost = MoneyField(dump_only=True, allow_none=True)
    estimated = ma.fields.Constant(True, metadata={"description": "Always true: plans, not invoices."})


class CostTotalsSchema(ma.Schema):
    currency = ma.fields.String(allow_none=True)
    plans = ma.fields.Integer()
    accelerator_hours = ma.fields.Float()
    flops = ma.fields.Float()
    cost = MoneyField(dump_only=True, allow_none=True)
    estimated = ma.fields.Constant(True)


def _report_value(name: str, value):
    if name == "estimated":
        return True
    return format_money(value) if isinstance(value, Decimal) else value


class CostReportSchema(ma.Schema):
    start = ma.fields.AwareDateTime(attribute="query.start", data_key="from")
    to = ma.fields.AwareDateTime(attribute="query.end")
    granularity = ma.fields.String(attribute="query.granularity")
    group_by = ma.fields.List(ma.fields.String(), attribute="query.group_by")
    status = ma.fields.String(attribute="query.status")
    rows = ma.fields.Function(
        lambda report: [
            {name: _report_value(name, row.get(name)) for name in report.columns} for row in report.rows
        ],
        metadata={
            "type": "array",
            "items": {"$ref": "#/components/schemas/CostRow"},
            "description": "A label group is a member named label:<key> (null for plans without the label).",
        },
    )
    totals = ma.fields.List(ma.fields.Nested(CostTotalsSchema), metadata={"description": "Per currency."})


class MonthUseSchema(ma.Schema):
    month = ma.fields.String(metadata={"example": "2026-03"})
    plans = ma.fields.Integer()
    committed = MoneyField(dump_only=True, metadata={"description": "Committed plans starting that month."})
    cumulative = MoneyField(dump_only=True, metadata={"description": "Committed up to the end of the month."})


class UtilizationSchema(ma.Schema):
    """Every month of the period is listed (those without plans at zero) when the period spans at most
    1 200 months; beyond, only months with plans."""

    budget_id = ma.fields.UUID(attribute="budget.id")
    currency = ma.fields.String(attribute="budget.currency")
    amount = MoneyField(dump_only=True, attribute="budget.amount")
    committed = MoneyField(dump_only=True, attribute="budget.committed")
    remaining = MoneyField(dump_only=True, attribute="budget.remaining")
    utilization = ma.fields.Float(
        attribute="budget.utilization", metadata={"description": "committed / amount"}
    )
    period_start = ma.fields.AwareDateTime(attribute="budget.period_start")
    period_end = ma.fields.AwareDateTime(attribute="budget.period_end")
    as_of = ma.fields.AwareDateTime()
    months = ma.fields.List(ma.fields.Nested(MonthUseSchema))
    burn_rate_per_day = MoneyField(
        dump_only=True,
        allow_none=True,
        metadata={"description": "Committed per day of the period elapsed so far; null before it starts."},
    )
    runs_out_at = ma.fields.AwareDateTime(
        allow_none=True,
        metadata={"description": "When the amount is spent at the burn rate; null if it never is."},
    )
    runs_out_before_period_end = ma.fields.Function(
        lambda use: use.runs_out_at is not None and use.runs_out_at < use.budget.period_end,
        metadata={"type": "boolean"},
    )
