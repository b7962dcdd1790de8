"""The terms of a training step that spreading it over many devices adds, one function each, over numpy
arrays of layouts: a layer's tensor-parallel collectives, context-parallel K/V exchange and expert all-to-all
(and how the all-to-all overlaps compute), the pipeline's stages, transfers and bubble, and the data-parallel
gradient traffic. `performance.evaluate` composes them with `step_terms`' terms of one device's own work.

Every function takes many layouts at once (`step_terms.Layouts`, one array element per layout) and the
hardware's achieved rates (`step_terms.Rates`), and computes element by element, so a layout's value does
not depend on the others evaluated beside it.

Each docstring gives the term's formula, its symbols and its source. The symbols are the papers': L layers,
h width, a heads, s sequence length, V vocabulary, b micro-batch, B global batch (sequences), m micro-batches
per step, t tensor-, p pipeline-, d data-, c context-, e expert-parallel degree, v interleaved stages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from service.core.shape import ModelShape
from service.core.step_terms import BACKWARD_PER_FORWARD, WIRE_BYTES, HeldParams, Layouts, OutputLayer, Rates

Array = npt.NDArray[np.float64]
Flags = npt.NDArray[np.bool_]

# Per-hop latency of a collective (NCCL's ring and tree latencies, order of magnitude: a few microseconds
# inside an NVLink domain, ~10 µs over InfiniBand/RoCE; NCCL tuning tables).
SCALE_UP_LATENCY_SECONDS = 3e-6
SCALE_OUT_LATENCY_SECONDS = 1e-5
# Share of an accelerator's streaming multiprocessors an overlapped expert all-to-all keeps busy: DeepSeek-V3
# §3.2.2 dedicates 20 of the H800's 132 SMs to it.
COMMUNICATION_SMS = 20 / 132


@dataclass(frozen=True)
class LayerSeconds:
    """One layer's parts, forward and backward, on the busiest device."""

    compute: Array
    memory_bound: Array
    tensor_parallel: Array
    context_parallel: Array
    expert_parallel: Array | float  # 0 for a dense model


@dataclass(frozen=True)
class Stages:
    """How layers fall on pipeline stages, and the busiest stage's time for one micro-batch."""

    layers_per_stage: Array  # ceil(L/p): what a middle stage holds
    first_stage_layers: Array
    busiest_layers: Array
    compute_seconds: Array
    memory_bound_seconds: Array
    seconds: Array  # compute, memory-bound and the layers' collectives


def all_reduce_seconds(message: Array, n: Array, bandwidth: Array, latency: Array) -> Array:
    """Seconds of an all-reduce of `message` bytes over n ranks (0 for one rank): the cheaper of a ring
    and a double binary tree, as NCCL picks (Sanders et al. 2009; NCCL's tuning model).

    Notes
    -----
    ring = 2(n - 1)/n · M / β + 2(n - 1)·λ; tree = 2·M / β + 2·log2(n)·λ, for a message of M bytes,
    link bandwidth β (bytes/s per rank and direction) and per-hop latency λ.
    """
    ring = 2 * (n - 1) / n * message / bandwidth + 2 * (n - 1) * latency
    tree = 2 * message / bandwidth + 2 * np.log2(np.maximum(n, 1)) * latency
    return np.where(n > 1, np.minimum(ring, tree), 0.0)


def tensor_parallel_layer_seconds(shape: ModelShape, layouts: Layouts, rates: Rates) -> Array:
    """A layer's tensor-parallel collectives, forward and backward (Megatron, Narayanan et al. 2021 §2.3;
    Korthikanti et al. 2022 §4.2.2).

    Notes
    -----
    n·all_reduce(2·T·h bytes over t ranks), T = b·s/c rows, n = 4 (two all-reduces forward, two backward),
    +1 with sequence parallelism (a reduce-scatter and an all-gather move an all-reduce's bytes, and the
    backward gathers the inputs of the two column-parallel GEMMs again rather than keep them), +2 when
    full recomputation repeats the forward. A group inside a node runs on the scale-up link; one wider than
    a node runs at the network's speed.
    """
    t = layouts.tensor_parallel
    in_node = t <= rates.accelerators_per_node
    link = np.where(in_node, rates.scale_up_bytes_per_second, rates.scale_out_bytes_per_second)
    latency = np.where(in_node, SCALE_UP_LATENCY_SECONDS, SCALE_OUT_LATENCY_SECONDS)
    message = WIRE_BYTES * layouts.tokens * float(shape.d_model)
    one = all_reduce_seconds(message, t, link, latency)
    collectives = 4.0 + 1.0 * layouts.sequence_parallel + 2.0 * layouts.full_recomputation
    return collectives * one


