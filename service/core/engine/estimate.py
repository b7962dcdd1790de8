"""What training a model takes on a cluster: time, accelerator-hours, cost and memory, at the pace the cluster
model predicts or at the MFU given."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from decimal import Decimal

from service.core import accuracy, caveats, cluster, frameworks, performance, units, wall_clock
from service.core import validation as v
from service.core.cluster import Runtime
from service.core.energy import RunEnergy
from service.core.engine.inputs import Cluster, NamedLaw, price_of
from service.core.engine.run import machine_of, model_run, reliability_of
from service.core.memory import MemoryEstimate, state_bytes, training_memory
from service.core.shape import ModelShape
from service.core.wall_clock import ClusterRun, Sizing


@dataclass(frozen=True)
class RunIntervals:
    """Where the published figure of a run like this one falls, at `confidence`: from the cluster model's
    judged error on organisations it had not seen (core/accuracy.py) for the groups of runs this one is in.
    `step_seconds` is None when the request's MFU set the pace."""

    confidence: float
    categories: tuple[str, ...]
    step_seconds: tuple[float, float] | None
    days: tuple[float, float]
    accelerator_hours: tuple[float, float]
    cost: tuple[Decimal, Decimal] | None


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
    intervals: RunIntervals | None = None
    # Set by the services from the hardware's power and the run's site (services/energy.py), never by the
    # engine: its figures follow from the accelerator-hours, so they leave the engine's version as it is.
    energy: RunEnergy | None = None

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


@dataclass(frozen=True)
class _Paced:
    """A run at its pace: the cluster model's, or the MFU given (on the cluster with its accelerators)."""

    cluster: Cluster
    runtime: Runtime
    memory: MemoryEstimate
    hardware_flops: float
    caveats: list[caveats.Caveat] = field(default_factory=list)
    run: ClusterRun | None = None
    sizing: Sizing | None = None
    shape: ModelShape | None = None


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
    flops = training_flops(params, tokens, on)
    price, price_currency = price_of(on.hardware, price_per_hour, currency)
    pace = _modelled if on.mfu is None else _at_given_mfu
    paced = pace(params, tokens, flops, on)
    notes = list(paced.caveats)
    runtime = paced.runtime
    cost = None if price is None else cluster.training_cost(runtime.accelerator_hours, price)
    if price is None:
        notes.append(caveats.unpriced_hardware(on.hardware.name))
    if law is not None and law.fitted_range is not None:
        notes += caveats.extrapolation(law.fitted_range, params, tokens, flops, law.slug or "the law")
    accelerators = paced.run.accelerators if paced.run is not None else paced.cluster.accelerators
    assert accelerators is not None, "a run at a given MFU has its accelerators"
    notes += caveats.implausibly_long_run(runtime.seconds, accelerators)
    spread = intervals_of(paced, runtime, price, params)
    return Estimate(
        params=params,
        tokens=tokens,
        cluster=paced.cluster,
        runtime=runtime,
        hardware_flops=paced.hardware_flops,
        price_per_hour=price,
        currency=price_currency,
        cost=cost,
        memory=paced.memory,
        caveats=notes,
        law=law,
        predicted_loss=None if law is None else law.law.loss(law_params(law, params, on), tokens),
        run=paced.run,
        sizing=paced.sizing,
        shape=paced.shape,
        intervals=spread,
    )


def intervals_of(paced: _Paced, runtime: Runtime, price: Decimal | None, params: float) -> RunIntervals:
    """The run's intervals (core/accuracy.py): the step's from the groups of judged runs it is in, the
    time's and cost's from the wider of those and whole runs', and on spot capacity stretched by what the
    preemption rate's own uncertainty does to the run (`preemption_spread`)."""
    run, shape, on = paced.run, paced.shape, paced.cluster
    if run is None or shape is None:  # paced by the MFU given: only what whole runs add
        groups: tuple[str, ...] = ()
        step, step_seconds = accuracy.WHOLE_RUN, None
    else:
        groups = tuple(
            accuracy.run_categories(
                run.search.best.layout,
                shape,
                calibrated=on.hardware.calibrated_at(on.precision),
                precision=on.precision,
            )
        )
        step = accuracy.widest(list(groups))
        step_seconds = step.interval(run.search.best.seconds)
    hours = accuracy.WHOLE_RUN.interval(runtime.accelerator_hours, widest=step)
    days = accuracy.WHOLE_RUN.interval(runtime.days, widest=step)
    if run is not None and on.preemptions_per_accelerator_hour > 0:
        fewer, more = preemption_spread(run, on, params)
        hours, days = (hours[0] * fewer, hours[1] * more), (days[0] * fewer, days[1] * more)
    return RunIntervals(
        confidence=accuracy.CONFIDENCE,
        categories=groups,
        step_seconds=step_seconds,
        days=days,
        accelerator_hours=hours,
        cost=None
        if price is None
        else (cluster.training_cost(hours[0], price), cluster.training_cost(hours[1], price)),
    )


def _modelled(params: float, tokens: float, flops: float, on: Cluster) -> _Paced:
    """The run at the pace of the cluster model's best layout, goodput included."""
    run, sizing, shape, notes = model_run(params, tokens, on)
    runtime = Runtime(
        flops=flops,
        pf_days=units.flops_to_pf_days(flops),
        seconds=run.seconds,
        days=run.seconds / units.SECONDS_PER_DAY,
        accelerator_hours=run.accelerator_hours,
    )
    best = run.search.best
    memory = memory_of(best, on)
    # A search keeps within memory; a layout given whole may not (performance.GIVEN_LAYOUT_MEMORY_TOLERANCE).
    notes += does_not_fit(memory, on)
    return _Paced(
        cluster=on,
        runtime=runtime,
        memory=memory,
        hardware_flops=best.hardware_flops * run.steps,
        caveats=notes,
        run=run,
        sizing=sizing,
        shape=shape,
    )


