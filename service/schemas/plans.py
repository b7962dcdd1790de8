"""Plans: the request, the stored plan and its documents, lists, comparisons and the budget ledger."""

from __future__ import annotations

import copy
import uuid
from typing import Any, ClassVar

import marshmallow as ma
from marshmallow import validate
from webargs.fields import DelimitedList

from service.core.units import MAX_ACCELERATORS, MAX_PARAMS, MAX_TOKENS
from service.data.models import PLAN_STATUSES
from service.schemas.calibrations import OwnCalibrationSchema
from service.schemas.common import (
    GREATER_THAN,
    NOT_LESS_THAN,
    ListQuerySchema,
    PageSchema,
    StrictSchema,
    excludes,
    requires,
)
from service.schemas.fields import (
    LABEL_FILTER_VALUE,
    LABEL_KEY_PATTERN,
    SIGNED_SUM_PATTERN,
    SLUG_PATTERN,
    LabelFilterField,
    MoneyField,
    SlugOrObject,
    Text,
    UtcDateTime,
    WholeNumber,
    labels_field,
    positive_float,
)
from service.schemas.planning import (
    ALLOCATES_NOTHING,
    BUDGET_FIELDS,
    AllocationRequestSchema,
    AllocationSchema,
    ClusterFieldsSchema,
    allocation_rules,
    hardware_field,
)
from service.services import plan_documents
from service.services.planning import PlanInputs
from service.services.plans import REMAINING, PlanRequest

# Active parameters describe a model given by its params, and only one given without a shape.
ACTIVE_PARAMS_RULES = (
    requires("active_params", "params"),
    excludes("active_params", "shape", "A shape gives its own active parameters.", at="active_params"),
)


class PlanInputsSchema(AllocationRequestSchema):
    """What a plan evaluates: an allocation request, or `params` and `tokens` of a model already chosen.

    Plans always name their cluster (`hardware` and `accelerators`): a plan says how long and at what cost.
    """

    params = positive_float(
        MAX_PARAMS,
        "Model parameters, for a model already chosen (with tokens); of a mixture of experts, every "
        "expert's.",
        metadata={GREATER_THAN: "active_params"},
    )
    tokens = positive_float(MAX_TOKENS, "Training tokens, for a model already chosen (with params).")
    active_params = positive_float(
        MAX_PARAMS,
        "Of a mixture of experts already chosen and given without a shape (with params): the parameters a "
        "token passes through. The FLOPs follow them, the memory params.",
    )
    hardware = hardware_field(required=True)
    accelerators = WholeNumber(
        required=True, validate=validate.Range(1, MAX_ACCELERATORS), metadata={"example": 1024}
    )

    RULES = (
        *ClusterFieldsSchema.RULES_WITH_HARDWARE,
        *allocation_rules(BUDGET_FIELDS, or_a_model=True),
        *ACTIVE_PARAMS_RULES,
    )
    REQUEST: ClassVar[type | None] = PlanInputs

    class Meta(StrictSchema.Meta):
        exclude = (
            "max_accelerators",
        )  # a plan names its accelerators  # PlanRequestSchema's is a PlanRequest


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
        validate=validate.OneOf([REMAINING]),
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
        *ClusterFieldsSchema.RULES_WITH_HARDWARE,
        *allocation_rules((*BUDGET_FIELDS, "budget"), or_a_model=True),
        requires("budget", "budget_id"),
        excludes("budget", "cost", 'Give cost or "budget": "remaining", not both.', at="cost"),
        excludes("budget", "params", ALLOCATES_NOTHING, at="budget"),
        *ACTIVE_PARAMS_RULES,
    )
    REQUEST = PlanRequest


def _revision_fields() -> dict[str, ma.fields.Field[Any]]:
    """Every request field, optional and nullable: null removes an input of the parent. Members that are
    objects (labels, shape, inline hardware or law) merge into the parent's, so only the merged request is
    validated for them."""
    fields: dict[str, ma.fields.Field[Any]] = {}
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


class ApprovalSchema(ma.Schema):
    """A plan's approval: asked for by committing it when it costs more than its budget's approval_above."""

    requested_at = ma.fields.AwareDateTime(metadata={"description": "When the commit asked for it."})
    requested_by = ma.fields.String(metadata={"description": "Key id of the caller who committed it."})
    decision = ma.fields.String(
        allow_none=True, metadata={"enum": ["approved", "rejected", None], "description": "null: pending."}
    )
    decided_at = ma.fields.AwareDateTime(allow_none=True)
    decided_by = ma.fields.String(allow_none=True, metadata={"description": "Key id of the approver."})
    note = ma.fields.String(allow_none=True, metadata={"description": "What the approver said."})


