"""How long a training step takes on a cluster, and how much memory it needs, under a parallel layout.

A step is built from the work it does, each part at the rate of the hardware that does it, plus a few
constants calibrated on published runs (`CALIBRATION`, fitted by `bench/calibrate_cluster.py`):

* matrix multiplies at the dense peak times an efficiency that falls for small matrices (Isaev et al. 2023,
  Calculon, model GEMM efficiency by size; here a GEMM of g FLOPs takes g / (peak · e) + τ, a fixed cost τ
  per kernel for its launch and its last partial wave, so its efficiency e · g / (g + τ · peak · e) halves
  at g = τ · peak · e);
* element-wise work (norms, residuals, dropout, activations, softmax) and the optimizer update as bytes moved
  at the HBM bandwidth times an achieved fraction;
* collectives at the link bandwidth times an achieved fraction, ring or tree (whichever is cheaper) with a
  per-hop latency: tensor-parallel all-reduces on the scale-up link, or the network when a group spans
  nodes (Narayanan et al. 2021, §3); pipeline point-to-point transfers; data-parallel and ZeRO traffic
  (Rajbhandari et al. 2020) partly hidden under the backward pass; context-parallel K/V exchange (Llama 3,
  Dubey et al. 2024, §3.3.2);
* the pipeline bubble (p - 1)/(v · m) of the ideal time (Narayanan et al. 2021, §2.2).

Every formula is written once over numpy arrays, so one call evaluates one layout or the thousands a layout
search enumerates (`evaluate`). Symbols, as in the papers: L layers, h width, a heads, s sequence length,
V vocabulary, b micro-batch, t tensor-, p pipeline-, d data-, c context-parallel degree, v interleaved
stages, m micro-batches per step.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from service.core import cluster
from service.core import validation as v
from service.core.cluster import ModelShape

Array = npt.NDArray[np.float64]
Flags = npt.NDArray[np.bool_]
Codes = npt.NDArray[np.int64]

# 1.1.0: mixture of experts (expert parallelism, its all-to-all), latent attention, multi-token prediction;
# in fp8, attention at the bf16 peak and GEMM inputs cached in fp8.
MODEL_VERSION = "1.1.0"
RECOMPUTATION_MODES = cluster.RECOMPUTATION_MODES  # none, selective, full: coded 0, 1, 2 in arrays
# Bytes of an activation, a gradient or a weight in transit: 16-bit training.
WIRE_BYTES = 2
# Bytes an Adam update reads and writes per locally held parameter (reference: "≈ 16 bytes per parameter").
OPTIMIZER_UPDATE_BYTES = 16
# Passes of element-wise work per layer in the forward pass, counted from the layer's operations (Korthikanti
# et al. 2022 §4.1 lists them): over b·s·h elements, two layer norms (read + write: 4), two residual adds
# (two reads, one write: 6), two dropouts (read, write, 1-byte mask: 5), biases fused: 15; over b·s·ffn, the
# activation function (read + write: 2, SwiGLU reads two inputs: 3); over the b·a·s² attention scores
# without FlashAttention, the fused scale-mask-softmax (2) and the dropout on the probabilities (2.5). The
# backward pass moves about twice the forward's bytes.
ELEMENTWISE_PASSES_WIDTH = 15.0
ELEMENTWISE_PASSES_SCORES = 4.5
BACKWARD_PER_FORWARD = 2.0
# Per-hop latency of a collective (NCCL's ring and tree latencies, order of magnitude: a few microseconds
# inside an NVLink domain, ~10 µs over InfiniBand/RoCE; NCCL tuning tables).
SCALE_UP_LATENCY_SECONDS = 3e-6
SCALE_OUT_LATENCY_SECONDS = 1e-5
# Share of an accelerator's streaming multiprocessors an overlapped expert all-to-all keeps busy: DeepSeek-V3
# §3.2.2 dedicates 20 of the H800's 132 SMs to it.
COMMUNICATION_SMS = 20 / 132


@dataclass(frozen=True)
class Calibration:
    """The constants the model cannot derive: fitted on published runs (`bench/calibrate_cluster.py`)."""

    matmul_efficiency: float  # large-GEMM fraction of the dense peak, for hardware without its own
    kernel_seconds: float  # fixed cost of a GEMM kernel besides its FLOPs: launch and the last partial wave
    memory_efficiency: float  # achieved fraction of the HBM bandwidth in element-wise kernels
    link_efficiency: float  # achieved fraction of a link's bandwidth in collectives (NCCL bus bandwidth)
    overlap: float  # fraction of data-parallel / ZeRO traffic hidden under the compute it overlaps
    # Large-GEMM efficiency per accelerator generation, where published runs calibrate one (by the
    # hardware slug's prefix).
    matmul_efficiency_by_hardware: tuple[tuple[str, float], ...] = ()

    def matmul_efficiency_for(self, hardware_slug: str | None) -> float:
        for prefix, efficiency in self.matmul_efficiency_by_hardware:
            if hardware_slug is not None and hardware_slug.startswith(prefix):
                return efficiency
        return self.matmul_efficiency

    def as_dict(self) -> dict[str, Any]:
        # Its fields are numbers but one, made a mapping here: dataclasses.asdict's deep copy of each cost a
        # plan more than the rest of its snapshot (issue 24).
        return {**vars(self), "matmul_efficiency_by_hardware": dict(self.matmul_efficiency_by_hardware)}


# Fitted by `python -m bench.calibrate_cluster` on the published runs in bench/published_runs.py.
CALIBRATION = Calibration(
    matmul_efficiency=0.751,
    kernel_seconds=2e-6,
    memory_efficiency=0.750,
    link_efficiency=0.715,
    overlap=1.0,
    # The H800 is the H100's chip with its NVLink cut: the same GEMMs.
    matmul_efficiency_by_hardware=(("a100", 0.751), ("h100", 0.609), ("h800", 0.609)),
)


@dataclass(frozen=True)
class Machine:
    """An accelerator as installed in a cluster: what the step-time model reads of it."""

    peak_flops_per_second: float
    memory_bytes: float
    memory_bandwidth_bytes_per_second: float
    accelerators_per_node: int
    scale_up_bytes_per_second: float
    scale_out_bytes_per_second: float
    slug: str | None = None
    # The dense peak attention runs at when it differs (training in fp8, attention stays in bf16: Transformer
    # Engine's recipes and DeepSeek-V3 §3.3 keep it out of fp8); None: the peak.
    attention_peak_flops_per_second: float | None = None

    def __post_init__(self) -> None:
        v.positive("peak_flops_per_second", self.peak_flops_per_second)
        v.positive("memory_bytes", self.memory_bytes, maximum=cluster.MAX_MEMORY_BYTES)
        v.positive("memory_bandwidth_bytes_per_second", self.memory_bandwidth_bytes_per_second)
        v.whole("accelerators_per_node", self.accelerators_per_node)
        v.positive("scale_up_bandwidth_bytes_per_second", self.scale_up_bytes_per_second)
        v.positive("scale_out_bandwidth_bytes_per_second", self.scale_out_bytes_per_second)


@dataclass(frozen=True)
class Layout:
    """How a run is spread over the cluster (Megatron-LM's and Llama 3's names)."""

    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    micro_batch: int
    global_batch: int  # sequences per step
    context_parallel: int = 1
    interleave: int = 1  # virtual pipeline stages per device
    sequence_parallel: bool = True
    recomputation: str = "none"
    zero_stage: int = 1
    flash_attention: bool = True
    # Ranks of the data-parallel group a mixture-of-experts layer's experts are spread over, and whether their
    # all-to-all runs under another micro-batch's compute (DeepSeek-V3's DualPipe) at the cost of the SMs
    # it takes.
    expert_parallel: int = 1
    expert_overlap: bool = False

    @property
    def accelerators(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel * self.context_parallel

    @property
    def micro_batches(self) -> int:
        """Micro-batches each pipeline runs per step: global batch ÷ (data-parallel degree · micro-batch)."""
        return self.global_batch // (self.data_parallel * self.micro_batch)


LAYOUT_FIELDS = tuple(field.name for field in fields(Layout))
# Layout fields that are counts, at least 1.
WHOLE_LAYOUT_FIELDS = (
    "tensor_parallel",
    "pipeline_parallel",
    "data_parallel",
    "context_parallel",
    "micro_batch",
    "global_batch",
    "interleave",
    "expert_parallel",
)
# The step's parts, in the order a breakdown lists them; they add up to the step time.
BREAKDOWN = (
    "compute",
    "memory_bound",
    "tensor_parallel",
    "context_parallel",
    "pipeline_bubble",
    "pipeline_transfers",
    "expert_parallel",
    "data_parallel",
    "optimizer",
)


@dataclass(frozen=True)
class Step:
    """One layout's step: its time, the parts it is made of, and memory on the busiest accelerator."""

    layout: Layout
    seconds: float
    breakdown: dict[str, float]
    memory_bytes: float
    model_states_bytes: float
    activations_bytes: float
    model_flops: float  # per step: (6N + 12·L·h·s) per token (PaLM's MFU accounting)
    hardware_flops: float  # per step, counting recomputation
    mfu: float
    hfu: float
    fits: bool

    def tokens_per_second_per_accelerator(self, sequence_length: int) -> float:
        return self.layout.global_batch * sequence_length / self.seconds / self.layout.accelerators


