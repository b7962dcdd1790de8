"""Uncertainty of an allocation under a fitted law: the same budget allocated with each bootstrap fit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from service.core import allocate
from service.core import validation as v
from service.core.engine.inputs import NamedLaw
from service.core.fit import CONFIDENCE
from service.core.laws import ScalingLaw

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


def intervals_over(
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
    return intervals_over(law.samples, lambda sample: allocate.compute_optimal(flops, sample))
