"""Fitting a scaling law (issue 7): accuracy on the Chinchilla data, and speed against scipy.

Reads the 245 points of Chinchilla's Figure 4 as extracted by Besiroglu et al. 2024 from ../shared/data (not
copied into this repository), drops the 5 highest losses as they did, and fits with service.core.fit: the
summed Huber objective from the 4 500-start grid, all starts at once. Prints the fit beside the published
point estimates and 95% intervals; fits 1 000 bootstrap resamples and prints their intervals beside the
published ones; runs the IsoFLOP method (Approach 2) on the same points; then times the same procedure done
start by start with scipy's L-BFGS-B and finite-difference gradients, over the same grid, in the same run.

    .venv/bin/python -m bench.bench_fit [--data PATH] [--scipy-starts 4500] [--bootstrap 1000]

Not a test: nothing asserts on time.
"""

from __future__ import annotations

import argparse
import csv
import resource
import time
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

from bench.machine import describe
from service.core import fit, isoflop_fit

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "chinchilla_fig4_epoch_svg_extracted.csv"
# Besiroglu et al. 2024 (arXiv 2404.10102): their fit and 95% bootstrap intervals
# (../shared/reference/science.md).
PUBLISHED = {
    "E": (1.8172, 1.769, 1.871),
    "A": (482.01, 285, 744),
    "B": (2085.43, 1042, 5810),
    "alpha": (0.3478, 0.317, 0.373),
    "beta": (0.3658, 0.331, 0.415),
}


def load(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    params = np.array([float(row["Model Size"]) for row in rows])
    flops = np.array([float(row["Training FLOP"]) for row in rows])
    loss = np.array([float(row["loss"]) for row in rows])
    kept = np.argsort(loss)[:-5]  # as Besiroglu et al.: the 5 highest losses are dropped
    params, flops, loss = params[kept], flops[kept], loss[kept]
    return np.log(params), np.log(flops / (6 * params)), np.log(loss)


def as_law(theta: np.ndarray) -> dict[str, float]:
    a, b, e, alpha, beta = theta
    return {"E": float(np.exp(e)), "A": float(np.exp(a)), "B": float(np.exp(b)), "alpha": alpha, "beta": beta}


def scipy_fit(log_n, log_d, log_loss, starts: np.ndarray) -> tuple[np.ndarray, float]:
    """The procedure as usually written: one scipy L-BFGS-B run per start, gradients by finite differences."""

    def objective(theta: np.ndarray) -> float:
        return float(fit.objective_and_gradient(theta[None, :], log_n, log_d, log_loss)[0][0])

    best_theta, best_value = None, np.inf
    for start in starts:
        result = minimize(objective, start, method="L-BFGS-B")
        if result.fun < best_value:
            best_theta, best_value = result.x, result.fun
    return best_theta, best_value


def many_runs(count: int) -> None:
    """A fit of `count` synthetic runs (uploads take 100 000): the grid on a subsample, then all runs."""
    rng = np.random.default_rng(0)
    n = np.exp(rng.uniform(np.log(5e7), np.log(5e9), count))
    d = np.exp(rng.uniform(np.log(1e9), np.log(2e11), count))
    loss = (1.82 + 480 / n**0.35 + 2100 / d**0.37) * np.exp(rng.normal(0.0, 0.01, count))
    started = time.perf_counter()
    result = fit.fit_law(n, d, loss)
    point = time.perf_counter() - started
    started = time.perf_counter()
    low, high = fit.fit_law(n, d, loss, bootstrap_samples=200, seed=1).bootstrap.intervals["alpha"]
    with_bootstrap = time.perf_counter() - started
    law = result.law
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{count} synthetic runs (E 1.82, A 480, B 2100, alpha 0.35, beta 0.37; 1% noise):")
    print(
        f"  fit {point:.1f} s: E {law.E:.4f}, alpha {law.alpha:.4f}, beta {law.beta:.4f}, "
        f"converged {result.converged}"
    )
    print(f"  with 200 bootstrap resamples {with_bootstrap:.1f} s: alpha in ({low:.4f}, {high:.4f})")
    print(f"  peak memory of this process so far: {peak:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--scipy-starts", type=int, default=4500, help="grid starts for the scipy baseline")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples to fit and time")
    parser.add_argument(
        "--many", type=int, default=100_000, help="synthetic runs for the large fit (0: skip)"
    )
    args = parser.parse_args()
    log_n, log_d, log_loss = load(args.data)
    print(describe())
    print(f"data: {args.data.name}, {log_n.size} runs after dropping the 5 highest losses")

    timings = []
    for _ in range(3):
        started = time.perf_counter()
        solution = fit.minimise(log_n, log_d, log_loss)
        timings.append(time.perf_counter() - started)
    ours = min(timings)
    law = as_law(solution.theta)
    print(
        f"service.core.fit: {solution.starts} starts, {solution.iterations} iterations, "
        f"objective {solution.objective:.6g}, converged {solution.converged}; best of 3: {ours:.2f} s"
    )
    print("| coefficient | fitted | published | published 95% interval | inside |")
    print("|---|---:|---:|---|---|")
    for name, (point, low, high) in PUBLISHED.items():
        value = law[name]
        inside = "yes" if low <= value <= high else "NO"
        print(f"| {name} | {value:.4g} | {point:.4g} | ({low:g}, {high:g}) | {inside} |")

    started = time.perf_counter()
    spread = fit.bootstrap(log_n, log_d, log_loss, solution, args.bootstrap, seed=2024)
    took = time.perf_counter() - started
    print(
        f"bootstrap: {spread.samples} resamples ({spread.unusable} unusable) fitted in {took:.2f} s "
        f"({1000 * took / spread.samples:.1f} ms each)"
    )
    print("| coefficient | 95% interval, ours | published 95% interval |")
    print("|---|---|---|")
    for name, (_, low, high) in PUBLISHED.items():
        ours_low, ours_high = spread.intervals[name]
        print(f"| {name} | ({ours_low:.4g}, {ours_high:.4g}) | ({low:g}, {high:g}) |")

    approach2 = isoflop_fit.fit_isoflop(np.exp(log_n), np.exp(log_d), np.exp(log_loss))
    if isinstance(approach2, isoflop_fit.IsoflopUnavailable):
        print(f"IsoFLOP (Approach 2): unavailable: {approach2.reason}")
    else:
        print(
            f"IsoFLOP (Approach 2): a = {approach2.a:.3f}, b = {approach2.b:.3f} from "
            f"{len(approach2.budgets)} budgets ({len(approach2.skipped)} skipped); Chinchilla's Approach 2 "
            "gives a = 0.49 (0.462, 0.534)"
        )

    if args.many:
        many_runs(args.many)

    starts = fit.default_grid()[: args.scipy_starts]
    started = time.perf_counter()
    theta, value = scipy_fit(log_n, log_d, log_loss, starts)
    baseline = time.perf_counter() - started
    scale = len(fit.default_grid()) / len(starts)
    print(
        f"scipy L-BFGS-B, finite-difference gradients, {len(starts)} starts one by one: {baseline:.1f} s"
        + (f" (x{scale:.1f} for the whole grid: {baseline * scale:.1f} s)" if scale != 1 else "")
        + f"; objective {value:.6g}; E={as_law(theta)['E']:.4f} alpha={theta[3]:.4f} beta={theta[4]:.4f}"
    )
    print(f"ratio, scipy over service.core.fit: {baseline * scale / ours:.0f}x")


if __name__ == "__main__":
    main()
