"""The planning engine: a budget and a rule in, an allocation with its estimate and caveats out.

This module only composes the others (units, laws, allocate, cluster, hyper, caveats); the formulas and
their sources live there. Inputs are resolved values (a hardware profile, a law), never names to look up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import numpy as np

from service.core import allocate, caveats, cluster, hyper, performance, units, wall_clock
from service.core import validation as v
from service.core.cluster import MemoryEstimate, ModelShape, Runtime
from service.core.fit import CONFIDENCE
from service.core.hyper import Hyperparameters, hyperparameters_for
from service.core.laws import (
    DATA_CONSTRAINED_LAW,
    DEFAULT_LAW,
    PUBLISHED_LAWS,
    FittedRange,
    MoEDesign,
    ScalingLaw,
)
from service.core.wall_clock import ClusterRun, Reliability, Sizing

# 1.1: allocations with a bootstrapped law carry intervals. 1.2: activations without sequence parallelism,
# DeepSeek's hints at their own C = M·D when the shape is known (and saying which C), the
# repetition_constants_from_c4 caveat, extrapolation distances near the range in percent or as a factor.
# 1.3: inference-aware allocation of a training budget; inference FLOPs, and the cost of serving.
# 2.0: wall-clock time from the cluster model (core/performance.py) unless an MFU is given; layout search,
# goodput, and the cluster size chosen when none is given.
ENGINE_VERSION = "2.0.0"
# The MFU of plans that give one but no figure (the cluster model sets the pace otherwise), and where a budget
# in money, hours or days starts its search for what the model achieves.
DEFAULT_MFU = 0.4
# Network of a profile that does not give one: an 8-accelerator node of DGX A100 class (NVLink 3, one
# 200 Gb/s NIC per accelerator), the most common installation; the answer says it was assumed.
ASSUMED_NETWORK = (8, 300e9, 25e9)
# Memory bandwidth of hardware that gives none: the peak over this many FLOPs per byte, as on an H100 SXM
# (989 TFLOP/s over 3.35 TB/s); element-wise work is a tenth or so of a step, so a rough figure does.
ASSUMED_FLOPS_PER_MEMORY_BYTE = 300
# A shape whose parameters are within this fraction of the run's is modelled as given; further off, it is
# scaled to the run's size (the shape's parameters leave out biases and norms, a fraction of a percent).
SHAPE_TOLERANCE = 0.10
DEFAULT_PRECISION = "bf16"
# Past this many epochs a repeated token is worth less than a tenth of a fresh one: the marginal value of
# data, dD'/dD = exp(-R_D/R_D*), falls below 0.1 at R_D = R_D*·ln 10 repeats (Muennighoff et al. 2023, Eq. 5).
EPOCHS_WITHOUT_GAIN = 1 + allocate.REPEATED_TOKENS_DECAY * math.log(10)


@dataclass(frozen=True)
class Hardware:
    """An accelerator as the engine needs it: dense peaks per precision, memory, and a price if known."""

    name: str
    peak_flops: Mapping[str, float]
    memory_bytes: float
    slug: str | None = None
    price_per_hour: Decimal | None = None
    currency: str | None = None
    memory_bandwidth_bytes_per_second: float | None = None  # what serving needs (cluster.decoding_runtime)
    # As installed (core/performance.py): None where the profile does not say.
    accelerators_per_node: int | None = None
    scale_up_bandwidth_bytes_per_second: float | None = None
    scale_out_bandwidth_bytes_per_second: float | None = None
    failures_per_accelerator_hour: float | None = None


# Layout fields that were top-level cluster options before the layout object, and still work.
DEPRECATED_LAYOUT_FIELDS = ("tensor_parallel", "zero_stage", "recomputation", "sequence_parallel")


@dataclass(frozen=True)
class Cluster:
    """The hardware a run is planned on, and how it is used. Without `mfu`, the cluster model
    (core/performance.py) predicts the pace from the layout, searching the fields `layout` leaves out; without
    `accelerators`, the planner chooses how many (`max_accelerators`, `deadline_days`)."""

    hardware: Hardware
    accelerators: int | None = None
    mfu: float | None = None
    precision: str = DEFAULT_PRECISION
    zero_stage: int | None = None
    optimizer: str = "adam"
    shape: cluster.ModelShape | None = None
    recomputation: str | None = None
    tensor_parallel: int | None = None
    sequence_parallel: bool | None = None
    layout: Mapping[str, Any] = field(default_factory=dict)
    max_accelerators: int | None = None
    deadline_days: float | None = None  # for choosing the accelerator count of a model already chosen
    checkpoint_write_bytes_per_second: float | None = None
    restart_seconds: float | None = None
    # What a budget in money, hours or days is turned into FLOPs at when the model sets the pace: the
    # allocation's FLOPs per accelerator-second over the peak, found by `plan`.
    utilisation: float | None = None
    calibration: performance.Calibration = performance.CALIBRATION  # a stored plan's, when it replays
    # The parameters a token passes through, for a mixture of experts given without its shape: the FLOPs
    # follow them, the memory the total (the cluster model assumes a fine-grained shape of both).
    active_params: float | None = None

    @property
    def fixed_layout(self) -> dict[str, Any]:
        """The layout fields the request fixes, the deprecated top-level ones included."""
        fixed = {
            name: getattr(self, name) for name in DEPRECATED_LAYOUT_FIELDS if getattr(self, name) is not None
        }
        return {**fixed, **self.layout}

    @property
    def peak_flops_per_second(self) -> float:
        peak = self.hardware.peak_flops.get(self.precision)
        if peak is None:
            available = ", ".join(sorted(self.hardware.peak_flops)) or "none"
            raise v.InvalidInput(
                "precision", f"{self.hardware.name} has no {self.precision} peak (available: {available})"
            )
        return peak

    @property
    def data_parallel(self) -> int:
        """Under a given MFU: accelerators over the tensor-parallel degree."""
        t = int(self.fixed_layout.get("tensor_parallel", 1))
        count = self.accelerators or 1
        if count % t:
            where = "layout.tensor_parallel" if "tensor_parallel" in self.layout else "tensor_parallel"
            raise v.InvalidInput(where, f"must divide accelerators ({count}), got {t}")
        return count // t


@dataclass(frozen=True)
class NamedLaw:
    law: ScalingLaw
    slug: str | None = None
    name: str | None = None
    source: str | None = None
    fitted_range: FittedRange | None = None
    note: str | None = None
    samples: tuple[ScalingLaw, ...] = ()  # bootstrap fits of a fitted law: plans with it get intervals
    # Whether the law's N counts the embedding and output layers (PublishedLaw.counts_embeddings). Inline
    # and fitted laws say nothing about it: taken as counting them, as Hoffmann et al. 2022 and the
    # 6·N·D the service budgets with do.
    counts_embeddings: bool = True
    moe: MoEDesign | None = None  # the mixture-of-experts design an MoE law assumes; None for dense laws


# Intervals propagate through at most this many bootstrap fits (the first ones; resamples are exchangeable):
# a data-constrained allocation takes ~0.3 ms a fit, and laws may carry 5 000.
MAX_INTERVAL_FITS = 1000


@dataclass(frozen=True)
class Intervals:
    """Percentile intervals of an allocation over a law's bootstrap fits: the same budget allocated with each
    fit. None where the plan fixes the figure (a fixed model's params and tokens)."""

    confidence: float
    samples: int  # bootstrap fits that allocated the budget (a fit can refuse it, e.g. a target under its E)
    params: tuple[float, float] | None
    tokens: tuple[float, float] | None
    predicted_loss: tuple[float, float]


def _intervals_over(
    samples: Sequence[ScalingLaw],
    outcome: Callable[[ScalingLaw], allocate.Allocation],
    *,
    fixed: bool = False,
) -> Intervals | None:
    """The intervals of what `outcome` gives for each bootstrap fit (None without fits that allocate)."""
    allocations = []
    for sample in samples[:MAX_INTERVAL_FITS]:
        try:
            allocations.append(outcome(sample))
        except v.InvalidInput:
            continue
    if len(allocations) < 2:
        return None
    tail = 100 * (1 - CONFIDENCE) / 2

    def interval(name: str) -> tuple[float, float]:
        low, high = np.percentile([getattr(item, name) for item in allocations], [tail, 100 - tail])
        return float(low), float(high)

    return Intervals(
        confidence=CONFIDENCE,
        samples=len(allocations),
        params=None if fixed else interval("params"),
        tokens=None if fixed else interval("tokens"),
        predicted_loss=interval("predicted_loss"),
    )


def frontier_intervals(law: NamedLaw, flops: float) -> Intervals | None:
    """The spread of the compute-optimal allocation at `flops` over the law's bootstrap fits (None without
    fits): the uncertainty band of a fitted law's frontier."""
    return _intervals_over(law.samples, lambda sample: allocate.compute_optimal(flops, sample))


def published(slug: str) -> NamedLaw:
    entry = PUBLISHED_LAWS[slug]
    return NamedLaw(
        entry.law,
        entry.slug,
        entry.name,
        entry.source,
        entry.fitted_range,
        entry.note or None,
        counts_embeddings=entry.counts_embeddings,
        moe=entry.moe,
    )


@dataclass(frozen=True)
class Estimate:
    """What training `params` on `tokens` takes on a cluster."""

    params: float
    tokens: float
    cluster: Cluster  # hides the module in this class body: hence Runtime, MemoryEstimate imported by name
    runtime: Runtime
    hardware_flops: float
    price_per_hour: Decimal | None
    currency: str | None
    cost: Decimal | None
    memory: MemoryEstimate
    caveats: list[caveats.Caveat]
    law: NamedLaw | None = None
    predicted_loss: float | None = None
    run: ClusterRun | None = None  # the cluster model's run; None when the request gives an MFU
    sizing: Sizing | None = None  # how the accelerator count was chosen, when the request left it out
    shape: ModelShape | None = None  # the shape the run was modelled with (given or assumed)

    @property
    def accelerators(self) -> int:
        if self.run is not None:
            return self.run.accelerators
        assert self.cluster.accelerators is not None, "an MFU estimate has its accelerators"
        return self.cluster.accelerators

    @property
    def mfu(self) -> float:
        """The MFU given, or the one the model predicts for the chosen layout (steady state, PaLM's count)."""
        if self.run is not None:
            return self.run.search.best.mfu
        assert self.cluster.mfu is not None
        return self.cluster.mfu


def estimate(
    params: float,
    tokens: float,
    on: Cluster,
    *,
    price_per_hour: Decimal | None = None,
    currency: str | None = None,
    law: NamedLaw | None = None,
) -> Estimate:
    """Time, accelerator-hours, cost and memory of a run; `price_per_hour` overrides the hardware's.

    The time comes from the cluster model (the best layout's step time, goodput, and the accelerator count
    chosen when the cluster does not give one), or from the cluster's MFU when it gives one (on the count
    the model chooses, when the cluster gives none). With a `law`,
    also the loss it predicts for this model size and token count.
    """
    flops = _training_flops(params, tokens, on)
    price, price_currency = _price(on.hardware, price_per_hour, currency)
    notes: list[caveats.Caveat] = []
    run: ClusterRun | None = None
    sizing: Sizing | None = None
    shape = on.shape
    if on.mfu is None:
        run, sizing, shape, notes = model_run(params, tokens, on)
        runtime = Runtime(
            flops=flops,
            pf_days=units.flops_to_pf_days(flops),
            seconds=run.seconds,
            days=run.seconds / units.SECONDS_PER_DAY,
            accelerator_hours=run.accelerator_hours,
        )
        memory = _memory_of(run.search.best, on)
        hardware_flops = run.search.best.hardware_flops * run.steps
    else:
        if on.accelerators is None:  # the cluster model chooses how many; the MFU given sets their pace
            chosen, sizing, shape, notes = model_run(params, tokens, on)
            on = replace(on, accelerators=chosen.accelerators)
        assert on.accelerators is not None
        assert on.mfu is not None
        mfu = on.mfu
        runtime = cluster.training_runtime(flops, on.accelerators, on.peak_flops_per_second, mfu)
        fixed = on.fixed_layout  # the layout given, as far as the memory of plans at an MFU counts it
        memory = cluster.training_memory(
            params,
            on.hardware.memory_bytes,
            data_parallel=on.data_parallel,
            zero_stage=fixed.get("zero_stage", 0),
            optimizer=on.optimizer,
            precision=on.precision,
            shape=on.shape,
            recomputation=fixed.get("recomputation", "none"),
            tensor_parallel=fixed.get("tensor_parallel", 1),
            sequence_parallel=fixed.get("sequence_parallel", True),
        )
        hardware_flops = flops * cluster.recomputation_flops_factor(fixed.get("recomputation", "none"))
        notes += [*caveats.unusual_mfu(mfu), caveats.mfu_given(mfu)]
        notes += _does_not_fit(memory, on)
    cost = None if price is None else cluster.training_cost(runtime.accelerator_hours, price)
    if law is not None and law.fitted_range is not None:
        notes += caveats.extrapolation(law.fitted_range, params, tokens, flops, law.slug or "the law")
    return Estimate(
        params=params,
        tokens=tokens,
        cluster=on,
        runtime=runtime,
        hardware_flops=hardware_flops,
        price_per_hour=price,
        currency=price_currency,
        cost=cost,
        memory=memory,
        caveats=notes,
        law=law,
        predicted_loss=None if law is None else law.law.loss(_law_params(law, params, on), tokens),
        run=run,
        sizing=sizing,
        shape=shape,
    )


def _law_params(law: NamedLaw, params: float, on: Cluster) -> float:
    """The N a law's loss takes for a model of `params`: a mixture-of-experts law's are the active ones (the
    shape's, or `active_params`, or its design's share of the total)."""
    if law.moe is None:
        return params
    if on.shape is not None and on.shape.mixture_of_experts:
        return params * on.shape.non_embedding_active_params / on.shape.params
    if on.active_params is not None:
        return on.active_params
    return params / law.moe.total_to_active_params


def _training_flops(params: float, tokens: float, on: Cluster) -> float:
    """C = 6·N·D with N the active parameters (cluster.training_flops), given by the shape or, without one,
    by `active_params`."""
    if on.active_params is not None and on.shape is None:
        active = v.positive("active_params", on.active_params, maximum=units.MAX_PARAMS)
        if active > params:
            raise v.InvalidInput("active_params", f"cannot exceed params ({params:.4g}), got {active:.4g}")
        return cluster.training_flops(active, tokens)
    return cluster.training_flops(params, tokens, on.shape)


def model_run(
    params: float, tokens: float, on: Cluster
) -> tuple[ClusterRun, Sizing | None, cluster.ModelShape, list[caveats.Caveat]]:
    """The cluster model's run of `params` on `tokens`: on the cluster's accelerators, or on the count it
    chooses; with the shape given, or one assumed (and said so)."""
    notes: list[caveats.Caveat] = []
    notes += caveats.deprecated_layout_fields(
        [name for name in DEPRECATED_LAYOUT_FIELDS if getattr(on, name) is not None]
    )
    shape = on.shape
    fixed = on.fixed_layout
    if shape is None:
        multiple = fixed.get("tensor_parallel", 1)
        shape = (
            wall_clock.assumed_shape(params, heads_multiple=multiple)
            if on.active_params is None or on.active_params >= params
            else wall_clock.assumed_moe_shape(params, on.active_params, heads_multiple=multiple)
        )
        notes.append(caveats.assumed_shape(shape))
    elif abs(math.log(shape.params / params)) > math.log(1 + SHAPE_TOLERANCE):
        # The step time is of the model that is trained: a shape of another size (an allocation's size is
        # the budget's, not the shape's) is scaled to it, keeping its proportions.
        given = shape
        shape = wall_clock.scaled_shape(given, params, heads_multiple=fixed.get("tensor_parallel", 1))
        notes.append(caveats.shape_scaled(given, shape, params))
    performance.check_model_fields(shape, fixed)  # at any count: said as such, not as no count fitting
    machine, assumed = _machine(on)
    if assumed:
        notes.append(caveats.assumed_network(on.hardware.name, machine))
    batch = on.layout.get("global_batch") or _default_global_batch(params, tokens, shape)
    reliability = Reliability(
        failures_per_accelerator_hour=_or(
            on.hardware.failures_per_accelerator_hour, Reliability.failures_per_accelerator_hour
        ),
        checkpoint_write_bytes_per_second=_or(
            on.checkpoint_write_bytes_per_second, Reliability.checkpoint_write_bytes_per_second
        ),
        restart_seconds=_or(on.restart_seconds, Reliability.restart_seconds),
    )

    def run_at(count: int) -> ClusterRun:
        return wall_clock.run_on_cluster(
            params,
            tokens,
            shape,
            machine,
            count,
            global_batch=batch,
            layout=fixed,
            reliability=reliability,
            precision=on.precision,
            optimizer=on.optimizer,
            calibration=on.calibration,
        )

    try:
        if on.accelerators is not None:
            return run_at(on.accelerators), None, shape, notes
        sizing = wall_clock.choose_accelerators(
            run_at,
            machine.accelerators_per_node,
            days=on.deadline_days,
            max_accelerators=on.max_accelerators or wall_clock.DEFAULT_MAX_ACCELERATORS,
        )
    except v.InvalidInput as error:
        # A layout field given at the top level (deprecated) is refused where the request gave it.
        name = error.argument.removeprefix("layout.")
        if name in DEPRECATED_LAYOUT_FIELDS and name not in on.layout and getattr(on, name) is not None:
            raise v.InvalidInput(name, error.message) from None
        raise
    return sizing.run, sizing, shape, notes


def step_of(run: Estimate, calibration: performance.Calibration) -> performance.Step:
    """The step of the layout the cluster model chose for `run`, under other constants: that one layout
    (no search), on the same shape and machine. What a refit of the constants evaluates for each measured
    run, many times over."""
    if run.run is None or run.shape is None:
        raise v.InvalidInput(
            "mfu", "the run was planned at a given MFU: the cluster model did not set its pace"
        )
    machine, _ = _machine(run.cluster)
    return performance.step(
        run.shape,
        machine,
        run.run.search.best.layout,
        precision=run.cluster.precision,
        optimizer=run.cluster.optimizer,
        calibration=calibration,
    )


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _machine(on: Cluster) -> tuple[performance.Machine, bool]:
    """The hardware as the cluster model reads it; whether its network had to be assumed."""
    hardware = on.hardware
    per_node, up, out = ASSUMED_NETWORK
    given = (
        hardware.accelerators_per_node,
        hardware.scale_up_bandwidth_bytes_per_second,
        hardware.scale_out_bandwidth_bytes_per_second,
    )
    bandwidth = hardware.memory_bandwidth_bytes_per_second
    if bandwidth is None:
        bandwidth = on.peak_flops_per_second / ASSUMED_FLOPS_PER_MEMORY_BYTE
    machine = performance.Machine(
        peak_flops_per_second=on.peak_flops_per_second,
        memory_bytes=hardware.memory_bytes,
        memory_bandwidth_bytes_per_second=bandwidth,
        accelerators_per_node=given[0] or per_node,
        scale_up_bytes_per_second=given[1] or up,
        scale_out_bytes_per_second=given[2] or out,
        slug=hardware.slug,
        # Training in fp8, attention stays in bf16 (performance.Machine).
        attention_peak_flops_per_second=hardware.peak_flops.get("bf16") if on.precision == "fp8" else None,
    )
    return machine, any(value is None for value in (*given, hardware.memory_bandwidth_bytes_per_second))


def _default_global_batch(params: float, tokens: float, shape: ModelShape) -> int:
    """Sequences per step when the layout does not fix them: DeepSeek LLM's near-optimal batch for the run's
    compute (core/hyper.py) in sequences, at the nearest power of two (as runs choose them, so that they
    divide among data-parallel replicas and micro-batches), and no more than the run has."""
    batch_tokens = hyperparameters_for(6 * params * tokens).batch_tokens
    sequences = max(1.0, batch_tokens / shape.sequence_length)
    power = 2 ** round(math.log2(sequences))
    return int(max(1, min(power, tokens // shape.sequence_length)))


def _memory_of(step: performance.Step, on: Cluster) -> MemoryEstimate:
    layout = step.layout
    w, g, K = cluster.state_bytes(on.precision, on.optimizer)
    return MemoryEstimate(
        zero_stage=layout.zero_stage,
        data_parallel=layout.data_parallel,
        bytes_per_param=float(w + g + K),
        model_states_bytes=step.model_states_bytes,
        activations_bytes=step.activations_bytes,
        total_bytes=step.memory_bytes,
        capacity_bytes=on.hardware.memory_bytes,
        fits=step.fits,
        min_accelerators=None,
        tensor_parallel=layout.tensor_parallel,
        sequence_parallel=layout.sequence_parallel,
    )


def _does_not_fit(memory: MemoryEstimate, on: Cluster) -> list[caveats.Caveat]:
    if memory.fits:
        return []
    needed = (
        f"at least {memory.min_accelerators} accelerators at ZeRO stage {memory.zero_stage}"
        if memory.min_accelerators
        # Without a shape no activations are counted, so recomputing them could not help.
        else "a higher ZeRO stage, more tensor parallelism or activation recomputation"
        if memory.activations_bytes > 0
        else "a higher ZeRO stage or more tensor parallelism"
    )
    return [
        caveats.Caveat(
            caveats.DOES_NOT_FIT_MEMORY,
            f"Training needs {memory.total_bytes / 1e9:.1f} GB per accelerator but "
            f"{on.hardware.name} has {memory.capacity_bytes / 1e9:.1f} GB; it needs {needed}.",
            {"total_bytes": memory.total_bytes, "capacity_bytes": memory.capacity_bytes},
        )
    ]


def _price(
    hardware: Hardware, price_per_hour: Decimal | None, currency: str | None
) -> tuple[Decimal | None, str | None]:
    if price_per_hour is not None:
        if currency is None:
            raise v.InvalidInput("currency", "is required with price_per_hour")
        return price_per_hour, currency
    if hardware.price_per_hour is None:
        return None, None
    if currency is not None and currency != hardware.currency:
        raise v.InvalidInput(
            "currency",
            f"{hardware.name} is priced in {hardware.currency}, not {currency}; amounts in different "
            "currencies are never mixed (give price_per_hour in your currency instead)",
        )
    return hardware.price_per_hour, hardware.currency


@dataclass(frozen=True)
class Budget:
    """Limits on a run. Compute limits (`flops`, or the money, hours and days a cluster turns into FLOPs)
    can be combined and the tightest binds; `target_loss` asks for the least compute reaching a loss."""

    flops: float | None = None
    pf_days: float | None = None
    target_loss: float | None = None
    cost: Decimal | None = None
    currency: str | None = None
    accelerator_hours: float | None = None
    days: float | None = None
    price_per_hour: Decimal | None = None


@dataclass(frozen=True)
class Limit:
    kind: str  # the request field that set it: flops, pf_days, cost, accelerator_hours or days
    flops: float
    binding: bool


# Precisions a server decodes bf16 weights at (cluster.SERVING_BYTES_PER_PARAM), in order of preference.
SERVING_PRECISIONS = ("bf16", "fp16")


@dataclass(frozen=True)
class Serving:
    """What serving the plan's inference tokens takes: accelerator-hours, and their cost if priced."""

    hardware: Hardware
    decoding: cluster.Decoding
    price_per_hour: Decimal | None
    currency: str | None
    cost: Decimal | None


@dataclass(frozen=True)
class InferenceSummary:
    """Inference-aware allocation: what was held fixed (`constraint`: the target_loss, or the budget's
    training compute), the lifetime FLOPs that were minimised under it, and what they are compared with."""

    constraint: str  # target_loss or budget
    inference_tokens: float
    inference_flops: float
    lifetime_flops: float
    compute_optimal: allocate.Allocation
    compute_optimal_lifetime_flops: float
    fraction_saved: float
    compute_optimal_at_budget: allocate.Allocation | None
    serving: Serving | None


@dataclass(frozen=True)
class Plan:
    method: str  # fixed-ratio, compute-optimal, data-constrained or inference-aware
    allocation: allocate.Allocation
    limits: list[Limit]
    law: NamedLaw | None
    inference: InferenceSummary | None
    estimate: Estimate | None
    hyperparameters: Hyperparameters
    caveats: list[caveats.Caveat] = field(default_factory=list)
    intervals: Intervals | None = None

    @property
    def pf_days(self) -> float:
        return self.allocation.flops / units.PF_DAY_FLOPS


CLUSTER_LIMITS = ("cost", "accelerator_hours", "days")
# The search for the utilisation the cluster model achieves on the allocation a budget buys stops when two
# rounds agree this closely; a plan never exceeds a limit, whatever the last round.
UTILISATION_TOLERANCE = 0.005
MAX_ROUNDS = 24


def plan(
    budget: Budget,
    *,
    tokens_per_param: float | None = None,
    law: NamedLaw | None = None,
    unique_tokens: float | None = None,
    inference_tokens: float | None = None,
    inference_hardware: Hardware | None = None,
    inference_batch: int | None = None,
    on: Cluster | None = None,
) -> Plan:
    """Allocate a budget to a model size and token count, and estimate the run when a cluster is given.

    When the cluster model sets the pace (no `mfu`) and the budget is money, accelerator-hours or days, the
    FLOPs they buy depend on the model the budget buys: the allocation is repeated at the utilisation the
    model achieved until the two agree, and never exceeds a limit. Without `accelerators`, each candidate
    count is planned so, and the count whose plan trains on the most compute wins (fewer on a tie).
    """
    arguments: dict[str, Any] = {
        "tokens_per_param": tokens_per_param,
        "law": law,
        "unique_tokens": unique_tokens,
        "inference_tokens": inference_tokens,
        "inference_hardware": inference_hardware,
        "inference_batch": inference_batch,
    }
    priced = any(getattr(budget, name) is not None for name in CLUSTER_LIMITS)
    if on is None or not priced or budget.target_loss is not None:
        return _plan(budget, on=on, **arguments)

    def plan_on(cluster: Cluster) -> Plan:
        if cluster.mfu is not None:  # the pace is given: the budget's FLOPs follow at once
            return _plan(budget, on=cluster, **arguments)
        return _plan_at_achieved_rate(budget, cluster, arguments)

    if on.accelerators is not None:
        return plan_on(on)
    machine, _ = _machine(on)
    most = on.max_accelerators or wall_clock.DEFAULT_MAX_ACCELERATORS
    counts = wall_clock.candidate_counts(machine.accelerators_per_node, most)
    plans: dict[int, Plan | None] = {}

    def plan_at(index: int) -> Plan | None:
        if index not in plans:
            try:
                plans[index] = plan_on(replace(on, accelerators=counts[index]))
            except v.InvalidInput:
                plans[index] = None
        return plans[index]

    def flops_at(index: int) -> float:
        found = plan_at(index)
        return -1.0 if found is None else found.allocation.flops

    # The compute a count's limits buy rises with the count while the deadline binds and falls slowly once
    # money does: every doubling first, then every count around the best doubling.
    step = wall_clock.COUNT_STEPS_PER_DOUBLING
    coarse = sorted({*range(0, len(counts), step), len(counts) - 1})
    around = max(coarse, key=lambda index: (flops_at(index), -index))
    for index in range(max(0, around - step + 1), min(len(counts), around + step)):
        flops_at(index)
    tried = sum(found is not None for found in plans.values())
    candidates = [found for found in plans.values() if found is not None]
    # Most compute; of counts within 0.1% of it, the fewest accelerators.
    most_flops = max((found.allocation.flops for found in candidates), default=0.0)
    best = min(
        (found for found in candidates if found.allocation.flops >= most_flops * (1 - 1e-3)),
        key=lambda found: found.estimate.accelerators if found.estimate is not None else 0,
        default=None,
    )
    if best is None or best.estimate is None:
        raise v.InvalidInput(
            "max_accelerators",
            f"no cluster of up to {most} accelerators runs a model this budget buys; allow more accelerators",
        )
    if best.estimate.run is None:  # at a given MFU: the count is the sizing
        return best
    sizing = Sizing(best.estimate.run, "budget", most, tried)
    return replace(best, estimate=replace(best.estimate, sizing=sizing))


def _plan_at_achieved_rate(budget: Budget, on: Cluster, arguments: dict[str, Any]) -> Plan:
    """The plan that trains on the most compute its modelled run keeps within every limit.

    A utilisation r turns the limits into FLOPs; the model the budget then buys has a modelled run, which
    keeps within the limits when r is at most what that run achieves. The largest such r is found by a
    safeguarded search: the achieved utilisation (over the excess, when a limit was passed) is the next guess
    when it falls inside the bracket known so far, the bracket's geometric middle otherwise. (Plain
    repetition can oscillate: a larger model can be laid out less efficiently, and vice versa.)
    """
    low, high = 0.0, 1.0
    rate = DEFAULT_MFU
    best: Plan | None = None
    for _ in range(MAX_ROUNDS):
        result = _plan(budget, on=replace(on, utilisation=rate), **arguments)
        assert result.estimate is not None, "a plan on a cluster has its estimate"
        runtime = result.estimate.runtime
        achieved = result.allocation.flops / (
            runtime.accelerator_hours * units.SECONDS_PER_HOUR * on.peak_flops_per_second
        )
        excess = _excess(budget, result.estimate)
        if excess <= 1:
            low = rate
            if best is None or result.allocation.flops > best.allocation.flops:
                best = result
            if excess >= 1 - UTILISATION_TOLERANCE:
                break
        else:
            high = rate
        if high / max(low, 1e-300) <= 1 + UTILISATION_TOLERANCE:
            break
        guess = achieved / excess
        rate = guess if low < guess < high else (math.sqrt(low * high) if low > 0 else high / 4)
    if best is None:
        limit = next(name for name in CLUSTER_LIMITS if getattr(budget, name) is not None)
        raise v.InvalidInput(
            limit,
            f"buys no run on {on.accelerators} accelerators that the cluster model keeps within it, however "
            "small the model: give more, or fewer accelerators",
        )
    return best


def _excess(budget: Budget, run: Estimate) -> float:
    """How far the run goes past the budget's tightest limit (1: exactly at it; below 1: within)."""
    ratios = [1e-300]
    if budget.cost is not None and run.cost is not None:
        ratios.append(float(run.cost) / float(budget.cost))
    if budget.accelerator_hours is not None:
        ratios.append(run.runtime.accelerator_hours / budget.accelerator_hours)
    if budget.days is not None:
        ratios.append(run.runtime.days / budget.days)
    return max(ratios)


def _plan(
    budget: Budget,
    *,
    tokens_per_param: float | None = None,
    law: NamedLaw | None = None,
    unique_tokens: float | None = None,
    inference_tokens: float | None = None,
    inference_hardware: Hardware | None = None,
    inference_batch: int | None = None,
    on: Cluster | None = None,
) -> Plan:
    """One allocation of the budget at the cluster's utilisation (see `plan`).

    Rules: `tokens_per_param` (fixed ratio, default 20) or `law` (compute-optimal frontier); with
    `unique_tokens` the data-constrained optimum; with `inference_tokens` the inference-aware optimum, for the
    `target_loss` or for the loss the compute budget reaches. A rule that needs a law and has none uses
    chinchilla-2022, or muennighoff-2023-c4 for data-constrained allocation (its repetition constants were
    fitted with it). Inference is served on `inference_hardware` (by default the cluster's hardware, when
    its memory bandwidth is known), `inference_batch` sequences at a time (default 1).
    """
    law = _law_for(budget, tokens_per_param, law, unique_tokens, inference_tokens)
    _check_moe_law(law, budget, unique_tokens, inference_tokens)
    _check_serving(inference_tokens, inference_hardware, inference_batch)
    notes: list[caveats.Caveat] = []
    limits: list[Limit] = []
    flops: float | None = None  # the training compute the budget allows; None when it is a target loss
    if budget.target_loss is None:
        limits = _limits(budget, on)
        flops = min(limit.flops for limit in limits)
        notes += _binding_caveat(limits)

    def allocate_with(rule: ScalingLaw | None) -> tuple[allocate.Allocation, str, InferenceSummary | None]:
        # _law_for gives every rule but the fixed ratio a law, and _limits every budget but a loss its FLOPs.
        if budget.target_loss is not None:
            assert rule is not None
            if inference_tokens is not None:
                result = allocate.inference_aware(budget.target_loss, inference_tokens, rule)
                return _inference_aware(result, "target_loss")
            return allocate.for_target_loss(budget.target_loss, rule), "compute-optimal", None
        assert flops is not None
        if rule is None:
            ratio = allocate.DEFAULT_TOKENS_PER_PARAM if tokens_per_param is None else tokens_per_param
            return allocate.fixed_ratio(flops, ratio), "fixed-ratio", None
        if inference_tokens is not None:
            return _inference_aware(allocate.inference_aware_within(flops, inference_tokens, rule), "budget")
        if unique_tokens is not None:
            return allocate.data_constrained(flops, unique_tokens, rule), "data-constrained", None
        optimum = (
            allocate.compute_optimal(flops, rule)
            if law is None or law.moe is None
            else allocate.moe_compute_optimal(flops, rule, law.moe)
        )
        return optimum, "compute-optimal", None

    allocation, method, inference = allocate_with(None if law is None else law.law)
    if method == "data-constrained" and law is not None:
        notes += _repetition_caveats(allocation) + _repetition_constants_caveat(law)
    spread = None if law is None else _intervals_over(law.samples, lambda rule: allocate_with(rule)[0])
    if law is not None and law.fitted_range is not None:
        notes += caveats.extrapolation(
            law.fitted_range, allocation.params, allocation.tokens, allocation.flops, law.slug or "the law"
        )
    if inference is not None:
        serving = _serving(
            allocation.params,
            inference.inference_tokens,
            hardware=inference_hardware,
            batch=inference_batch,
            budget=budget,
            on=on,
        )
        inference = replace(inference, serving=serving)
    run = None
    if on is not None:
        run_params, run_on, assumed = _the_model_the_law_sized(allocation, law, on)
        run = estimate(
            run_params,
            allocation.tokens,
            run_on,
            price_per_hour=budget.price_per_hour,
            currency=budget.currency,
        )
        notes += assumed + run.caveats
    return Plan(
        method=method,
        allocation=allocation,
        limits=limits,
        law=law,
        inference=inference,
        estimate=run,
        hyperparameters=_hyperparameters(allocation, on),
        caveats=notes,
        intervals=spread,
    )


def _check_moe_law(
    law: NamedLaw | None, budget: Budget, unique_tokens: float | None, inference_tokens: float | None
) -> None:
    """A mixture-of-experts law sizes a model for a compute budget (Krajewski et al. 2024 §6.2): the other
    rules are derived for dense laws and are refused with it, naming the field."""
    if law is None or law.moe is None:
        return
    for name, value in (
        ("target_loss", budget.target_loss),
        ("unique_tokens", unique_tokens),
        ("inference_tokens", inference_tokens),
    ):
        if value is not None:
            raise v.InvalidInput(
                name,
                f"is not planned with the mixture-of-experts law {law.slug}: it sizes a model for a compute, "
                "money, hours or days budget only",
            )


def _the_model_the_law_sized(
    allocation: allocate.Allocation, law: NamedLaw | None, on: Cluster
) -> tuple[float, Cluster, list[caveats.Caveat]]:
    """The parameters and cluster an allocation's run is modelled with. A mixture of experts the law sized
    (its experts, top-k, active parameters) or a law whose N leaves the embeddings out gets the assumed shape
    of that model, its embeddings counted on top (and said so); otherwise the allocation as it is."""
    if on.shape is not None or law is None or (law.moe is None and law.counts_embeddings):
        return allocation.params, on, []
    multiple = on.fixed_layout.get("tensor_parallel", 1)
    if allocation.active_params is not None and allocation.experts and allocation.experts_per_token:
        shape = wall_clock.designed_moe_shape(
            allocation.active_params,
            allocation.experts,
            allocation.experts_per_token,
            counts_embeddings=law.counts_embeddings,
            heads_multiple=multiple,
        )
    else:
        shape = wall_clock.assumed_shape_without_embeddings(allocation.params, heads_multiple=multiple)
    return shape.params, replace(on, shape=shape), [caveats.assumed_shape(shape)]


def _inference_aware(
    result: allocate.InferenceAwareAllocation, constraint: str
) -> tuple[allocate.Allocation, str, InferenceSummary]:
    summary = InferenceSummary(
        constraint=constraint,
        inference_tokens=result.inference_tokens,
        inference_flops=result.inference_flops,
        lifetime_flops=result.lifetime_flops,
        compute_optimal=result.compute_optimal,
        compute_optimal_lifetime_flops=result.compute_optimal_lifetime_flops,
        fraction_saved=result.fraction_saved,
        compute_optimal_at_budget=result.compute_optimal_at_budget,
        serving=None,
    )
    return result.allocation, "inference-aware", summary


def fixed(
    params: float,
    tokens: float,
    on: Cluster,
    *,
    law: NamedLaw | None = None,
    price_per_hour: Decimal | None = None,
    currency: str | None = None,
) -> Plan:
    """A plan for a model already chosen: nothing to allocate, only the run to estimate (and, with a law,
    the loss to predict)."""
    run = estimate(params, tokens, on, price_per_hour=price_per_hour, currency=currency, law=law)
    allocation = allocate.Allocation(
        params=params, tokens=tokens, flops=run.runtime.flops, predicted_loss=run.predicted_loss
    )
    moe = run.shape if run.shape is not None and run.shape.mixture_of_experts else None
    if moe is not None:  # what the request gave, or the share of the modelled shape's
        active = on.active_params or params * moe.active_params / moe.params
        allocation = replace(
            allocation, active_params=active, experts=moe.experts, experts_per_token=moe.experts_per_token
        )
    return Plan(
        method="fixed",
        allocation=allocation,
        limits=[],
        law=law,
        inference=None,
        estimate=run,
        hyperparameters=_hyperparameters(allocation, on),
        caveats=list(run.caveats),
        intervals=None
        if law is None
        else _intervals_over(
            law.samples,
            lambda rule: allocate.Allocation(
                params, tokens, run.runtime.flops, rule.loss(_law_params(law, params, on), tokens)
            ),
            fixed=True,
        ),
    )


def _check_serving(
    inference_tokens: float | None, inference_hardware: Hardware | None, inference_batch: int | None
) -> None:
    for name, value in (("inference_hardware", inference_hardware), ("inference_batch", inference_batch)):
        if value is not None and inference_tokens is None:
            raise v.InvalidInput(name, "needs inference_tokens: it says how they are served")
    if inference_hardware is not None and inference_hardware.memory_bandwidth_bytes_per_second is None:
        raise v.InvalidInput(
            "inference_hardware",
            f"{inference_hardware.name} has no memory_bandwidth_bytes_per_second, which decoding is bound by",
        )
    if inference_batch is not None:
        v.whole("inference_batch", inference_batch)


def _serving(
    params: float,
    inference_tokens: float,
    *,
    hardware: Hardware | None,
    batch: int | None,
    budget: Budget,
    on: Cluster | None,
) -> Serving | None:
    """Serving the inference tokens on `hardware` at its price, or else on the cluster's hardware at the
    cluster's price (a `price_per_hour` given for the cluster included); None without a memory bandwidth."""
    price_per_hour, currency, argument = None, None, "inference_hardware"
    if hardware is None:
        if on is None:
            return None
        hardware, price_per_hour, currency = on.hardware, budget.price_per_hour, budget.currency
        argument = "hardware"
    bandwidth = hardware.memory_bandwidth_bytes_per_second
    if bandwidth is None:  # the cluster's hardware's (_check_serving refused inference_hardware without one)
        return None
    price, price_currency = _price(hardware, price_per_hour, currency)
    peak = next((hardware.peak_flops[p] for p in SERVING_PRECISIONS if p in hardware.peak_flops), None)
    try:
        decoding = cluster.decoding_runtime(
            params,
            inference_tokens,
            bandwidth,
            batch=1 if batch is None else batch,
            peak_flops_per_second=peak,
        )
    except v.InvalidInput as error:  # figures of the hardware (the rest the plan has checked already)
        raise v.InvalidInput(argument, f"{hardware.name}: {error.message}") from None
    try:
        cost = None if price is None else units.cost_of_accelerator_hours(decoding.accelerator_hours, price)
    except v.InvalidInput as error:
        raise v.InvalidInput("inference_tokens", f"serving them {error.message}") from None
    return Serving(hardware, decoding, price, price_currency, cost)


def _hyperparameters(allocation: allocate.Allocation, on: Cluster | None) -> Hyperparameters:
    """DeepSeek's hints at their own compute M·D when the model's shape is known, else at the plan's FLOPs,
    which are 6·N·D without a shape."""
    if on is None or on.shape is None:
        return hyperparameters_for(allocation.flops)
    flops = hyper.deepseek_flops(allocation.tokens, on.shape)
    return hyperparameters_for(flops, definition=hyper.DEEPSEEK_FLOPS)


def _law_for(
    budget: Budget,
    tokens_per_param: float | None,
    law: NamedLaw | None,
    unique_tokens: float | None,
    inference_tokens: float | None,
) -> NamedLaw | None:
    """Check that the rules asked for go together; the law to use (a default where one is needed)."""
    if tokens_per_param is not None and law is not None:
        raise v.InvalidInput("tokens_per_param", "give either tokens_per_param or law, not both")
    needs_law = budget.target_loss is not None or unique_tokens is not None or inference_tokens is not None
    if needs_law and tokens_per_param is not None:
        raise v.InvalidInput(
            "tokens_per_param",
            "a fixed ratio cannot honour target_loss, unique_tokens or inference_tokens; give a law instead",
        )
    if inference_tokens is not None and unique_tokens is not None:
        raise v.InvalidInput(
            "unique_tokens",
            "cannot be combined with inference_tokens: inference-aware plans assume fresh data",
        )
    if budget.target_loss is not None and unique_tokens is not None:
        raise v.InvalidInput("unique_tokens", "cannot be combined with target_loss; give a compute budget")
    if needs_law and law is None:
        return published(DATA_CONSTRAINED_LAW if unique_tokens is not None else DEFAULT_LAW)
    return law


def _limits(budget: Budget, on: Cluster | None) -> list[Limit]:
    """Each limit as the FLOPs it allows; the smallest binds."""
    if budget.flops is not None and budget.pf_days is not None:
        raise v.InvalidInput("pf_days", "give the compute budget once: flops or pf_days, not both")
    found: list[tuple[str, float]] = []
    if budget.flops is not None:
        found.append(("flops", units.budget_flops("flops", budget.flops)))
    if budget.pf_days is not None:
        found.append(("pf_days", units.pf_days_to_flops(budget.pf_days)))
    cluster_limits = [
        name for name in ("cost", "accelerator_hours", "days") if getattr(budget, name) is not None
    ]
    if cluster_limits:
        if on is None:
            raise v.InvalidInput("hardware", f"is required to turn {cluster_limits[0]} into compute")
        found += _cluster_limits(budget, on)
    if not found:
        raise v.InvalidInput(
            "flops", "give a budget: flops, pf_days, target_loss, cost, accelerator_hours or days"
        )
    smallest = min(flops for _, flops in found)
    binding = next(kind for kind, flops in found if flops == smallest)
    return [Limit(kind, flops, kind == binding) for kind, flops in found]


def _cluster_limits(budget: Budget, on: Cluster) -> list[tuple[str, float]]:
    """The limits that the cluster turns into FLOPs: cost, accelerator_hours and days."""
    found: list[tuple[str, float]] = []
    if budget.cost is not None:
        price, _ = _price(on.hardware, budget.price_per_hour, budget.currency)
        if price is None:
            raise v.InvalidInput(
                "hardware", f"{on.hardware.name} has no price; give price_per_hour and currency"
            )
        if budget.currency is None:
            raise v.InvalidInput("currency", "is required with cost")
        hours = units.accelerator_hours_for_cost(budget.cost, price)
        found.append(("cost", _flops_for_hours("cost", hours, on)))
    if budget.accelerator_hours is not None:
        hours = v.positive("accelerator_hours", budget.accelerator_hours)
        found.append(("accelerator_hours", _flops_for_hours("accelerator_hours", hours, on)))
    if budget.days is not None:
        if on.accelerators is None:
            raise v.InvalidInput("accelerators", "is required to turn days into compute")
        flops = units.flops_for_deadline(budget.days, on.accelerators, on.peak_flops_per_second, _rate(on))
        found.append(("days", units.budget_flops("days", flops)))
    return found


def _rate(on: Cluster) -> float:
    """The utilisation a budget in money, hours or days is turned into FLOPs at: the MFU given, or what the
    cluster model achieves (found by `plan`), or DEFAULT_MFU as the first guess."""
    if on.mfu is not None:
        return on.mfu
    return DEFAULT_MFU if on.utilisation is None else min(on.utilisation, 1.0)


def _flops_for_hours(argument: str, hours: float, on: Cluster) -> float:
    flops = units.flops_for_accelerator_hours(hours, on.peak_flops_per_second, _rate(on))
    if not units.MIN_FLOPS <= flops <= units.MAX_FLOPS:
        raise v.InvalidInput(
            argument,
            f"buys {flops:.3g} FLOPs on this cluster; a budget must be "
            f"{units.MIN_FLOPS:g} to {units.MAX_FLOPS:g}",
        )
    return flops


def _binding_caveat(limits: list[Limit]) -> list[caveats.Caveat]:
    if len(limits) < 2:
        return []
    binding = next(limit for limit in limits if limit.binding)
    others = ", ".join(f"{limit.kind} would allow {limit.flops:.3g}" for limit in limits if not limit.binding)
    return [
        caveats.Caveat(
            caveats.BINDING_LIMIT,
            f"The {binding.kind} limit binds at {binding.flops:.3g} FLOPs ({others}).",
            {"binding": binding.kind, "flops": binding.flops},
        )
    ]


def _repetition_constants_caveat(law: NamedLaw) -> list[caveats.Caveat]:
    """Muennighoff et al. 2023 fitted R_D* and R_N* jointly with their C4 law; with another law (another
    corpus, another model family) they are borrowed, not fitted."""
    if law.law == PUBLISHED_LAWS[DATA_CONSTRAINED_LAW].law:
        return []
    return [
        caveats.Caveat(
            caveats.REPETITION_CONSTANTS_FROM_C4,
            f"The repetition constants R_D* = {allocate.REPEATED_TOKENS_DECAY:.4g} and R_N* = "
            f"{allocate.EXCESS_PARAMS_DECAY:.4g} (how fast repeated tokens and excess parameters lose their "
            "value) were fitted by Muennighoff et al. 2023 together with their C4 law, "
            f"{DATA_CONSTRAINED_LAW}; applied to {law.slug or 'this law'} they are an assumption, not a fit.",
            {"law": law.slug, "fitted_with": DATA_CONSTRAINED_LAW},
        )
    ]


def _repetition_caveats(allocation: allocate.Allocation) -> list[caveats.Caveat]:
    epochs = allocation.epochs or 0.0
    if epochs > EPOCHS_WITHOUT_GAIN:
        return [
            caveats.Caveat(
                caveats.REPETITION_WITHOUT_GAIN,
                f"{epochs:.1f} epochs: past {EPOCHS_WITHOUT_GAIN:.0f} epochs a repeated token is worth less "
                "than a tenth of a fresh one; more unique data, not more compute, would lower the loss.",
                {"epochs": epochs},
            )
        ]
    if epochs > caveats.MAX_WORTHWHILE_EPOCHS:
        return [
            caveats.Caveat(
                caveats.REPEATED_DATA,
                f"{epochs:.1f} epochs over the unique data: beyond about 4, repeated tokens are worth "
                "noticeably less than fresh ones (Muennighoff et al. 2023).",
                {"epochs": epochs},
            )
        ]
    return []
