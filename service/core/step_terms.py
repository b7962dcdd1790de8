"""The terms of a training step that are one device's own work, one function each, over numpy arrays of
layouts: a layer's GEMMs (`layer_gemms`, `layer_compute_seconds`), its element-wise work
(`layer_memory_bound_seconds`), the output layer, the optimizer update, the FLOPs counted for MFU and HFU,
and the parameters, model states and activations a device holds. What spreading the step over devices adds
(tensor-parallel, context-parallel and expert all-to-all traffic, the pipeline's stages, transfers and
bubble, data-parallel gradient traffic) is `parallel_terms`'; `performance.evaluate` composes the two into
a step.

The functions of both modules take many layouts at once (`Layouts`, one array element per layout) and the
hardware's achieved rates (`Rates`), both defined here, and compute element by element, so a layout's value
does not depend on the others evaluated beside it.

Each docstring gives the term's formula, its symbols and its source. The symbols are the papers': L layers,
h width, a heads, s sequence length, V vocabulary, b micro-batch, B global batch (sequences), m micro-batches
per step, t tensor-, p pipeline-, d data-, c context-, e expert-parallel degree, v interleaved stages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from service.core import memory
from service.core.shape import ModelShape

Array = npt.NDArray[np.float64]
Flags = npt.NDArray[np.bool_]
Codes = npt.NDArray[np.int64]

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


@dataclass(frozen=True)
class Layouts:
    """Layouts of one model as arrays, one element per layout, with the quantities several terms share
    (computed once: a search evaluates thousands of layouts, and each array operation costs about a
    microsecond whatever its size)."""

    tensor_parallel: Array
    pipeline_parallel: Array
    data_parallel: Array
    context_parallel: Array
    micro_batch: Array
    global_batch: Array
    interleave: Array
    sequence_parallel: Flags  # and tensor-parallel: without t > 1 nothing is split along the sequence
    recomputation: Codes  # 0 none, 1 selective, 2 full
    zero_stage: Codes
    flash_attention: Flags
    expert_parallel: Array
    expert_overlap: Codes  # 1 overlapped, 0 not, -1 whichever is faster
    tensor_parallel_overlap: Flags  # and t > 1
    micro_batches: Array  # per step and pipeline: B / (d·b), rounded down
    tokens: Array  # rows of every GEMM on one device: b·s/c
    gemm_flops_per_weight: Array  # 2·b·s/c: a GEMM's FLOPs per weight
    gemm_flops_per_column: Array  # 2·b·s/c·h: a GEMM's FLOPs per output column of an h-wide input
    full_recomputation: Flags
    selective_recomputation: Flags
    pipelined: Flags  # p > 1
    sequence_split: Array  # t under sequence parallelism, else 1
    tensor_context: Array  # t·c
    model_parallel: Array  # t·c·p

    @classmethod
    def of(cls, shape: ModelShape, columns: Mapping[str, Any]) -> Layouts:
        """The layouts in `columns`, one array per `performance.Layout` field (recomputation coded 0 none,
        1 selective, 2 full; expert_overlap 1, 0 or -1 for whichever is faster)."""
        f64 = np.float64
        t = np.asarray(columns["tensor_parallel"], dtype=f64)
        p = np.asarray(columns["pipeline_parallel"], dtype=f64)
        d = np.asarray(columns["data_parallel"], dtype=f64)
        c = np.asarray(columns["context_parallel"], dtype=f64)
        b = np.asarray(columns["micro_batch"], dtype=f64)
        B = np.asarray(columns["global_batch"], dtype=f64)
        sp = np.asarray(columns["sequence_parallel"], dtype=bool) & (t > 1)
        rec = np.asarray(columns["recomputation"], dtype=np.int64)
        tokens = b * (float(shape.sequence_length) / c)
        two_tokens = 2 * tokens  # 2·x is exact, so (2·b)·s/c is 2·(b·s/c)
        tc = t * c
        return cls(
            tensor_parallel=t,
            pipeline_parallel=p,
            data_parallel=d,
            context_parallel=c,
            micro_batch=b,
            global_batch=B,
            interleave=np.asarray(columns["interleave"], dtype=f64),
            sequence_parallel=sp,
            recomputation=rec,
            zero_stage=np.asarray(columns["zero_stage"], dtype=np.int64),
            flash_attention=np.asarray(columns["flash_attention"], dtype=bool),
            expert_parallel=np.asarray(columns["expert_parallel"], dtype=f64),
            expert_overlap=np.asarray(columns["expert_overlap"], dtype=np.int64),
            tensor_parallel_overlap=np.asarray(columns["tensor_parallel_overlap"], dtype=bool) & (t > 1),
            micro_batches=np.floor(B / (d * b)),
            tokens=tokens,
            gemm_flops_per_weight=two_tokens,
            gemm_flops_per_column=two_tokens * float(shape.d_model),
            full_recomputation=rec == 2,
            selective_recomputation=rec == 1,
            pipelined=p > 1,
            sequence_split=np.where(sp, t, 1.0),
            tensor_context=tc,
            model_parallel=tc * p,
        )


@dataclass(frozen=True)
class Rates:
    """What an accelerator and its links achieve, the calibration applied: the rates the terms divide by."""

    peak_flops_per_second: float  # dense peak at the training precision
    attention_flops_per_second: float  # the peak attention runs at (bf16 when training in fp8)
    matmul_efficiency: float  # large-GEMM fraction of the peak
    kernel_seconds: float  # fixed cost of a GEMM kernel
    memory_bytes_per_second: float  # HBM bandwidth achieved by element-wise kernels
    accelerators_per_node: float
    scale_up_bytes_per_second: float  # achieved in collectives, per accelerator and direction
    scale_out_bytes_per_second: float
    overlap: float  # fraction of data-parallel traffic hidden under the compute it overlaps
    # Fraction of the attention peak a fused attention kernel achieves on the FLOPs it computes (the causal
    # half); None: the full score matrix at the GEMM fraction (the model before 1.4).
    attention_efficiency: float | None = None


@dataclass(frozen=True)
class LayerGemms:
    """One layer's forward GEMMs on one device: FLOPs by group, and their seconds."""

    qkv_flops: Array
    projection_flops: Array
    scores_flops: Array
    values_flops: Array
    mlp_flops: Array  # a mixture-of-experts layer's averaged over the layers, as the seconds are
    attention_seconds: Array  # the scores and values GEMMs
    forward_seconds: Array


