"""Planning: allocation and estimate requests, and the allocation document they answer with."""

from __future__ import annotations

from typing import ClassVar

import marshmallow as ma
from marshmallow import validate

from service.core.cluster import DECODING_BOUNDS, MAX_INFERENCE_BATCH
from service.core.engine import ENGINE_VERSION
from service.core.hyper import FLOPS_DEFINITIONS
from service.core.laws import ScalingLaw
from service.core.memory import MAX_MEMORY_BYTES, OPTIMIZER_STATE_BYTES, RECOMPUTATION_MODES
from service.core.shape import (
    ACTIVATIONS,
    LATENT_ATTENTION_FIELDS,
    MAX_MTP_DEPTH,
    MAX_SHAPE_DIMENSION,
    MOE_FIELDS,
    SERVING_BYTES_PER_PARAM,
    ModelShape,
)
from service.core.units import (
    MAX_ACCELERATORS,
    MAX_FLOPS,
    MAX_PARAMS,
    MAX_TOKENS,
    MIN_FLOPS,
    MIN_TOKENS,
    PF_DAY_FLOPS,
)
from service.data.catalog import PRECISIONS
from service.schemas.common import (
    GREATER_THAN,
    CaveatSchema,
    DocumentSchema,
    Rule,
    StrictSchema,
    core_value,
    excludes,
    one_at_least,
    requires,
)
from service.schemas.fields import (
    CurrencyField,
    JsonBoolean,
    MoneyField,
    Number,
    PairField,
    SlugOrObject,
    Text,
    WholeNumber,
    budget_float,
    positive_float,
)
from service.schemas.hardware import (
    MAX_LINK_BYTES_PER_SECOND,
    SCALE_OUT,
    SCALE_UP,
    PeakFlopsSchema,
    accelerators_per_node_field,
    failures_field,
)
from service.services import plan_documents
from service.services.plan_documents import HYPERPARAMETERS_NOTE, INFERENCE_MINIMISES
from service.services.planning import AllocationRequest, EstimateRequest, InlineHardware

# What the engine's memory model trains at (core/memory.py): every catalog precision but int8, which
# profiles quote for inference.
TRAINING_PRECISIONS = tuple(precision for precision in PRECISIONS if precision != "int8")


class InlineHardwareSchema(StrictSchema):
    name = Text(load_default="custom hardware", validate=validate.Length(min=1, max=200))
    peak_flops = ma.fields.Nested(PeakFlopsSchema, required=True, metadata={"minProperties": 1})
    memory_bytes = positive_float(MAX_MEMORY_BYTES, "Memory of one accelerator.", required=True)
    memory_bandwidth_bytes_per_second = positive_float(1e16, "Memory bandwidth of one accelerator.")
    price_per_hour = MoneyField(allow_zero=True, metadata={"description": "Price per accelerator-hour."})
    currency = CurrencyField()
    accelerators_per_node = accelerators_per_node_field()
    scale_up_bandwidth_bytes_per_second = positive_float(MAX_LINK_BYTES_PER_SECOND, SCALE_UP)
    scale_out_bandwidth_bytes_per_second = positive_float(MAX_LINK_BYTES_PER_SECOND, SCALE_OUT)
    failures_per_accelerator_hour = failures_field()

    RULES = (requires("price_per_hour", "currency"),)
    REQUEST = InlineHardware


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

    @ma.post_load
    def _as_law(self, data, **kwargs) -> ScalingLaw:
        return core_value(ScalingLaw, data)