def exposed_tensor_parallel(layouts: Layouts, collectives: Array, compute: Array, overlap: float) -> Array:
    """A layer's tensor-parallel collectives left exposed when the layout overlaps them with its GEMMs
    (Megatron-Core's --tp-comm-overlap splits each all-gather and reduce-scatter into chunks pipelined with
    the GEMM that consumes or produces them; Wang et al. 2023, "Overlap communication with dependent
    computation via decomposition"; torchtitan's asynchronous TP does the same).

    Notes
    -----
    T - o·min(T, C) for the layer's collectives T and its compute C when overlapped, T otherwise: at most
    the compute hides them, and o (calibrated) of what it could.
    """
    return np.where(
        layouts.tensor_parallel_overlap, collectives - overlap * np.minimum(collectives, compute), collectives
    )


def context_parallel_layer_seconds(shape: ModelShape, layouts: Layouts, rates: Rates) -> Array:
    """A layer's context-parallel K/V exchange (Llama 3, Dubey et al. 2024, §3.3.2), not overlapped.

    Notes
    -----
    2·(c - 1)·K_V / β for c > 1 (else 0): each rank all-gathers the K and V of the other c - 1 chunks in the
    forward pass and reduce-scatters their gradients in the backward, K_V = 2 bytes · 2·T·kv·d_h/t the
    K and V of its T = b·s/c rows (kv key/value heads of width d_h), over the scale-up link when the t·c
    ranks fit a node, the network otherwise.
    """
    c = layouts.context_parallel
    in_node = layouts.tensor_context <= rates.accelerators_per_node
    link = np.where(in_node, rates.scale_up_bytes_per_second, rates.scale_out_bytes_per_second)
    kv_width = float(shape.key_value_heads * shape.head_width)
    kv_bytes = WIRE_BYTES * 2 * layouts.tokens * kv_width / layouts.tensor_parallel
    return np.where(c > 1, 2 * (c - 1) * kv_bytes / link, 0.0)


def expert_all_to_all_layer_seconds(
    shape: ModelShape, layouts: Layouts, rates: Rates, precision: str
) -> Array | float:
    """A mixture-of-experts layer's all-to-alls, averaged over the layers (GShard, Lepikhin et al. 2020;
    DeepSeek-V3 §3.2.2); 0 for a dense model or one expert-parallel rank.

    Notes
    -----
    μ·(max(X·R/β_out, X·(l + R)/β_up) + 2·λ)·(2 + 1 under full recomputation): a dispatch and a combine,
    forward and again backward. X = T·h/t·(w_d + 2) bytes a rank sends (dispatch in w_d = 1-byte fp8 when
    training in fp8, DeepSeek-V3 §3.3.2, else 2). The e ranks of a group sit t·c apart, n_l =
    max(1, min(e, node/(t·c))) of them in a node, over n = ceil(e/n_l) nodes; a token with k experts goes
    once to each other node its experts are on (DeepSeek-V3's dispatch: E[nodes] = n·(1 - (1 - 1/n)^k)),
    R = that·(n - 1)/n times the capacity factor, and is copied to l = r·(n_l - 1)/e ranks inside its node
    (r routed rows). λ is the network's latency when the group spans nodes, the scale-up link's otherwise.
    """
    moe = shape.moe_share
    if not moe > 0:
        return 0.0
    t, e = layouts.tensor_parallel, layouts.expert_parallel
    up, out = rates.scale_up_bytes_per_second, rates.scale_out_bytes_per_second
    k = float(shape.experts_per_token or 0)
    per_node = np.maximum(1.0, np.minimum(e, rates.accelerators_per_node / layouts.tensor_context))
    nodes = np.ceil(e / per_node)
    remote_nodes = np.where(nodes > 1, nodes * (1 - (1 - 1 / nodes) ** k) * (nodes - 1) / nodes, 0.0) * float(
        shape.capacity_factor or 1.0
    )
    local_copies = shape.routed_rows * (per_node - 1) / e
    hidden = layouts.tokens * float(shape.d_model) / t
    dispatch_bytes = 1.0 if precision == "fp8" else float(WIRE_BYTES)
    message = hidden * (dispatch_bytes + WIRE_BYTES)  # a dispatch and a combine
    one_pass = np.maximum(message * remote_nodes / out, message * (local_copies + remote_nodes) / up)
    latency = np.where(nodes > 1, SCALE_OUT_LATENCY_SECONDS, SCALE_UP_LATENCY_SECONDS)
    return np.where(
        (e > 1) & (moe > 0),
        moe * (one_pass + 2 * latency) * (2.0 + layouts.full_recomputation),
        0.0,
    )