@dataclass(frozen=True)
class OutputLayer:
    """The output layer (and multi-token prediction modules) on the last stage: forward FLOPs on one
    device, and seconds forward and backward."""

    forward_flops: Array
    compute_seconds: Array | float
    memory_bound_seconds: Array


@dataclass(frozen=True)
class HeldParams:
    """Parameters one device holds: its stage's dense weights (the embedding's share included) and, in a
    mixture of experts, its share of the routed experts (None when dense)."""

    dense: Array
    experts: Array | None

    @property
    def total(self) -> Array:
        return self.dense if self.experts is None else self.dense + self.experts


def gemm_seconds(flops: Array, rates: Rates, peak_flops_per_second: float | None = None) -> Array:
    """Seconds of one GEMM of `flops` (Isaev et al. 2023, Calculon, GEMM efficiency by size).

    Notes
    -----
    g / (P·e) + τ for a GEMM of g FLOPs at peak P (the `peak_flops_per_second` given, or the rates'),
    large-GEMM efficiency e and fixed cost τ per kernel (its launch and last partial wave), so that its
    efficiency e·g / (g + τ·P·e) halves at g = τ·P·e.
    """
    peak = rates.peak_flops_per_second if peak_flops_per_second is None else peak_flops_per_second
    return flops / (peak * rates.matmul_efficiency) + rates.kernel_seconds


def replicated_kv_weights(shape: ModelShape, tensor_parallel: Array) -> Array:
    """The K and V projection weights a tensor-parallel rank holds beyond its 1/t share when t exceeds the
    key/value heads: Megatron then gives each rank one K/V head, each replicated t/kv times (grouped-query
    and multi-query attention; Megatron-Core's TE attention).

    Notes
    -----
    W_kv·(1/kv - 1/t) for t > kv, W_kv = 2·h·kv·d_v the K and V projections; 0 otherwise, and for latent
    attention (its latents are not split by heads).
    """
    if shape.latent_attention:
        return np.zeros_like(tensor_parallel)
    kv = float(shape.key_value_heads)
    weights = 2.0 * shape.d_model * kv * shape.head_width
    return np.where(tensor_parallel > kv, weights * (1.0 / kv - 1.0 / tensor_parallel), 0.0)


