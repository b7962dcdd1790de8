"""Custom fields: what JSON values a request may hold (numbers that are not text, money as decimal
strings, times in UTC, slugs or inline objects, labels), each stated so that the OpenAPI description carries
the rule too."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC

import marshmallow as ma
import pycountry
from marshmallow import validate

from service.core.units import MAX_FLOPS, MIN_FLOPS
from service.services.documents import format_money
from service.services.pagination import CURSOR_PATTERN, Cursor

SLUG_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])$"


def slug_field(**kwargs) -> ma.fields.String:
    """The slug a resource is named by, in paths and in requests."""
    error = "Must be 2-63 lowercase letters, digits or inner hyphens."
    return ma.fields.String(validate=validate.Regexp(SLUG_PATTERN, error=error), **kwargs)


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
    """A pagination cursor, as `next_cursor` gives it: of the shape `pattern` states (every string of that
    shape is a position), loaded into a `Cursor` or what `decode` makes of it (the events feed's cursor).
    `decode` also reads cursors of the earlier form, which the description no longer offers."""

    def __init__(
        self, *, decode: Callable[[str], object] = Cursor.decode, pattern: str = CURSOR_PATTERN, **kwargs
    ):
        self.decode = decode
        metadata = {"pattern": pattern, **kwargs.pop("metadata", {})}
        super().__init__(metadata=metadata, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        token = super()._deserialize(value, attr, data, **kwargs)
        try:
            return self.decode(token)
        except ValueError as exc:
            raise ma.ValidationError(str(exc)) from exc


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


# Money a request may send: ASCII digits (Python's \d takes any script's), at most 12 before the point, which
# every sum the service keeps of them holds (see service.data.models.MAX_MONEY). What the service answers may
# be a total over many budgets: up to 18 digits.
MONEY_PATTERN = r"^[0-9]{1,12}(\.[0-9]{1,6})?$"
SUM_PATTERN = r"^[0-9]{1,18}(\.[0-9]{1,6})?$"
SIGNED_SUM_PATTERN = r"^-?[0-9]{1,18}(\.[0-9]{1,6})?$"


class MoneyField(ma.fields.Decimal):
    """Money as a decimal string ("1234.56"), never a JSON number, which would pass through a float."""

    def __init__(self, *, allow_zero: bool = False, **kwargs):
        self.allow_zero = allow_zero
        metadata = {
            "example": "1234.56",
            "pattern": MONEY_PATTERN if not kwargs.get("dump_only") else SUM_PATTERN,
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
        if not re.fullmatch(MONEY_PATTERN, value):
            raise ma.ValidationError("Must be a non-negative decimal with at most 12 digits and 6 decimals.")
        amount = super()._deserialize(value, attr, data, **kwargs)
        if amount == 0 and not self.allow_zero:
            raise ma.ValidationError("Must be greater than 0.")
        return amount


def signed_money(description: str, *, example: str = "-1234.56", **kwargs) -> MoneyField:
    """An amount the service answers that may be negative (a reversal, a budget spent past its amount, a
    run heading over its plan)."""
    pattern = {"pattern": SIGNED_SUM_PATTERN, "example": example, "description": description}
    return MoneyField(dump_only=True, metadata=pattern, **kwargs)


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


def nullable_nested_to_property(self, field, ret, **kwargs) -> dict:
    """apispec attribute function: a nested object that may be null is the object or null, not "the object
    or any object" (apispec's second branch, `{type: object, nullable: true}`, would admit anything)."""
    if not (isinstance(field, ma.fields.Nested) and field.allow_none and "anyOf" in ret):
        return {}
    return {
        "anyOf": [branch for branch in ret["anyOf"] if "$ref" in branch]
        + [{"nullable": True, "enum": [None]}]
    }


class PairField(ma.fields.List):
    """[low, high]."""

    def __init__(self, **kwargs):
        super().__init__(ma.fields.Float(), **kwargs)


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


class BoundedList(ma.fields.List):
    """A list that its Length validator refuses as too long before its items are validated, with that
    validator's message (the one the description's maxItems comes from): validating each of 100 001 rows
    only to refuse them all took 20 s of a worker's CPU. Too short a list is refused after its items, as any
    list is."""

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, list):
            for validator in self.validators:
                if (
                    isinstance(validator, validate.Length)
                    and validator.max is not None
                    and len(value) > validator.max
                ):
                    validator(value)
        return super()._deserialize(value, attr, data, **kwargs)
