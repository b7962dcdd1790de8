"""How far the cluster model's answers fall from what published runs measured, and the intervals that follow.

The model is judged on organisations it has not seen (`bench/calibrate_cluster.py`): each organisation's
published runs predicted with the constants fitted on the other organisations', the log-error
r = log(published / predicted) recorded for every run. Those errors, grouped by what a run exercises
(`categories`), give for each group the mean m (the model's lean: positive when it promises too little time)
and the spread s of r. A prediction p of a run in a group then has the interval

    [p · exp(m - z·s), p · exp(m + z·s)],  z the normal quantile of the confidence (1.2816 at 80%),

which holds the published figure at the confidence's rate if new runs err as the judged ones did. A run in
several groups takes the widest group's (m, s): its errors are already those of runs with its traits. A
group of fewer than MIN_RUNS judged runs says too little of its own: it takes the errors of all the judged
runs (`POOLED`).
Days, accelerator-hours and cost take the larger of the step's spread and the spread of whole runs'
accelerator-hours against their published totals (evaluation, restarts, slow nodes and data stalls besides
the steady state, `WHOLE_RUN`), with the whole runs' lean.

The groups' figures are measured, not chosen: `python -m bench.calibrate_cluster` prints them (and the
coverage they reach on the organisations left out) for pasting here when the model or the corpus changes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist

from service.core import validation as v
from service.core.performance import Layout
from service.core.shape import ModelShape

CONFIDENCE = 0.8
# The two-sided normal quantile of CONFIDENCE: Φ⁻¹(0.9).
Z = 1.2815515655446004
# What a run exercises beyond a dense step in bf16 on a calibrated part: groups of the judged errors.
LONG_CONTEXT = 16_384  # tokens per sequence
LARGE_SCALE = 1_024  # accelerators
MIN_RUNS = 5
# The groups `categories` puts runs in; "baseline" when none of the others.
CATEGORIES = (
    "baseline",
    "uncalibrated hardware",
    "fp8",
    "parallelism",
    "context length",
    "scale",
    "mixture of experts",
)


@dataclass(frozen=True)
class LogError:
    """log(published / predicted) over judged runs: mean (the lean), spread (standard deviation), count."""

    mean: float
    spread: float
    runs: int

    def interval(self, value: float, widest: LogError | None = None) -> tuple[float, float]:
        """`value`'s interval at CONFIDENCE, with the larger spread of this and `widest`."""
        spread = self.spread if widest is None else max(self.spread, widest.spread)
        low, high = self.mean - Z * spread, self.mean + Z * spread
        return value * math.exp(low), value * math.exp(high)


# Measured by `python -m bench.calibrate_cluster` on bench/cluster_runs.json, model 1.5.1: the 92 published
# step times (6 organisations, sent through the core as POST /v1/estimates sends them, with their published
# layouts), each organisation's predicted by constants fitted on the other organisations' runs; the 4
# mixture-of-experts checks; and the 16 whole runs' accelerator-hours (4 organisations) through the API at
# DEFAULT_RUN_OVERHEAD. Hardware only the left-out organisation ran is uncalibrated in its fold (Google's
# TPUs, NVIDIA's Blackwell): those runs err by the missing calibration, too few and too one-sided (each
# family one organisation's) to measure it, so "uncalibrated hardware" is a prior: no lean, and the spread
# of the calibrated families' BF16 GEMM fractions (0.220 in log: Blackwell's 0.477 to TPU v5e's 0.913)
# beside the model's own on calibrated hardware (POOLED). Built so for each organisation from the others'
# errors, the step intervals held 78% of the published step times (81% on hardware calibrated in the fold,
# 67% on hardware uncalibrated in it; median half-width 15%), the accelerator-hour ones 81% of the totals
# (25%; bench/RESULTS.md).
STEP_ERRORS: dict[str, LogError] = {
    "baseline": LogError(mean=0.1108, spread=0.1355, runs=3),
    "context length": LogError(mean=-0.0826, spread=0.1844, runs=7),
    "fp8": LogError(mean=-0.0049, spread=0.1344, runs=22),
    "mixture of experts": LogError(mean=-0.0195, spread=0.1553, runs=4),
    "parallelism": LogError(mean=-0.0100, spread=0.1094, runs=69),
    "scale": LogError(mean=-0.0421, spread=0.0467, runs=12),
    "uncalibrated hardware": LogError(mean=0.0, spread=0.2468, runs=74),
}
POOLED = LogError(mean=-0.0034, spread=0.1112, runs=74)
WHOLE_RUN = LogError(mean=-0.0031, spread=0.2552, runs=16)


def at_quantile(point: float, interval: tuple[float, float], quantile: float) -> float:
    """The `quantile` of a figure whose CONFIDENCE interval is `interval` around `point`: the log-normal the
    interval was built from (`LogError.interval`), its lean and spread recovered from the interval's ends."""
    v.in_range("quantile", quantile, 0.0, 1.0, low_inclusive=False, high_inclusive=False)
    low, high = interval
    spread = math.log(high / low) / (2 * Z)
    lean = math.log(math.sqrt(low * high) / point)
    return point * math.exp(lean + NormalDist().inv_cdf(quantile) * spread)


def categories(
    *,
    calibrated: bool,
    precision: str,
    model_parallel: int,
    zero_stage: int,
    sequence_length: int,
    accelerators: int,
    mixture_of_experts: bool,
) -> list[str]:
    """The groups of judged runs a run belongs to (`STEP_ERRORS`' keys); "baseline" when none."""
    found = []
    if not calibrated:
        found.append("uncalibrated hardware")
    if precision == "fp8":
        found.append("fp8")
    if model_parallel > 1 or zero_stage == 3:
        found.append("parallelism")
    if sequence_length >= LONG_CONTEXT:
        found.append("context length")
    if accelerators >= LARGE_SCALE:
        found.append("scale")
    if mixture_of_experts:
        found.append("mixture of experts")
    return found or ["baseline"]


def run_categories(layout: Layout, shape: ModelShape, *, calibrated: bool, precision: str) -> list[str]:
    """`categories` of a run of `shape` at `layout`: the service's intervals and the judge's tables group
    runs by this one reading."""
    return categories(
        calibrated=calibrated,
        precision=precision,
        model_parallel=layout.tensor_parallel * layout.pipeline_parallel * layout.context_parallel,
        zero_stage=layout.zero_stage,
        sequence_length=shape.sequence_length,
        accelerators=layout.accelerators,
        mixture_of_experts=shape.mixture_of_experts,
    )


def widest(
    groups: list[str], errors: Mapping[str, LogError] = STEP_ERRORS, pooled: LogError = POOLED
) -> LogError:
    """The judged error of the widest of `groups` in `errors` (the pooled one for a group judged on too few
    runs, or none); the judge passes the errors of the organisations it has not left out."""
    for group in groups:
        v.choice("category", group, CATEGORIES)
    judged = [errors.get(group, pooled) for group in groups]
    return max(
        (error if error.runs >= MIN_RUNS else pooled for error in judged), key=lambda error: error.spread
    )
