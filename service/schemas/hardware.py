"""Hardware profiles: peak FLOP/s by precision, memory, bandwidth, and the price history."""

from __future__ import annotations

import re
from datetime import date

import marshmallow as ma
from marshmallow import validate

from service.catalog import PRECISIONS
from service.core.cluster import MAX_MEMORY_BYTES
from service.core.units import MAX_PEAK_FLOPS_PER_SECOND
from service.schemas.common import ListQuerySchema, PageSchema, StrictSchema, requires
from service.schemas.fields import (
    CurrencyField,
    MoneyField,
    Text,
    WholeNumber,
    positive_float,
    slug_field,
)
from service.services.hardware import HardwareFields


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

    slug = slug_field(required=True, metadata={"example": "our-h100"})
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
    REQUEST = HardwareFields


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


# Variants for PUT and PATCH, named for the OpenAPI description (service/api/__init__.py).
HARDWARE_REPLACE = HardwareSchema(exclude=("slug",))
HARDWARE_PATCH = HardwareSchema(exclude=("slug",), partial=True)
