"""Budgets: money an organisation may commit to plans in a period."""

from __future__ import annotations

import marshmallow as ma
from marshmallow import validate

from service.core.units import MAX_FLOPS
from service.schemas.common import GREATER_THAN, ListQuerySchema, PageSchema, StrictSchema
from service.schemas.fields import (
    SLUG_PATTERN,
    CurrencyField,
    MoneyField,
    Number,
    Text,
    UtcDateTime,
    labels_field,
    positive_float,
    signed_money,
)
from service.services.budgets import BudgetFields


def _distinct(thresholds: list[float]) -> None:
    if len(set(thresholds)) != len(thresholds):
        raise ma.ValidationError("Each threshold once.")


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
    commit_quantile = Number(
        allow_none=True,
        validate=validate.Range(0.5, 0.99),
        metadata={
            "description": "Commit each plan at this quantile of its cost (0.8: P80), from its estimate's "
            "interval, instead of the point value; null (default): the point value.",
            "example": 0.8,
        },
    )
    approval_above = MoneyField(
        allow_zero=True,
        allow_none=True,
        metadata={
            "description": "Plans that cost more than this (in the budget's currency) wait for a finance or "
            "admin key's approval when committed (status pending_approval): the ledger reserves nothing "
            "until POST /v1/plans/{id}/approve; 0: every plan; null (default): none.",
            "example": "1000000.00",
        },
    )
    alert_thresholds = ma.fields.List(
        positive_float(10, "A share of the amount: 0.8 for 80%."),
        validate=[validate.Length(max=10), _distinct],
        metadata={
            "description": "Shares of the amount (and of each plan's cost) whose crossing by the spend "
            "raises an event; from 1 up, also by the forecast. Default [0.8, 1.0].",
            "example": [0.5, 0.8, 1.0],
            "uniqueItems": True,
        },
    )
    committed = MoneyField(
        dump_only=True,
        metadata={"description": "Reserved by plans: their cost, or what a finished run spent if less."},
    )
    spent = MoneyField(dump_only=True, metadata={"description": "Actual: what usage records reported."})
    overrun = MoneyField(
        dump_only=True, metadata={"description": "Spent beyond what the plans that spent it reserved."}
    )
    remaining = signed_money(
        "amount - committed - overrun: what new plans may reserve. Negative when runs spent beyond the "
        "amount.",
        example="1234.56",
    )
    committed_flops = ma.fields.Float(dump_only=True, metadata={"description": "Training FLOPs committed."})
    committed_accelerator_hours = ma.fields.Float(dump_only=True)
    utilization = ma.fields.Float(dump_only=True, metadata={"description": "committed / amount"})
    created_at = ma.fields.AwareDateTime(dump_only=True)
    updated_at = ma.fields.AwareDateTime(dump_only=True)
    REQUEST = BudgetFields


class BudgetPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(BudgetSchema), required=True)


class BudgetQuerySchema(ListQuerySchema):
    organization = ma.fields.String(
        validate=validate.Regexp(SLUG_PATTERN), metadata={"description": "Only this organisation's budgets."}
    )


# The variant for PATCH, named for the OpenAPI description (service/api/__init__.py).
BUDGET_PATCH = BudgetSchema(partial=True)