class ModelShapeSchema(StrictSchema):
    layers = WholeNumber(required=True, validate=validate.Range(1, MAX_SHAPE_DIMENSION))
    d_model = WholeNumber(required=True, validate=validate.Range(1, MAX_SHAPE_DIMENSION))
    heads = WholeNumber(required=True, validate=validate.Range(1, MAX_SHAPE_DIMENSION))
    sequence_length = WholeNumber(required=True, validate=validate.Range(1, MAX_SHAPE_DIMENSION))
    micro_batch = WholeNumber(
        load_default=1,
        validate=validate.Range(1, MAX_SHAPE_DIMENSION),
        metadata={"description": "Sequences per micro-batch, for the memory of a plan given an mfu."},
    )
    kv_heads = WholeNumber(
        validate=validate.Range(1, MAX_SHAPE_DIMENSION),
        metadata={
            "description": "Key/value heads (grouped-query attention); must divide heads; default heads."
        },
    )
    ffn = WholeNumber(
        validate=validate.Range(1, MAX_SHAPE_DIMENSION),
        metadata={"description": "Inner width of the MLP; default 4·d_model."},
    )
    activation = ma.fields.String(
        validate=validate.OneOf(ACTIVATIONS),
        metadata={"description": "gelu (two MLP matrices, default) or swiglu (three, as in Llama)."},
    )
    vocabulary = WholeNumber(
        validate=validate.Range(1, MAX_SHAPE_DIMENSION),
        metadata={"description": "Tokens of the embedding and output layers; default: not counted."},
    )
    head_dim = WholeNumber(
        validate=validate.Range(1, MAX_SHAPE_DIMENSION),
        metadata={"description": "Width of an attention head; default d_model / heads (which must divide)."},
    )
    experts = WholeNumber(
        validate=validate.Range(1, MAX_SHAPE_DIMENSION),
        metadata={
            "description": "Routed experts per mixture-of-experts layer; left out, the model is dense."
        },
    )
    experts_per_token = WholeNumber(
        validate=validate.Range(1, MAX_SHAPE_DIMENSION),
        metadata={"description": "Routed experts each token goes to (top-k); required with experts."},
    )
    shared_experts = WholeNumber(
        validate=validate.Range(0, MAX_SHAPE_DIMENSION),
        metadata={"description": "Experts every token goes to besides the routed ones; default 0."},
    )
    expert_ffn = WholeNumber(
        validate=validate.Range(1, MAX_SHAPE_DIMENSION),
        metadata={"description": "Inner width of one expert's MLP; default ffn."},
    )
    moe_every = WholeNumber(
        validate=validate.Range(1, MAX_SHAPE_DIMENSION),
        metadata={
            "description": "Every k-th layer after the dense ones is a mixture-of-experts layer; default 1."
        },
    )
    dense_layers = WholeNumber(
        validate=validate.Range(0, MAX_SHAPE_DIMENSION),
        metadata={"description": "First layers that keep a dense MLP (DeepSeek-V3: 3); default 0."},
    )
    capacity_factor = Number(
        validate=validate.Range(1, MAX_SHAPE_DIMENSION),
        metadata={
            "description": "Tokens of the busiest expert-parallel rank over the mean: load imbalance; "
            "default 1 (balanced)."
        },
    )
    kv_lora_rank = WholeNumber(
        validate=validate.Range(1, MAX_SHAPE_DIMENSION),
        metadata={"description": "Multi-head latent attention (DeepSeek-V2): width of the key/value latent."},
    )
    q_lora_rank = WholeNumber(
        validate=validate.Range(1, MAX_SHAPE_DIMENSION),
        metadata={
            "description": "Latent attention: width of the query latent; default none (a full projection)."
        },
    )
    rope_head_dim = WholeNumber(
        validate=validate.Range(1, MAX_SHAPE_DIMENSION),
        metadata={"description": "Latent attention: rotary channels per head; default 64."},
    )
    mtp_depth = WholeNumber(
        validate=validate.Range(0, MAX_MTP_DEPTH),
        metadata={"description": "Multi-token prediction modules (DeepSeek-V3: 1); default 0."},
    )

    RULES = (
        requires(MOE_FIELDS, "experts", "Needs experts (a mixture-of-experts shape)."),
        requires("experts", "experts_per_token"),
        requires(
            LATENT_ATTENTION_FIELDS, "kv_lora_rank", "Needs kv_lora_rank (multi-head latent attention)."
        ),
        excludes(
            "kv_lora_rank",
            "kv_heads",
            "Latent attention (kv_lora_rank) has no key/value heads of its own.",
            at="kv_heads",
        ),
    )

    @ma.validates_schema
    def _heads_divide_width(self, data, **kwargs):
        if {"heads", "d_model"} <= set(data) and "head_dim" not in data and data["d_model"] % data["heads"]:
            raise ma.ValidationError("Must divide d_model.", "heads")
        if {"heads", "kv_heads"} <= set(data) and data["heads"] % data["kv_heads"]:
            raise ma.ValidationError("Must divide heads.", "kv_heads")

    @ma.post_load
    def _as_shape(self, data, **kwargs) -> ModelShape:
        return core_value(ModelShape, data)


