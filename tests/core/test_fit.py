"""Fitting a law to runs: the objective's gradient, and recovering known coefficients."""

from __future__ import annotations

import numpy as np
import pytest

from service.core import fit
from service.core.validation import InvalidInput

TRUE = {"E": 1.82, "A": 480.0, "B": 2100.0, "alpha": 0.35, "beta": 0.37}


def synthetic_runs(noise: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A small sweep, 6 model sizes by 6 token counts, with multiplicative noise on the loss."""
    sizes = np.geomspace(5e7, 5e9, 6)
    tokens = np.geomspace(1e9, 2e11, 6)
    n, d = (grid.ravel() for grid in np.meshgrid(sizes, tokens))
    loss = TRUE["E"] + TRUE["A"] / n ** TRUE["alpha"] + TRUE["B"] / d ** TRUE["beta"]
    loss *= np.exp(np.random.default_rng(seed).normal(0.0, noise, loss.size))
    return np.log(n), np.log(d), np.log(loss)


def as_law(theta: np.ndarray) -> dict[str, float]:
    a, b, e, alpha, beta = theta
    return {"E": np.exp(e), "A": np.exp(a), "B": np.exp(b), "alpha": alpha, "beta": beta}


def test_the_gradient_is_the_derivative_of_the_objective():
    log_n, log_d, log_loss = synthetic_runs(noise=0.01)
    # Points on both sides of the Huber threshold, and one whose terms overflow without the max-shift.
    theta = np.array([[6.0, 7.5, 0.6, 0.35, 0.37], [3.0, 9.0, -0.5, 0.8, 0.2], [800.0, 5.0, 0.1, 0.1, 0.3]])
    _, gradient = fit.objective_and_gradient(theta, log_n, log_d, log_loss)
    step = 1e-6
    for k in range(5):
        shift = np.zeros(5)
        shift[k] = step
        up, _ = fit.objective_and_gradient(theta + shift, log_n, log_d, log_loss)
        down, _ = fit.objective_and_gradient(theta - shift, log_n, log_d, log_loss)
        np.testing.assert_allclose(gradient[:, k], (up - down) / (2 * step), rtol=1e-5, atol=1e-9)


def test_the_objective_is_the_summed_huber_loss_of_log_residuals():
    log_n, log_d, log_loss = synthetic_runs(noise=0.0)
    exact = np.array([[np.log(TRUE["A"]), np.log(TRUE["B"]), np.log(TRUE["E"]), TRUE["alpha"], TRUE["beta"]]])
    assert fit.objective_and_gradient(exact, log_n, log_d, log_loss)[0][0] == pytest.approx(0.0, abs=1e-20)
    off = exact + np.array([0.0, 0.0, 0.01, 0.0, 0.0])  # E 1% higher
    value, _ = fit.objective_and_gradient(off, log_n, log_d, log_loss)
    residual = (
        np.log(
            np.exp(
                np.logaddexp(
                    np.logaddexp(off[0, 0] - off[0, 3] * log_n, off[0, 1] - off[0, 4] * log_d), off[0, 2]
                )
            )
        )
        - log_loss
    )
    delta = fit.HUBER_DELTA
    expected = np.where(np.abs(residual) <= delta, 0.5 * residual**2, delta * (np.abs(residual) - delta / 2))
    assert value[0] == pytest.approx(expected.sum(), rel=1e-12)


def test_the_grid_has_4500_starts_spanning_the_published_ranges():
    grid = fit.default_grid()
    assert grid.shape == (4500, 5)
    assert {tuple(np.unique(grid[:, k])) for k in (3, 4)} == {(0.0, 0.5, 1.0, 1.5, 2.0)}
    assert tuple(np.unique(grid[:, 2])) == (-1.0, -0.5, 0.0, 0.5, 1.0)
    assert tuple(np.unique(grid[:, 0])) == tuple(np.unique(grid[:, 1])) == (0.0, 5.0, 10.0, 15.0, 20.0, 25.0)


def test_noiseless_runs_give_back_the_law_that_made_them():
    solution = fit.minimise(*synthetic_runs(noise=0.0))
    assert solution.converged
    for name, value in as_law(solution.theta).items():
        assert value == pytest.approx(TRUE[name], rel=1e-3), name


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_noisy_runs_give_back_the_law_within_its_noise(seed):
    solution = fit.minimise(*synthetic_runs(noise=0.005, seed=seed))
    law = as_law(solution.theta)
    assert law["E"] == pytest.approx(TRUE["E"], rel=0.05)
    assert law["alpha"] == pytest.approx(TRUE["alpha"], abs=0.05)
    assert law["beta"] == pytest.approx(TRUE["beta"], abs=0.05)


def test_the_best_start_wins_over_a_worse_single_start():
    runs = synthetic_runs(noise=0.0)
    poor = fit.minimise(*runs, starts=np.array([[0.0, 0.0, -1.0, 2.0, 2.0]]), max_iterations=5)
    best = fit.minimise(*runs)
    assert best.objective < poor.objective
    assert best.starts == 4500


def runs_of(noise: float = 0.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    log_n, log_d, log_loss = synthetic_runs(noise, seed)
    return np.exp(log_n), np.exp(log_d), np.exp(log_loss)


def test_a_law_fitted_to_runs_reports_its_range_residuals_and_ratios():
    n, d, loss = runs_of(noise=0.002, seed=4)
    result = fit.fit_law(n, d, loss)
    assert result.runs == 36
    assert result.converged
    assert result.law.E == pytest.approx(TRUE["E"], rel=0.05)
    assert (result.fitted_range.min_params, result.fitted_range.max_params) == (n.min(), n.max())
    assert result.fitted_range.max_flops == pytest.approx(6 * (n * d).max())
    assert 0 < result.rmse_log_loss < 0.01
    assert result.max_abs_log_residual >= result.rmse_log_loss
    for budget, ratio in result.tokens_per_param.items():
        assert ratio == pytest.approx(result.law.optimal_tokens(budget) / result.law.optimal_params(budget))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda n, d, loss: (n[:4], d[:4], loss[:4]), "at least 5 runs"),
        (lambda n, d, loss: (np.full_like(n, 1e9), d, loss), "3 model sizes"),
        (
            lambda n, d, loss: (n, d, np.where(np.arange(n.size) == 3, np.nan, loss)),
            "loss must be a positive",
        ),
        (lambda n, d, loss: (n, -d, loss), "tokens must be a positive"),
        (
            lambda n, d, loss: (np.r_[n[:3], n[:3]], np.r_[d[:3], d[:3]], np.r_[loss[:3], loss[:3]]),
            "distinct",
        ),
        (lambda n, d, loss: (n, d, 1.0 / loss), "do not decrease"),
        (lambda n, d, loss: (n, d, np.full_like(loss, 2.5)), "do not decrease"),
        (lambda n, d, loss: (n, d[:-1], loss), "one value per run"),
    ],
)
def test_runs_that_cannot_be_fitted_are_refused_with_the_reason(change, reason):
    with pytest.raises(InvalidInput, match=reason):
        fit.fit_law(*change(*runs_of()))


# --- Bootstrap ------------------------------------------------------------------------------------------


def test_weights_count_runs_as_if_they_were_repeated():
    log_n, log_d, log_loss = synthetic_runs(noise=0.01)
    counts = np.random.default_rng(7).multinomial(log_n.size, np.full(log_n.size, 1 / log_n.size))
    theta = np.array([[6.0, 7.5, 0.6, 0.35, 0.37], [3.0, 9.0, -0.5, 0.8, 0.2]])
    weighted = fit.objective_and_gradient(theta, log_n, log_d, log_loss, weights=np.tile(counts, (2, 1)))
    repeated = fit.objective_and_gradient(
        theta, *(np.repeat(values, counts) for values in (log_n, log_d, log_loss))
    )
    for got, expected in zip(weighted, repeated, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_rows_are_evaluated_in_chunks_with_the_same_result(monkeypatch):
    runs = synthetic_runs(noise=0.01)
    theta = fit.default_grid()[::50]
    whole = fit.objective_and_gradient(theta, *runs)
    monkeypatch.setattr(fit, "CHUNK_ELEMENTS", 7 * runs[0].size)  # 7 rows at a time
    chunked = fit.objective_and_gradient(theta, *runs)
    for got, expected in zip(chunked, whole, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-18)  # BLAS may sum in another order


def test_bootstrap_intervals_cover_the_true_law_and_widen_with_noise(small_fit_grid):
    widths = []
    for noise in (0.002, 0.01):
        n, d, loss = runs_of(noise=noise, seed=11)
        result = fit.fit_law(n, d, loss, bootstrap_samples=200, seed=3)
        assert result.bootstrap.samples == 200
        assert result.bootstrap.unusable <= 10
        true_law = fit.ScalingLaw(**TRUE)
        for name, (low, high) in result.bootstrap.intervals.items():
            assert low < getattr(result.law, name) < high, name  # the point fit lies inside its interval
            if name in TRUE or name in {"a", "b"}:
                assert low <= getattr(true_law, name) <= high, name
        widths.append(result.bootstrap.intervals["alpha"][1] - result.bootstrap.intervals["alpha"][0])
    # 5x the noise: intervals of order 5x as wide; a bootstrap whose refits stopped at their start would
    # give intervals of almost no width at any noise.
    assert widths[1] > 2.5 * widths[0] > 0


def test_the_bootstrap_is_reproducible_from_its_seed(small_fit_grid):
    n, d, loss = runs_of(noise=0.01, seed=2)
    first, again, other = (
        fit.fit_law(n, d, loss, bootstrap_samples=20, seed=seed).bootstrap for seed in (1, 1, 2)
    )
    assert first.laws == again.laws
    assert first.intervals == again.intervals
    assert first.laws != other.laws


def test_without_a_bootstrap_there_are_no_intervals():
    assert fit.fit_law(*runs_of(noise=0.01)).bootstrap is None


def test_many_runs_search_the_grid_on_a_subsample_and_find_the_same_optimum(monkeypatch):
    rng = np.random.default_rng(9)
    n, d = (
        np.exp(rng.uniform(np.log(5e7), np.log(5e9), 600)),
        np.exp(rng.uniform(np.log(1e9), np.log(2e11), 600)),
    )
    loss = (TRUE["E"] + TRUE["A"] / n ** TRUE["alpha"] + TRUE["B"] / d ** TRUE["beta"]) * np.exp(
        rng.normal(0.0, 0.01, n.size)
    )
    # A tenth of the grid for both searches, which are compared like for like: the grid's size is not what
    # this tests, where it is searched is.
    grid = fit.default_grid()[::10]
    monkeypatch.setattr(fit, "default_grid", lambda: grid)
    everything = fit.minimise(np.log(n), np.log(d), np.log(loss))
    monkeypatch.setattr(fit, "GRID_RUNS", 100)  # the grid on 100 runs, then a descent on all 600
    result = fit.fit_law(n, d, loss)
    assert result.objective <= everything.objective * (1 + 1e-9)
    for name, value in as_law(everything.theta).items():
        assert getattr(result.law, name) == pytest.approx(value, rel=1e-3), name