def check_layout(shape: ModelShape, layout: Layout, accelerators: int | None = None) -> None:
    """Refuse a layout that cannot run, naming the field: degrees that do not multiply to the accelerator
    count, a tensor-parallel degree that does not divide the heads, a pipeline deeper than the layers, a
    micro-batch that does not divide the batch of a replica (`check_fixed_fields`, every field fixed), and an
    interleaved schedule without a pipeline or with micro-batches in other than multiples of its stages."""
    fixed = {name: getattr(layout, name) for name in LAYOUT_FIELDS}
    count = layout.accelerators if accelerators is None else accelerators
    check_fixed_fields(shape, fixed, count, layout.global_batch)
    if layout.interleave > 1 and layout.pipeline_parallel == 1:
        raise v.InvalidInput("layout.interleave", "needs pipeline_parallel above 1")
    if layout.interleave > 1 and layout.micro_batches % layout.pipeline_parallel:
        raise v.InvalidInput(
            "layout.interleave",
            f"an interleaved schedule needs micro-batches ({layout.micro_batches}) in multiples of "
            f"pipeline_parallel ({layout.pipeline_parallel})",
        )


def _divisors_text(n: int) -> str:
    found = _divisors(n, 4096)
    shown = ", ".join(str(k) for k in found[:12])
    return shown + (", …" if len(found) > 12 else "")


def step(
    shape: ModelShape,
    machine: Machine,
    layout: Layout,
    *,
    precision: str = "bf16",
    optimizer: str = "adam",
    calibration: Calibration = CALIBRATION,
) -> Step:
    """The step of one layout (checked first)."""
    check_layout(shape, layout)
    columns = {name: np.array([getattr(layout, name)]) for name in LAYOUT_FIELDS if name != "recomputation"}
    columns["recomputation"] = np.array([RECOMPUTATION_MODES.index(layout.recomputation)])
    result = evaluate(
        shape, machine, columns, precision=precision, optimizer=optimizer, calibration=calibration
    )
    return _step_at(result, 0, layout)


def _step_at(result: dict[str, Array], i: int, layout: Layout) -> Step:
    return Step(
        layout=layout,
        seconds=float(result["seconds"][i]),
        breakdown={part: float(result[part][i]) for part in BREAKDOWN},
        memory_bytes=float(result["memory_bytes"][i]),
        model_states_bytes=float(result["model_states_bytes"][i]),
        activations_bytes=float(result["activations_bytes"][i]),
        model_flops=float(result["model_flops"][i]),
        hardware_flops=float(result["hardware_flops"][i]),
        mfu=float(result["mfu"][i]),
        hfu=float(result["hfu"][i]),
        fits=bool(result["fits"][i]),
    )


