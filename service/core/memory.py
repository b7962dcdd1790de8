"""What training takes of an accelerator's memory: the model states (weights, gradients and optimizer state,
by precision and optimizer, sharded by ZeRO) and the activations (by tensor, sequence, context and pipeline
parallelism, recomputation and FlashAttention), for one layout (`training_memory`) or many (the step model's
`activation_bytes`).

Sources: Rajbhandari et al. 2020 (ZeRO, memory of model states) and Korthikanti et al. 2022 (activation
memory and recomputation). Memory figures are bytes; the ZeRO paper's "GB" are 1e9 bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from service.core import units
from service.core import validation as v
from service.core.shape import ModelShape, check_shape

Array = npt.NDArray[np.float64]
Flags = npt.NDArray[np.bool_]
Codes = npt.NDArray[np.int64]

# Memory of one accelerator: 1e15 bytes (1 PB) is thousands of times the largest device sold today.
MAX_MEMORY_BYTES = 1e15

# Bytes of optimizer state per parameter under bf16/fp16 mixed precision: K in Rajbhandari et al. 2020
# (ZeRO), §3.1. Adam keeps an fp32 master copy of the weights, the momentum and the variance (4 + 4 + 4 = 12);
# SGD with momentum keeps the fp32 master copy and the momentum (4 + 4 = 8). In pure fp32 training the weights
# are already fp32, so the master copy disappears and K shrinks by 4 (see `_PRECISION_STORAGE`).
OPTIMIZER_STATE_BYTES: dict[str, int] = {
    "adam": 12,
    "adamw": 12,
    "sgd-momentum": 8,
}
FP32_MASTER_WEIGHT_BYTES = 4

# Bytes per parameter of weights and of gradients, and whether the optimizer keeps a separate fp32 master
# copy. TF32 is a tensor-core math mode over fp32 storage. FP8 recipes (e.g. Transformer Engine) compute in
# fp8 but keep higher-precision weights, gradients and optimizer state, so fp8 is counted as bf16 mixed
# precision; recipes that also cache fp8 weight copies use a little more.
_PRECISION_STORAGE: dict[str, tuple[int, int, bool]] = {
    "bf16": (2, 2, True),
    "fp16": (2, 2, True),
    "fp8": (2, 2, True),
    "fp32": (4, 4, False),
    "tf32": (4, 4, False),
}

RECOMPUTATION_MODES = ("none", "selective", "full")  # coded 0, 1, 2 in the step model's arrays
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-accelerator training memory. `min_accelerators` counts accelerators (data-parallel degree ·
    tensor-parallel size); `min_data_parallel` is the data-parallel degree alone."""

    zero_stage: int
    data_parallel: int
    bytes_per_param: float
    model_states_bytes: float
    activations_bytes: float
    total_bytes: float
    capacity_bytes: float
    fits: bool
    min_accelerators: int | None
    tensor_parallel: int = 1
    min_data_parallel: int | None = None
    sequence_parallel: bool = True


