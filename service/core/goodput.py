"""Goodput: the share of a run's wall-clock time that trains, once interruptions and checkpoints are paid.

A job of n accelerators fails at n · λ per hour, λ the interruptions per accelerator-hour (Llama 3, Dubey et
al. 2024, §3.3.4: 419 unexpected interruptions in 54 days on 16 384 H100, 1.97e-5 per GPU-hour), so its mean
time between failures is M = 1 / (n · λ). Each failure loses the work since the last checkpoint (half an
interval on average) and a restart; each checkpoint stops training for δ, the model states written at the
storage's write bandwidth. Young (1974) and Daly (2006) give the interval that loses the least,
τ = √(2δM) - δ (δ < M/2; τ = M otherwise), and the useful fraction 1 - δ/τ - (R + τ/2)/M, R the restart.

On spot capacity the provider also takes instances back: preemptions at λp per accelerator-hour add to the
failures (M = 1 / (n · (λ + λp)), and the interval is chosen for the sum), and each one waits for capacity to
come back (requeue time Q) before the restart, so the mean restart is R + Q · λp / (λ + λp).

Whole runs lose more than that: evaluation, restarts after loss spikes, slow or degraded nodes, data stalls,
ramp-up and power caps. The useful fraction is also multiplied by 1 - o, o the run overhead: by default
what published whole runs took beyond the model's pace with failures and checkpoints paid
(`DEFAULT_RUN_OVERHEAD`), editable per request, per hardware profile and by an organisation's calibration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.core import validation as v

LLAMA3_FAILURES_PER_ACCELERATOR_HOUR = 419 / (54 * 24 * 16_384)  # 1.97e-5
# Bytes a checkpoint writes per parameter: bf16 weights (2) and Adam's fp32 master weights, momentum and
# variance (12), with a little metadata: ≈ 16 (reference: BLOOM-176B's 2.3 TB checkpoints).
CHECKPOINT_BYTES_PER_PARAM = 16
# Aggregate write bandwidth of the checkpoint storage: BLOOM-176B's checkpoint (≈ 2.8 TB) took about 40 s on
# Jean Zay's GPFS (BigScience tr11 log), ≈ 70 GB/s; Llama 3's Tectonic sustained 2 TB/s. 100 GB/s is a
# parallel filesystem of a modest cluster; give yours.
DEFAULT_CHECKPOINT_WRITE_BYTES_PER_SECOND = 100e9
# From a failure to training again: detection, rescheduling onto healthy nodes, loading the checkpoint,
# warming up. Minutes to tens of minutes in published reports; 10 minutes by default.
DEFAULT_RESTART_SECONDS = 600.0
# What whole runs lose beyond failures and checkpoints, as a fraction of their wall-clock time: what the
# published whole-run GPU-hour totals of bench/cluster_runs.json (16 runs, 4 organisations: Meta's LLaMA 1-4
# and Chameleon, DeepSeek's V2, V3 and 67B, BLOOM, SmolLM3) took beyond the planner's steady-state pace for
# them with failures and checkpoints paid (`python -m bench.calibrate_cluster`, model 1.5: 0.27). It holds
# what runs lose beside their steady state (evaluation, loss-spike restarts, slow nodes, data stalls,
# ramp-up; 9% for Llama 3 405B and 13% for BLOOM against their own published pace) and what the layouts teams
# run lose against the one the planner would choose (its picks promise 14% more than the published runs of
# the same models got; bench/RESULTS.md). Each organisation's runs at the overhead fitted on the others'
# land 2.9% under their totals on average. An organisation's calibration refits its own from its actuals.
DEFAULT_RUN_OVERHEAD = 0.28
MAX_RUN_OVERHEAD = 0.9


@dataclass(frozen=True)
class Goodput:
    failures_per_hour: float  # of the whole job
    mean_time_between_failures_seconds: float
    checkpoint_seconds: float
    checkpoint_interval_seconds: float
    restart_seconds: float
    useful_fraction: float
    interruptions: float  # expected over the wall-clock time, failures and preemptions
    wall_clock_seconds: float  # training time / useful fraction
    run_overhead: float = 0.0  # the share of the wall-clock time lost beyond failures and checkpoints
    preemptions: float = 0.0  # of the interruptions, those a spot provider makes


def goodput(
    training_seconds: float,
    accelerators: int,
    params: float,
    *,
    failures_per_accelerator_hour: float = LLAMA3_FAILURES_PER_ACCELERATOR_HOUR,
    checkpoint_write_bytes_per_second: float = DEFAULT_CHECKPOINT_WRITE_BYTES_PER_SECOND,
    restart_seconds: float = DEFAULT_RESTART_SECONDS,
    run_overhead: float = 0.0,
    preemptions_per_accelerator_hour: float = 0.0,
    requeue_seconds: float = 0.0,
) -> Goodput:
    """The wall-clock time of `training_seconds` of steps on `accelerators`, with failures (and a spot
    provider's preemptions, each waiting `requeue_seconds` for capacity), checkpoints and the
    `run_overhead`."""
    seconds = v.positive("training_seconds", training_seconds)
    count = v.whole("accelerators", accelerators)
    rate = v.in_range(
        "failures_per_accelerator_hour", failures_per_accelerator_hour, 0.0, 1.0, high_inclusive=False
    )
    bandwidth = v.positive("checkpoint_write_bytes_per_second", checkpoint_write_bytes_per_second)
    restart = v.in_range("restart_seconds", restart_seconds, 0.0, 30 * 86_400.0)
    overhead = v.in_range("run_overhead", run_overhead, 0.0, MAX_RUN_OVERHEAD)
    preempted = v.in_range(
        "preemptions_per_accelerator_hour", preemptions_per_accelerator_hour, 0.0, 1.0, high_inclusive=False
    )
    requeue = v.in_range("requeue_seconds", requeue_seconds, 0.0, 30 * 86_400.0)
    delta = CHECKPOINT_BYTES_PER_PARAM * v.positive("params", params) / bandwidth
    per_hour = count * (rate + preempted)
    if preempted > 0:  # the mean restart: a preemption's waits for capacity first
        restart += requeue * preempted / (rate + preempted)
    if per_hour == 0 or math.isinf(3600.0 / per_hour):  # no failure expected (a subnormal rate: none either)
        per_hour = 0.0
        kept = 1.0 - overhead
        return Goodput(0.0, math.inf, delta, math.inf, restart, kept, 0.0, seconds / kept, overhead)
    M = 3600.0 / per_hour
    tau = math.sqrt(2 * delta * M) - delta if delta < M / 2 else M
    # A checkpoint too small to take measurable time (a few parameters: delta underflows to 0) is written
    # continuously at no cost: delta / tau's limit as delta goes to 0 is 0.
    useful = 1 - (delta / tau if tau > 0 else 0.0) - (restart + tau / 2) / M
    if useful <= 0.01:
        raise v.InvalidInput(
            "preemptions_per_accelerator_hour" if preempted > rate else "failures_per_accelerator_hour",
            f"at {per_hour:.3g} interruptions an hour (one every {M / 60:.1f} minutes) a checkpoint of "
            f"{delta:.0f} s and a restart of {restart:.0f} s leave no time to train",
        )
    useful *= 1.0 - overhead
    wall = seconds / useful
    return Goodput(
        failures_per_hour=per_hour,
        mean_time_between_failures_seconds=M,
        checkpoint_seconds=delta,
        checkpoint_interval_seconds=tau,
        restart_seconds=restart,
        useful_fraction=useful,
        interruptions=wall / 3600.0 * per_hour,
        wall_clock_seconds=wall,
        run_overhead=overhead,
        preemptions=wall / 3600.0 * count * preempted,
    )
