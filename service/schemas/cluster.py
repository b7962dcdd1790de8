"""The cluster a run is trained on, as requests give it: the hardware (a profile's slug or inline), the
model's shape, the parallel layout, reliability, and the fields every request with a cluster shares."""

from __future__ import annotations

import marshmallow as ma
from marshmallow import validate

from service.core import engine
from service.core.frameworks import FRAMEWORKS
from service.core.goodput import DEFAULT_RUN_OVERHEAD, MAX_RUN_OVERHEAD
from service.core.memory import MAX_MEMORY_BYTES, OPTIMIZER_STATE_BYTES, RECOMPUTATION_MODES
from service.core.performance import DEFAULT_MEMORY_HEADROOM, MAX_MEMORY_HEADROOM
from service.core.shape import (
    ACTIVATIONS,
    LATENT_ATTENTION_FIELDS,
    MAX_MTP_DEPTH,
    MAX_SHAPE_DIMENSION,
    MOE_FIELDS,
    ModelShape,
)
from service.core.units import MAX_ACCELERATORS
from service.data.catalog import PRECISIONS
from service.schemas.common import Rule, StrictSchema, core_value, excludes, requires
from service.schemas.energy import SiteSchema, power_basis_field
from service.schemas.fields import (
    CurrencyField,
    JsonBoolean,
    MoneyField,
    Number,
    SlugOrObject,
    Text,
    WholeNumber,
    positive_float,
)
from service.schemas.hardware import (
    MAX_LINK_BYTES_PER_SECOND,
    SCALE_OUT,
    SCALE_UP,
    InlineEfficiencySchema,
    PeakFlopsSchema,
    accelerators_per_node_field,
    failures_field,
    run_overhead_field,
)

# What the engine's memory model trains at (core/cluster.py): every catalog precision but int8, which
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
    run_overhead = run_overhead_field(allow_none=True)
    efficiency = ma.fields.Nested(
        InlineEfficiencySchema,
        metadata={
            "description": "What it achieves of its peaks (as a profile states it, GET /v1/hardware/{slug}); "
            "left out, the uncalibrated default, with an uncalibrated_hardware warning."
        },
    )

    RULES = (requires("price_per_hour", "currency"),)
    REQUEST = engine.Hardware


class InlineServingHardwareSchema(InlineHardwareSchema):
    """Inline hardware to serve on: decoding is bound by its memory bandwidth, so that is required."""

    memory_bandwidth_bytes_per_second = positive_float(
        1e16, "Memory bandwidth of one accelerator: decoding reads every weight once per step.", required=True
    )


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
    dropout = JsonBoolean(
        metadata={
            "description": "Whether training applies dropout and keeps its masks for the backward pass "
            "(GPT-3 and Megatron's GPT defaults); default false, as modern pretraining runs."
        }
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
    run_overhead = Number(
        validate=validate.Range(0, MAX_RUN_OVERHEAD, max_inclusive=True),
        metadata={
            "description": "Share of the wall-clock time whole runs lose beyond failures and checkpoints "
            "(evaluation, loss-spike restarts, slow nodes, data stalls, ramp-up); default "
            f"{DEFAULT_RUN_OVERHEAD}, fitted on published whole runs' GPU-hours (bench/RESULTS.md). 0: "
            "the steady state."
        },
    )
    preemptions_per_accelerator_hour = Number(
        validate=validate.Range(min=0, max=1, max_inclusive=False),
        metadata={
            "description": "On spot capacity: preemptions per accelerator-hour (an instance's rate over its "
            "accelerators), beside the hardware's failures; default 0. The checkpoint interval is chosen "
            "for both.",
            "exclusiveMaximum": True,
        },
    )
    requeue_seconds = Number(
        validate=validate.Range(0, 30 * 86_400),
        metadata={"description": "On spot capacity: how long a preempted job waits for capacity; default 0."},
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
    tensor_parallel_overlap = JsonBoolean(
        metadata={
            "description": "Tensor-parallel collectives pipelined with the GEMMs (Megatron-Core's "
            "--tp-comm-overlap, torchtitan's async TP); default what the framework does."
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
    framework = ma.fields.String(
        validate=validate.OneOf(tuple(FRAMEWORKS)),
        metadata={
            "description": "The training framework: the layout search stays inside what it can run "
            "(megatron-core: interleaving, context parallelism, ZeRO 0-1, TP overlap; megatron-lm: the same "
            "without overlap; deepspeed: ZeRO 0-3, no interleaving; fsdp: ZeRO 1-3; torchtitan: FSDP2, "
            "TP with async overlap, interleaving; maxtext: FSDP or plain data parallelism, TP with overlap, "
            "no pipeline; dualpipe: DeepSeek's expert overlap). Default generic: what they all run (no "
            "interleaving, no communication overlap beyond the data-parallel one)."
        },
    )
    recomputation = ma.fields.String(
        validate=validate.OneOf(RECOMPUTATION_MODES),
        metadata={"description": "Deprecated: use layout.recomputation.", "deprecated": True},
    )
    memory_headroom = Number(
        validate=validate.Range(0, MAX_MEMORY_HEADROOM),
        metadata={
            "description": "Share of each accelerator's memory a layout leaves free for what the model does "
            "not count (the CUDA context, NCCL's buffers, fragmentation); default "
            f"{DEFAULT_MEMORY_HEADROOM}: Megatron-style runs that published their layouts sit at or just "
            "above the model's count, so a reserve would refuse what ran. A layout given whole may exceed "
            "it (and the memory by up to 15%) with a does_not_fit_memory warning."
        },
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
            "model assumes one (and says so).",
            "example": {"d_model": 4096, "heads": 32, "layers": 32, "sequence_length": 4096},  # Llama 2 7B
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
    site = ma.fields.Nested(
        SiteSchema,
        metadata={
            "description": "Where the run draws its power: the estimate's energy takes its PUE, its "
            "emissions its grid's carbon intensity. Left out: PUE 1.2, and energy without emissions.",
            "example": {"region": "gcp:us-central1"},
        },
    )
    power_basis = power_basis_field()

    CLUSTER_OPTIONS = (
        "accelerators",
        "mfu",
        "precision",
        "zero_stage",
        "optimizer",
        "framework",
        "memory_headroom",
        "recomputation",
        "tensor_parallel",
        "sequence_parallel",
        "shape",
        "layout",
        "reliability",
        "site",
        "power_basis",
    )

    # The rules of a request that always names its hardware (a plan's); the schemas of requests with a
    # cluster add their own.
    RULES_WITH_HARDWARE: tuple[Rule, ...] = (requires("price_per_hour", "currency"),)
    RULES: tuple[Rule, ...] = (requires(CLUSTER_OPTIONS, "hardware"), *RULES_WITH_HARDWARE)
