"""Planning requests: allocate a budget (POST /v1/allocations, and the inputs of a plan), estimate a run
(POST /v1/estimates). The cluster they share is in service/schemas/cluster.py; the documents they answer with
in service/schemas/planning_documents.py, both re-exported here for the modules that import them from it."""

from __future__ import annotations

from typing import ClassVar

import marshmallow as ma
from marshmallow import validate

from service.core.cluster import MAX_INFERENCE_BATCH
from service.core.laws import ScalingLaw
from service.core.units import (
    MAX_ACCELERATORS,
    MAX_FLOPS,
    MAX_PARAMS,
    MAX_TOKENS,
    MIN_FLOPS,
    MIN_TOKENS,
    PF_DAY_FLOPS,
)
from service.schemas.cluster import (
    TRAINING_PRECISIONS,
    ClusterFieldsSchema,
    InlineHardwareSchema,
    InlineServingHardwareSchema,
    LayoutSchema,
    ModelShapeSchema,
    hardware_field,
)
from service.schemas.common import (
    GREATER_THAN,
    Rule,
    StrictSchema,
    core_value,
    excludes,
    one_at_least,
    requires,
)
from service.schemas.fields import MoneyField, Number, SlugOrObject, WholeNumber, budget_float, positive_float
from service.schemas.planning_documents import (
    AllocationPointSchema,
    AllocationSchema,
    EstimateSchema,
    LawSchema,
)
from service.services.planning import AllocationRequest, EstimateRequest

__all__ = [
    "ALLOCATES_NOTHING",
    "BUDGET_FIELDS",
    "RULE_FIELDS",
    "SERVING_FIELDS",
    "TRAINING_PRECISIONS",
    "AllocationPointSchema",
    "AllocationRequestSchema",
    "AllocationSchema",
    "ClusterFieldsSchema",
    "EstimateRequestSchema",
    "EstimateSchema",
    "InlineHardwareSchema",
    "InlineLawSchema",
    "InlineServingHardwareSchema",
    "LawSchema",
    "LayoutSchema",
    "ModelShapeSchema",
    "allocation_rules",
    "hardware_field",
]


class InlineLawSchema(StrictSchema):
    E = positive_float(100, "Irreducible loss (nats/token).", required=True)
    A = positive_float(1e12, "Coefficient of the parameter term.", required=True)
    B = positive_float(1e12, "Coefficient of the data term.", required=True)
    alpha = positive_float(3, "Exponent of the parameter term.", required=True)
    beta = positive_float(3, "Exponent of the data term.", required=True)

    @ma.post_load
    def _as_law(self, data, **kwargs) -> ScalingLaw:
        return core_value(ScalingLaw, data)


BUDGET_FIELDS = ("flops", "pf_days", "target_loss", "cost", "accelerator_hours", "days")
RULE_FIELDS = ("tokens_per_param", "unique_tokens", "inference_tokens")  # how a budget is allocated
SERVING_FIELDS = ("inference_hardware", "inference_batch")  # how the inference tokens are served
ALLOCATES_NOTHING = "A plan for a given params and tokens allocates nothing."


def allocation_rules(budgets: tuple[str, ...], *, or_a_model: bool = False) -> tuple[Rule, ...]:
    """An allocation request's rules, given the fields that count as its budget (a plan's "budget" is one);
    `or_a_model`: a plan may give the model instead (`params` and `tokens`), and then no budget or rule, and
    always names its hardware, so that the rules needing it are left out: each rule the description states
    makes it harder for property-based testing to draw requests, and a redundant one as much.
    """
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
        *(() if or_a_model else (requires(("cost", "accelerator_hours", "days"), "hardware"),)),
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
    days = positive_float(36_500, "Wall-clock deadline in days; with hardware.")
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

    max_accelerators = WholeNumber(
        validate=validate.Range(1, MAX_ACCELERATORS),
        metadata={
            "description": "Most accelerators the planner may choose when accelerators is left out; "
            "default 32768."
        },
    )

    RULES = (
        *ClusterFieldsSchema.RULES,
        requires("max_accelerators", "hardware"),
        *allocation_rules(BUDGET_FIELDS),
    )
    REQUEST: ClassVar[type | None] = AllocationRequest  # a plan's schemas load into subclasses


class EstimateRequestSchema(ClusterFieldsSchema):
    params = positive_float(
        MAX_PARAMS,
        "Model parameters (of a mixture of experts, every expert's); left out with a shape, the shape's.",
        metadata={"example": 7e9, GREATER_THAN: "active_params"},
    )
    tokens = positive_float(MAX_TOKENS, "Training tokens.", required=True, metadata={"example": 1.4e11})
    active_params = positive_float(
        MAX_PARAMS,
        "Of a mixture of experts given without a shape: the parameters a token passes through (params is "
        "every expert's). The FLOPs follow them, the memory params; the cluster model assumes a "
        "fine-grained shape of both.",
    )
    hardware = hardware_field(required=True)
    law = SlugOrObject(
        InlineLawSchema,
        "Slug of a scaling law: the response then predicts the loss of this model.",
        metadata={"example": "chinchilla-2022"},
    )
    days = positive_float(
        36_500,
        "A deadline: without accelerators, the planner chooses the fewest that finish within it (without "
        "days, the cheapest).",
    )

    max_accelerators = WholeNumber(
        validate=validate.Range(1, MAX_ACCELERATORS),
        metadata={
            "description": "Most accelerators the planner may choose when accelerators is left out; "
            "default 32768."
        },
    )

    RULES = (
        *ClusterFieldsSchema.RULES,
        excludes(
            "days", "accelerators", "A deadline chooses the accelerators: give one or the other.", at="days"
        ),
        excludes("active_params", "shape", "A shape gives its own active parameters.", at="active_params"),
        one_at_least(
            ("params", "shape"), "Give params, or a shape: its parameters are then the model's.", at="params"
        ),
    )
    REQUEST = EstimateRequest