class ReliabilitySchema(StrictSchema):
    checkpoint_write_bytes_per_second = positive_float(
        1e16, "Aggregate write bandwidth of the checkpoint storage; default 100e9."
    )
    restart_seconds = Number(
        validate=validate.Range(0, 30 * 86_400),
        metadata={"description": "From a failure to training again; default 600."},
    )

    @ma.post_load
    def _as_fields(self, data, **kwargs) -> dict:
        return dict(data)


class LayoutSchema(StrictSchema):
    """How the run is spread over the cluster. Every field left out is searched (the best layout that fits
    memory, by step time)."""

    tensor_parallel = WholeNumber(validate=validate.Range(1, MAX_ACCELERATORS))
    pipeline_parallel = WholeNumber(validate=validate.Range(1, MAX_ACCELERATORS))
    data_parallel = WholeNumber(validate=validate.Range(1, MAX_ACCELERATORS))
    context_parallel = WholeNumber(
        validate=validate.Range(1, MAX_ACCELERATORS), metadata={"description": "Default 1 (not searched)."}
    )
    micro_batch = WholeNumber(validate=validate.Range(1, MAX_SHAPE_DIMENSION))
    global_batch = WholeNumber(
        validate=validate.Range(1, MAX_SHAPE_DIMENSION),
        metadata={"description": "Sequences per step; default DeepSeek LLM's batch for the run's compute."},
    )
    interleave = WholeNumber(
        validate=validate.Range(1, MAX_SHAPE_DIMENSION),
        metadata={"description": "Virtual pipeline stages per accelerator (interleaved 1F1B)."},
    )
    sequence_parallel = JsonBoolean(metadata={"description": "Default true."})
    recomputation = ma.fields.String(validate=validate.OneOf(RECOMPUTATION_MODES))
    zero_stage = WholeNumber(validate=validate.Range(0, 3), metadata={"description": "3 is FSDP-like."})
    flash_attention = JsonBoolean(metadata={"description": "No s² attention scores in memory; default true."})
    expert_parallel = WholeNumber(
        validate=validate.Range(1, MAX_ACCELERATORS),
        metadata={
            "description": "Data-parallel ranks a mixture-of-experts layer's experts are spread over; must "
            "divide the experts and data_parallel."
        },
    )
    expert_overlap = JsonBoolean(
        metadata={
            "description": "The experts' all-to-all runs under another micro-batch's compute (DeepSeek-V3's "
            "DualPipe), taking 20 of 132 SMs."
        }
    )

    @ma.post_load
    def _as_fields(self, data, **kwargs) -> dict:
        return dict(data)


def hardware_field(**kwargs) -> SlugOrObject:
    """The hardware a run is trained on: a profile's slug, or inline."""
    return SlugOrObject(
        InlineHardwareSchema,
        "Slug of a hardware profile (GET /v1/hardware), e.g. h100-sxm.",
        metadata={"example": "h100-sxm"},
        **kwargs,
    )