def evaluate(  # noqa: PLR0915 -- one step written out part by part, each with its source
    shape: ModelShape,
    machine: Machine,
    columns: dict[str, Any],
    *,
    precision: str = "bf16",
    optimizer: str = "adam",
    calibration: Calibration = CALIBRATION,
) -> dict[str, Array]:
    """Step time, its parts and memory for many layouts at once: `columns` holds one array per `Layout`
    field (recomputation coded 0 none, 1 selective, 2 full), the layouts already checked."""
    f64 = np.float64
    t = np.asarray(columns["tensor_parallel"], dtype=f64)
    p = np.asarray(columns["pipeline_parallel"], dtype=f64)
    d = np.asarray(columns["data_parallel"], dtype=f64)
    c = np.asarray(columns["context_parallel"], dtype=f64)
    b = np.asarray(columns["micro_batch"], dtype=f64)
    B = np.asarray(columns["global_batch"], dtype=f64)
    vi = np.asarray(columns["interleave"], dtype=f64)
    sp = np.asarray(columns["sequence_parallel"], dtype=bool) & (t > 1)
    rec = np.asarray(columns["recomputation"], dtype=np.int64)
    zero = np.asarray(columns["zero_stage"], dtype=np.int64)
    flash = np.asarray(columns["flash_attention"], dtype=bool)
    e = np.asarray(columns["expert_parallel"], dtype=f64)
    # 1 overlapped, 0 not, -1 whichever is faster (what the search asks, rather than twice the layouts).
    overlap_code = np.asarray(columns["expert_overlap"], dtype=np.int64)

    L, h, a = float(shape.layers), float(shape.d_model), float(shape.heads)
    s, f, V = float(shape.sequence_length), float(shape.ffn_width), float(shape.vocabulary or 0)
    d_qk, d_v = float(shape.query_key_width), float(shape.head_width)
    kv_width = float(shape.key_value_heads * shape.head_width)  # of K and of V (grouped-query attention)
    gated = shape.activation == "swiglu"
    # Mixture of experts: the share of layers whose MLP is routed, the experts a token's rows go through on
    # the busiest rank (top-k times the capacity factor) and the shared ones, each expert's width.
    moe, routed, f_e = shape.moe_share, shape.routed_rows, float(shape.expert_width)
    shared = float(shape.shared_experts or 0)
    E = float(shape.experts or 1)
    mtp = float(shape.mtp_depth or 0)
    # A dense shape (no routed layers) and one without prediction modules skip the terms that are then zero.
    # Leaving them out changes no bit: 0·x is +0 for finite x, x + 0 and 1·x are x, and every part of a
    # step is finite and at least 0.
    experts = moe > 0
    m = np.floor(B / (d * b))
    sc = s / c  # tokens of a sequence on one context-parallel rank
    tokens = b * sc  # rows of every GEMM on one device
    # Subexpressions several formulas share, computed once (a search evaluates thousands of layouts, and
    # each array operation costs about a microsecond whatever its size): the same operations in the same
    # order, so the same bits. 2·x is exact, so (2·b)·sc is 2·(b·sc).
    two_tokens = 2 * tokens
    two_tokens_h = two_tokens * h
    full = rec == 2
    selective = rec == 1
    staged = p > 1
    sp_split = np.where(sp, t, 1.0)
    tc = t * c
    tcp = tc * p

    peak = machine.peak_flops_per_second
    e_max = calibration.matmul_efficiency_for(machine.slug)
    kernel = calibration.kernel_seconds
    hbm = machine.memory_bandwidth_bytes_per_second * calibration.memory_efficiency
    node = float(machine.accelerators_per_node)
    up = machine.scale_up_bytes_per_second * calibration.link_efficiency
    out = machine.scale_out_bytes_per_second * calibration.link_efficiency

    def gemm_seconds(flops: Array, at: float = peak) -> Array:
        return flops / (at * e_max) + kernel

    attention_peak = machine.attention_peak_flops_per_second or peak

    # Forward GEMMs of one layer on one device (each split t ways): QKV (grouped K and V, or latent
    # attention's down- and up-projections), output projection, the MLP's up (gate and up for SwiGLU) and
    # down projections, and the attention scores and values over the local queries and all keys (the full
    # matrix: Megatron's kernels compute it; FlashAttention skips the causal half but runs at about half a
    # GEMM's efficiency, Dao 2023, so the two are taken to cancel).
    output_params = shape.output_projection_params
    qkv = two_tokens * (shape.attention_params - output_params) / t
    projection = two_tokens * output_params / t
    mlp_flops = two_tokens_h * f
    up_projection = (mlp_flops * 2 if gated else mlp_flops) / t  # (·1 is exact)
    down_projection = mlp_flops / t
    attention_flops = two_tokens * s * a
    scores = attention_flops * d_qk / t
    values = attention_flops * d_v / t
    dense_mlp_seconds = gemm_seconds(up_projection) + gemm_seconds(down_projection)
    attention_seconds = gemm_seconds(scores, attention_peak) + gemm_seconds(values, attention_peak)
    if experts:
        # A mixture-of-experts MLP: the router's logits (d·E per token), the shared experts as dense GEMMs,
        # and the routed rows on this rank's E/e experts, each expert a GEMM of its own (its fixed cost each
        # time).
        expert_flops = two_tokens_h * f_e * shape.mlp_matrices / t
        local_experts = E / e
        router = two_tokens_h * E
        moe_mlp_seconds = gemm_seconds(router) + (
            2 * kernel + shared * expert_flops / (peak * e_max) if shared > 0 else 0.0
        )
        moe_mlp_seconds = (
            moe_mlp_seconds + routed * expert_flops / (peak * e_max) + 2 * local_experts * kernel
        )
        mlp_seconds = (1 - moe) * dense_mlp_seconds + moe * moe_mlp_seconds
    else:
        mlp_seconds = dense_mlp_seconds
    forward_gemm = gemm_seconds(qkv) + gemm_seconds(projection) + attention_seconds + mlp_seconds

    # Element-wise bytes of one layer's forward pass on one device (ELEMENTWISE_PASSES_*): width-sized work
    # is split by sequence parallelism, the MLP's by the tensor-parallel split, the scores only exist without
    # FlashAttention.
    width_elements = tokens * h / sp_split
    # A routed MLP's activation runs over every row an expert takes; its rows are permuted into expert order
    # and back, and the router's softmax and top-k read its logits (about four passes over each).
    ffn_elements = tokens * ((1 - moe) * f + moe * (routed + shared) * f_e) / t
    permute_elements = moe * tokens * (routed * h / t + E) if experts else 0.0
    score_elements = 0.0 if flash.all() else np.where(flash, 0.0, b * (a / t) * sc * s)
    forward_bytes = WIRE_BYTES * (
        ELEMENTWISE_PASSES_WIDTH * width_elements
        + (3.0 if gated else 2.0) * ffn_elements
        + 4.0 * permute_elements
        + ELEMENTWISE_PASSES_SCORES * score_elements
    )
    forward_memory_bound = forward_bytes / hbm

    # Tensor-parallel collectives (Megatron, Narayanan et al. 2021 §2.3): two all-reduces of b·s·h in the
    # forward pass and two in the backward (with sequence parallelism a reduce-scatter and an all-gather of
    # the same bytes, and the backward gathers the inputs of the two column-parallel GEMMs again rather than
    # keep them, Korthikanti et al. 2022 §4.2.2: one all-reduce's bytes more), two more when full
    # recomputation repeats the forward. Inside a node they run on the scale-up link; a group wider than a
    # node runs at the network's speed.
    tp_in_node = t <= node
    tp_link = np.where(tp_in_node, up, out)
    tp_latency = np.where(tp_in_node, SCALE_UP_LATENCY_SECONDS, SCALE_OUT_LATENCY_SECONDS)
    message = WIRE_BYTES * tokens * h  # bytes of a layer's activations on the wire
    tp_one = _all_reduce_seconds(message, t, tp_link, tp_latency)
    tp_collectives = 4.0 + 1.0 * sp + 2.0 * full

    # Context parallelism (Llama 3 §3.3.2): each rank all-gathers the K and V of the other c - 1 chunks in
    # the forward pass and reduce-scatters their gradients in the backward; not overlapped.
    cp_link = np.where(tc <= node, up, out)
    kv_bytes = WIRE_BYTES * 2 * tokens * kv_width / t
    cp_layer = np.where(c > 1, 2 * (c - 1) * kv_bytes / cp_link, 0.0)

    # Expert parallelism (GShard, Lepikhin et al. 2020; DeepSeek-V3 §3.2.2): each mixture-of-experts layer
    # sends every token's hidden state to the ranks of its top-k experts (dispatch) and brings the outputs
    # back (combine), in the forward pass and again, as gradients, in the backward: four all-to-alls (six
    # with full recomputation). The e ranks of a group sit t·c apart, so e·t·c <= node keeps it on the
    # scale-up link; a wider group sends to the other nodes over the network, each token once per node its
    # experts are on (DeepSeek-V3's dispatch: E[nodes] = n·(1 - (1 - 1/n)^k) for k experts spread over n
    # nodes), forwarding inside the node. Dispatch travels in fp8 when training in fp8 (DeepSeek-V3 §3.3.2).
    # The busiest rank takes capacity_factor times the mean.
    if experts:
        k = float(shape.experts_per_token or 0)
        per_node = np.maximum(1.0, np.minimum(e, node / tc))
        nodes = np.ceil(e / per_node)
        remote_nodes = np.where(
            nodes > 1, nodes * (1 - (1 - 1 / nodes) ** k) * (nodes - 1) / nodes, 0.0
        ) * float(shape.capacity_factor or 1.0)
        local_copies = routed * (per_node - 1) / e
        hidden = tokens * h / t
        dispatch_bytes = 1.0 if precision == "fp8" else float(WIRE_BYTES)
        a2a_bytes = hidden * (dispatch_bytes + WIRE_BYTES)  # a dispatch and a combine
        a2a_pass = np.maximum(a2a_bytes * remote_nodes / out, a2a_bytes * (local_copies + remote_nodes) / up)
        a2a_latency = np.where(nodes > 1, SCALE_OUT_LATENCY_SECONDS, SCALE_UP_LATENCY_SECONDS)
        a2a_layer: Array | float = np.where(
            (e > 1) & (moe > 0),
            moe * (a2a_pass + 2 * a2a_latency) * (2.0 + full),
            0.0,
        )
    else:
        a2a_layer = 0.0

    # One layer, forward + backward (+ recomputation): selective recomputation repeats the attention scores
    # and their element-wise work (Korthikanti et al. 2022 §5), full repeats the whole forward.
    compute_layer = forward_gemm * (1 + BACKWARD_PER_FORWARD) + np.where(
        full, forward_gemm, np.where(selective, attention_seconds, 0.0)
    )
    if experts:
        # Overlapped, the all-to-all of one micro-batch runs under the compute of another (DualPipe pairs
        # a forward with a backward chunk, DeepSeek-V3 §3.2.1), with COMMUNICATION_SMS of the SMs taken
        # from the GEMMs; what the compute does not cover stays exposed.
        overlapped_compute = compute_layer / (1 - COMMUNICATION_SMS)
        overlapped_exposed = np.maximum(0.0, a2a_layer - overlapped_compute)
        faster = overlapped_compute + overlapped_exposed < compute_layer + a2a_layer
        overlap_experts = (e > 1) & (moe > 0) & np.where(overlap_code < 0, faster, overlap_code == 1)
        compute_layer = np.where(overlap_experts, overlapped_compute, compute_layer)
        ep_layer: Array | float = np.where(overlap_experts, overlapped_exposed, a2a_layer)
    else:
        overlap_experts = np.zeros(compute_layer.shape, dtype=bool)
        ep_layer = 0.0
    score_bytes = WIRE_BYTES * ELEMENTWISE_PASSES_SCORES * score_elements
    memory_layer = forward_memory_bound * (1 + BACKWARD_PER_FORWARD) + np.where(
        full, forward_memory_bound, np.where(selective, score_bytes / hbm, 0.0)
    )
    tp_layer = tp_collectives * tp_one
    layer_seconds = compute_layer + memory_layer + tp_layer + cp_layer + ep_layer

    # The output layer, on the last stage: the logits GEMM forward and backward, and the loss's element-wise
    # work over fp32 logits (written, read by the loss, its gradient written). Multi-token prediction
    # (DeepSeek-V3 §2.2) puts its modules there too (DeepSeek-V3 §3.2.3: beside the output layer they share),
    # each a layer, a 2h → h projection and the output layer once more.
    logits = two_tokens_h * V / t
    heads_run = 1.0 + mtp
    logits_compute = heads_run * gemm_seconds(logits) * (1 + BACKWARD_PER_FORWARD) if V > 0 else 0.0
    if mtp > 0:
        mtp_projection = 2 * tokens * 2 * h * h / t
        logits_compute = logits_compute + mtp * gemm_seconds(mtp_projection) * (1 + BACKWARD_PER_FORWARD)
    logits_memory = heads_run * 3 * 4.0 * tokens * V / t / hbm

    # The busiest stage sets the pipeline's pace. When p does not divide L the spare layer slots come off
    # the first and last stages, as Llama 3 did (§3.3.2: one layer fewer on each), the last also carrying
    # the output layer; a single stage holds everything.
    per_stage = np.ceil(L / p)
    spare = per_stage * p - L
    # (At least one layer each: with many spare slots, 75 layers on 34 stages say, the middle ones give
    # theirs up too.)
    first_layers = np.where(staged, np.maximum(1.0, per_stage - np.ceil(spare / 2)), L)
    last_layers = np.where(staged, np.maximum(1.0, per_stage - np.floor(spare / 2)), L) + mtp
    last_is_busiest = (
        last_layers * layer_seconds + logits_compute + logits_memory >= per_stage * layer_seconds
    )
    busy_layers = np.where(last_is_busiest, last_layers, per_stage)
    with_output = np.where(last_is_busiest, 1.0, 0.0)
    stage_compute = busy_layers * compute_layer + with_output * logits_compute
    stage_memory = busy_layers * memory_layer + with_output * logits_memory
    stage_seconds = stage_compute + stage_memory + busy_layers * (tp_layer + cp_layer + ep_layer)

    # Pipeline transfers: each micro-batch sends b·s·h forward and its gradient back across each stage
    # boundary, v times with interleaving; divided t ways by Megatron's scatter/gather optimisation (§4.1).
    inside = tcp <= node
    pp_link = np.where(inside, up, out)
    pp_latency = np.where(inside, SCALE_UP_LATENCY_SECONDS, SCALE_OUT_LATENCY_SECONDS)
    boundary = message / t
    transfer = np.where(staged, 2 * vi * (boundary / pp_link + pp_latency), 0.0)
    bubble = (p - 1) / vi * stage_seconds

    # Data parallelism and ZeRO (Rajbhandari et al. 2020): the gradients of the parameters a device holds.
    # Stages 0-2 reduce them once a step (an all-reduce, or reduce-scatter + all-gather: the same bytes),
    # hidden under the last micro-batch's backward pass up to `overlap`; stage 3 also gathers the parameters
    # for every micro-batch's forward and backward (1.5x the traffic, per micro-batch), hidden under that
    # micro-batch's compute. The first stage holds the input embedding, the last the output layer. A rank
    # holds E/e of a mixture-of-experts layer's routed experts, whose gradients it reduces over the d/e ranks
    # that hold the same ones (DeepSeek-V3 §3.2: ZeRO-1 over the expert's data-parallel group).
    routed_params = moe * E * shape.expert_params  # per layer, on average
    dense_params = shape.layer_params - routed_params
    held_dense = (per_stage * dense_params + np.where(staged, 0.5, 1.0) * shape.embedding_params) / t
    inside = tcp * d <= node
    dp_link = np.where(inside, up, out)
    dp_latency = np.where(inside, SCALE_UP_LATENCY_SECONDS, SCALE_OUT_LATENCY_SECONDS)
    reduce_once = _all_reduce_seconds(WIRE_BYTES * held_dense, d, dp_link, dp_latency)
    if experts:
        held_experts = per_stage * routed_params / (e * t)
        held = held_dense + held_experts
        expert_reduce = _all_reduce_seconds(WIRE_BYTES * held_experts, d / e, dp_link, dp_latency)
        reduce_once = reduce_once + np.where(held_experts > 0, expert_reduce, 0.0)
    else:
        held = held_dense
    backward_window = stage_seconds * BACKWARD_PER_FORWARD / (1 + BACKWARD_PER_FORWARD)
    exposed_once = reduce_once - calibration.overlap * np.minimum(reduce_once, backward_window)
    gathers = 1.5 * reduce_once
    exposed_gathers = m * (gathers - calibration.overlap * np.minimum(gathers, stage_seconds))
    data_parallel = np.where(zero == 3, exposed_gathers, exposed_once)

    # The optimizer update reads and writes the state of the parameters a device updates.
    sharding = zero >= 1
    updated = held_dense / np.where(sharding, d, 1.0)
    if experts:
        updated = updated + held_experts / np.where(sharding, d / e, 1.0)
    optimizer_seconds = OPTIMIZER_UPDATE_BYTES * updated / hbm

    breakdown = {
        "compute": m * stage_compute,
        "memory_bound": m * stage_memory,
        "tensor_parallel": m * busy_layers * tp_layer,
        "context_parallel": m * busy_layers * cp_layer,
        "pipeline_bubble": bubble,
        "pipeline_transfers": m * transfer,
        "expert_parallel": m * busy_layers * ep_layer,
        "data_parallel": data_parallel,
        "optimizer": optimizer_seconds,
    }
    seconds = sum(breakdown.values())

    # MFU counts model FLOPs, (6N + 12·L·h·s) per token with N the weights a token passes through in the
    # layers and the output layer (PaLM, Chowdhery et al. 2022, App. B; the active ones of a mixture of
    # experts, and the multi-token prediction modules'), h·2 the attention width a·(d_qk + d_v); HFU counts
    # what ran, recomputation included.
    devices = tcp * d  # whole numbers, so in any order the same
    active = shape.non_embedding_active_params + shape.embedding_params / 2 + shape.mtp_active_params
    attention_width = 2 * shape.attention_width
    model_flops = (6 * active + 6 * (L + mtp) * attention_width * s) * B * s
    mlp_forward = up_projection + down_projection
    if experts:
        mlp_forward = (1 - moe) * mlp_forward + moe * ((routed + shared) * expert_flops + router)
    layer_forward = t * (qkv + projection + scores + values + mlp_forward)
    layer_ran = layer_forward * (1 + BACKWARD_PER_FORWARD) + np.where(
        full, layer_forward, np.where(selective, t * (scores + values), 0.0)
    )
    head_forward = heads_run * logits
    if mtp > 0:
        head_forward = head_forward + mtp * mtp_projection
    head_forward = t * head_forward
    hardware_flops = ((L + mtp) * layer_ran + 3 * head_forward) * m * d * c
    memory = _memory(
        shape,
        t=t,
        p=p,
        d=d,
        c=c,
        b=b,
        m=m,
        vi=vi,
        sp_split=sp_split,
        rec=rec,
        full=full,
        staged=staged,
        zero=zero,
        flash=flash,
        first_layers=first_layers,
        held=held,
        sharded=held_dense / d + held_experts / (d / e) if experts else held_dense / d,
        precision=precision,
        optimizer=optimizer,
    )
    return {
        "seconds": seconds,
        **breakdown,
        "model_flops": model_flops * np.ones_like(seconds),
        "hardware_flops": hardware_flops,
        "mfu": model_flops / (seconds * devices * peak),
        "hfu": hardware_flops / (seconds * devices * peak),
        **memory,
        "fits": memory["memory_bytes"] <= machine.memory_bytes,
        "expert_overlap": overlap_experts,
    }


