"""Comparisons: one run priced on many offers (POST /v1/comparisons)."""

from __future__ import annotations

import marshmallow as ma
from marshmallow import validate

from service.core.units import MAX_ACCELERATORS, MAX_PARAMS, MAX_TOKENS
from service.data.models import PRICINGS
from service.schemas.cluster import TRAINING_PRECISIONS
from service.schemas.common import StrictSchema, excludes, one_at_least, requires
from service.schemas.energy import EnergySchema
from service.schemas.fields import (
    CurrencyField,
    MoneyField,
    Text,
    WholeNumber,
    budget_float,
    positive_float,
    slug_field,
)
from service.schemas.planning_documents import LayoutDocumentSchema
from service.services.comparisons import MAX_OFFERS, RANKINGS, ComparisonRequest


def _tuple_of(field: ma.fields.Field, description: str) -> ma.fields.List:
    return ma.fields.List(
        field, validate=validate.Length(min=1, max=100), metadata={"description": description}
    )


def _name() -> Text:
    return Text(validate=validate.Length(min=1, max=100))


class OfferComparisonRequestSchema(StrictSchema):
    """The run (a model, or a budget a law allocates) and the offers it may go to."""

    params = positive_float(
        MAX_PARAMS, "A model already chosen: its parameters (with tokens).", metadata={"example": 7e10}
    )
    tokens = positive_float(MAX_TOKENS, "Its training tokens.", metadata={"example": 1.4e12})
    flops = budget_float("A compute budget the law allocates on each offer.")
    cost = MoneyField(
        metadata={
            "description": "Money: with a model and no days, the fastest run within it on each offer; "
            "with days, a cap; without a model, a budget the law allocates on each offer (a reservation "
            "counts its whole term)."
        }
    )
    currency = CurrencyField(load_default="USD")  # of the comparison: offers priced otherwise are unable
    days = positive_float(
        36_500,
        "A deadline: with a model, the fewest accelerators that finish by it on each offer; without, a "
        "budget of time.",
    )
    law = slug_field(
        metadata={
            "description": "A scaling law's slug, to allocate a budget (and predict the loss).",
            "example": "chinchilla-2022",
        }
    )
    tokens_per_param = positive_float(1e6, "A fixed ratio instead of a law (default 20 without one).")
    hardware = _tuple_of(slug_field(), "Only offers of these hardware profiles.")
    provider = _tuple_of(_name(), "Only these providers.")
    region = _tuple_of(_name(), "Only these regions.")
    pricing = _tuple_of(ma.fields.String(validate=validate.OneOf(PRICINGS)), "Only these pricings.")
    offers = _tuple_of(
        slug_field(), f"Only these offers. Without any filter, every offer (at most {MAX_OFFERS})."
    )
    rank_by = ma.fields.String(
        validate=validate.OneOf(RANKINGS),
        metadata={
            "description": "cost: the cheapest first (ties: the fastest), the default for a model; days: the "
            "fastest first; compute: the most training compute (the lowest loss) first, the default for a "
            "budget."
        },
    )
    precision = ma.fields.String(
        validate=validate.OneOf(TRAINING_PRECISIONS), metadata={"description": "Default bf16."}
    )
    max_accelerators = WholeNumber(
        validate=validate.Range(1, MAX_ACCELERATORS),
        metadata={"description": "Most accelerators the planner may choose on any offer; default 32768."},
    )

    RULES = (
        requires("params", "tokens"),
        requires("tokens", "params"),
        one_at_least(("params", "flops", "cost", "days"), "Give the run: params and tokens, or a budget."),
        excludes("params", "flops", "A model already chosen takes no compute budget.", at="flops"),
        excludes(
            "params", "tokens_per_param", "A model already chosen has its tokens.", at="tokens_per_param"
        ),
        excludes("tokens_per_param", "law", "Give either tokens_per_param or law.", at="tokens_per_param"),
    )
    REQUEST = ComparisonRequest


class ComparisonIntervalsSchema(ma.Schema):
    confidence = ma.fields.Float()
    days = ma.fields.List(ma.fields.Float(), metadata={"description": "[low, high]"})
    cost = ma.fields.List(
        MoneyField(dump_only=True), allow_none=True, metadata={"description": "[low, high], as paid."}
    )


class ComparisonGoodputSchema(ma.Schema):
    useful_fraction = ma.fields.Float()
    interruptions = ma.fields.Float(
        metadata={"description": "Expected over the run: failures and preemptions."}
    )
    preemptions = ma.fields.Float(metadata={"description": "Of them, a spot provider's."})
    checkpoint_interval_seconds = ma.fields.Float(
        allow_none=True, metadata={"description": "Chosen for the combined rate (Young/Daly)."}
    )


class _OfferNamesSchema(ma.Schema):
    offer = ma.fields.String(metadata={"description": "The offer's slug."})
    hardware = ma.fields.String()
    provider = ma.fields.String()
    region = ma.fields.String(allow_none=True)
    pricing = ma.fields.String(metadata={"enum": list(PRICINGS)})
    instance_type = ma.fields.String(allow_none=True)


class ComparedOfferSchema(_OfferNamesSchema):
    rank = ma.fields.Integer()
    on_frontier = ma.fields.Boolean(metadata={"description": "No other offer is both as fast and as cheap."})
    price_per_hour = MoneyField(
        dump_only=True, metadata={"description": "An accelerator-hour: an owned offer's with its energy."}
    )
    term_days = ma.fields.Integer(allow_none=True)
    accelerators = ma.fields.Integer()
    params = ma.fields.Float()
    tokens = ma.fields.Float()
    flops = ma.fields.Float()
    predicted_loss = ma.fields.Float(allow_none=True)
    days = ma.fields.Float()
    accelerator_hours = ma.fields.Float()
    run_cost = MoneyField(
        dump_only=True, allow_none=True, metadata={"description": "Its hours at the price."}
    )
    cost = MoneyField(
        dump_only=True,
        allow_none=True,
        metadata={"description": "What is paid: a reservation's term at least."},
    )
    intervals = ma.fields.Nested(ComparisonIntervalsSchema, allow_none=True)
    mfu = ma.fields.Float()
    layout = ma.fields.Nested(LayoutDocumentSchema, allow_none=True)
    goodput = ma.fields.Nested(ComparisonGoodputSchema, allow_none=True)
    energy = ma.fields.Nested(EnergySchema, allow_none=True)
    notes = ma.fields.List(ma.fields.String())
    plan = ma.fields.Dict(
        metadata={
            "description": "The body of POST /v1/plans that keeps this run as a plan: add `organization` "
            "(and a `budget_id` to charge). The model, the offer's hardware, count and hourly price, a spot "
            "offer's preemptions, the site, and the offer in `labels`."
        }
    )


class UnableOfferSchema(_OfferNamesSchema):
    reason = ma.fields.String(metadata={"description": "Why the offer cannot take the run."})


class OfferComparisonSchema(ma.Schema):
    rank_by = ma.fields.String(metadata={"enum": list(RANKINGS)})
    currency = ma.fields.String()
    offers = ma.fields.List(ma.fields.Nested(ComparedOfferSchema), metadata={"description": "Best first."})
    frontier = ma.fields.List(
        ma.fields.String(),
        metadata={"description": "The offers no other beats on both days and cost, fastest first."},
    )
    unable = ma.fields.List(ma.fields.Nested(UnableOfferSchema))