class ApprovalRequestSchema(StrictSchema):
    """The body of an approval or a rejection."""

    note = Text(
        validate=validate.Length(min=1, max=1000),
        metadata={"description": "Why: kept with the plan and sent with its event.", "example": "Q1 roadmap"},
    )


class RejectionRequestSchema(ApprovalRequestSchema):
    note = Text(
        required=True,
        validate=validate.Length(min=1, max=1000),
        error_messages={"required": "Say why in the note to reject the plan."},
        metadata={
            "description": "Why not: kept with the plan and sent with its event.",
            "example": "Over the quarter's plan.",
        },
    )


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
    approval = ma.fields.Nested(
        ApprovalSchema,
        allow_none=True,
        metadata={"description": "Null unless committing it asked its budget's approvers (approval_above)."},
    )
    started_at = ma.fields.AwareDateTime(allow_none=True, metadata={"description": "When its run began."})
    finished_at = ma.fields.AwareDateTime(allow_none=True, metadata={"description": "Completed or failed."})
    actual_accelerator_hours = ma.fields.Float(metadata={"description": "Reported by its usage records."})
    off_schedule_accelerator_hours = ma.fields.Float(
        metadata={
            "description": "Of actual_accelerator_hours, what records beginning before start_at or ending "
            "after end_at reported: accepted, and flagged here and on each record (off_schedule)."
        }
    )
    off_schedule_cost = MoneyField(
        dump_only=True, metadata={"description": "Of actual_cost, what those records spent."}
    )
    actual_cost = MoneyField(dump_only=True, metadata={"description": "Reported by its usage records."})
    tokens_trained = ma.fields.Float(metadata={"description": "By its latest usage record."})
    share_trained = ma.fields.Float(
        attribute="progress.share_trained", metadata={"description": "tokens_trained / tokens, at most 1."}
    )
    forecast_basis = ma.fields.String(
        attribute="progress.basis",
        metadata={
            "enum": ["plan", "trend", "spent"],
            "description": "What estimate_at_completion stands on (see the budget forecast's runs).",
        },
    )
    estimate_at_completion = MoneyField(
        dump_only=True,
        allow_none=True,
        metadata={
            "description": "What the run will cost: actual_cost * tokens / tokens_trained while it runs, "
            "the plan's cost before any progress, actual_cost once finished; null for plans without a cost."
        },
    )


class _SnapshotField(ma.fields.Float):
    """A figure a plan's snapshot records (null in plans from before it did)."""

    def __init__(self, key: str, **kwargs):
        super().__init__(dump_only=True, allow_none=True, **kwargs)
        self.key = key

    def get_value(self, obj, attr, accessor=None, default=ma.missing):
        return (obj.snapshot or {}).get(self.key)


class _OwnCalibrationField(ma.fields.Nested):
    """The organisation's calibration a plan's snapshot names (null: the published constants)."""

    def get_value(self, obj, attr, accessor=None, default=ma.missing):
        return plan_documents.snapshot_own_calibration(obj.snapshot)


class PlanSchema(PlanSummarySchema):
    """A plan: the record an organisation acts on. Immutable but for its status."""

    cost_quantile = _SnapshotField(
        "commit_quantile",
        metadata={
            "description": "The quantile of its cost the plan charges, its budget's commit_quantile when it "
            "was made (0.8: P80, from the estimate's interval); null: the point value (result.estimate.cost)."
        },
    )
    calibration = _OwnCalibrationField(
        OwnCalibrationSchema,
        allow_none=True,
        metadata={
            "description": "The organisation's own calibration of the cluster model on its hardware that the "
            "plan was made with (POST /v1/calibrations); null: the constants fitted on published runs."
        },
    )

    inputs = ma.fields.Dict(metadata={"description": "The request evaluated (PlanInputs), as stored."})
    snapshot = ma.fields.Dict(
        metadata={"description": "What the evaluation used: hardware figures and price, law, engine version."}
    )
    result = StoredDocument(AllocationSchema, metadata={"description": "All outputs, as evaluated."})


class PlanPageSchema(PageSchema):
    """What GET /v1/plans answers."""

    items = ma.fields.List(ma.fields.Nested(PlanSummarySchema), required=True)


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
        metadata={"description": "Created before (exclusive).", NOT_LESS_THAN: "created_from"}
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
        metadata={"description": "Signed: negative for a release.", "pattern": SIGNED_SUM_PATTERN},
    )
    currency = ma.fields.String()
    flops = ma.fields.Float()
    accelerator_hours = ma.fields.Float()
    actor = ma.fields.String(metadata={"description": "Key id of the caller."})
    request_id = ma.fields.String(allow_none=True)
    created_at = ma.fields.AwareDateTime()


class LedgerPageSchema(PageSchema):
    items = ma.fields.List(ma.fields.Nested(LedgerEntrySchema), required=True)
