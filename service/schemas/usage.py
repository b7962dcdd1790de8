"""A plan's run: usage records, the start of a run, and a budget's forecast."""

from __future__ import annotations

import marshmallow as ma
from marshmallow import validate

from service.core.forecast import FORECAST_BASES, MIN_SHARE_TO_EXTRAPOLATE
from service.core.units import MAX_TOKENS
from service.schemas.common import GREATER_THAN, PageSchema, StrictSchema
from service.schemas.fields import (
    CurrencyField,
    MoneyField,
    Number,
    Text,
    UtcDateTime,
    positive_float,
    signed_money,
)
from service.services.pagination import CURSOR_PATTERN
from service.services.usage import UsageReport

MAX_HOURS = 1e12
FORECAST_BASIS = (
    "What estimate_at_completion stands on: trend (the spend so far over the share of tokens trained), plan "
    f"(less than {MIN_SHARE_TO_EXTRAPOLATE:.0%} trained: too little to extrapolate, the plan's cost or the "
    "spend if more), spent (finished, or every token trained)."
)


class UsageRequestSchema(StrictSchema):
    """What a run used in a period. Without `cost`, the hours are charged at the price in force at
    period_start (the plan's own price_per_hour when its request gave one)."""

    reporter = Text(
        required=True,
        validate=validate.Length(min=1, max=100),
        metadata={
            "description": "Who reports (an orchestrator, a job): its periods may not overlap each other.",
            "example": "slurm-cluster-a",
        },
    )
    period_start = UtcDateTime(required=True, metadata={"description": "Start of the period (inclusive)."})
    period_end = UtcDateTime(
        required=True,
        metadata={
            "description": "End of the period (exclusive); not in the future.",
            GREATER_THAN: "period_start",
        },
    )
    accelerator_hours = Number(
        required=True,
        validate=validate.Range(min=0, max=MAX_HOURS),
        metadata={
            "description": "Accelerator-hours used in the period (0 for an idle one).",
            "example": 1024.0,
        },
    )
    tokens = Number(
        validate=validate.Range(min=0, max=MAX_TOKENS),
        metadata={
            "description": "Tokens trained by period_end, in all (not in the period).",
            "example": 2.1e10,
        },
    )
    tokens_per_second = positive_float(
        MAX_TOKENS,
        "Measured training throughput of the whole cluster over the period.",
        metadata={"example": 3.6e6},
    )
    cost = MoneyField(
        allow_zero=True, metadata={"description": "What the period cost, when the reporter knows."}
    )
    currency = CurrencyField()
    note = Text(validate=validate.Length(max=1000))
    REQUEST = UsageReport


class ReversalRequestSchema(StrictSchema):
    note = Text(validate=validate.Length(max=1000), metadata={"description": "Why the record was wrong."})


class StartRequestSchema(StrictSchema):
    started_at = UtcDateTime(metadata={"description": "When the run began; now by default."})


class UsageRecordSchema(ma.Schema):
    """A usage record, or a reversal of one (negative hours and cost)."""

    id = ma.fields.UUID()
    plan_id = ma.fields.UUID()
    kind = ma.fields.String(metadata={"enum": ["usage", "reversal"]})
    reverses = ma.fields.UUID(
        attribute="reverses_id",
        allow_none=True,
        metadata={"description": "The record a reversal takes back."},
    )
    reporter = ma.fields.String()
    period_start = ma.fields.AwareDateTime()
    period_end = ma.fields.AwareDateTime()
    accelerator_hours = ma.fields.Float()
    tokens = ma.fields.Float(allow_none=True)
    tokens_per_second = ma.fields.Float(allow_none=True)
    cost = signed_money("Negative for a reversal.")
    currency = ma.fields.String()
    cost_source = ma.fields.String(
        metadata={
            "enum": ["reported", "price", "reversal"],
            "description": "reported: the reporter's cost; price: the hours at price_per_hour.",
        }
    )
    price_per_hour = MoneyField(dump_only=True, allow_none=True)
    off_schedule = ma.fields.Boolean(
        metadata={
            "description": "The period begins before the plan's start_at or ends after its end_at: taken "
            "(runs start late and run over), and flagged, here and in the plan's off_schedule_* figures."
        }
    )
    note = ma.fields.String(allow_none=True)
    created_by = ma.fields.String(attribute="actor", metadata={"description": "Key id of the reporter."})
    created_at = ma.fields.AwareDateTime()


class UsagePageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(UsageRecordSchema), required=True)


class RunForecastIntervalsSchema(ma.Schema):
    confidence = ma.fields.Float(metadata={"example": 0.8})
    estimate_at_completion = ma.fields.List(
        MoneyField(dump_only=True),
        metadata={
            "description": "[low, high]: what it has spent plus what remains of its estimate, stretched as "
            "its plan's cost interval stretches its cost; before it reports tokens, the plan's interval; "
            "once finished, or for a plan without an interval, the estimate twice."
        },
    )
    estimate_at_completion_p50 = MoneyField(
        dump_only=True,
        metadata={"description": "The median: half the runs like it spend more (the band's log-normal)."},
    )
    estimate_at_completion_p90 = MoneyField(
        dump_only=True,
        metadata={
            "description": "Nine in ten runs like it spend less: the band's upper end (80%, two sided)."
        },
    )


class ForecastIntervalsSchema(RunForecastIntervalsSchema):
    estimate_at_completion = ma.fields.List(
        MoneyField(dump_only=True),
        metadata={
            "description": "[low, high]: each charged plan's band, added (their errors are the cluster "
            "model's, and move together); finished plans count their spend."
        },
    )
    variance_at_completion = ma.fields.List(
        signed_money("An end of estimate_at_completion - amount."),
        metadata={"description": "[low, high]: estimate_at_completion's [low, high] - amount."},
    )


class RunForecastSchema(ma.Schema):
    plan_id = ma.fields.UUID(attribute="plan.id")
    name = ma.fields.String(attribute="plan.name", allow_none=True)
    started_at = ma.fields.AwareDateTime(attribute="plan.started_at")
    planned_cost = MoneyField(dump_only=True, attribute="progress.planned_cost")
    actual_cost = MoneyField(dump_only=True, attribute="progress.actual_cost")
    tokens = ma.fields.Float(attribute="progress.planned_tokens")
    tokens_trained = ma.fields.Float(attribute="progress.tokens_trained")
    share_trained = ma.fields.Float(attribute="progress.share_trained")
    estimate_at_completion = MoneyField(dump_only=True, attribute="progress.estimate_at_completion")
    forecast_basis = ma.fields.String(
        attribute="progress.basis",
        metadata={"enum": list(FORECAST_BASES), "description": FORECAST_BASIS},
    )
    variance_at_completion = signed_money(
        "Forecast less planned: positive when heading over (the sign of every variance here).",
        attribute="progress.variance_at_completion",
    )
    planned_end_at = ma.fields.AwareDateTime(attribute="plan.end_at")
    expected_end_at = ma.fields.AwareDateTime(
        allow_none=True, metadata={"description": "At the pace kept since it started; null before progress."}
    )
    intervals = ma.fields.Nested(RunForecastIntervalsSchema)


class BudgetForecastSchema(ma.Schema):
    """A budget's money now and where it is heading."""

    budget_id = ma.fields.UUID(attribute="budget.id")
    currency = ma.fields.String(attribute="budget.currency")
    amount = MoneyField(dump_only=True, attribute="budget.amount")
    committed = MoneyField(dump_only=True, attribute="budget.committed")
    spent = MoneyField(dump_only=True, attribute="budget.spent")
    remaining = signed_money(
        "amount - committed - overrun: what plans may still reserve.", attribute="budget.remaining"
    )
    estimate_at_completion = MoneyField(
        dump_only=True,
        metadata={
            "description": "Every plan charged to it: its spend once finished, its forecast while running, "
            "its cost before it starts."
        },
    )
    variance_at_completion = signed_money(
        "estimate_at_completion - amount: positive when heading over (the sign of every variance here)."
    )
    intervals = ma.fields.Nested(
        ForecastIntervalsSchema,
        metadata={
            "description": "Where the estimate at completion falls at `confidence`, from each plan's cost "
            "interval (the cluster model's judged error) for what it has not yet spent."
        },
    )
    as_of = ma.fields.AwareDateTime()
    running = ma.fields.List(
        ma.fields.Nested(RunForecastSchema),
        metadata={
            "description": "A page of its running plans (`limit`, `cursor`), newest started first; the "
            "budget's own figures are every plan's, on every page."
        },
    )
    next_cursor = ma.fields.String(
        allow_none=True,
        metadata={
            "pattern": CURSOR_PATTERN,
            "description": "Pass as `cursor` for the next page of running plans; null on the last.",
        },
    )