class ClusterFieldsSchema(StrictSchema):
    """Where and how a run is trained; shared by allocations and estimates."""

    hardware = hardware_field()
    accelerators = WholeNumber(
        validate=validate.Range(1, MAX_ACCELERATORS),
        metadata={
            "description": "Accelerators; left out, the planner chooses the count (see max_accelerators)."
        },
    )
    mfu = Number(
        validate=validate.Range(min=0, max=1, min_inclusive=False),
        metadata={
            "description": "Model FLOPs utilisation, (0, 1]: overrides the cluster model, which otherwise "
            "predicts the pace from the layout.",
            "exclusiveMinimum": True,
        },
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
        validate=validate.Range(0, 3),
        metadata={
            "description": "Deprecated: use layout.zero_stage (still taken as it).",
            "deprecated": True,
        },
    )
    optimizer = ma.fields.String(validate=validate.OneOf(sorted(OPTIMIZER_STATE_BYTES)))
    recomputation = ma.fields.String(
        validate=validate.OneOf(RECOMPUTATION_MODES),
        metadata={"description": "Deprecated: use layout.recomputation.", "deprecated": True},
    )
    tensor_parallel = WholeNumber(
        validate=validate.Range(1, MAX_ACCELERATORS),
        metadata={"description": "Deprecated: use layout.tensor_parallel.", "deprecated": True},
    )
    sequence_parallel = JsonBoolean(
        metadata={"description": "Deprecated: use layout.sequence_parallel.", "deprecated": True},
    )
    shape = ma.fields.Nested(
        ModelShapeSchema,
        metadata={
            "description": "Transformer shape: attention FLOPs, memory and step time. Left out, the cluster "
            "model assumes one (and says so)."
        },
    )
    layout = ma.fields.Nested(
        LayoutSchema,
        metadata={"description": "Parallel layout; the fields left out are searched."},
    )
    reliability = ma.fields.Nested(
        ReliabilitySchema,
        metadata={"description": "What goodput needs besides the hardware's failure rate."},
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
        "layout",
        "reliability",
    )

    # The rules of a request that always names its hardware (a plan's); the schemas of requests with a
    # cluster add their own.
    RULES_WITH_HARDWARE: tuple[Rule, ...] = (requires("price_per_hour", "currency"),)
    RULES: tuple[Rule, ...] = (requires(CLUSTER_OPTIONS, "hardware"), *RULES_WITH_HARDWARE)


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
        "Model parameters (of a mixture of experts, every expert's).",
        required=True,
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
    )
    REQUEST = EstimateRequest


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
    counts_embeddings = ma.fields.Boolean(
        metadata={"description": "Whether the law's N (and so the plan's params) counts the embeddings."}
    )


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


class LayoutDocumentSchema(ma.Schema):
    tensor_parallel = ma.fields.Integer()
    pipeline_parallel = ma.fields.Integer()
    data_parallel = ma.fields.Integer()
    micro_batch = ma.fields.Integer()
    global_batch = ma.fields.Integer(metadata={"description": "Sequences per step."})
    context_parallel = ma.fields.Integer()
    interleave = ma.fields.Integer()
    sequence_parallel = ma.fields.Boolean()
    recomputation = ma.fields.String()
    zero_stage = ma.fields.Integer()
    flash_attention = ma.fields.Boolean()
    expert_parallel = ma.fields.Integer()
    expert_overlap = ma.fields.Boolean()


class BreakdownSchema(ma.Schema):
    """Seconds of one step, by what takes them; they add up to step_seconds."""

    compute = ma.fields.Float(metadata={"description": "Matrix multiplies (with recomputation)."})
    memory_bound = ma.fields.Float(metadata={"description": "Element-wise work at HBM bandwidth."})
    tensor_parallel = ma.fields.Float(metadata={"description": "Exposed tensor-parallel collectives."})
    context_parallel = ma.fields.Float(metadata={"description": "Context-parallel K/V exchange."})
    pipeline_bubble = ma.fields.Float(metadata={"description": "(p-1)/(v·m) of the ideal time."})
    pipeline_transfers = ma.fields.Float(metadata={"description": "Activations across stage boundaries."})
    expert_parallel = ma.fields.Float(
        metadata={"description": "Mixture-of-experts dispatch and combine (all-to-all), not hidden."}
    )
    data_parallel = ma.fields.Float(metadata={"description": "Exposed data-parallel and ZeRO traffic."})
    optimizer = ma.fields.Float(metadata={"description": "The optimizer update at HBM bandwidth."})


class AlternativeLayoutSchema(ma.Schema):
    layout = ma.fields.Nested(LayoutDocumentSchema)
    step_seconds = ma.fields.Float()
    mfu = ma.fields.Float()
    memory_bytes = ma.fields.Float()


class GoodputSchema(ma.Schema):
    failures_per_hour = ma.fields.Float(metadata={"description": "Of the whole job."})
    interruptions = ma.fields.Float(metadata={"description": "Expected over the run."})
    checkpoint_seconds = ma.fields.Float()
    checkpoint_interval_seconds = ma.fields.Float(
        allow_none=True, metadata={"description": "Young/Daly: sqrt(2·δ·M) - δ; null if nothing fails."}
    )
    restart_seconds = ma.fields.Float()
    useful_fraction = ma.fields.Float(metadata={"description": "Of the wall-clock time, spent training."})


