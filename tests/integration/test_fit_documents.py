"""What a fit stores (services.laws.fit_columns): a fit that did not converge, or whose bootstrap could not
refit many resamples, is kept with a warning that says so, never silently."""

from __future__ import annotations

import math

import pytest

from service.core import fit
from service.services import laws

pytestmark = pytest.mark.usefixtures("small_fit_grid")  # the grid search is tests/core/test_fit.py's

RUNS = {"params": [], "tokens": [], "loss": []}
for size in (5e7, 1e8, 2e8, 5e8, 1e9, 2e9):
    for tokens in (1e9, 3e9, 1e10, 3e10, 1e11):
        RUNS["params"].append(size)
        RUNS["tokens"].append(tokens)
        RUNS["loss"].append(1.82 + 480 / size**0.35 + 2100 / tokens**0.37 + 0.003 * math.sin(size * tokens))


def codes(columns) -> list[str]:
    return [warning["code"] for warning in columns["warnings"]]


def test_a_converged_fit_has_no_warnings_and_its_documents_are_complete():
    columns = laws.fit_columns(laws.Fit(runs=laws.Runs(**RUNS), bootstrap=laws.Bootstrap(samples=20, seed=1)))
    assert columns["fit"]["converged"] is True
    assert codes(columns) == []
    assert len(columns["bootstrap_laws"]) == 20 - columns["bootstrap"]["unusable"]
    assert set(columns["bootstrap"]["intervals"]) == {"E", "A", "B", "alpha", "beta", "a", "b"}
    assert columns["runs"] == RUNS


def test_a_fit_stopped_before_it_converged_is_stored_with_a_warning(monkeypatch):
    monkeypatch.setattr(fit, "MAX_ITERATIONS", 3)
    columns = laws.fit_columns(laws.Fit(runs=laws.Runs(**RUNS)))
    assert columns["fit"]["converged"] is False
    assert codes(columns) == ["not_converged"]


def test_a_bootstrap_that_could_not_refit_many_resamples_says_so(monkeypatch):
    real = fit._law_of
    calls = iter(range(10**6))
    # Every other bootstrap refit gives a law the engine refuses (the full fit, called first, does not).
    monkeypatch.setattr(fit, "_law_of", lambda theta: real(theta) if next(calls) % 2 == 0 else None)
    columns = laws.fit_columns(laws.Fit(runs=laws.Runs(**RUNS), bootstrap=laws.Bootstrap(samples=20, seed=1)))
    assert columns["bootstrap"]["unusable"] == pytest.approx(10, abs=1)
    assert codes(columns) == ["unstable_bootstrap"]