def _at_given_mfu(params: float, tokens: float, flops: float, on: Cluster) -> _Paced:
    """The run at the cluster's MFU, on the count the cluster model chooses when the cluster gives none."""
    notes: list[caveats.Caveat] = []
    sizing: Sizing | None = None
    shape = on.shape
    if on.accelerators is None:  # the cluster model chooses how many; the MFU given sets their pace
        chosen, sizing, shape, notes = model_run(params, tokens, on)
        on = replace(on, accelerators=chosen.accelerators)
    assert on.accelerators is not None
    assert on.mfu is not None
    mfu = on.mfu
    runtime = cluster.training_runtime(flops, on.accelerators, on.peak_flops_per_second, mfu)
    fixed = on.layout  # the layout given, as far as the memory of plans at an MFU counts it
    memory = training_memory(
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
        flash_attention=fixed.get("flash_attention", True),
    )
    hardware_flops = flops * cluster.recomputation_flops_factor(fixed.get("recomputation", "none"))
    notes += [*caveats.unusual_mfu(mfu), caveats.mfu_given(mfu)]
    notes += does_not_fit(memory, on)
    return _Paced(on, runtime, memory, hardware_flops, notes, sizing=sizing, shape=shape)


def law_params(law: NamedLaw, params: float, on: Cluster) -> float:
    """The N a law's loss takes for a model of `params`: a mixture-of-experts law's are the active ones (the
    shape's, or `active_params`, or its design's share of the total)."""
    if law.moe is None:
        return params
    if on.shape is not None and on.shape.mixture_of_experts:
        return params * on.shape.non_embedding_active_params / on.shape.params
    if on.active_params is not None:
        return on.active_params
    return params / law.moe.total_to_active_params


def training_flops(params: float, tokens: float, on: Cluster) -> float:
    """C = 6·N·D with N the active parameters (cluster.training_flops), given by the shape or, without one,
    by `active_params`."""
    if on.active_params is not None and on.shape is None:
        active = v.positive("active_params", on.active_params, maximum=units.MAX_PARAMS)
        if active > params:
            raise v.InvalidInput("active_params", f"cannot exceed params ({params:.4g}), got {active:.4g}")
        return cluster.training_flops(active, tokens)
    return cluster.training_flops(params, tokens, on.shape)


def step_of(run: Estimate, matmul_efficiency: float) -> performance.Step:
    """The step of the layout the cluster model chose for `run` were the hardware's large GEMMs to reach
    `matmul_efficiency` of the peak: that one layout (no search), on the same shape and machine. What a refit
    of the efficiency evaluates for each measured run, many times over."""
    if run.run is None or run.shape is None:
        raise v.InvalidInput(
            "mfu", "the run was planned at a given MFU: the cluster model did not set its pace"
        )
    machine = dataclasses.replace(machine_of(run.cluster)[0], matmul_efficiency=matmul_efficiency)
    return performance.step(
        run.shape,
        machine,
        run.run.search.best.layout,
        precision=run.cluster.precision,
        optimizer=run.cluster.optimizer,
        calibration=run.cluster.calibration,
        framework=frameworks.framework_named(run.cluster.framework),
    )


def memory_of(step: performance.Step, on: Cluster) -> MemoryEstimate:
    layout = step.layout
    w, g, K = state_bytes(on.precision, on.optimizer)
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


def does_not_fit(memory: MemoryEstimate, on: Cluster) -> list[caveats.Caveat]:
    if memory.fits:
        return []
    if memory.total_bytes <= memory.capacity_bytes:  # within memory, but not its headroom
        headroom = on.headroom
        usable = memory.capacity_bytes * (1 - headroom)
        return [
            caveats.Caveat(
                caveats.DOES_NOT_FIT_MEMORY,
                f"Training needs {memory.total_bytes / 1e9:.1f} GB per accelerator, more than the "
                f"{usable / 1e9:.1f} GB a layout should fill of {on.hardware.name}'s "
                f"{memory.capacity_bytes / 1e9:.1f} GB (memory_headroom {headroom:.0%}: the runtime, NCCL "
                "and fragmentation take the rest).",
                {
                    "total_bytes": memory.total_bytes,
                    "capacity_bytes": memory.capacity_bytes,
                    "memory_headroom": headroom,
                },
            )
        ]
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


# How far a spot offer's preemption rate may stray from the one stated: no provider publishes a rate, and
# AWS's Spot Instance Advisor gives buckets of monthly interruption frequency about a factor of 2 wide
# (5-10%, 10-15%, ...; docs/research/energy-and-offers.md, 4.3). A judgement, stated with the answer.
PREEMPTION_RATE_SPREAD = 2.0


def preemption_spread(run: ClusterRun, on: Cluster, params: float) -> tuple[float, float]:
    """The run's wall-clock time at half and at twice the stated preemption rate, over its time at the rate:
    how much the rate's uncertainty moves it (at twice a rate that leaves no time to train: at 1.5 times)."""
    reliability = reliability_of(on)

    def time_at(factor: float) -> float:
        moved = replace(
            reliability, preemptions_per_accelerator_hour=on.preemptions_per_accelerator_hour * factor
        )
        return (
            wall_clock.goodput_of(run.training_seconds, run.accelerators, params, moved).wall_clock_seconds
            / run.seconds
        )

    try:
        more = time_at(PREEMPTION_RATE_SPREAD)
    except v.InvalidInput:
        more = time_at(1.5)
    return time_at(1 / PREEMPTION_RATE_SPREAD), more