def training_memory(
    params: float,
    memory_bytes: float,
    *,
    data_parallel: int = 1,
    zero_stage: int = 0,
    optimizer: str = "adam",
    precision: str = "bf16",
    shape: ModelShape | None = None,
    recomputation: str = "none",
    tensor_parallel: int = 1,
    sequence_parallel: bool = True,
    flash_attention: bool = True,
) -> MemoryEstimate:
    """Training memory per accelerator, whether it fits, and the smallest data-parallel degree that fits.

    Model states, Rajbhandari et al. 2020 (ZeRO) §3.1 and Fig. 1, with Ψ parameters per accelerator, N_d the
    data-parallel degree, K optimizer bytes per parameter and w, g the bytes of a weight and of a gradient
    (2 and 2 in bf16/fp16 mixed precision; 4 and 4 in fp32 or tf32, where K also loses the fp32 master copy;
    fp8 is counted as bf16 mixed precision, since fp8 recipes keep higher-precision copies for the optimizer):
    stage 0 (plain data parallelism) (w+g+K)·Ψ; stage 1 (w+g)·Ψ + K·Ψ/N_d; stage 2 w·Ψ + (g+K)·Ψ/N_d;
    stage 3 (w+g+K)·Ψ/N_d. With tensor parallelism of size t each accelerator holds Ψ = params/t, as in
    ZeRO's Table 1 with model parallelism (replicated layer norms and biases are ignored).

    Activations are the cluster model's (`activation_bytes`) on one pipeline stage of every layer and one
    micro-batch of `shape.micro_batch` sequences, so a plan at a given MFU reports what the layout search
    checks for the same layout: for a plain transformer trained with dropout Korthikanti et al. 2022 Table
    2's s·b·h·(10 + 24/t) a layer with tensor parallelism alone, s·b·h·34/t with sequence parallelism (the
    default), the scores' 5·a·s²·b/t only without FlashAttention or recomputation; without dropout (the
    default) 8 and 4 instead of 10 and 5. Memory fragmentation is not modelled.

    The data-parallel degree needed is the smallest N_d with fixed + sharded/N_d ≤ memory_bytes, solved in
    closed form; None when no degree up to `units.MAX_ACCELERATORS` fits (always so at stage 0 when it does
    not fit at N_d = 1, since nothing is sharded).
    """
    psi_total = v.positive("params", params, maximum=units.MAX_PARAMS)
    capacity = v.positive("memory_bytes", memory_bytes, maximum=MAX_MEMORY_BYTES)
    N_d = v.whole_at_most("data_parallel", data_parallel, units.MAX_ACCELERATORS)
    stage = v.whole_at_most("zero_stage", zero_stage, ZERO_STAGES[-1], minimum=ZERO_STAGES[0])
    w, g, K = state_bytes(precision, optimizer)
    mode = v.choice("recomputation", recomputation, RECOMPUTATION_MODES)
    t = v.whole_at_most("tensor_parallel", tensor_parallel, units.MAX_ACCELERATORS)
    for name, flag in (("sequence_parallel", sequence_parallel), ("flash_attention", flash_attention)):
        if not isinstance(flag, bool):
            raise v.InvalidInput(name, f"must be true or false, got {flag!r}")
    activations = _activations_alone(
        shape,
        mode,
        t,
        sequence_parallel=sequence_parallel,
        flash_attention=flash_attention,
        precision=precision,
    )

    Psi = psi_total / t
    replicated_per_param, sharded_per_param = zero_split(w, g, K)[stage]
    replicated = replicated_per_param * Psi
    sharded = sharded_per_param * Psi

    def model_states_at(degree: int) -> float:
        return replicated + sharded / degree

    def fits_at(degree: int) -> bool:
        return model_states_at(degree) + activations <= capacity

    model_states = model_states_at(N_d)
    min_data_parallel = _smallest_degree(fits_at, replicated + activations, sharded, capacity)
    return MemoryEstimate(
        zero_stage=stage,
        data_parallel=N_d,
        bytes_per_param=float(w + g + K),
        model_states_bytes=model_states,
        activations_bytes=activations,
        total_bytes=model_states + activations,
        capacity_bytes=capacity,
        fits=fits_at(N_d),
        min_accelerators=None if min_data_parallel is None else min_data_parallel * t,
        tensor_parallel=t,
        min_data_parallel=min_data_parallel,
        sequence_parallel=sequence_parallel,
    )


def state_bytes(precision: str, optimizer: str) -> tuple[int, int, int]:
    """Bytes per parameter of a weight, a gradient and the optimizer state (w, g, K in ZeRO's §3.1) at a
    training precision: K loses the fp32 master copy where the weights are fp32 already."""
    K_mixed = OPTIMIZER_STATE_BYTES[v.choice("optimizer", optimizer, tuple(OPTIMIZER_STATE_BYTES))]
    w, g, master_copy = _PRECISION_STORAGE[v.choice("precision", precision, tuple(_PRECISION_STORAGE))]
    return w, g, K_mixed if master_copy else K_mixed - FP32_MASTER_WEIGHT_BYTES


def zero_split(w: int, g: int, K: int) -> tuple[tuple[int, int], ...]:
    """Per ZeRO stage 0-3, the bytes per parameter every data-parallel rank keeps and those sharded over
    the ranks (Rajbhandari et al. 2020, Fig. 1): stage 1 shards the optimizer state, 2 the gradients too,
    3 the weights too."""
    return ((w + g + K, 0), (w + g, K), (w, g + K), (0, w + g + K))