def layer_gemms(shape: ModelShape, layouts: Layouts, rates: Rates) -> LayerGemms:
    """One layer's forward GEMMs on one device, each split t ways (Megatron, Narayanan et al. 2021 §2.3).

    Notes
    -----
    With T = b·s/c rows: QKV 2·T·W_qkv/t (grouped K and V, or latent attention's projections: W_qkv the
    attention's weights less the output projection's; with t above the K/V heads, a rank's K/V head is
    replicated: `replicated_kv_weights`), output projection 2·T·a·d_v·h/t, MLP up 2·T·h·f/t
    (twice that with SwiGLU's gate) and down 2·T·h·f/t, attention scores 2·T·s·a·d_qk/t and values
    2·T·s·a·d_v/t over the local queries and all s keys (the full matrix, as Megatron's unfused kernels
    compute it). Each GEMM takes `gemm_seconds`; the attention's at the attention peak. A fused attention
    kernel (FlashAttention, cuDNN: `flash_attention`) skips the masked causal half and runs at a fraction of
    its own, the hardware's attention efficiency: (scores + values)/2 / (P_att·e_att) + 2τ (FlashAttention-2
    reaches 50-70% of an A100's peak but 35% of an H100's, Dao 2023; without a figure, plans from before
    model 1.4.0 took the whole matrix at the GEMM fraction). A
    mixture-of-experts layer's MLP is `_moe_mlp`'s. For a plain GELU transformer the FLOPs add up to
    Megatron's (24·b·s·h² + 4·b·s²·h)/t (Narayanan et al. 2021, §5.1).
    """
    t = layouts.tensor_parallel
    a, s = float(shape.heads), float(shape.sequence_length)
    f, d_qk, d_v = float(shape.ffn_width), float(shape.query_key_width), float(shape.head_width)
    two_tokens, two_tokens_h = layouts.gemm_flops_per_weight, layouts.gemm_flops_per_column
    output_params = shape.output_projection_params
    qkv = two_tokens * ((shape.attention_params - output_params) / t + replicated_kv_weights(shape, t))
    projection = two_tokens * output_params / t
    mlp = two_tokens_h * f
    up_projection = (mlp * 2 if shape.activation == "swiglu" else mlp) / t  # (·1 is exact)
    down_projection = mlp / t
    attention = two_tokens * s * a
    scores = attention * d_qk / t
    values = attention * d_v / t
    dense_mlp_seconds = gemm_seconds(up_projection, rates) + gemm_seconds(down_projection, rates)
    attention_peak = rates.attention_flops_per_second
    attention_seconds = gemm_seconds(scores, rates, attention_peak) + gemm_seconds(
        values, rates, attention_peak
    )
    if rates.attention_efficiency is not None:
        causal_half = (scores + values) / 2
        fused = causal_half / (attention_peak * rates.attention_efficiency) + 2 * rates.kernel_seconds
        attention_seconds = np.where(layouts.flash_attention, fused, attention_seconds)
    mlp_flops = up_projection + down_projection
    if shape.moe_share > 0:
        mlp_seconds, mlp_flops = _moe_mlp(shape, layouts, rates, dense_mlp_seconds, mlp_flops)
    else:
        mlp_seconds = dense_mlp_seconds
    forward = gemm_seconds(qkv, rates) + gemm_seconds(projection, rates) + attention_seconds + mlp_seconds
    return LayerGemms(
        qkv_flops=qkv,
        projection_flops=projection,
        scores_flops=scores,
        values_flops=values,
        mlp_flops=mlp_flops,
        attention_seconds=attention_seconds,
        forward_seconds=forward,
    )


def _moe_mlp(
    shape: ModelShape, layouts: Layouts, rates: Rates, dense_seconds: Array, dense_flops: Array
) -> tuple[Array, Array]:
    """Seconds and FLOPs of the MLP averaged over the layers when a share μ of them is routed
    (Shazeer et al. 2017; DeepSeek-V3's shared and routed experts): (1 - μ)·dense + μ·routed.

    A routed MLP runs the router's logits (2·T·h·E), the shared experts as dense GEMMs and the routed rows
    r (top-k times the capacity factor) on this rank's E/e experts, each expert a GEMM of its own with its
    own fixed cost τ each time; an expert of width f_e costs 2·T·h·f_e·n_mat/t per row.
    """
    moe, routed, f_e = shape.moe_share, shape.routed_rows, float(shape.expert_width)
    shared, E = float(shape.shared_experts or 0), float(shape.experts or 1)
    t, e = layouts.tensor_parallel, layouts.expert_parallel
    peak, e_max, kernel = rates.peak_flops_per_second, rates.matmul_efficiency, rates.kernel_seconds
    expert_flops = layouts.gemm_flops_per_column * f_e * shape.mlp_matrices / t
    local_experts = E / e
    router = layouts.gemm_flops_per_column * E
    moe_seconds = gemm_seconds(router, rates) + (
        2 * kernel + shared * expert_flops / (peak * e_max) if shared > 0 else 0.0
    )
    moe_seconds = moe_seconds + routed * expert_flops / (peak * e_max) + 2 * local_experts * kernel
    seconds = (1 - moe) * dense_seconds + moe * moe_seconds
    flops = (1 - moe) * dense_flops + moe * ((routed + shared) * expert_flops + router)
    return seconds, flops