def _all_reduce_seconds(message: Array, n: Array, bandwidth: Array, latency: Array) -> Array:
    """All-reduce of `message` bytes over n ranks: the cheaper of a ring (2(n - 1)/n of the bytes per rank,
    2(n - 1) latency hops) and a double binary tree (the bytes twice, 2·log2 n hops); NCCL picks the same
    way (Sanders et al. 2009; NCCL's tuning model)."""
    ring = 2 * (n - 1) / n * message / bandwidth + 2 * (n - 1) * latency
    tree = 2 * message / bandwidth + 2 * np.log2(np.maximum(n, 1)) * latency
    return np.where(n > 1, np.minimum(ring, tree), 0.0)


def _memory(
    shape: ModelShape,
    *,
    t: Array,
    p: Array,
    d: Array,
    c: Array,
    b: Array,
    m: Array,
    vi: Array,
    sp_split: Array,
    rec: Codes,
    full: Flags,
    staged: Flags,
    zero: Codes,
    flash: Flags,
    first_layers: Array,
    held: Array,
    sharded: Array,
    precision: str,
    optimizer: str,
) -> dict[str, Array]:
    """Memory of the first pipeline stage, the fullest under 1F1B (Korthikanti et al. 2022 §4.2.3).

    Model states: ZeRO's (w + g + K)·Ψ split by stage (Rajbhandari et al. 2020 §5), Ψ the parameters held.
    Activations per layer (Korthikanti et al. 2022 Table 2, generalised to grouped K/V and any MLP): inside
    the tensor-parallel blocks, Q, K, V and the output projection's input, (4 + 4·kv/a)·s·b·h, and the MLP's
    (4 or, with SwiGLU, 6)·s·b·ffn; outside them, the norms' and blocks' inputs and the dropout masks,
    10·s·b·h, split only by sequence parallelism. Without FlashAttention the scores add 5·a·s²·b (Table 2's
    5as/h term), which selective recomputation drops; full recomputation keeps 2·s·b·h per layer plus one
    layer's working set. The first stage holds min(p, m) micro-batches in flight, times 1 + (p - 1)/(p·v)
    with an interleaved schedule.
    """
    split = np.array(cluster.zero_split(*cluster.state_bytes(precision, optimizer)), dtype=np.float64)
    states = split[zero, 0] * held + split[zero, 1] * sharded
    h, a, s = float(shape.d_model), float(shape.heads), float(shape.sequence_length)
    sc = s / c
    sbh = sc * b * h
    # Q, K, V and the output projection's input, at 2 bytes each (4 + 4·kv/a of s·b·h in a plain
    # transformer); latent attention also keeps its latents.
    qk, hv = float(shape.query_key_width), float(shape.head_width)
    kv = float(shape.key_value_heads)
    attention_widths = (
        a * qk + a * qk + a * hv + a * hv + (shape.q_lora_rank or 0) + (shape.kv_lora_rank or 0)
        if shape.latent_attention
        else a * qk + 2 * kv * hv + a * hv
    )
    # Training in fp8, the inputs the backward pass of a GEMM needs are kept in fp8 (Transformer Engine;
    # DeepSeek-V3 §3.3.3): the output projection's and the down-projection's at 1 byte instead of 2.
    cached = 1.0 if precision == "fp8" else 2.0
    inside_blocks = (2.0 * (attention_widths - a * hv) + cached * a * hv) / h
    mlp_ffn = (4.0 if shape.activation == "swiglu" else 2.0) + cached
    # A routed MLP keeps the activations of every row it runs (top-k times the capacity factor, and the
    # shared experts'), the dispatched inputs and combined outputs (k·h each) and fp32 router logits.
    moe, routed, f_e = shape.moe_share, shape.routed_rows, float(shape.expert_width)
    expert_rows = routed + float(shape.shared_experts or 0)
    mlp_bytes = (1 - moe) * shape.ffn_width * mlp_ffn + moe * (
        expert_rows * f_e * mlp_ffn + (2.0 + cached) * routed * h + 4.0 * float(shape.experts or 0)
    )
    per_layer = sbh * (10.0 / sp_split + inside_blocks / t) + sc * b * mlp_bytes / t
    # (With FlashAttention everywhere, as a search has unless told otherwise, the scores' term is 0 and
    # adding it would change nothing.)
    working = (
        per_layer if flash.all() else per_layer + np.where(flash | (rec >= 1), 0.0, 5.0 * a * sc * s * b / t)
    )
    stored = np.where(full, 2.0 * sbh / sp_split, working)
    in_flight = np.minimum(p, m) * np.where(vi > 1, 1 + (p - 1) / (p * vi), 1.0)
    activations = first_layers * stored * in_flight + np.where(full, working, 0.0)
    vocab = float(shape.vocabulary or 0)
    logits = np.where(staged, 0.0, 4.0 * sc * b * vocab / t)  # fp32 logits, on the only stage
    activations = activations + logits
    return {
        "memory_bytes": states + activations,
        "model_states_bytes": states,
        "activations_bytes": activations,
    }