def expert_overlap(
    shape: ModelShape, layouts: Layouts, compute: Array, all_to_all: Array | float
) -> tuple[Array, Array | float, Flags]:
    """A layer's compute and exposed all-to-all when the all-to-all runs under another micro-batch's
    compute (DualPipe pairs a forward with a backward chunk, DeepSeek-V3 §3.2.1), and whether it does.

    Notes
    -----
    Overlapped: compute C/(1 - φ), φ = COMMUNICATION_SMS the SMs the all-to-all takes from the GEMMs, and
    max(0, A - C/(1 - φ)) of the all-to-all A exposed; not: C and A. Expert parallelism overlaps where the
    layout says so (`expert_overlap` 1), or where it is faster (-1). Returns (compute, exposed all-to-all,
    overlapped).
    """
    if not shape.moe_share > 0:
        return compute, 0.0, np.zeros(compute.shape, dtype=bool)
    overlapped_compute = compute / (1 - COMMUNICATION_SMS)
    overlapped_exposed = np.maximum(0.0, all_to_all - overlapped_compute)
    faster = overlapped_compute + overlapped_exposed < compute + all_to_all
    code = layouts.expert_overlap
    overlapped = (layouts.expert_parallel > 1) & np.where(code < 0, faster, code == 1)
    return (
        np.where(overlapped, overlapped_compute, compute),
        np.where(overlapped, overlapped_exposed, all_to_all),
        overlapped,
    )


def pipeline_stages(shape: ModelShape, layouts: Layouts, layer: LayerSeconds, output: OutputLayer) -> Stages:
    """The layers on each pipeline stage and the busiest stage's time for one micro-batch.

    Notes
    -----
    A middle stage holds ceil(L/p) layers. When p does not divide L the spare slots come off the first and
    last stages, as Llama 3 did (§3.3.2: one layer fewer on each), each keeping at least one (75 layers on
    34 stages leave more spare slots than those two can give up); the last also carries the output layer
    and the D prediction modules' layers; one stage holds everything. The busiest of the last and a middle
    stage sets the pace: its layers times the layer's compute, memory-bound and collective seconds, plus
    the output layer's when it is the last.
    """
    L, p, mtp = float(shape.layers), layouts.pipeline_parallel, float(shape.mtp_depth or 0)
    staged = layouts.pipelined
    per_stage = np.ceil(L / p)
    spare = per_stage * p - L
    first_layers = np.where(staged, np.maximum(1.0, per_stage - np.ceil(spare / 2)), L)
    last_layers = np.where(staged, np.maximum(1.0, per_stage - np.floor(spare / 2)), L) + mtp
    layer_seconds = (
        layer.compute
        + layer.memory_bound
        + layer.tensor_parallel
        + layer.context_parallel
        + layer.expert_parallel
    )
    last_is_busiest = (
        last_layers * layer_seconds + output.compute_seconds + output.memory_bound_seconds
        >= per_stage * layer_seconds
    )
    busy_layers = np.where(last_is_busiest, last_layers, per_stage)
    with_output = np.where(last_is_busiest, 1.0, 0.0)
    compute = busy_layers * layer.compute + with_output * output.compute_seconds
    memory_bound = busy_layers * layer.memory_bound + with_output * output.memory_bound_seconds
    collectives = layer.tensor_parallel + layer.context_parallel + layer.expert_parallel
    return Stages(
        layers_per_stage=per_stage,
        first_stage_layers=first_layers,
        busiest_layers=busy_layers,
        compute_seconds=compute,
        memory_bound_seconds=memory_bound,
        seconds=compute + memory_bound + busy_layers * collectives,
    )


def pipeline_transfer_seconds(shape: ModelShape, layouts: Layouts, rates: Rates) -> Array:
    """Point-to-point transfers across a stage boundary for one micro-batch (Narayanan et al. 2021 §4.1).

    Notes
    -----
    2·v·(2·T·h/t / β + λ) for p > 1 (else 0): the activations of T = b·s/c rows forward and their gradient
    back, v times with an interleaved schedule, split t ways by Megatron's scatter/gather optimisation; over
    the scale-up link when the t·c·p ranks of a pipeline fit a node, the network otherwise.
    """
    t = layouts.tensor_parallel
    inside = layouts.model_parallel <= rates.accelerators_per_node
    link = np.where(inside, rates.scale_up_bytes_per_second, rates.scale_out_bytes_per_second)
    latency = np.where(inside, SCALE_UP_LATENCY_SECONDS, SCALE_OUT_LATENCY_SECONDS)
    boundary = WIRE_BYTES * layouts.tokens * float(shape.d_model) / t
    return np.where(layouts.pipelined, 2 * layouts.interleave * (boundary / link + latency), 0.0)


