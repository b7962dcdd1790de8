"""What a run takes on a cluster: the FLOPs of training, its wall-clock time, accelerator-hours and cost at a
given MFU, and the accelerator-hours of serving (decoding).

Sources: Kaplan et al. 2020 (training FLOPs with the attention term), Chowdhery et al. 2022 (PaLM, MFU),
Korthikanti et al. 2022 (recomputation's FLOPs) and Pope et al. 2022 (decoding bound by memory bandwidth).
The memory a run needs is `memory`'s; the step time of a layout, from which the MFU follows, `performance`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from service.core import units
from service.core import validation as v
from service.core.memory import RECOMPUTATION_MODES
from service.core.shape import SERVING_BYTES_PER_PARAM, ModelShape, check_shape


def training_flops(params: float, tokens: float, shape: ModelShape | None = None) -> float:
    """FLOPs to train `params` parameters on `tokens` tokens.

    Without a shape, C = 6·N·D (forward 2·N·D, backward 4·N·D; Kaplan et al. 2020, §2.1). With a shape,
    Kaplan et al. 2020 Eq. 2.2 adds the attention scores: a forward pass costs 2·N + 2·n_layer·n_ctx·d_attn
    per token and training three forward passes, so C = D·(6·N + 6·n_layer·n_ctx·d_attn), d_attn the
    shape's attention width (d_model in a plain transformer). N counts the parameters a token passes
    through: all of a dense model's, the active ones of a mixture of experts (N · active/total of the
    shape), and the multi-token prediction modules' with their attention (DeepSeek-V3 §2.2).
    """
    N = v.positive("params", params, maximum=units.MAX_PARAMS)
    D = v.positive("tokens", tokens, maximum=units.MAX_TOKENS)
    if 6.0 * N * D == 0:  # both so small that their product underflows
        raise v.InvalidInput("tokens", f"{D:g} tokens of a {N:g}-parameter model are too few FLOPs to count")
    if shape is None:
        return 6.0 * N * D
    check_shape(shape)
    active = N * shape.active_params / shape.params + shape.mtp_active_params
    attention_layers = shape.layers + (shape.mtp_depth or 0)
    C = D * (6.0 * active + 6.0 * attention_layers * shape.sequence_length * shape.attention_width)
    if C > units.MAX_FLOPS:
        raise v.InvalidInput("shape", f"the attention term takes training past {units.MAX_FLOPS:g} FLOPs")
    return C


@dataclass(frozen=True)
class Runtime:
    flops: float
    pf_days: float
    seconds: float
    days: float
    accelerator_hours: float


def training_runtime(flops: float, accelerators: int, peak_flops_per_second: float, mfu: float) -> Runtime:
    """Wall-clock time and accelerator-hours to deliver `flops` of model FLOPs.

    Each accelerator does useful work at its dense peak times the model FLOPs utilisation (MFU, Chowdhery et
    al. 2022, PaLM, App. B), so seconds = flops / (accelerators · peak · MFU) and accelerator-hours =
    accelerators · seconds / 3600. Restarts, evaluation and failures are not in the MFU; papers' reported
    GPU-hours include them and run higher.
    """
    total = v.positive("flops", flops, maximum=units.MAX_FLOPS)
    count = v.whole_at_most("accelerators", accelerators, units.MAX_ACCELERATORS)
    rate = units.effective_flops_per_second(peak_flops_per_second, mfu)
    # A peak · MFU near the smallest float makes the time overflow; no real accelerator is that slow.
    seconds = total / (count * rate) if count * rate > 0 else math.inf
    accelerator_hours = count * seconds / units.SECONDS_PER_HOUR
    if not math.isfinite(accelerator_hours):
        raise v.InvalidInput(
            "peak_flops_per_second", f"peak · mfu = {rate:g} FLOP/s is too slow for the time to be counted"
        )
    return Runtime(
        flops=total,
        pf_days=units.flops_to_pf_days(total),
        seconds=seconds,
        days=seconds / units.SECONDS_PER_DAY,
        accelerator_hours=accelerator_hours,
    )


def training_cost(accelerator_hours: float, price_per_hour: Decimal) -> Decimal:
    """Accelerator-hours times the price per accelerator-hour, exact to the cent."""
    return units.cost_of_accelerator_hours(accelerator_hours, price_per_hour)


# Sequences decoded together: servers batch tens to hundreds; a million is far past any compute bound.
MAX_INFERENCE_BATCH = 1_000_000
DECODING_BOUNDS = ("memory_bandwidth", "compute")


@dataclass(frozen=True)
class Decoding:
    """Serving `tokens` on one kind of accelerator: its throughput, and what bounds it."""

    batch: int
    tokens_per_second: float  # of one accelerator
    bound: str  # memory_bandwidth or compute
    accelerator_hours: float


def decoding_runtime(
    params: float,
    tokens: float,
    memory_bandwidth_bytes_per_second: float,
    batch: int = 1,
    peak_flops_per_second: float | None = None,
) -> Decoding:
    """Accelerator-hours to generate `tokens` with a model of `params`, `batch` sequences decoded together.

    Each decoding step reads every weight from memory once (SERVING_BYTES_PER_PARAM bytes each) and gives one
    token to each sequence of the batch; each token costs 2·N FLOPs (Kaplan et al. 2020). The slower of the
    two sets the pace (the roofline): per accelerator

        tokens/s = min(batch · bandwidth / (2 bytes · N), peak / (2·N)).

    At small batches the weights' reads dominate: decoding is memory-bandwidth bound (Pope et al. 2022,
    "Efficiently Scaling Transformer Inference"). Both bounds are ideals, with the model sharded over as many
    accelerators as it needs at no cost: the KV cache's reads, prompts (processed in parallel, compute bound)
    and batches that are not full are not counted, so real serving takes more hours, not fewer. Without a
    peak, only the bandwidth bounds.
    """
    N = v.positive("params", params, maximum=units.MAX_PARAMS)
    D = v.positive("tokens", tokens, maximum=units.MAX_TOKENS * 1e3)
    bandwidth = v.positive("memory_bandwidth_bytes_per_second", memory_bandwidth_bytes_per_second)
    count = v.whole_at_most("batch", batch, MAX_INFERENCE_BATCH)
    bound_argument = {
        "memory_bandwidth": "memory_bandwidth_bytes_per_second",
        "compute": "peak_flops_per_second",
    }
    rates = {"memory_bandwidth": count * bandwidth / (SERVING_BYTES_PER_PARAM * N)}
    if peak_flops_per_second is not None:
        peak = v.positive(
            "peak_flops_per_second", peak_flops_per_second, maximum=units.MAX_PEAK_FLOPS_PER_SECOND
        )
        rates["compute"] = peak / (2 * N)
    bound = min(rates, key=rates.__getitem__)
    # A bandwidth or peak near the smallest float makes the time overflow; no real accelerator is that slow.
    hours = D / rates[bound] / units.SECONDS_PER_HOUR if rates[bound] > 0 else math.inf
    if not math.isfinite(hours):
        raise v.InvalidInput(bound_argument[bound], f"{rates[bound]:g} tokens/s is too slow to be counted")
    return Decoding(batch=count, tokens_per_second=rates[bound], bound=bound, accelerator_hours=hours)


def recomputation_flops_factor(recomputation: str) -> float:
    """Hardware FLOPs per model FLOP for an activation-recomputation mode (Korthikanti et al. 2022).

    Full recomputation runs every forward pass twice: 2 + 2 + 4 = 8 FLOPs per parameter and token instead of
    6, a factor 8/6. Selective recomputation redoes only the attention softmax and dropout, whose cost the
    paper measures at a few percent; it is counted as 1. MFU is quoted against the 6·N·D model FLOPs, so this
    factor converts to hardware FLOPs (HFU), not to wall-clock time at a given MFU.
    """
    mode = v.choice("recomputation", recomputation, RECOMPUTATION_MODES)
    return 8.0 / 6.0 if mode == "full" else 1.0
