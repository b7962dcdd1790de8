"""The cluster model's run of a model: the shape it is modelled with, the machine the hardware is, and the
layout search on the accelerators given or on the count the planner chooses (core/wall_clock.py)."""

from __future__ import annotations

import math

from service.core import caveats, frameworks, performance, wall_clock
from service.core.engine.inputs import Cluster
from service.core.hyper import hyperparameters_for
from service.core.shape import ModelShape
from service.core.wall_clock import ClusterRun, Reliability, Sizing

# Network of a profile that does not give one: an 8-accelerator node of DGX A100 class (NVLink 3, one
# 200 Gb/s NIC per accelerator), the most common installation; the answer says it was assumed.
ASSUMED_NETWORK = (8, 300e9, 25e9)
# Memory bandwidth of hardware that gives none: the peak over this many FLOPs per byte, as on an H100 SXM
# (989 TFLOP/s over 3.35 TB/s); element-wise work is a tenth or so of a step, so a rough figure does.
ASSUMED_FLOPS_PER_MEMORY_BYTE = 300
# A shape whose parameters are within this fraction of the run's is modelled as given; further off, it is
# scaled to the run's size (the shape's parameters leave out biases and norms, a fraction of a percent).
SHAPE_TOLERANCE = 0.10


def model_run(
    params: float, tokens: float, on: Cluster
) -> tuple[ClusterRun, Sizing | None, ModelShape, list[caveats.Caveat]]:
    """The cluster model's run of `params` on `tokens`: on the cluster's accelerators, or on the count it
    chooses; with the shape given, or one assumed (and said so)."""
    shape, notes = modelled_shape(params, on)
    fixed = dict(on.layout)
    performance.check_model_fields(shape, fixed)  # at any count: said as such, not as no count fitting
    machine, assumed = machine_of(on)
    if assumed:
        notes.append(caveats.assumed_network(on.hardware.name, machine))
    if not on.hardware.calibrated_at(on.precision):
        gemm = on.hardware.matmul_efficiency_at(on.precision, on.calibration)
        notes.append(caveats.uncalibrated_hardware(on.hardware.name, on.precision, gemm))
    batch = on.layout.get("global_batch") or default_global_batch(params, tokens, shape)
    framework = frameworks.framework_named(on.framework)
    reliability = reliability_of(on)

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
            framework=framework,
        )

    if on.accelerators is not None:
        return run_at(on.accelerators), None, shape, notes
    sizing = wall_clock.choose_accelerators(
        run_at,
        machine.accelerators_per_node,
        days=on.deadline_days,
        max_accelerators=on.max_accelerators or wall_clock.DEFAULT_MAX_ACCELERATORS,
        count_multiple=on.count_multiple,
    )
    return sizing.run, sizing, shape, notes


def modelled_shape(params: float, on: Cluster) -> tuple[ModelShape, list[caveats.Caveat]]:
    """The shape a run of `params` is modelled with: the cluster's, scaled to the run's size when it is of
    another; or, without one, an assumed one (of a mixture of experts with `active_params`)."""
    shape = on.shape
    multiple = on.layout.get("tensor_parallel", 1)
    if shape is None:
        shape = (
            wall_clock.assumed_shape(params, heads_multiple=multiple)
            if on.active_params is None or on.active_params >= params
            else wall_clock.assumed_moe_shape(params, on.active_params, heads_multiple=multiple)
        )
        return shape, [caveats.assumed_shape(shape)]
    if abs(math.log(shape.params / params)) > math.log(1 + SHAPE_TOLERANCE):
        # The step time is of the model that is trained: a shape of another size (an allocation's size is
        # the budget's, not the shape's) is scaled to it, keeping its proportions.
        scaled = wall_clock.scaled_shape(shape, params, heads_multiple=multiple)
        return scaled, [caveats.shape_scaled(shape, scaled, params)]
    return shape, []


def reliability_of(on: Cluster) -> Reliability:
    """What goodput needs of the cluster: the hardware's failure rate, the checkpoint storage and restart
    time given, and the defaults where they are not."""
    return Reliability(
        failures_per_accelerator_hour=_or(
            on.hardware.failures_per_accelerator_hour, Reliability.failures_per_accelerator_hour
        ),
        checkpoint_write_bytes_per_second=_or(
            on.checkpoint_write_bytes_per_second, Reliability.checkpoint_write_bytes_per_second
        ),
        restart_seconds=_or(on.restart_seconds, Reliability.restart_seconds),
        run_overhead=run_overhead_of(on)[0],
        preemptions_per_accelerator_hour=on.preemptions_per_accelerator_hour,
        requeue_seconds=on.requeue_seconds,
    )


def run_overhead_of(on: Cluster) -> tuple[float, str]:
    """What the run loses beyond failures and checkpoints, and whose figure it is: the request's, the
    hardware's (its profile's or the organisation's calibration), or the default."""
    if on.run_overhead is not None:
        return on.run_overhead, "request"
    if on.hardware.run_overhead is not None:
        return on.hardware.run_overhead, on.hardware.run_overhead_source or "hardware"
    return Reliability.run_overhead, "default"


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def machine_of(on: Cluster) -> tuple[performance.Machine, bool]:
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
    efficiency = hardware.efficiency
    machine = performance.Machine(
        peak_flops_per_second=on.peak_flops_per_second,
        memory_bytes=hardware.memory_bytes,
        memory_bandwidth_bytes_per_second=bandwidth,
        accelerators_per_node=given[0] or per_node,
        scale_up_bytes_per_second=given[1] or up,
        scale_out_bytes_per_second=given[2] or out,
        # Training in fp8, attention stays in bf16 (performance.Machine).
        attention_peak_flops_per_second=hardware.peak_flops.get("bf16") if on.precision == "fp8" else None,
        matmul_efficiency=None if efficiency is None else efficiency.gemm.get(on.precision),
        memory_headroom=on.headroom,
        memory_efficiency=None if efficiency is None else efficiency.memory,
        link_efficiency=None if efficiency is None else efficiency.link,
        attention_efficiency=None
        if efficiency is None
        else efficiency.attention_with(frameworks.framework_named(on.framework).transformer_engine_attention),
    )
    return machine, any(value is None for value in (*given, hardware.memory_bandwidth_bytes_per_second))


def default_global_batch(params: float, tokens: float, shape: ModelShape) -> int:
    """Sequences per step when the layout does not fix them: DeepSeek LLM's near-optimal batch for the run's
    compute (core/hyper.py) in sequences, at the nearest power of two (as runs choose them, so that they
    divide among data-parallel replicas and micro-batches), and no more than the run has."""
    batch_tokens = hyperparameters_for(6 * params * tokens).batch_tokens
    sequences = max(1.0, batch_tokens / shape.sequence_length)
    power = 2 ** round(math.log2(sequences))
    return int(max(1, min(power, tokens // shape.sequence_length)))