def pipeline_bubble_seconds(layouts: Layouts, stage_seconds: Array) -> Array:
    """The pipeline bubble of a step (Narayanan et al. 2021 §2.2).

    Notes
    -----
    (p - 1)/(v·m) of the ideal time m·t_stage, i.e. (p - 1)/v·t_stage, for p stages, v interleaved stages
    per device, m micro-batches and the busiest stage's time t_stage for one micro-batch.
    """
    return (layouts.pipeline_parallel - 1) / layouts.interleave * stage_seconds


def data_parallel_seconds(layouts: Layouts, rates: Rates, held: HeldParams, stage_seconds: Array) -> Array:
    """Data-parallel gradient traffic left exposed (Rajbhandari et al. 2020, ZeRO; DeepSeek-V3 §3.2).

    Notes
    -----
    G = all_reduce(2·Ψ_dense bytes over d ranks) + all_reduce(2·Ψ_experts bytes over d/e ranks), the
    experts' gradients reduced over the ranks holding the same ones; over the scale-up link when all
    t·c·p·d ranks fit a node. A group spanning nodes runs node-aware: k = max(1, min(d, n/(t·c))) of its
    ranks share each node of n accelerators (data parallelism outside tensor and context parallelism, as
    Megatron orders ranks), and NCCL's rings, one channel per NIC, cross each node boundary k times at
    once, so the group moves data at min(β_up, k·β_out) per rank: the node's aggregate network bandwidth,
    not one accelerator's NIC (NCCL's hierarchical and multi-channel rings; Jeaugey 2019, "Massively Scale
    Your Deep Learning Training with NCCL 2.4"). ZeRO stages 0-2 (an all-reduce, or reduce-scatter +
    all-gather of the same bytes) reduce once a step under the last micro-batch's backward pass, 2/3 of the
    stage time t_stage: G - o·min(G, 2/3·t_stage). Stage 2 keeps only its shard of the gradients, so each
    of the other m - 1 micro-batches reduce-scatters its own under its backward pass too, (m - 1)·(G/2 -
    o·min(G/2, 2/3·t_stage)) (DeepSpeed reduces at every micro-step under ZeRO 2; FSDP's SHARD_GRAD_OP
    without no_sync likewise); stages 0 and 1 hold whole gradients and accumulate them locally. Stage 3
    also gathers the parameters for every micro-batch's forward and backward, 1.5·G per micro-batch under
    its compute: m·(1.5·G - o·min(1.5·G, t_stage)). o is the calibrated overlap.
    """
    d, e = layouts.data_parallel, layouts.expert_parallel
    inside = layouts.model_parallel * d <= rates.accelerators_per_node
    per_node = np.maximum(1.0, np.minimum(d, rates.accelerators_per_node / layouts.tensor_context))
    up = rates.scale_up_bytes_per_second
    link = np.where(inside, up, np.minimum(up, per_node * rates.scale_out_bytes_per_second))
    latency = np.where(inside, SCALE_UP_LATENCY_SECONDS, SCALE_OUT_LATENCY_SECONDS)
    reduce_once = all_reduce_seconds(WIRE_BYTES * held.dense, d, link, latency)
    if held.experts is not None:
        expert_reduce = all_reduce_seconds(WIRE_BYTES * held.experts, d / e, link, latency)
        reduce_once = reduce_once + np.where(held.experts > 0, expert_reduce, 0.0)
    overlap = rates.overlap
    backward_window = stage_seconds * BACKWARD_PER_FORWARD / (1 + BACKWARD_PER_FORWARD)
    exposed_once = reduce_once - overlap * np.minimum(reduce_once, backward_window)
    scatter = 0.5 * reduce_once
    further_scatters = (layouts.micro_batches - 1) * (
        scatter - overlap * np.minimum(scatter, backward_window)
    )
    gathers = 1.5 * reduce_once
    exposed_gathers = layouts.micro_batches * (gathers - overlap * np.minimum(gathers, stage_seconds))
    zero = layouts.zero_stage
    return np.where(
        zero == 3, exposed_gathers, np.where(zero == 2, exposed_once + further_scatters, exposed_once)
    )