def layer_compute_seconds(gemms: LayerGemms, layouts: Layouts, selective_matmuls: float = 0.0) -> Array:
    """A layer's GEMMs forward, backward and recomputed (Korthikanti et al. 2022 §5).

    Notes
    -----
    F·(1 + 2) + R for forward GEMM seconds F, the backward pass twice the forward's; R = F under full
    recomputation, under selective recomputation the attention scores and values and the share
    `selective_matmuls` of the other GEMMs (0 in Megatron, whose selective recomputation redoes attention
    alone; half in torchtitan's per-op policy, which saves every other matmul's output), 0 without.
    """
    forward = gemms.forward_seconds
    attention = gemms.attention_seconds
    selective = attention + selective_matmuls * (forward - attention)
    return forward * (1 + BACKWARD_PER_FORWARD) + np.where(
        layouts.full_recomputation, forward, np.where(layouts.selective_recomputation, selective, 0.0)
    )


def layer_memory_bound_seconds(shape: ModelShape, layouts: Layouts, rates: Rates) -> Array:
    """A layer's element-wise work, forward, backward and recomputed: bytes moved over the achieved HBM
    bandwidth (the passes counted from Korthikanti et al. 2022 §4.1, as ELEMENTWISE_PASSES_* say).

    Notes
    -----
    Forward bytes 2·(15·T·h/t_sp + n_act·T·f'/t + 4·T·μ·(r·h/t + E) + 4.5·b·(a/t)·(s/c)·s), T = b·s/c rows,
    t_sp = t under sequence parallelism (else 1), n_act = 2 (GELU) or 3 (SwiGLU), f' the MLP rows' width
    (1 - μ)·f + μ·(r + shared)·f_e, the permutation of routed rows into expert order and back and the
    router's softmax and top-k (about four passes over each), and the attention scores only without
    FlashAttention. Time: forward·(1 + 2), plus the forward again under full recomputation, or the scores'
    work under selective recomputation; each over β_HBM.
    """
    t, b, flash = layouts.tensor_parallel, layouts.micro_batch, layouts.flash_attention
    h, a, s = float(shape.d_model), float(shape.heads), float(shape.sequence_length)
    f, f_e = float(shape.ffn_width), float(shape.expert_width)
    moe, routed, shared = shape.moe_share, shape.routed_rows, float(shape.shared_experts or 0)
    E = float(shape.experts or 1)
    tokens, hbm = layouts.tokens, rates.memory_bytes_per_second
    width_elements = tokens * h / layouts.sequence_split
    ffn_elements = tokens * ((1 - moe) * f + moe * (routed + shared) * f_e) / t
    permute_elements = moe * tokens * (routed * h / t + E) if moe > 0 else 0.0
    # (With FlashAttention everywhere, as a search has unless told otherwise, the scores' term is 0.)
    score_elements = (
        0.0 if flash.all() else np.where(flash, 0.0, b * (a / t) * (s / layouts.context_parallel) * s)
    )
    forward_bytes = WIRE_BYTES * (
        ELEMENTWISE_PASSES_WIDTH * width_elements
        + (3.0 if shape.activation == "swiglu" else 2.0) * ffn_elements
        + 4.0 * permute_elements
        + ELEMENTWISE_PASSES_SCORES * score_elements
    )
    forward = forward_bytes / hbm
    score_bytes = WIRE_BYTES * ELEMENTWISE_PASSES_SCORES * score_elements
    return forward * (1 + BACKWARD_PER_FORWARD) + np.where(
        layouts.full_recomputation,
        forward,
        np.where(layouts.selective_recomputation, score_bytes / hbm, 0.0),
    )