# --- layout search ------------------------------------------------------------------------------------------

# What the search tries for the fields a request leaves out.
MICRO_BATCHES = (1, 2, 4, 8, 16)
INTERLEAVES = (1, 2, 4, 8)
# Layouts returned beside the best: the fastest of each other tensor/pipeline split.
ALTERNATIVES = 4
# Searches remembered per process (least recently used out): a search is a pure function of its arguments
# and the costliest part of a plan, and orchestrators send the same run again and again (retries, a plan and
# then its estimate, one run planned for several budgets). A Search is about 5 KB.
SEARCHES_REMEMBERED = 1024


@dataclass(frozen=True)
class Search:
    """The best layout for a run, a few alternatives, and how many layouts were looked at."""

    best: Step
    alternatives: tuple[Step, ...]
    evaluated: int
    fitting: int


def _tensor_degrees(shape: ModelShape, machine: Machine) -> list[int]:
    """Tensor-parallel degrees Megatron can use: divisors of the node that divide the heads and K/V heads."""
    node = machine.accelerators_per_node
    return [
        t
        for t in range(1, node + 1)
        if node % t == 0 and shape.heads % t == 0 and shape.key_value_heads % t == 0
    ]


def search(
    shape: ModelShape,
    machine: Machine,
    accelerators: int,
    *,
    global_batch: int,
    fixed: dict[str, Any] | None = None,
    precision: str = "bf16",
    optimizer: str = "adam",
    calibration: Calibration = CALIBRATION,
) -> Search:
    """Every layout of `accelerators` for the fields not in `fixed`, the ones that do not fit memory
    dropped, ranked by step time (ties: less memory).

    Tensor parallelism runs over the divisors of a node that divide the heads and K/V heads, the pipeline
    over the divisors of what is left up to the layer count, data parallelism takes the rest; then the
    micro-batch, interleaving, recomputation and ZeRO stage. `global_batch` (sequences) is kept when it is
    fixed; otherwise it is rounded up to a multiple of the data-parallel degree. Sequence parallelism and
    FlashAttention are on unless fixed off; context parallelism is 1 unless fixed. Raises InvalidInput on
    `layout` when nothing fits, saying what comes closest.
    """
    return _search(
        shape,
        machine,
        v.whole("accelerators", accelerators),
        global_batch=global_batch,
        fixed_fields=tuple(sorted((fixed or {}).items())),  # hashable, in one order
        precision=precision,
        optimizer=optimizer,
        calibration=calibration,
    )


