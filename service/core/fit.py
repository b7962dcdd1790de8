"""Fitting L(N, D) = E + A/N^alpha + B/D^beta to training runs (Hoffmann et al. 2022, App. D.2, as
corrected by Besiroglu et al. 2024).

In log space, with A = e^a, B = e^b, E = e^e, the predicted log-loss is
LSE(a - alpha·log N, b - beta·log D, e), and the objective is the Huber loss (delta = 1e-3) of its residuals
against log L, summed over runs: summed, not averaged, since averaging shrinks the objective n-fold and
stops L-BFGS early (the flaw Besiroglu et al. found in the original fit).

The procedure starts L-BFGS from every point of a grid (alpha, beta in {0, 0.5, ..., 2}, e in {-1, -0.5,
..., 1}, a, b in {0, 5, ..., 25}: 4 500 starts) and keeps the best end point. All starts are optimised
together: one vectorised objective-and-gradient evaluation serves every start, and each start keeps its own
L-BFGS memory, step length and convergence test, so the result is that of 4 500 independent runs. A law
fitted to runs (fit_law) goes on from the best few end points to the optimum itself (see _solve).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from service.core import validation as v
from service.core.laws import FittedRange, ScalingLaw

HUBER_DELTA = 1e-3
MEMORY = 10  # L-BFGS correction pairs kept per start
MAX_ITERATIONS = 1000
GRADIENT_TOLERANCE = 1e-5  # on the largest gradient component (scipy L-BFGS-B's pgtol)
RELATIVE_DECREASE = 2.220446049250313e-09  # scipy L-BFGS-B's ftol: stop when a step gains less
ARMIJO = 1e-4
MAX_HALVINGS = 40
# Descents that start near an optimum (a refinement, a bootstrap refit) run on to a far smaller gradient: in
# the flat valley where A and alpha trade off, 1e-5 still leaves A a percent or more short of the optimum.
REFIT_TOLERANCE = 1e-9
CHUNK_ELEMENTS = 4_000_000  # rows x runs evaluated at once: ~30 MB per temporary array

# evaluate(rows, theta): the objectives and gradients of those rows of theta (see _descend).
Evaluate = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def default_grid() -> np.ndarray:
    """The 4 500 starts, as rows (a, b, e, alpha, beta)."""
    alphas = betas = np.arange(0.0, 2.01, 0.5)
    es = np.arange(-1.0, 1.01, 0.5)
    abs_ = np.arange(0.0, 25.01, 5.0)
    return np.array(list(itertools.product(abs_, abs_, es, alphas, betas)))


@dataclass(frozen=True)
class Solution:
    """The best end point of a multi-start fit, in log parameters (a, b, e, alpha, beta)."""

    theta: np.ndarray
    objective: float
    converged: bool
    iterations: int
    starts: int
    ends: _Ends  # every start's end point: the bootstrap restarts from the best few


def objective_and_gradient(
    theta: np.ndarray,
    log_n: np.ndarray,
    log_d: np.ndarray,
    log_loss: np.ndarray,
    *,
    delta: float = HUBER_DELTA,
    weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Summed Huber loss of the log-loss residuals, and its gradient, for each row of `theta` (S x 5).

    Returns (S,) objectives and (S, 5) gradients; every start is evaluated on every run at once (in chunks
    of rows when that would take too much memory). `weights` (S x runs) counts each run that many times, as a
    bootstrap resample does. The three terms of the log-sum-exp are exponentiated without the usual max-shift
    (a third less work); rows where a term overflows are computed again with it.
    """
    rows = max(1, CHUNK_ELEMENTS // max(1, log_n.size))
    if theta.shape[0] > rows:
        parts = [
            objective_and_gradient(
                theta[start : start + rows],
                log_n,
                log_d,
                log_loss,
                delta=delta,
                weights=None if weights is None else weights[start : start + rows],
            )
            for start in range(0, theta.shape[0], rows)
        ]
        return np.concatenate([f for f, _ in parts]), np.concatenate([g for _, g in parts])
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        f, g = _huber_terms(theta, log_n, log_d, log_loss, delta, weights=weights, shifted=False)
    bad = ~(np.isfinite(f) & np.isfinite(g).all(axis=1))
    if bad.any():
        f[bad], g[bad] = _huber_terms(
            theta[bad],
            log_n,
            log_d,
            log_loss,
            delta,
            weights=None if weights is None else weights[bad],
            shifted=True,
        )
    return f, g


def _huber_terms(
    theta: np.ndarray,
    log_n: np.ndarray,
    log_d: np.ndarray,
    log_loss: np.ndarray,
    delta: float,
    *,
    weights: np.ndarray | None,
    shifted: bool,
) -> tuple[np.ndarray, np.ndarray]:
    # In place where it can be: this is where a fit spends its time (S x runs arrays, ~3 per iteration).
    a, b, e, alpha, beta = (theta[:, k : k + 1] for k in range(5))
    n_term = np.subtract(a, alpha * log_n)  # exponents first, then the terms A/N^alpha, B/D^beta and E
    d_term = np.subtract(b, beta * log_d)
    shift = np.maximum(np.maximum(n_term, d_term), e) if shifted else 0.0  # terms divided by e^shift
    if shifted:
        n_term -= shift
        d_term -= shift
    np.exp(n_term, out=n_term)
    np.exp(d_term, out=d_term)
    e_term = np.exp(e - shift)
    total = n_term + d_term
    total += e_term
    residual = np.log(total)
    residual += shift
    residual -= log_loss
    slope = np.clip(residual, -delta, delta)  # d huber / d residual
    residual -= 0.5 * slope
    residual *= slope  # huber: 0.5·r² inside ±delta, delta·(|r| - delta/2) outside
    if weights is not None:
        residual *= weights
        slope *= weights
    share = np.divide(slope, total, out=slope)  # d huber / d term: a term's weight is term / total
    g_n = np.multiply(n_term, share, out=n_term)
    g_d = np.multiply(d_term, share, out=d_term)
    g_e = (share * e_term).sum(axis=1) if shifted else e_term[:, 0] * share.sum(axis=1)
    gradient = np.column_stack((g_n.sum(axis=1), g_d.sum(axis=1), g_e, -(g_n @ log_n), -(g_d @ log_d)))
    return residual.sum(axis=1), gradient


def minimise(
    log_n: np.ndarray,
    log_d: np.ndarray,
    log_loss: np.ndarray,
    starts: np.ndarray | None = None,
    *,
    delta: float = HUBER_DELTA,
    max_iterations: int | None = None,
) -> Solution:
    """L-BFGS from every start (rows of `starts`, default the 4 500-point grid); the best end point.

    Each start stops after `max_iterations` (default MAX_ITERATIONS) at most.
    """
    x = np.array(default_grid() if starts is None else starts, dtype=float)
    max_iterations = MAX_ITERATIONS if max_iterations is None else max_iterations

    def evaluate(rows: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return objective_and_gradient(theta, log_n, log_d, log_loss, delta=delta)

    ends = _descend(evaluate, x, max_iterations)
    best = int(np.argmin(ends.f))
    return Solution(
        theta=ends.x[best].copy(),
        objective=float(ends.f[best]),
        converged=bool(ends.converged[best]),
        iterations=ends.iterations,
        starts=x.shape[0],
        ends=ends,
    )


@dataclass(frozen=True)
class _Ends:
    """Where each start's descent ended: point, objective (inf if not finite) and whether it converged."""

    x: np.ndarray
    f: np.ndarray
    converged: np.ndarray
    iterations: int


def _descend(
    evaluate: Evaluate,
    x: np.ndarray,
    max_iterations: int,
    *,
    from_grid: bool = True,
    gradient_tolerance: float = GRADIENT_TOLERANCE,
) -> _Ends:
    """L-BFGS from each row of `x` at once; `evaluate(rows, theta)` gives objectives and gradients of those
    rows (rows index the starts, so that each start can have an objective of its own).

    A start stops when its gradient is below `gradient_tolerance`, when no step along its search direction
    lowers its objective, or, `from_grid`, when an iteration lowers it by less than RELATIVE_DECREASE times
    max(|objective|, 1) (scipy's rule, as the published procedure used). That last rule is for starts far
    from an optimum: a descent that starts near one (a bootstrap refit, a refinement) gains little per step
    on an objective that is large or flat, and the rule would stop it after a few steps, at its start.
    A stopped start has converged unless it stopped for want of a step with its gradient above
    GRADIENT_TOLERANCE.
    """
    count = x.shape[0]
    f, g = evaluate(np.arange(count), x)
    memory = _Memory(count)
    active = np.abs(g).max(axis=1) > gradient_tolerance
    stalled = np.zeros(count, dtype=bool)
    iterations = 0
    while active.any() and iterations < max_iterations:
        iterations += 1
        idx = np.flatnonzero(active)
        direction = -memory.apply_inverse_hessian(idx, g[idx])
        slope = (direction * g[idx]).sum(axis=1)
        uphill = slope >= 0  # a curvature estimate gone bad: steepest descent for that start
        direction[uphill] = -g[idx][uphill]
        slope[uphill] = -(g[idx][uphill] ** 2).sum(axis=1)
        new_x, new_f, new_g, moved = _backtrack(idx, x[idx], f[idx], slope, direction, evaluate)
        memory.remember(idx[moved], new_x[moved] - x[idx][moved], new_g[moved] - g[idx][moved])
        decrease = f[idx] - new_f
        x[idx[moved]], f[idx[moved]], g[idx[moved]] = new_x[moved], new_f[moved], new_g[moved]
        flat = moved & from_grid & (decrease <= RELATIVE_DECREASE * np.maximum(np.abs(f[idx]), 1.0))
        stalled[idx[~moved]] = True
        finished = ~moved | flat | (np.abs(g[idx]).max(axis=1) <= gradient_tolerance)
        active[idx[finished]] = False
    small_gradient = np.abs(g).max(axis=1) <= GRADIENT_TOLERANCE  # converged, whatever it stopped at
    converged = ~active & (small_gradient | ~stalled | (f == 0.0))
    return _Ends(x=x, f=np.where(np.isfinite(f), f, np.inf), converged=converged, iterations=iterations)


def _backtrack(  # noqa: PLR0917 -- one call site
    rows: np.ndarray,
    x: np.ndarray,
    f: np.ndarray,
    slope: np.ndarray,
    direction: np.ndarray,
    evaluate: Evaluate,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Armijo backtracking for each start at once: halve each start's step until its objective falls enough.

    Returns the new points, objectives, gradients, and which starts found a step that lowers the objective.
    """
    step = np.ones(x.shape[0])
    new_x, new_f, new_g = x.copy(), f.copy(), np.zeros_like(x)
    accepted = np.zeros(x.shape[0], dtype=bool)
    pending = np.arange(x.shape[0])
    for _ in range(MAX_HALVINGS):
        trial = x[pending] + step[pending, None] * direction[pending]
        trial_f, trial_g = evaluate(rows[pending], trial)
        ok = np.isfinite(trial_f) & (trial_f <= f[pending] + ARMIJO * step[pending] * slope[pending])
        done = pending[ok]
        new_x[done], new_f[done], new_g[done] = trial[ok], trial_f[ok], trial_g[ok]
        accepted[done] = True
        pending = pending[~ok]
        if pending.size == 0:
            break
        step[pending] *= 0.5
    moved = accepted & (new_f < f)
    return new_x, new_f, new_g, moved


class _Memory:
    """Each start's last MEMORY correction pairs (s, y), in a ring buffer of its own."""

    def __init__(self, count: int) -> None:
        self.s = np.zeros((count, MEMORY, 5))
        self.y = np.zeros((count, MEMORY, 5))
        self.rho = np.zeros((count, MEMORY))
        self.head = np.zeros(count, dtype=int)  # where each start writes its next pair
        self.stored = np.zeros(count, dtype=int)

    def remember(self, idx: np.ndarray, s: np.ndarray, y: np.ndarray) -> None:
        sy = (s * y).sum(axis=1)
        keep = sy > 1e-12 * np.sqrt((s * s).sum(axis=1) * (y * y).sum(axis=1))  # curvature condition
        idx, s, y, sy = idx[keep], s[keep], y[keep], sy[keep]
        slot = self.head[idx] % MEMORY
        self.s[idx, slot], self.y[idx, slot], self.rho[idx, slot] = s, y, 1.0 / sy
        self.head[idx] += 1
        self.stored[idx] = np.minimum(self.stored[idx] + 1, MEMORY)

    def apply_inverse_hessian(self, idx: np.ndarray, gradient: np.ndarray) -> np.ndarray:
        """H·g by the two-loop recursion (Nocedal & Wright, Algorithm 7.4), each start with its own pairs."""
        ages = (self.head[idx, None] - 1 - np.arange(MEMORY)) % MEMORY  # slots, newest first
        s = np.take_along_axis(self.s[idx], ages[:, :, None], axis=1)
        y = np.take_along_axis(self.y[idx], ages[:, :, None], axis=1)
        rho = np.take_along_axis(self.rho[idx], ages, axis=1) * (np.arange(MEMORY) < self.stored[idx, None])
        q = gradient.copy()
        alphas = np.zeros((idx.size, MEMORY))
        for age in range(MEMORY):
            alphas[:, age] = rho[:, age] * (s[:, age] * q).sum(axis=1)
            q -= alphas[:, age, None] * y[:, age]
        yy = (y[:, 0] ** 2).sum(axis=1)
        usable = (self.stored[idx] > 0) & (yy > 0)
        gamma = np.where(usable, (s[:, 0] * y[:, 0]).sum(axis=1) / np.where(yy > 0, yy, 1.0), 1.0)
        r: np.ndarray = gamma[:, None] * q
        for age in reversed(range(MEMORY)):
            beta = rho[:, age] * (y[:, age] * r).sum(axis=1)
            r += (alphas[:, age] - beta)[:, None] * s[:, age]
        return r


# --- A law from runs ------------------------------------------------------------------------------------

MIN_RUNS = 5
MIN_MODEL_SIZES = 3
MAX_RUNS = 100_000
TOKENS_PER_PARAM_BUDGETS = (1e20, 1e22, 1e24)  # where a fitted law's implied ratio D/N is reported
GRID_RUNS = 1_000  # above this many runs the grid is searched on a subsample (see _solve)
REFINED = 8  # best distinct end points of the grid search descended on to the optimum (see _solve)


@dataclass(frozen=True)
class LawFit:
    """A fitted law and how well it fits: what POST /v1/scaling-laws stores and reports."""

    law: ScalingLaw
    fitted_range: FittedRange
    objective: float
    converged: bool
    runs: int
    rmse_log_loss: float  # root mean square of log(L_predicted) - log(L_observed)
    max_abs_log_residual: float
    tokens_per_param: dict[float, float]  # at each of TOKENS_PER_PARAM_BUDGETS
    bootstrap: Bootstrap | None = None
    influence: Influence | None = None  # runs far off the law, and the law fitted without them


def fit_law(
    params: Sequence[float],
    tokens: Sequence[float],
    losses: Sequence[float],
    *,
    bootstrap_samples: int = 0,
    seed: int = 0,
) -> LawFit:
    """Fit L = E + A/N^alpha + B/D^beta to runs (N, D, L); InvalidInput says why runs cannot be fitted.

    With `bootstrap_samples`, also fit that many resamples of the runs (drawn with `seed`) for intervals.
    """
    n, d, loss = _checked_runs(params, tokens, losses)
    log_n, log_d, log_loss = np.log(n), np.log(d), np.log(loss)
    solution = _solve(log_n, log_d, log_loss)
    law = _law_of(solution.theta)
    if law is None:
        raise v.InvalidInput(
            "runs", "the fit gives a law outside what the engine accepts; more varied runs may help"
        )
    predicted = np.log(law.E + law.A / n**law.alpha + law.B / d**law.beta)
    residual = predicted - np.log(loss)
    flops = 6 * n * d
    # An unconverged fit's residuals say more about the fit than about the runs.
    influence = influence_of_outliers(n, d, loss, solution, residual) if solution.converged else None
    return LawFit(
        law=law,
        fitted_range=FittedRange(
            min_params=float(n.min()),
            max_params=float(n.max()),
            min_tokens=float(d.min()),
            max_tokens=float(d.max()),
            min_flops=float(flops.min()),
            max_flops=float(flops.max()),
        ),
        objective=solution.objective,
        converged=solution.converged,
        runs=int(n.size),
        rmse_log_loss=float(np.sqrt(np.mean(residual**2))),
        max_abs_log_residual=float(np.abs(residual).max()),
        tokens_per_param=_tokens_per_param(law),
        bootstrap=bootstrap(log_n, log_d, log_loss, solution, bootstrap_samples, seed)
        if bootstrap_samples
        else None,
        influence=influence,
    )


def _tokens_per_param(law: ScalingLaw) -> dict[float, float]:
    return {
        budget: law.optimal_tokens(budget) / law.optimal_params(budget) for budget in TOKENS_PER_PARAM_BUDGETS
    }


def _solve(log_n: np.ndarray, log_d: np.ndarray, log_loss: np.ndarray) -> Solution:
    """The published procedure, the 4 500-start grid, then its REFINED best distinct end points descended on
    every run to REFIT_TOLERANCE; the best of those.

    The grid's descents stop when a step gains less than RELATIVE_DECREASE, which in the flat valley where A
    and alpha (and B and beta) trade off is well short of the optimum, at a point that rounding decides: the
    last bits of a sum (which BLAS kernel the CPU gets) move the best end point by a few parts in a thousand
    on one sweep, and its tokens per parameter at 1e24 FLOPs by 10% on another. Descending on from there
    reaches the optimum itself, which rounding does not move, and costs little: a few starts.

    Up to GRID_RUNS runs the grid is searched on every run. Beyond, it is searched on a fixed random
    subsample of GRID_RUNS runs: a subsample moves the minima a little, not to other basins, so this finds the
    same optimum at a small fraction of the cost: the grid's cost grows with the runs, about 2 s per 240 runs
    on two cores, which would be ten minutes for 100 000.
    """
    if log_n.size <= GRID_RUNS:
        rough = minimise(log_n, log_d, log_loss)
    else:
        pick = np.sort(np.random.default_rng(0).choice(log_n.size, GRID_RUNS, replace=False))
        rough = minimise(log_n[pick], log_d[pick], log_loss[pick])
    starts = _distinct_best(rough.ends, REFINED)

    def evaluate(rows: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return objective_and_gradient(theta, log_n, log_d, log_loss)

    ends = _descend(
        evaluate, starts.copy(), MAX_ITERATIONS, from_grid=False, gradient_tolerance=REFIT_TOLERANCE
    )
    # Runs too few to pin the law down (5 runs, 5 coefficients) leave valleys that fall forever towards an
    # exponent of hundreds: a descent run on along one ends outside what the engine accepts, and is no
    # candidate (nor a start for the bootstrap or the leave-out refits).
    usable = np.array([_law_of(x) is not None for x in ends.x])
    ends = _Ends(
        x=ends.x, f=np.where(usable, ends.f, np.inf), converged=ends.converged, iterations=ends.iterations
    )
    best = int(np.argmin(ends.f))
    return Solution(
        theta=ends.x[best].copy(),
        objective=float(ends.f[best]),
        converged=bool(ends.converged[best]),
        iterations=rough.iterations + ends.iterations,
        starts=rough.starts,
        ends=ends,
    )


def _law_of(theta: np.ndarray) -> ScalingLaw | None:
    """The law of a fit's log parameters, or None when it is outside what the engine accepts."""
    a, b, e, alpha, beta = theta
    try:
        return ScalingLaw(E=math.exp(e), A=math.exp(a), B=math.exp(b), alpha=float(alpha), beta=float(beta))
    except (v.InvalidInput, OverflowError):
        return None


# --- Influential runs ----------------------------------------------------------------------------------

# A run is an outlier when its log residual is this many times the typical one: the median absolute
# deviation of all residuals, times 1.4826 (a standard deviation, were the residuals normal), which a few
# outliers do not inflate as they do the RMSE (on Chinchilla's 245 runs the worst, 0.263, is 11 RMSEs but
# 45 of these). Ten times the Huber delta (1% of the loss) is the least that counts: a fit of nearly
# noiseless runs has a typical residual near zero.
OUTLIER_SCALES = 5.0
OUTLIER_FLOOR = 10 * HUBER_DELTA
MAX_LEFT_OUT = 20  # and at most a tenth of the runs: beyond, it is the law that does not fit, not a few runs
# The refits start from the full fit's best end point: 4 distinct ones give the same on Chinchilla's runs, at
# up to 4 times the cost, which grows with the runs (1.5 s on 20 000 from one, on two cores).
LEAVE_OUT_RESTARTS = 1


@dataclass(frozen=True)
class InfluentialRun:
    """A run far off the fitted law: its place among the runs as given (from 0), and its residual."""

    index: int
    params: float
    tokens: float
    loss: float
    log_residual: float  # log(L_predicted) - log(L_observed)


@dataclass(frozen=True)
class Influence:
    """The runs far off a fitted law, worst first, and the law fitted to the other runs: how far they sway
    the fit is the difference between law_with and law_without (at each of TOKENS_PER_PARAM_BUDGETS)."""

    runs: tuple[InfluentialRun, ...]
    typical_log_residual: float  # 1.4826 x the median absolute deviation of every run's residual
    law_with: ScalingLaw  # every run, refitted as law_without is: what law_without is compared with
    law_without: ScalingLaw

    @property
    def tokens_per_param_with(self) -> dict[float, float]:
        return _tokens_per_param(self.law_with)

    @property
    def tokens_per_param_without(self) -> dict[float, float]:
        return _tokens_per_param(self.law_without)


def influence_of_outliers(
    n: np.ndarray, d: np.ndarray, loss: np.ndarray, solution: Solution, residual: np.ndarray
) -> Influence | None:
    """The outliers among the runs (see OUTLIER_SCALES), worst first, and the law refitted without them;
    None when there are none, or when the other runs are too few to fit or their refit fails.

    The refit starts from the full fit's best end point, as a bootstrap resample does, rather than the whole
    grid: leaving out a few runs moves the optimum, not to another basin (on Chinchilla's runs it lands where
    the whole grid does, at a fortieth of the cost: 0.1 s). Every run is refitted the same way from the same
    point, so that the two laws differ by the runs left out, not by how far a descent went: a start of the
    grid stops sooner than a refit, in the flat valley where A and alpha trade off.
    """
    typical = 1.4826 * float(np.median(np.abs(residual - np.median(residual))))
    size = np.abs(residual)
    outliers = np.flatnonzero(size > max(OUTLIER_SCALES * typical, OUTLIER_FLOOR))
    worst_first = outliers[np.argsort(-size[outliers], kind="stable")]
    outliers = worst_first[: min(MAX_LEFT_OUT, max(1, size.size // 10))]
    kept = np.ones(size.size, dtype=bool)
    kept[outliers] = False
    if outliers.size == 0 or kept.sum() < MIN_RUNS or np.unique(n[kept]).size < MIN_MODEL_SIZES:
        return None
    log_n, log_d, log_loss = np.log(n), np.log(d), np.log(loss)
    starts = _distinct_best(solution.ends, LEAVE_OUT_RESTARTS)
    count = starts.shape[0]
    weights = np.vstack((np.ones((count, size.size)), np.tile(kept.astype(float), (count, 1))))

    def evaluate(rows: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return objective_and_gradient(theta, log_n, log_d, log_loss, weights=weights[rows])

    ends = _descend(
        evaluate,
        np.vstack((starts, starts)),
        MAX_ITERATIONS,
        from_grid=False,
        gradient_tolerance=REFIT_TOLERANCE,
    )
    best = np.argmin(ends.f.reshape(2, count), axis=1) + np.array([0, count])
    law_with, law_without = (_law_of(ends.x[row]) if ends.converged[row] else None for row in best)
    if law_with is None or law_without is None:
        return None
    return Influence(
        runs=tuple(
            InfluentialRun(
                index=int(run),
                params=float(n[run]),
                tokens=float(d[run]),
                loss=float(loss[run]),
                log_residual=float(residual[run]),
            )
            for run in outliers
        ),
        typical_log_residual=typical,
        law_with=law_with,
        law_without=law_without,
    )


# --- Uncertainty ----------------------------------------------------------------------------------------

BOOTSTRAP_RESTARTS = 4  # a resample is fitted from the full fit's best few distinct end points
CONFIDENCE = 0.95
COEFFICIENTS = ("E", "A", "B", "alpha", "beta", "a", "b")  # each gets an interval


@dataclass(frozen=True)
class Bootstrap:
    """Fits of `samples` resamples of the runs (drawn with replacement, with `seed`) and the percentile
    intervals of the coefficients over them (Efron & Tibshirani 1993, §13.3)."""

    samples: int
    seed: int
    laws: tuple[ScalingLaw, ...]  # one per resample whose fit converged to a law the engine accepts
    intervals: dict[str, tuple[float, float]]  # CONFIDENCE percentile interval of each of COEFFICIENTS

    @property
    def unusable(self) -> int:
        """Resamples whose fit did not converge or gave a law outside what the engine accepts."""
        return self.samples - len(self.laws)


def bootstrap(  # noqa: PLR0917 -- the runs and the fit they came from, then what to draw
    log_n: np.ndarray, log_d: np.ndarray, log_loss: np.ndarray, solution: Solution, samples: int, seed: int
) -> Bootstrap:
    """Refit `samples` resamples of the runs, each from the best BOOTSTRAP_RESTARTS distinct end points of
    the full fit rather than the whole grid: a resample moves the optimum a little, not to another basin,
    and this makes 1 000 resamples cost about one full fit.

    A resample is a count per run (multinomial), used as weights of the summed Huber loss; resamples are
    drawn and fitted in chunks, so memory stays bounded for 100 000 runs.
    """
    rng = np.random.default_rng(seed)
    starts = _distinct_best(solution.ends, BOOTSTRAP_RESTARTS)
    per_chunk = max(1, CHUNK_ELEMENTS // (log_n.size * starts.shape[0]))
    laws: list[ScalingLaw] = []
    for first in range(0, samples, per_chunk):
        count = min(per_chunk, samples - first)
        weights = rng.multinomial(log_n.size, np.full(log_n.size, 1.0 / log_n.size), size=count)
        weights = np.repeat(weights.astype(float), starts.shape[0], axis=0)

        def evaluate(
            rows: np.ndarray, theta: np.ndarray, weights: np.ndarray = weights
        ) -> tuple[np.ndarray, np.ndarray]:
            return objective_and_gradient(theta, log_n, log_d, log_loss, weights=weights[rows])

        ends = _descend(
            evaluate,
            np.tile(starts, (count, 1)),
            MAX_ITERATIONS,
            from_grid=False,
            gradient_tolerance=REFIT_TOLERANCE,
        )
        best = np.argmin(ends.f.reshape(count, -1), axis=1) + np.arange(count) * starts.shape[0]
        for row in best[ends.converged[best]]:
            law = _law_of(ends.x[row])
            if law is not None:
                laws.append(law)
    if len(laws) < 2:
        raise v.InvalidInput("bootstrap", "no two resamples of these runs could be fitted; add runs")
    tail = 100 * (1 - CONFIDENCE) / 2
    intervals = {}
    for name in COEFFICIENTS:
        values = np.array([getattr(law, name) for law in laws])
        low, high = np.percentile(values, [tail, 100 - tail])
        intervals[name] = (float(low), float(high))
    return Bootstrap(samples=samples, seed=seed, laws=tuple(laws), intervals=intervals)


def _distinct_best(ends: _Ends, count: int) -> np.ndarray:
    """The `count` lowest end points that differ from each other (many starts end at the same optimum)."""
    chosen: list[np.ndarray] = []
    for row in np.argsort(ends.f):
        if not np.isfinite(ends.f[row]):
            break
        if all(np.abs(ends.x[row] - other).max() > 1e-3 for other in chosen):
            chosen.append(ends.x[row])
            if len(chosen) == count:
                break
    return np.array(chosen)


def _checked_runs(
    params: Sequence[float], tokens: Sequence[float], losses: Sequence[float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not len(params) == len(tokens) == len(losses):
        raise v.InvalidInput("runs", "params, tokens and losses must have one value per run")
    if len(params) > MAX_RUNS:
        raise v.InvalidInput("runs", f"at most {MAX_RUNS} runs can be fitted at once")
    n, d, loss = (np.asarray(values, dtype=float) for values in (params, tokens, losses))
    for name, values in (("params", n), ("tokens", d), ("loss", loss)):
        bad = ~(np.isfinite(values) & (values > 0))
        if bad.any():
            raise v.InvalidInput(
                "runs", f"run {int(np.argmax(bad))}: {name} must be a positive finite number"
            )
    if n.size < MIN_RUNS:
        raise v.InvalidInput("runs", f"give at least {MIN_RUNS} runs (got {n.size})")
    if np.unique(n).size < MIN_MODEL_SIZES:
        raise v.InvalidInput(
            "runs", f"give runs of at least {MIN_MODEL_SIZES} model sizes: the exponents need them"
        )
    if np.unique(np.column_stack((n, d)), axis=0).shape[0] < MIN_RUNS:
        raise v.InvalidInput(
            "runs", f"give at least {MIN_RUNS} distinct (params, tokens) points, not repeats"
        )
    # The loss must fall with scale: bigger runs (by compute) that do no better leave nothing to fit.
    flops = n * d
    flat = np.ptp(loss) == 0
    if flat or (np.ptp(flops) > 0 and np.corrcoef(np.log(flops), np.log(loss))[0, 1] >= 0):
        raise v.InvalidInput(
            "runs", "the losses do not decrease with scale (params x tokens); check the runs"
        )
    return n, d, loss
