"""The documents planning answers with: an estimate of a run, and an allocation (which a plan stores as its
result). Both are made by service/services/plan_documents.py; these schemas describe them."""

from __future__ import annotations

import marshmallow as ma

from service.core.cluster import DECODING_BOUNDS
from service.core.engine import ENGINE_VERSION
from service.core.hyper import FLOPS_DEFINITIONS
from service.core.shape import SERVING_BYTES_PER_PARAM
from service.schemas.common import CaveatSchema, DocumentSchema
from service.schemas.energy import EnergySchema
from service.schemas.fields import MoneyField, PairField
from service.schemas.hardware import PeakFlopsSchema
from service.services import plan_documents
from service.services.plan_documents import HYPERPARAMETERS_NOTE, INFERENCE_MINIMISES


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
    tensor_parallel_overlap = ma.fields.Boolean()


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
    failures_per_hour = ma.fields.Float(
        metadata={
            "description": "Interruptions an hour of the whole job: failures, and a spot offer's preemptions."
        }
    )
    interruptions = ma.fields.Float(metadata={"description": "Expected over the run."})
    preemptions = ma.fields.Float(
        metadata={"description": "Of the interruptions, those a spot provider makes (0 on other capacity)."}
    )
    checkpoint_seconds = ma.fields.Float()
    checkpoint_interval_seconds = ma.fields.Float(
        allow_none=True, metadata={"description": "Young/Daly: sqrt(2·δ·M) - δ; null if nothing fails."}
    )
    restart_seconds = ma.fields.Float()
    useful_fraction = ma.fields.Float(
        metadata={
            "description": "Of the wall-clock time, spent training: the run overhead's share taken too."
        }
    )
    run_overhead = ma.fields.Float(
        metadata={"description": "The share lost beyond failures and checkpoints (reliability.run_overhead)."}
    )
    run_overhead_source = ma.fields.String(
        metadata={
            "enum": ["request", "calibration", "hardware", "default"],
            "description": "Whose run_overhead it is: the request's reliability.run_overhead; the "
            "organisation's calibration, fitted on its runs' actual accelerator-hours; the hardware "
            "profile's; or the default, from published whole runs.",
        }
    )


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


class UsedEfficiencySchema(ma.Schema):
    gemm = ma.fields.Float(
        metadata={"description": "Large-GEMM fraction of the dense peak at the precision."}
    )
    attention = ma.fields.Float(
        allow_none=True,
        metadata={
            "description": "Fraction of the BF16 peak fused attention ran at, on the causal half of the "
            "scores (null in plans from before model 1.4.0, which counted the whole score matrix at the GEMM "
            "fraction)."
        },
    )
    provenance = ma.fields.String(metadata={"description": "calibrated, derived or uncalibrated."})
    basis = ma.fields.String()


class PerformanceSchema(ma.Schema):
    """The cluster model's prediction (service/core/performance.py): null when the request gives an mfu."""

    model_version = ma.fields.String()
    framework = ma.fields.String(
        metadata={"description": "The framework the layout search stayed inside (the request's, or generic)."}
    )
    hardware_efficiency = ma.fields.Nested(
        UsedEfficiencySchema,
        metadata={
            "description": "The GEMM and attention fractions the model ran the hardware at, and how they are "
            "known."
        },
    )
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


class RunIntervalsSchema(ma.Schema):
    confidence = ma.fields.Float(metadata={"example": 0.8})
    categories = ma.fields.List(
        ma.fields.String(),
        metadata={
            "description": "The groups of judged runs this one is in (baseline, hardware, parallelism, "
            "context length, scale, mixture of experts), whose errors set the width; empty when the "
            "request's MFU set the pace."
        },
    )
    step_seconds = PairField(
        allow_none=True, metadata={"description": "[low, high]; null when the request's MFU set the pace."}
    )
    days = PairField()
    accelerator_hours = PairField()
    cost = ma.fields.List(
        MoneyField(dump_only=True),
        allow_none=True,
        metadata={"description": "[low, high] in the estimate's currency; null without a price."},
    )


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
    intervals = ma.fields.Nested(
        RunIntervalsSchema,
        metadata={
            "description": "Where the published figures of runs like this one fell around the model's, at "
            "`confidence` (80%): the cluster model judged on organisations it was not fitted on "
            "(bench/RESULTS.md), by the groups of runs this one is in; time and cost add what whole runs "
            "lose beside their steady state."
        },
    )
    warnings = ma.fields.List(ma.fields.Nested(CaveatSchema))
    energy = ma.fields.Nested(
        EnergySchema,
        metadata={
            "description": "The run's energy and emissions at the request's site (services/energy.py); "
            "absent from plans made before energy was modelled."
        },
    )


class LimitSchema(ma.Schema):
    kind = ma.fields.String(metadata={"description": "The request field that set the limit."})
    flops = ma.fields.Float()
    binding = ma.fields.Boolean()
    unspent = ma.fields.Float(
        allow_none=True,
        metadata={
            "description": "The share of the limit the plan leaves unspent: 1 - its run's cost, "
            "accelerator-hours or days (or the compute allocated) over the limit; negative past it (a run "
            "is modelled at its own pace, not the one the limit was turned into FLOPs at). Null without a "
            "run to measure it."
        },
    )


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