@functools.lru_cache(maxsize=SEARCHES_REMEMBERED)
def _search(
    shape: ModelShape,
    machine: Machine,
    count: int,
    *,
    global_batch: int,
    fixed_fields: tuple[tuple[str, Any], ...],
    precision: str,
    optimizer: str,
    calibration: Calibration,
) -> Search:
    """`search`, remembered: its result is shared by every caller that asks the same, and never changed."""
    fixed = dict(fixed_fields)
    check_fixed_fields(shape, fixed, count, global_batch)
    c = int(fixed.get("context_parallel", 1))
    rows = _splits(shape, machine, count, fixed, int(fixed.get("global_batch", global_batch)))
    if not rows:
        raise v.InvalidInput("layout", _no_layout_text(shape, machine, count, fixed))

    def options(name: str, default: list[Any]) -> list[Any]:
        return [fixed[name]] if name in fixed else default

    # Expert parallelism over the divisors of the data-parallel degree that divide the experts: 1 for a
    # dense shape, the only degree it may have (check_model_fields).
    if shape.mixture_of_experts:
        degrees: dict[int, list[int]] = {}  # by data-parallel degree
        for row in rows:
            if row[2] not in degrees:
                degrees[row[2]] = options("expert_parallel", _expert_degrees(shape, row[2]))
        rows = [(*row, e) for row in rows for e in degrees[row[2]] if row[2] % e == 0]
        if not rows:
            raise v.InvalidInput("layout", _no_layout_text(shape, machine, count, fixed))
    else:
        rows = [(*row, 1) for row in rows]
    base = np.array(rows, dtype=np.int64)
    modes = options("recomputation", list(RECOMPUTATION_MODES))
    stages = options("zero_stage", list(cluster.ZERO_STAGES))
    overlap = int(fixed["expert_overlap"]) if "expert_overlap" in fixed else -1  # -1: the faster
    extra = np.array(
        [(RECOMPUTATION_MODES.index(mode), stage) for mode in modes for stage in stages], dtype=np.int64
    )
    grid = np.repeat(base, len(extra), axis=0)
    extras = np.tile(extra, (len(base), 1))
    columns: dict[str, Any] = {
        "tensor_parallel": grid[:, 0],
        "pipeline_parallel": grid[:, 1],
        "data_parallel": grid[:, 2],
        "micro_batch": grid[:, 3],
        "global_batch": grid[:, 4],
        "interleave": grid[:, 5],
        "expert_parallel": grid[:, 6],
        "context_parallel": np.full(len(grid), c),
        "sequence_parallel": np.full(len(grid), bool(fixed.get("sequence_parallel", True))),
        "recomputation": extras[:, 0],
        "zero_stage": extras[:, 1],
        "flash_attention": np.full(len(grid), bool(fixed.get("flash_attention", True))),
        "expert_overlap": np.full(len(grid), overlap),
    }
    result = _evaluate_in_blocks(
        shape, machine, columns, precision=precision, optimizer=optimizer, calibration=calibration
    )
    columns["expert_overlap"] = result["expert_overlap"]  # as chosen where the request left it open
    fits = np.flatnonzero(result["fits"])
    if fits.size == 0:
        closest = int(np.argmin(result["memory_bytes"]))
        layout = _layout_at(columns, closest)
        raise v.InvalidInput(
            "layout",
            f"no layout of {count} accelerators fits {machine.memory_bytes / 1e9:.0f} GB: the least memory "
            f"needed is {result['memory_bytes'][closest] / 1e9:.1f} GB ({_describe(layout)}); "
            + _what_would_fit(
                result["model_states_bytes"][closest], result["activations_bytes"][closest], machine
            ),
        )
    order = fits[np.lexsort((result["memory_bytes"][fits], result["seconds"][fits]))]
    best_index = int(order[0])
    alternatives: list[int] = []
    seen = {_family(columns, best_index)}
    for index in order[1:]:
        family = _family(columns, int(index))
        if family not in seen:
            seen.add(family)
            alternatives.append(int(index))
        if len(alternatives) == ALTERNATIVES:
            break
    return Search(
        best=_step_at(result, best_index, _layout_at(columns, best_index)),
        alternatives=tuple(_step_at(result, i, _layout_at(columns, i)) for i in alternatives),
        evaluated=len(grid),
        fitting=int(fits.size),
    )


