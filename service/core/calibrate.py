"""The cluster model against measured runs: relative errors, the large-GEMM efficiency of one hardware
profile refitted so that the model's throughput for an organisation's runs matches what they measured, and
the run overhead that their actual accelerator-hours show beyond their measured pace.

Of the step's constants only `matmul_efficiency` is refitted: it is the constant that moves with the
kernels, the software stack and the clock an organisation's clusters run at, and one number is what a few
runs can pin down; the memory, link and overlap constants stay those fitted on published runs
(`performance.CALIBRATION`). The run overhead is the whole run's: what its hours went to besides training
at its pace, failures and checkpoints (core/goodput.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scipy.optimize import minimize_scalar

from service.core import validation as v
from service.core.goodput import MAX_RUN_OVERHEAD
from service.core.performance import EFFICIENCY_RANGE

# The efficiencies a fit may return: those a profile may state.
EFFICIENCY_BOUNDS = EFFICIENCY_RANGE
# The bounded solve stops when the efficiency is known to this absolute tolerance.
EFFICIENCY_TOLERANCE = 1e-7


def relative_error(measured: float, predicted: float) -> float:
    """measured / predicted - 1: positive when the run went faster than the model said."""
    v.positive("predicted", predicted)
    return v.positive("measured", measured) / predicted - 1.0


@dataclass(frozen=True)
class ErrorSummary:
    """Relative errors (measured / predicted - 1) of several runs."""

    runs: int
    mean: float
    median: float
    rms: float
    worst: float  # the error of largest magnitude, with its sign


def summarise(errors: Sequence[float]) -> ErrorSummary:
    if not errors:
        raise v.InvalidInput("errors", "needs at least one run")
    return ErrorSummary(
        runs=len(errors),
        mean=statistics.fmean(errors),
        median=statistics.median(errors),
        rms=math.sqrt(statistics.fmean(error * error for error in errors)),
        worst=max(errors, key=abs),
    )


@dataclass(frozen=True)
class EfficiencyFit:
    """The efficiency that makes the model's throughput match the runs, and how well it does."""

    efficiency: float
    objective: float  # mean squared log error at the efficiency
    predicted: tuple[float, ...]  # each run's throughput at the efficiency
    at_bound: bool  # the best efficiency is an end of EFFICIENCY_BOUNDS: the runs want more (or less)


def fit_matmul_efficiency(
    measured: Sequence[float], predict: Callable[[float], Sequence[float]]
) -> EfficiencyFit:
    """The efficiency e in EFFICIENCY_BOUNDS minimising the mean of (log predicted_i(e) - log measured_i)²,
    where `predict(e)` gives every run's predicted throughput (tokens/s) at e.

    Squared log error, so that a run off by a factor counts the same at any scale and over- and
    under-prediction by the same factor weigh alike; a bounded 1-D solve (Brent's method), since throughput
    falls monotonically but not in closed form with e (the GEMMs' share of a step varies by layout).
    """
    if not measured:
        raise v.InvalidInput("measured", "needs at least one run")
    logs = [math.log(v.positive("measured", value)) for value in measured]

    def objective(efficiency: float) -> float:
        predicted = predict(efficiency)
        return statistics.fmean((math.log(p) - m) ** 2 for p, m in zip(predicted, logs, strict=True))

    low, high = EFFICIENCY_BOUNDS
    solution = minimize_scalar(
        objective, bounds=EFFICIENCY_BOUNDS, method="bounded", options={"xatol": EFFICIENCY_TOLERANCE}
    )
    efficiency = float(solution.x)
    # The bounded method never evaluates the bounds themselves; a solution that runs into one is the bound.
    for bound in EFFICIENCY_BOUNDS:
        if abs(efficiency - bound) < 1e-5 and objective(bound) <= objective(efficiency):
            efficiency = bound
    return EfficiencyFit(
        efficiency=efficiency,
        objective=objective(efficiency),
        predicted=tuple(float(p) for p in predict(efficiency)),
        at_bound=efficiency - low < 1e-5 or high - efficiency < 1e-5,
    )


@dataclass(frozen=True)
class OverheadFit:
    """The share of some runs' actual accelerator-hours that their measured pace, failures and checkpoints
    do not account for."""

    run_overhead: float
    runs: int
    paced_accelerator_hours: float  # the tokens trained at the measured pace, failures and checkpoints paid
    actual_accelerator_hours: float
    clipped: bool  # the runs took less than their pace says (0) or lost more than MAX_RUN_OVERHEAD


def fit_run_overhead(actual_hours: Sequence[float], paced_hours: Sequence[float]) -> OverheadFit:
    """1 - Σ paced / Σ actual over the runs, within [0, MAX_RUN_OVERHEAD]: goodput's useful fraction is
    (1 - o) times that of failures and checkpoints, so the hours a run's tokens take at its measured pace
    over that fraction (`paced_hours`) are what it would have taken without the overhead. Summed before the
    ratio, so that runs weigh by their accelerator-hours, as a budget does."""
    if not actual_hours:
        raise v.InvalidInput("actual_hours", "needs at least one run")
    actual = math.fsum(v.positive("actual_hours", hours) for hours in actual_hours)
    paced = math.fsum(v.positive("paced_hours", hours) for hours in paced_hours)
    overhead = 1.0 - paced / actual
    kept = min(max(overhead, 0.0), MAX_RUN_OVERHEAD)
    return OverheadFit(kept, len(actual_hours), paced, actual, clipped=kept != overhead)