class SizingSchema(ma.Schema):
    chosen_by = ma.fields.String(
        metadata={
            "enum": ["days", "cost", "budget"],
            "description": "days: the fewest accelerators that finish by the deadline; cost: the fewest "
            "accelerator-hours among runs within a year; budget: the count whose limits buy the most "
            "compute.",
        }
    )
    max_accelerators = ma.fields.Integer()
    counts_tried = ma.fields.Integer()


class ModelledShapeSchema(ma.Schema):
    layers = ma.fields.Integer()
    d_model = ma.fields.Integer()
    heads = ma.fields.Integer()
    kv_heads = ma.fields.Integer()
    ffn = ma.fields.Integer()
    activation = ma.fields.String()
    vocabulary = ma.fields.Integer(allow_none=True)
    sequence_length = ma.fields.Integer()
    params = ma.fields.Float(metadata={"description": "Parameters the shape has (every expert's)."})
    active_params = ma.fields.Float(
        metadata={
            "description": "Parameters a token passes through: the routed top-k and shared experts only."
        }
    )
    embedding_params = ma.fields.Float(
        metadata={"description": "Input embedding and output layer, in params."}
    )
    mtp_params = ma.fields.Float(metadata={"description": "Multi-token prediction modules (training only)."})
    head_dim = ma.fields.Integer()
    experts = ma.fields.Integer(allow_none=True)
    experts_per_token = ma.fields.Integer(allow_none=True)
    shared_experts = ma.fields.Integer(allow_none=True)
    expert_ffn = ma.fields.Integer(allow_none=True)
    moe_layers = ma.fields.Integer(metadata={"description": "Layers with a mixture-of-experts MLP."})
    capacity_factor = ma.fields.Float(allow_none=True)
    kv_lora_rank = ma.fields.Integer(allow_none=True)
    q_lora_rank = ma.fields.Integer(allow_none=True)
    rope_head_dim = ma.fields.Integer(allow_none=True)
    mtp_depth = ma.fields.Integer()
    kv_cache_bytes_per_token = ma.fields.Float(
        metadata={"description": "Key/value cache at 16 bits per token over the layers (latent under MLA)."}
    )


class PerformanceSchema(ma.Schema):
    """The cluster model's prediction (service/core/performance.py): null when the request gives an mfu."""

    model_version = ma.fields.String()
    step_seconds = ma.fields.Float()
    steps = ma.fields.Integer()
    tokens_per_step = ma.fields.Integer()
    training_seconds = ma.fields.Float(metadata={"description": "Steps x step time, before goodput."})
    tokens_per_second_per_accelerator = ma.fields.Float()
    mfu = ma.fields.Float(metadata={"description": "PaLM's model FLOPs (6N + 12·L·h·s per token)."})
    hfu = ma.fields.Float(metadata={"description": "Counting recomputation."})
    breakdown = ma.fields.Nested(BreakdownSchema)
    layout = ma.fields.Nested(LayoutDocumentSchema)
    memory_bytes = ma.fields.Float(metadata={"description": "Per accelerator, on the first pipeline stage."})
    alternatives = ma.fields.List(ma.fields.Nested(AlternativeLayoutSchema))
    layouts_evaluated = ma.fields.Integer()
    layouts_fitting = ma.fields.Integer()
    goodput = ma.fields.Nested(GoodputSchema)
    sizing = ma.fields.Nested(SizingSchema, allow_none=True)
    shape = ma.fields.Nested(ModelledShapeSchema)


class EstimateHardwareSchema(ma.Schema):
    slug = ma.fields.String(allow_none=True)
    name = ma.fields.String()
    peak_flops = ma.fields.Nested(PeakFlopsSchema)
    memory_bytes = ma.fields.Float()