# Layouts evaluated at once. Past about 2 800 (arrays of 23 KB) an evaluation took three times as long per
# layout on a 2-core AMD EPYC with 1 MB of L2 a core (a glibc heap; 0.46 ms at 2 800 layouts, 1.4 ms at
# 2 900): its temporaries no longer stay in cache. A search of more is evaluated in blocks, which changes no
# value (every formula is element by element).
EVALUATE_BLOCK = 2048


def _evaluate_in_blocks(
    shape: ModelShape, machine: Machine, columns: dict[str, Any], **options: Any
) -> dict[str, Array]:
    """`evaluate` over `columns`, in blocks of at most EVALUATE_BLOCK layouts."""
    size = len(columns["tensor_parallel"])
    if size <= EVALUATE_BLOCK:
        return evaluate(shape, machine, columns, **options)
    blocks = -(-size // EVALUATE_BLOCK)
    bounds = [size * i // blocks for i in range(blocks + 1)]  # equal blocks
    parts = [
        evaluate(shape, machine, {name: column[start:end] for name, column in columns.items()}, **options)
        for start, end in itertools.pairwise(bounds)
    ]
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def check_fixed_fields(
    shape: ModelShape, fixed: dict[str, Any], accelerators: int, global_batch: int
) -> None:
    """Refuse fixed layout fields no layout of `accelerators` can have, naming the field and what would do:
    the rules of `check_layout`, applied to the fields given."""
    check_model_fields(shape, fixed)
    degrees = ("tensor_parallel", "pipeline_parallel", "data_parallel", "context_parallel")
    ep = fixed.get("expert_parallel", 1)
    if "data_parallel" in fixed and fixed["data_parallel"] % ep:
        raise v.InvalidInput(
            "layout.expert_parallel",
            f"must divide data_parallel ({fixed['data_parallel']}): experts are spread over data-parallel "
            f"ranks, got {ep}",
        )
    t = fixed.get("tensor_parallel")
    if t is not None and (shape.heads % t or shape.key_value_heads % t):
        raise v.InvalidInput(
            "layout.tensor_parallel",
            f"must divide the heads ({shape.heads}) and the key/value heads ({shape.key_value_heads}); "
            f"{_divisors_text(math.gcd(shape.heads, shape.key_value_heads))} would, got {t}",
        )
    p = fixed.get("pipeline_parallel")
    if p is not None and p > shape.layers:
        raise v.InvalidInput(
            "layout.pipeline_parallel", f"cannot exceed the layers ({shape.layers}), got {p}"
        )
    product = math.prod(fixed.get(name, 1) for name in degrees)
    given = [name for name in degrees if name in fixed]
    if accelerators % product or (len(given) == len(degrees) and product != accelerators):
        raise v.InvalidInput(
            f"layout.{given[0]}" if len(given) == 1 else "layout",
            f"{' · '.join(given)} = {product} must {'equal' if len(given) == len(degrees) else 'divide'} "
            f"the accelerators ({accelerators})",
        )
    c = fixed.get("context_parallel", 1)
    if shape.sequence_length % c:
        raise v.InvalidInput(
            "layout.context_parallel",
            f"must divide the sequence length ({shape.sequence_length}), got {c}",
        )
    if "recomputation" in fixed and fixed["recomputation"] not in RECOMPUTATION_MODES:
        raise v.InvalidInput("layout.recomputation", f"must be one of {', '.join(RECOMPUTATION_MODES)}")
    if "zero_stage" in fixed and fixed["zero_stage"] not in cluster.ZERO_STAGES:
        raise v.InvalidInput("layout.zero_stage", "must be 0, 1, 2 or 3")
    d = fixed.get("data_parallel")
    batch = fixed.get("global_batch")
    if d is not None and batch is not None and batch % d:
        raise v.InvalidInput("layout.global_batch", f"must be a multiple of data_parallel ({d}), got {batch}")
    b = fixed.get("micro_batch")
    if b is not None and d is not None:
        replica = (batch if batch is not None else -(-global_batch // d) * d) // d
        if replica % b:
            raise v.InvalidInput(
                "layout.micro_batch",
                f"must divide the batch of a replica ({replica} sequences); {_divisors_text(replica)} "
                f"would, got {b}",
            )
    vi = fixed.get("interleave")
    if vi is not None and p is not None and vi > -(-shape.layers // p):
        raise v.InvalidInput(
            "layout.interleave",
            f"must not exceed the layers per stage ({-(-shape.layers // p)} with {p} stages), got {vi}",
        )


def check_model_fields(shape: ModelShape, fixed: dict[str, Any]) -> None:
    """Refuse fixed layout fields the model cannot have at any accelerator count, naming the field: unknown
    ones, and expert parallelism that a dense model does not have or that does not divide the experts."""
    unknown = set(fixed) - set(LAYOUT_FIELDS)
    if unknown:
        raise v.InvalidInput("layout", f"unknown fields: {', '.join(sorted(unknown))}")
    for name in WHOLE_LAYOUT_FIELDS:
        if name in fixed:
            v.whole(f"layout.{name}", fixed[name])
    ep = fixed.get("expert_parallel", 1)
    if fixed.get("expert_overlap") and not shape.mixture_of_experts:
        raise v.InvalidInput("layout.expert_overlap", "needs a mixture-of-experts shape (experts)")
    if ep > 1 and not shape.mixture_of_experts:
        raise v.InvalidInput(
            "layout.expert_parallel", f"needs a mixture-of-experts shape (experts), got {ep}"
        )
    if shape.experts is not None and shape.experts % ep:
        raise v.InvalidInput(
            "layout.expert_parallel",
            f"must divide the experts ({shape.experts}); {_divisors_text(shape.experts)} would, got {ep}",
        )


def _splits(
    shape: ModelShape, machine: Machine, count: int, fixed: dict[str, Any], target_batch: int
) -> list[tuple[int, ...]]:
    """(t, p, d, micro-batch, global batch, interleave) of every split of `count` that honours `fixed`, in
    the order tensor, pipeline, micro-batch, interleave (the search breaks ties by it)."""
    v.whole("layout.global_batch", target_batch)
    c = int(fixed.get("context_parallel", 1))
    layers = shape.layers
    fixed_p = fixed.get("pipeline_parallel")
    fixed_d = fixed.get("data_parallel")
    fixed_vi = fixed.get("interleave")
    micro_batches = [fixed["micro_batch"]] if "micro_batch" in fixed else MICRO_BATCHES
    batch_fixed = "global_batch" in fixed
    tensor = [fixed["tensor_parallel"]] if "tensor_parallel" in fixed else _tensor_degrees(shape, machine)

    rows: list[tuple[int, ...]] = []
    for t in tensor:
        if count % (t * c):
            continue
        rest = count // (t * c)
        for p in [fixed_p] if fixed_p is not None else _divisors(rest, layers):
            d = rest // p
            if rest % p or (fixed_d is not None and fixed_d != d):
                continue
            batch = target_batch if batch_fixed else -(-target_batch // d) * d
            if batch % d:  # a fixed batch the replicas cannot share
                continue
            replica = batch // d
            chunks = -(-layers // p)
            for b in micro_batches:
                if replica % b:
                    continue
                # An interleaved schedule needs a pipeline, micro-batches in multiples of its stages and
                # no more chunks than layers per stage.
                interleaved = p > 1 and (replica // b) % p == 0
                if fixed_vi is None:
                    interleaves = [x for x in INTERLEAVES if x <= chunks] if interleaved else [1]
                elif fixed_vi == 1 or (interleaved and fixed_vi <= chunks):
                    interleaves = [fixed_vi]
                else:
                    continue
                rows += [(t, p, d, b, batch, vi) for vi in interleaves]
    return rows


def _divisors(n: int, most: int) -> list[int]:
    """The divisors of n up to `most`, ascending (by trial up to √n rather than up to `most`)."""
    small, large = [], []
    k = 1
    while k * k <= n:
        if n % k == 0:
            small.append(k)
            if k * k != n:
                large.append(n // k)
        k += 1
    return [k for k in small + large[::-1] if k <= most]


def _expert_degrees(shape: ModelShape, data_parallel: int) -> list[int]:
    """Expert-parallel degrees the search tries: the powers of two that divide the data-parallel degree
    and the experts (1 if dense). Others that divide both can be given."""
    experts = shape.experts or 1
    degrees, e = [], 1
    while e <= min(experts, data_parallel) and experts % e == 0 and data_parallel % e == 0:
        degrees.append(e)
        e *= 2
    return degrees


def _family(columns: dict[str, Any], i: int) -> tuple[int, int, int]:
    """Alternatives split the model another way (tensor, pipeline and expert degrees), the fastest of each."""
    return (
        int(columns["tensor_parallel"][i]),
        int(columns["pipeline_parallel"][i]),
        int(columns["expert_parallel"][i]),
    )


def _layout_at(columns: dict[str, Any], i: int) -> Layout:
    values = {name: columns[name][i] for name in LAYOUT_FIELDS if name != "recomputation"}
    return Layout(
        tensor_parallel=int(values["tensor_parallel"]),
        pipeline_parallel=int(values["pipeline_parallel"]),
        data_parallel=int(values["data_parallel"]),
        micro_batch=int(values["micro_batch"]),
        global_batch=int(values["global_batch"]),
        context_parallel=int(values["context_parallel"]),
        interleave=int(values["interleave"]),
        sequence_parallel=bool(values["sequence_parallel"]),
        recomputation=RECOMPUTATION_MODES[int(columns["recomputation"][i])],
        zero_stage=int(values["zero_stage"]),
        flash_attention=bool(values["flash_attention"]),
        expert_parallel=int(values["expert_parallel"]),
        expert_overlap=bool(values["expert_overlap"]),
    )


def _describe(layout: Layout) -> str:
    return (
        f"tensor {layout.tensor_parallel}, pipeline {layout.pipeline_parallel}, data {layout.data_parallel}, "
        f"{f'expert {layout.expert_parallel}, ' if layout.expert_parallel > 1 else ''}"
        f"micro-batch {layout.micro_batch}, {layout.recomputation} recomputation, ZeRO {layout.zero_stage}"
    )


def _what_would_fit(states: float, activations: float, machine: Machine) -> str:
    if states >= machine.memory_bytes:
        return (
            f"the model states alone take {states / 1e9:.1f} GB: more accelerators (for more pipeline stages "
            "or ZeRO sharding) or accelerators with more memory would fit"
        )
    return (
        f"activations take {activations / 1e9:.1f} GB: a shorter sequence, more accelerators or accelerators "
        "with more memory would fit"
    )


def _no_layout_text(shape: ModelShape, machine: Machine, count: int, fixed: dict[str, Any]) -> str:
    given = ", ".join(f"{name} {value}" for name, value in sorted(fixed.items())) or "no fields"
    degrees = ", ".join(str(t) for t in _tensor_degrees(shape, machine))
    return (
        f"no layout of {count} accelerators has {given}: tensor parallelism must divide a node of "
        f"{machine.accelerators_per_node} and the heads ({degrees} would), the degrees must multiply to "
        f"{count}, and the micro-batch must divide each replica's batch"
    )