def output_layer(shape: ModelShape, layouts: Layouts, rates: Rates) -> OutputLayer:
    """The output layer on the last stage, and the multi-token prediction modules beside it (DeepSeek-V3
    §2.2 and §3.2.3: they share the output layer).

    Notes
    -----
    Logits 2·T·h·V/t FLOPs, run 1 + D times for D prediction modules, each module also a projection
    2·T·2h·h/t, forward and backward (3 times) as `gemm_seconds`; the loss's element-wise work over fp32
    logits (written, read by the loss, its gradient written): (1 + D)·3·4·T·V/t bytes over β_HBM. A
    module's layer is counted with the stage's layers (`parallel_terms.pipeline_stages`).
    """
    t, tokens = layouts.tensor_parallel, layouts.tokens
    h, V, mtp = float(shape.d_model), float(shape.vocabulary or 0), float(shape.mtp_depth or 0)
    logits = layouts.gemm_flops_per_column * V / t
    heads_run = 1.0 + mtp
    compute: Array | float = (
        heads_run * gemm_seconds(logits, rates) * (1 + BACKWARD_PER_FORWARD) if V > 0 else 0.0
    )
    forward_flops = heads_run * logits
    if mtp > 0:
        projection = 2 * tokens * 2 * h * h / t
        compute = compute + mtp * gemm_seconds(projection, rates) * (1 + BACKWARD_PER_FORWARD)
        forward_flops = forward_flops + mtp * projection
    memory_bound = heads_run * 3 * 4.0 * tokens * V / t / rates.memory_bytes_per_second
    return OutputLayer(
        forward_flops=forward_flops, compute_seconds=compute, memory_bound_seconds=memory_bound
    )


def held_params(shape: ModelShape, layouts: Layouts, layers_per_stage: Array) -> HeldParams:
    """The parameters one device holds (the experts as DeepSeek-V3 §3.2 spreads them).

    Notes
    -----
    Dense: (ceil(L/p)·(N_layer - μ·E·N_expert) + N_emb·(1/2 if p > 1 else 1))/t, N_layer an average layer's
    weights, μ the routed share of layers, N_expert one expert's weights, N_emb the input embedding and
    output layer (the first stage holds one, the last the other). Experts: ceil(L/p)·μ·E·N_expert/(e·t),
    a rank holding E/e of each routed layer's experts.
    """
    t, E = layouts.tensor_parallel, float(shape.experts or 1)
    routed_params = shape.moe_share * E * shape.expert_params  # per layer, on average
    dense_params = shape.layer_params - routed_params
    embedding_share = np.where(layouts.pipelined, 0.5, 1.0)
    dense = (layers_per_stage * dense_params + embedding_share * shape.embedding_params) / t
    dense = dense + layers_per_stage * replicated_kv_weights(shape, t)
    if not shape.moe_share > 0:
        return HeldParams(dense=dense, experts=None)
    experts = layers_per_stage * routed_params / (layouts.expert_parallel * t)
    return HeldParams(dense=dense, experts=experts)


def optimizer_seconds(layouts: Layouts, rates: Rates, held: HeldParams) -> Array:
    """The optimizer update: 16 bytes read and written per parameter a device updates, over the HBM
    bandwidth (the reference's "≈ 16 bytes per locally held parameter").

    Notes
    -----
    16·(Ψ_dense/d' + Ψ_experts/(d'/e)) / β_HBM, with d' = d under ZeRO stages 1-3 (each rank updates its
    shard) and 1 under stage 0.
    """
    d, e = layouts.data_parallel, layouts.expert_parallel
    sharding = layouts.zero_stage >= 1
    updated = held.dense / np.where(sharding, d, 1.0)
    if held.experts is not None:
        updated = updated + held.experts / np.where(sharding, d / e, 1.0)
    return OPTIMIZER_UPDATE_BYTES * updated / rates.memory_bytes_per_second


