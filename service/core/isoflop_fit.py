"""Compute-optimal scaling from IsoFLOP profiles: Approach 2 of Hoffmann et al. 2022 (the Chinchilla paper,
arXiv:2203.15556, §3.2).

Runs of equal compute C = 6·N·D form an IsoFLOP profile. For each profile a parabola of the final loss
against ln N is fitted; its vertex is that budget's optimal model size N_opt, with D_opt = C / (6·N_opt).
Ordinary least squares across budgets of ln N_opt and ln D_opt on ln C then gives N_opt = k_N·C^a and
D_opt = k_D·C^b. Since ln D_opt = ln C - ln 6 - ln N_opt at every budget, a + b = 1 and k_N·k_D = 1/6.

Unlike the parametric fit (`fit.py`), this one assumes nothing about the shape of L(N, D), but it needs an
IsoFLOP grid: several budgets, each with runs of several model sizes on both sides of its optimum. When the
runs do not give that, `fit_isoflop` says why in an `IsoflopUnavailable` instead of raising, so that a
caller can still report the parametric fit.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from service.core import validation as v
from service.core.fit import TOKENS_PER_PARAM_BUDGETS
from service.core.units import MAX_FLOPS, MIN_FLOPS, budget_flops

# Runs within this many decades of compute of the smallest run of a group share a budget: 0.05 decades is
# ~12%, wider than the few percent by which runs of one sweep miss their nominal budget, and narrower than
# the steps between budgets in published sweeps (Chinchilla's 6e18, 1e19, 3e19, ... differ by 1.7x or more).
BUDGET_TOLERANCE_DECADES = 0.05
MIN_MODEL_SIZES = 3  # a parabola has three coefficients
# Two points always lie on a line, so two budgets give an exponent with nothing to check it against; three
# is the least that can show optima off a power law. (Chinchilla used nine.)
MIN_BUDGETS = 3
LOG_FLOAT_LIMIT = 700.0  # |ln x| below this keeps x a normal float (ln of the largest double is 709.8)

FEWER_SIZES = f"fewer than {MIN_MODEL_SIZES} distinct model sizes"
NO_MINIMUM = "the loss has no minimum over model size (the parabola opens downward)"
MINIMUM_OUTSIDE = "the minimum is outside the model sizes tried"
MINIMUM_NOT_FINITE = "the loss at the minimum is not a finite number"


@dataclass(frozen=True)
class IsoflopBudget:
    """One IsoFLOP profile and the vertex of its parabola."""

    flops: float  # geometric mean of the runs' 6·N·D
    optimal_params: float
    optimal_tokens: float
    optimal_loss: float  # the parabola's value at its vertex
    runs: int


@dataclass(frozen=True)
class SkippedBudget:
    """An IsoFLOP profile that could not give an optimum, and why (one of the reasons above)."""

    flops: float
    runs: int
    reason: str


@dataclass(frozen=True)
class IsoflopFit:
    """N_opt = params_coefficient·C^a and D_opt = tokens_coefficient·C^b, C in FLOPs; a + b = 1."""

    a: float
    b: float
    params_coefficient: float  # k_N
    tokens_coefficient: float  # k_D
    budgets: tuple[IsoflopBudget, ...]  # the profiles used, by increasing compute
    skipped: tuple[SkippedBudget, ...]
    tokens_per_param: dict[float, float]  # D_opt / N_opt at each of TOKENS_PER_PARAM_BUDGETS
    scattered: tuple[float, ...]  # compute of the budgets used that are not set apart from others (set_apart)

    def optimal_params(self, flops: float) -> float:
        return _power(self.params_coefficient, self.a, flops)

    def optimal_tokens(self, flops: float) -> float:
        return _power(self.tokens_coefficient, self.b, flops)


@dataclass(frozen=True)
class IsoflopUnavailable:
    """Why the runs do not allow an IsoFLOP fit, in words for the person who gave them."""

    reason: str


def fit_isoflop(
    params: np.ndarray, tokens: np.ndarray, losses: np.ndarray
) -> IsoflopFit | IsoflopUnavailable:
    """Approach 2 on runs already checked by `fit._checked_runs` (positive finite arrays of equal length)."""
    log_flops = math.log(6) + np.log(params) + np.log(tokens)  # in logs: N·D may overflow
    outside = (log_flops < math.log(MIN_FLOPS)) | (log_flops > math.log(MAX_FLOPS))
    if outside.any():
        run = int(np.argmax(outside))
        return IsoflopUnavailable(
            f"run {run}: its compute 6 x params x tokens (about 1e{log_flops[run] / math.log(10):.0f} FLOPs) "
            f"is outside the {MIN_FLOPS:g} to {MAX_FLOPS:g} FLOPs the planner works with"
        )
    budgets: list[tuple[IsoflopBudget, float]] = []  # with each budget's ln C, for the regression
    skipped: list[SkippedBudget] = []
    scattered: list[float] = []
    groups = budget_groups(log_flops)
    for group, apart in zip(groups, set_apart(log_flops, groups), strict=True):
        log_budget = float(log_flops[group].mean())
        outcome = _profile_optimum(log_budget, np.log(params[group]), losses[group])
        if isinstance(outcome, str):
            skipped.append(SkippedBudget(flops=math.exp(log_budget), runs=group.size, reason=outcome))
        else:
            budgets.append((outcome, log_budget))
            if not apart:
                scattered.append(outcome.flops)
    if len(budgets) < MIN_BUDGETS:
        return IsoflopUnavailable(_too_few_budgets(len(budgets), skipped))
    return _power_laws(budgets, skipped, scattered)


def budget_groups(log_flops: np.ndarray) -> list[np.ndarray]:
    """Indices of runs grouped by budget: sorted by compute, a run more than BUDGET_TOLERANCE_DECADES above
    the smallest run of the current group starts a new one."""
    order = np.argsort(log_flops, kind="stable")
    tolerance = BUDGET_TOLERANCE_DECADES * math.log(10)
    groups, start = [], 0
    for position in range(1, order.size + 1):
        if position == order.size or log_flops[order[position]] - log_flops[order[start]] > tolerance:
            groups.append(order[start:position])
            start = position
    return groups


def set_apart(log_flops: np.ndarray, groups: list[np.ndarray]) -> list[bool]:
    """Whether each budget group (from `budget_groups`) is more than BUDGET_TOLERANCE_DECADES from every run
    of the groups beside it.

    The runs of an IsoFLOP sweep sit at a few budgets far apart, and group the same way whatever run the
    grouping starts from. Runs of scattered compute are only cut into groups: a run just beyond the tolerance
    of a group's lowest run starts the next group, though it may lie a hair above the group's highest, and
    each profile then mixes runs up to 12% apart in compute (Chinchilla's Figure 4 runs, for one: 51 groups of
    compute spread evenly, not the nine budgets of its IsoFLOP sweeps).
    """
    tolerance = BUDGET_TOLERANCE_DECADES * math.log(10)
    gaps = [log_flops[higher].min() - log_flops[lower].max() for lower, higher in itertools.pairwise(groups)]
    return [
        (position == 0 or gaps[position - 1] > tolerance)
        and (position == len(gaps) or gaps[position] > tolerance)
        for position in range(len(groups))
    ]


def _profile_optimum(log_budget: float, log_params: np.ndarray, losses: np.ndarray) -> IsoflopBudget | str:
    """The vertex of loss = c0 + c1·u + c2·u² in u = ln N (centred and scaled), or why there is none."""
    if np.unique(log_params).size < MIN_MODEL_SIZES:
        return FEWER_SIZES
    centre = (log_params.max() + log_params.min()) / 2
    half_width = (log_params.max() - log_params.min()) / 2
    u = (log_params - centre) / half_width  # in [-1, 1]: a well-conditioned least-squares problem
    scale = float(losses.max())  # losses in (0, 1]: no overflow in the solver, whatever their units
    design = np.column_stack((np.ones_like(u), u, u * u))
    coefficients, _, rank, _ = np.linalg.lstsq(design, losses / scale, rcond=None)
    c0, c1, c2 = (float(c) for c in coefficients)
    if rank < 3:  # distinct sizes, but too close together for the solver to tell apart
        return FEWER_SIZES
    if c2 <= 0:
        return NO_MINIMUM
    # The vertex -c1/(2·c2) must lie in [-1, 1]: an unbracketed minimum would be an extrapolation of the
    # parabola, which only approximates the profile near its samples. (Compared before dividing: c2 may be
    # tiny.)
    if abs(c1) > 2 * c2:
        return MINIMUM_OUTSIDE
    vertex = -c1 / (2 * c2)
    optimal_loss = scale * (c0 + c1 * vertex / 2)  # c0 - c1²/(4·c2), without squaring c1
    if not math.isfinite(optimal_loss):
        return MINIMUM_NOT_FINITE
    log_optimal_params = centre + half_width * vertex
    return IsoflopBudget(
        flops=math.exp(log_budget),
        optimal_params=math.exp(log_optimal_params),
        optimal_tokens=math.exp(log_budget - math.log(6) - log_optimal_params),
        optimal_loss=float(optimal_loss),
        runs=log_params.size,
    )


def _power_laws(
    budgets: list[tuple[IsoflopBudget, float]], skipped: list[SkippedBudget], scattered: list[float]
) -> IsoflopFit | IsoflopUnavailable:
    log_flops = np.array([log_budget for _, log_budget in budgets])
    log_optima = np.log([[budget.optimal_params, budget.optimal_tokens] for budget, _ in budgets])
    x = log_flops - log_flops.mean()
    spread = float(x @ x)
    if spread == 0:  # budgets are distinct by construction; this keeps a division by zero impossible
        return IsoflopUnavailable("all usable IsoFLOP profiles have the same compute budget")
    mean_optima = log_optima.mean(axis=0)
    a, b = (x @ (log_optima - mean_optima)) / spread  # ordinary least squares slopes
    log_k_n, log_k_d = mean_optima - np.array([a, b]) * log_flops.mean()
    log_ratios = [log_k_d - log_k_n + (b - a) * math.log(budget) for budget in TOKENS_PER_PARAM_BUDGETS]
    # Budgets a hair apart, or optima scattered over many decades, can give exponents whose powers leave
    # floating point: that is no usable law either.
    if not all(abs(value) < LOG_FLOAT_LIMIT for value in (log_k_n, log_k_d, *log_ratios)):
        return IsoflopUnavailable(
            "the optima of the IsoFLOP profiles do not follow a power law of compute that can be computed; "
            "the budgets may be too close together"
        )
    return IsoflopFit(
        a=float(a),
        b=float(b),
        params_coefficient=math.exp(log_k_n),
        tokens_coefficient=math.exp(log_k_d),
        budgets=tuple(budget for budget, _ in budgets),
        skipped=tuple(skipped),
        scattered=tuple(scattered),
        tokens_per_param={
            budget: math.exp(log_ratio)
            for budget, log_ratio in zip(TOKENS_PER_PARAM_BUDGETS, log_ratios, strict=True)
        },
    )


def _too_few_budgets(usable: int, skipped: list[SkippedBudget]) -> str:
    total = usable + len(skipped)
    message = (
        f"an IsoFLOP fit needs at least {MIN_BUDGETS} compute budgets, each with runs of {MIN_MODEL_SIZES} "
        f"or more model sizes around its lowest loss; the runs form {total} "
        f"budget{'' if total == 1 else 's'}, {usable} of them usable"
    )
    if not skipped:
        return message
    reasons = Counter(budget.reason for budget in skipped)
    return f"{message}. Skipped: " + "; ".join(f"{reason} ({count})" for reason, count in reasons.items())


def _power(coefficient: float, exponent: float, flops: float) -> float:
    log_value = math.log(coefficient) + exponent * math.log(budget_flops("flops", flops))
    if abs(log_value) >= LOG_FLOAT_LIMIT:
        raise v.InvalidInput("flops", "the fitted power law leaves floating-point range at this budget")
    return math.exp(log_value)