def activation_bytes(
    shape: ModelShape,
    *,
    tensor_parallel: Array,
    pipeline_parallel: Array,
    context_parallel: Array,
    micro_batch: Array,
    micro_batches: Array,
    interleave: Array,
    sequence_split: Array,
    recomputation: Codes,
    flash_attention: Flags,
    first_stage_layers: Array,
    precision: str,
    selective_kept: float = 1.0,
    logit_bytes: float = 4.0,
) -> Array:
    """Activation memory of the first pipeline stage, the fullest under 1F1B (Korthikanti et al. 2022
    §4.2.3), for many layouts at once: the one model of activations, for the cluster model's step
    (`step_terms.activation_bytes`) and for `training_memory`.

    Notes
    -----
    Per layer (Korthikanti et al. 2022 Table 2, generalised to grouped K/V and any MLP), with s the
    sequence length over the c context-parallel ranks, b the micro-batch, h d_model, a the heads and t the
    tensor-parallel degree: inside the tensor-parallel blocks, Q, K, V and the output projection's input,
    (4 + 4·kv/a)·s·b·h, and the MLP's (4 or, with SwiGLU, 6)·s·b·ffn, split t ways; outside them, the norms'
    and blocks' inputs, 8·s·b·h, and with dropout its two masks, 2·s·b·h more, split only by sequence
    parallelism (`sequence_split` t, else 1). A plain transformer with dropout thus gives Table 2's
    s·b·h·(10 + 24/t) with tensor parallelism alone and s·b·h·34/t with sequence parallelism. Without
    FlashAttention the scores add 4·a·s²·b/t, 5 with dropout's mask (Table 2's 5as/h term), which selective
    recomputation drops; full recomputation keeps each layer's input,
    2·s·b·h (split by sequence parallelism), plus one layer's working set. The first stage's layers hold
    min(p, m) micro-batches in flight, times 1 + (p - 1)/(p·v) with an interleaved schedule; a single stage
    also holds the logits, `logit_bytes`·s·b·V/t (4: Megatron's fused cross-entropy keeps fp32 ones).
    Selective recomputation keeps `selective_kept` of a layer's tensors besides the scores it drops (1 in
    Megatron's, which redoes attention alone). Training in fp8 caches the inputs of the output projection and
    the MLP's down-projection in fp8; a routed MLP keeps every row it runs, its dispatched and combined
    rows and fp32 router logits.
    """
    t, p, c, b = tensor_parallel, pipeline_parallel, context_parallel, micro_batch
    sp_split, rec, flash = sequence_split, recomputation, flash_attention
    full = rec == 2
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
    # Outside the blocks: the two norms' inputs (2 + 2), the two blocks' inputs (2 + 2) and, with dropout,
    # its two 1-byte masks; the scores without FlashAttention: softmax input and output (2 + 2) and, with
    # dropout, its mask (Korthikanti et al. 2022 Table 2's 10 and 5, which count dropout).
    masks = 1.0 if shape.dropout else 0.0
    outside = 8.0 + 2.0 * masks
    per_layer = sbh * (outside / sp_split + inside_blocks / t) + sc * b * mlp_bytes / t
    # (With FlashAttention everywhere, as a search has unless told otherwise, the scores' term is 0 and
    # adding it would change nothing.)
    scores = (4.0 + masks) * a * sc * s * b / t
    working = per_layer if flash.all() else per_layer + np.where(flash | (rec >= 1), 0.0, scores)
    kept = working if selective_kept == 1.0 else np.where(rec == 1, selective_kept * per_layer, working)
    stored = np.where(full, 2.0 * sbh / sp_split, kept)
    in_flight = np.minimum(p, micro_batches) * np.where(interleave > 1, 1 + (p - 1) / (p * interleave), 1.0)
    activations = first_stage_layers * stored * in_flight + np.where(full, working, 0.0)
    vocab = float(shape.vocabulary or 0)
    logits = np.where(p > 1, 0.0, logit_bytes * sc * b * vocab / t)  # on the only stage
    total: Array = activations + logits
    return total


def _activations_alone(
    shape: ModelShape | None,
    mode: str,
    tensor_parallel: int,
    *,
    sequence_parallel: bool,
    flash_attention: bool,
    precision: str,
) -> float:
    """`activation_bytes` of a shape (checked first; 0 without one) on one pipeline stage, one micro-batch
    of `shape.micro_batch` sequences, without context parallelism."""
    if shape is None:
        return 0.0
    check_shape(shape)
    if shape.heads % tensor_parallel:
        # Megatron splits attention heads across tensor-parallel ranks.
        raise v.InvalidInput(
            "tensor_parallel", f"must divide the heads ({shape.heads}), got {tensor_parallel}"
        )
    t = float(tensor_parallel)

    def one(value: float) -> Array:
        return np.array([value], dtype=np.float64)

    return float(
        activation_bytes(
            shape,
            tensor_parallel=one(t),
            pipeline_parallel=one(1.0),
            context_parallel=one(1.0),
            micro_batch=one(float(shape.micro_batch)),
            micro_batches=one(1.0),
            interleave=one(1.0),
            sequence_split=one(t if sequence_parallel and t > 1 else 1.0),
            recomputation=np.array([RECOMPUTATION_MODES.index(mode)], dtype=np.int64),
            flash_attention=np.array([flash_attention]),
            first_stage_layers=one(float(shape.layers)),
            precision=precision,
        )[0]
    )


def _smallest_degree(
    fits_at: Callable[[int], bool], fixed: float, sharded: float, capacity: float
) -> int | None:
    """Smallest N_d >= 1 with fixed + sharded/N_d <= capacity, or None when even MAX_ACCELERATORS is too few.

    The closed form N_d = ceil(sharded / (capacity - fixed)) can be one off in floating point, so it only
    seeds a bisection on `fits_at`, which is monotone in N_d: a few dozen evaluations at most.
    """
    if fits_at(1):
        return 1
    if sharded == 0 or fixed >= capacity:
        return None
    estimate = sharded / (capacity - fixed)
    most = units.MAX_ACCELERATORS
    guess = min(max(2, math.ceil(estimate)), most) if math.isfinite(estimate) else most
    if fits_at(guess):
        if not fits_at(guess - 1):
            return guess
        too_few, enough = 1, guess - 1
    elif guess == most or not fits_at(most):
        return None
    else:
        too_few, enough = guess, most
    while enough - too_few > 1:
        middle = (too_few + enough) // 2
        if fits_at(middle):
            enough = middle
        else:
            too_few = middle
    return enough