def step_flops(
    shape: ModelShape,
    layouts: Layouts,
    gemms: LayerGemms,
    output: OutputLayer,
    selective_matmuls: float = 0.0,
) -> tuple[Array, Array]:
    """Model and hardware FLOPs of a step: (model, hardware).

    Notes
    -----
    Model (PaLM, Chowdhery et al. 2022, App. B): (6·N + 6·(L + D)·2·h_att·s)·B·s, N the weights a token
    passes through in the layers, the output layer and the D prediction modules (the active ones of a
    mixture of experts), 2·h_att = a·(d_qk + d_v) the attention width (2h in a plain transformer, so
    12·L·h·s per token). Hardware, what ran: ((L + D)·F_layer·(3, or 4 under full recomputation, or 3 plus
    the attention scores and values and `selective_matmuls` of the rest under selective) + 3·F_out)·m·d·c,
    F the forward FLOPs of all t ranks.
    """
    t, s = layouts.tensor_parallel, float(shape.sequence_length)
    L, mtp = float(shape.layers), float(shape.mtp_depth or 0)
    active = shape.non_embedding_active_params + shape.embedding_params / 2 + shape.mtp_active_params
    attention_width = 2 * shape.attention_width
    model = (6 * active + 6 * (L + mtp) * attention_width * s) * layouts.global_batch * s
    scores, values = gemms.scores_flops, gemms.values_flops
    matmuls = t * (gemms.qkv_flops + gemms.projection_flops + gemms.mlp_flops)
    layer_forward = matmuls + t * (scores + values)
    selective = t * (scores + values) + selective_matmuls * matmuls
    layer_ran = layer_forward * (1 + BACKWARD_PER_FORWARD) + np.where(
        layouts.full_recomputation, layer_forward, np.where(layouts.selective_recomputation, selective, 0.0)
    )
    head_forward = t * output.forward_flops
    ran = (L + mtp) * layer_ran + 3 * head_forward
    return model, ran * layouts.micro_batches * layouts.data_parallel * layouts.context_parallel


def model_states_bytes(layouts: Layouts, held: HeldParams, precision: str, optimizer: str) -> Array:
    """Weights, gradients and optimizer state one device keeps (Rajbhandari et al. 2020, ZeRO, §5).

    Notes
    -----
    (w + g + K)·Ψ split by ZeRO stage into what every data-parallel rank keeps and what it shards
    (`memory.zero_split`): w, g, K the bytes per parameter of a weight, a gradient and the optimizer state
    at the precision (`memory.state_bytes`), Ψ the parameters held, the dense ones sharded over d ranks and
    the experts' over the d/e ranks that hold the same ones.
    """
    d, e = layouts.data_parallel, layouts.expert_parallel
    split = np.array(memory.zero_split(*memory.state_bytes(precision, optimizer)), dtype=np.float64)
    sharded = held.dense / d if held.experts is None else held.dense / d + held.experts / (d / e)
    zero = layouts.zero_stage
    states: Array = split[zero, 0] * held.total + split[zero, 1] * sharded  # (indexing is typed Any)
    return states


def activation_bytes(
    shape: ModelShape,
    layouts: Layouts,
    first_stage_layers: Array,
    precision: str,
    *,
    selective_kept: float = 1.0,
    logit_bytes: float = 4.0,
) -> Array:
    """Activations on the first pipeline stage, the fullest under 1F1B: `memory.activation_bytes` (the one
    model of activation memory, which `memory.training_memory` reports too) of these layouts.

    Notes
    -----
    Per layer (Korthikanti et al. 2022 Table 2, generalised to grouped K/V and any MLP): inside the
    tensor-parallel blocks, Q, K, V and the output projection's input, (4 + 4·kv/a)·s·b·h, and the MLP's
    (4 or, with SwiGLU, 6)·s·b·ffn; outside them, the norms' and blocks' inputs, 8·s·b·h, and 2·s·b·h of
    dropout masks where the shape has dropout, split only by sequence parallelism. Without FlashAttention the
    scores add 4·a·s²·b, 5 with dropout (Table 2's 5as/h term), which selective recomputation drops; full
    recomputation keeps 2·s·b·h per layer plus one
    layer's working set. The first stage holds min(p, m) micro-batches in flight, times 1 + (p - 1)/(p·v)
    with an interleaved schedule; a single stage also holds the fp32 logits, 4·s·b·V/t.
    """
    return memory.activation_bytes(
        shape,
        tensor_parallel=layouts.tensor_parallel,
        pipeline_parallel=layouts.pipeline_parallel,
        context_parallel=layouts.context_parallel,
        micro_batch=layouts.micro_batch,
        micro_batches=layouts.micro_batches,
        interleave=layouts.interleave,
        sequence_split=layouts.sequence_split,
        recomputation=layouts.recomputation,
        flash_attention=layouts.flash_attention,
        first_stage_layers=first_stage_layers,
        precision=precision,
        selective_kept=selective_kept,
        logit_bytes=logit_bytes,
    )