class EstimateSchema(DocumentSchema):
    """POST /v1/estimates, and an allocation's `estimate` on hardware: made by
    service/services/plan_documents.py."""

    document = plan_documents.estimate_document

    params = ma.fields.Float()
    tokens = ma.fields.Float()
    flops = ma.fields.Float(metadata={"description": "Model FLOPs (what MFU counts)."})
    hardware_flops = ma.fields.Float(metadata={"description": "Including activation recomputation."})
    pf_days = ma.fields.Float()
    seconds = ma.fields.Float()
    days = ma.fields.Float()
    accelerator_hours = ma.fields.Float()
    hardware = ma.fields.Nested(EstimateHardwareSchema)
    accelerators = ma.fields.Integer()
    mfu = ma.fields.Float()
    precision = ma.fields.String()
    peak_flops_per_second = ma.fields.Float()
    price_per_hour = MoneyField(dump_only=True, allow_none=True)
    cost = MoneyField(
        dump_only=True, allow_none=True, metadata={"description": "Rounded half-up to the cent."}
    )
    currency = ma.fields.String(allow_none=True)
    memory = ma.fields.Nested(MemorySchema)
    performance = ma.fields.Nested(PerformanceSchema, allow_none=True)
    predicted_loss = ma.fields.Float(allow_none=True, metadata={"description": "With a law in the request."})
    warnings = ma.fields.List(ma.fields.Nested(CaveatSchema))


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
    batch = ma.fields.Integer()
    bytes_per_param = ma.fields.Constant(SERVING_BYTES_PER_PARAM)
    tokens_per_second = ma.fields.Float(metadata={"description": "Of one accelerator."})
    bound = ma.fields.String(
        metadata={"enum": list(DECODING_BOUNDS), "description": "What limits the tokens per second."},
    )
    accelerator_hours = ma.fields.Float()
    price_per_hour = MoneyField(dump_only=True, allow_none=True)
    cost = MoneyField(
        dump_only=True,
        allow_none=True,
        metadata={"description": "Of serving, in its own currency; never added to training's."},
    )
    currency = ma.fields.String(allow_none=True)


class InferenceSchema(ma.Schema):
    minimised = ma.fields.Constant(
        INFERENCE_MINIMISES, metadata={"description": "What the inference-aware allocation minimises."}
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
    note = ma.fields.Constant(HYPERPARAMETERS_NOTE)


class IntervalsSchema(ma.Schema):
    confidence = ma.fields.Float(metadata={"example": 0.95})
    samples = ma.fields.Integer(metadata={"description": "Bootstrap fits that allocated the budget."})
    params = PairField(allow_none=True, metadata={"description": "[low, high]; null for a model given."})
    tokens = PairField(allow_none=True, metadata={"description": "[low, high]; null for a model given."})
    predicted_loss = PairField()


class AllocationSchema(DocumentSchema):
    """POST /v1/allocations, and a plan's `result`: made by service/services/plan_documents.py, as plans
    store it."""

    document = plan_documents.allocation_document

    method = ma.fields.String(
        metadata={"description": "fixed-ratio, compute-optimal, data-constrained or inference-aware"}
    )
    params = ma.fields.Float()
    tokens = ma.fields.Float()
    tokens_per_param = ma.fields.Float()
    flops = ma.fields.Float()
    pf_days = ma.fields.Float()
    predicted_loss = ma.fields.Float(allow_none=True)
    unique_tokens = ma.fields.Float(allow_none=True)
    epochs = ma.fields.Float(allow_none=True)
    active_params = ma.fields.Float(
        allow_none=True,
        metadata={
            "description": "Of a mixture of experts a law sized: the parameters a token passes through "
            "(params counts every expert's); null for dense models."
        },
    )
    experts = ma.fields.Integer(allow_none=True, metadata={"description": "Experts per layer (MoE laws)."})
    experts_per_token = ma.fields.Integer(allow_none=True, metadata={"description": "Top-k (MoE laws)."})
    limits = ma.fields.List(ma.fields.Nested(LimitSchema))
    law = ma.fields.Nested(LawSchema, allow_none=True)
    inference = ma.fields.Nested(InferenceSchema, allow_none=True)
    estimate = ma.fields.Nested(EstimateSchema, allow_none=True)
    hyperparameters = ma.fields.Nested(HyperparametersSchema)
    warnings = ma.fields.List(ma.fields.Nested(CaveatSchema))
    intervals = ma.fields.Nested(
        IntervalsSchema,
        allow_none=True,
        metadata={
            "description": "With a fitted law that was bootstrapped: the allocation under each bootstrap "
            "fit, as percentile intervals."
        },
    )
    engine_version = ma.fields.Constant(ENGINE_VERSION)
