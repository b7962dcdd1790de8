"""IsoFLOP profiles (Chinchilla Approach 2): recovering a known allocation, grouping runs into budgets, and
saying why when the runs are not an IsoFLOP grid."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.core import caveats
from service.core import isoflop_fit as iso
from service.core.fit import TOKENS_PER_PARAM_BUDGETS
from service.core.isoflop_fit import MIN_BUDGETS
from service.core.laws import PUBLISHED_LAWS
from service.core.validation import InvalidInput
from tests.chinchilla import chinchilla_runs, needs_chinchilla

LAW = PUBLISHED_LAWS["chinchilla-2022-rounded"].law  # E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28
BUDGETS = tuple(np.geomspace(1e18, 1e21, 6))
# Real sweeps are not centred on the optimum they are looking for: each budget's sizes are off by up to 30%.
OFF_CENTRE = (1.0, 1.3, 0.77, 1.2, 0.85, 1.0)


def isoflop_grid(
    budgets=BUDGETS, sizes=9, span=4.0, centres=OFF_CENTRE, noise=0.0, jitter=0.0, seed=0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs (N, D, L): at each budget, `sizes` model sizes from 1/span to span times centre·N_opt (the law's
    optimum), compute off by up to ±jitter, losses from LAW with multiplicative noise."""
    rng = np.random.default_rng(seed)
    spread = np.geomspace(1 / span, span, sizes)
    params = np.concatenate(
        [LAW.optimal_params(c) * centre * spread for c, centre in zip(budgets, centres, strict=True)]
    )
    flops = np.repeat(budgets, sizes) * rng.uniform(1 - jitter, 1 + jitter, params.size)
    tokens = flops / (6 * params)
    losses = LAW.E + LAW.A / params**LAW.alpha + LAW.B / tokens**LAW.beta
    return params, tokens, losses * np.exp(rng.normal(0.0, noise, params.size))


def fitted(**grid) -> iso.IsoflopFit:
    result = iso.fit_isoflop(*isoflop_grid(**grid))
    assert isinstance(result, iso.IsoflopFit), result
    return result


def test_noiseless_profiles_give_back_the_laws_exponent_and_optima():
    result = fitted()
    # Along an IsoFLOP profile the loss is E + K(C)·(beta·e^(-alpha·t) + alpha·e^(beta·t)), t = ln(N/N_opt):
    # the same shape at every budget. The parabola's vertex is off the true optimum by the same factor at
    # every budget when the sizes sit at the same multiples of N_opt, leaving the exponent exact; off-centre
    # sweeps (OFF_CENTRE) move it by ~2e-4. 0.005 is a wide margin on that, and a tenth of the gap between
    # Chinchilla's Approaches 2 and 3 (0.49 and 0.46).
    assert result.a == pytest.approx(LAW.a, abs=0.005)
    assert len(result.budgets) == len(BUDGETS)
    assert result.skipped == ()
    for budget, flops in zip(result.budgets, BUDGETS, strict=True):
        assert budget.flops == pytest.approx(flops, rel=1e-12)
        # The profile is steeper on the small-model side (alpha > beta), so the parabola's vertex lies ~1.4%
        # above the true optimum for sizes spanning 16x; 5% leaves room for that and the off-centre sweeps.
        assert budget.optimal_params == pytest.approx(LAW.optimal_params(flops), rel=0.05)
        assert budget.optimal_loss == pytest.approx(LAW.frontier_loss(flops), rel=1e-3)
        assert budget.runs == 9


def test_the_two_power_laws_split_compute_exactly():
    result = fitted()
    # ln D_opt = ln C - ln 6 - ln N_opt at every budget, so the two regressions are tied (up to rounding).
    assert result.a + result.b == pytest.approx(1.0, abs=1e-12)
    assert result.params_coefficient * result.tokens_coefficient == pytest.approx(1 / 6, rel=1e-12)
    for flops in (1e19, 1e23, 1e30):
        assert 6 * result.optimal_params(flops) * result.optimal_tokens(flops) == pytest.approx(
            flops, rel=1e-12
        )
    assert tuple(result.tokens_per_param) == TOKENS_PER_PARAM_BUDGETS
    for flops, ratio in result.tokens_per_param.items():
        assert ratio == pytest.approx(result.optimal_tokens(flops) / result.optimal_params(flops), rel=1e-12)


def test_the_power_law_passes_through_the_budgets_optima():
    result = fitted()
    for budget in result.budgets:
        # Noiseless optima lie on a power law up to the ~0.5% spread that off-centre sweeps give them.
        assert result.optimal_params(budget.flops) == pytest.approx(budget.optimal_params, rel=0.01)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_noisy_profiles_give_back_the_exponent_within_their_noise(seed):
    result = fitted(noise=0.002, seed=seed)
    # With 0.2% noise on each loss, over 2 000 seeds the worst error in a was 0.014 and the worst optimum
    # was off by 11% (the 99th percentiles: 0.010 and 9%).
    assert result.a == pytest.approx(LAW.a, abs=0.02)
    for budget in result.budgets:
        assert budget.optimal_params == pytest.approx(LAW.optimal_params(budget.flops), rel=0.15)


def test_runs_a_few_percent_off_their_budget_are_grouped_with_it():
    # +-4% spans 0.035 decades, inside the 0.05-decade tolerance; neighbouring budgets are 4x apart.
    result = fitted(jitter=0.04, seed=7)
    assert [budget.runs for budget in result.budgets] == [9] * len(BUDGETS)
    for budget, flops in zip(result.budgets, BUDGETS, strict=True):
        assert budget.flops == pytest.approx(flops, rel=0.04)


def test_budgets_a_decade_apart_are_never_merged():
    log_flops = np.log(np.array([1e19, 1.05e19, 0.97e19, 1e20, 1.04e20, 0.96e20, 1e21]))
    groups = iso.budget_groups(log_flops)
    assert [sorted(group.tolist()) for group in groups] == [[0, 1, 2], [3, 4, 5], [6]]


@given(st.lists(st.floats(min_value=6.0, max_value=35.0), min_size=1, max_size=60))
def test_every_run_is_in_one_group_that_spans_at_most_the_tolerance(log10_flops):
    log_flops = np.array(log10_flops) * math.log(10)
    groups = iso.budget_groups(log_flops)
    assert sorted(np.concatenate(groups).tolist()) == list(range(len(log10_flops)))
    tolerance = iso.BUDGET_TOLERANCE_DECADES * math.log(10)
    for group in groups:
        assert np.ptp(log_flops[group]) <= tolerance
    for lower, higher in itertools.pairwise(groups):  # a group starts only beyond the tolerance
        assert log_flops[higher].min() - log_flops[lower].min() > tolerance


def test_one_budget_is_not_enough():
    result = iso.fit_isoflop(*isoflop_grid(budgets=(1e19,), centres=(1.0,)))
    assert isinstance(result, iso.IsoflopUnavailable)
    assert "at least 3 compute budgets" in result.reason
    assert "1 budget, 1 of them usable" in result.reason


def test_two_budgets_are_not_enough():
    result = iso.fit_isoflop(*isoflop_grid(budgets=(1e19, 1e20), centres=(1.0, 1.0)))
    assert isinstance(result, iso.IsoflopUnavailable)
    assert "2 budgets, 2 of them usable" in result.reason


# Sizes 40x to 10x below the optimum: the loss only falls over them, and its minimum is not bracketed.
ALL_TOO_SMALL = 1 / 20


def test_budgets_whose_minimum_is_not_bracketed_are_skipped_with_the_reason():
    centres = (1.0, ALL_TOO_SMALL, 1.0, 1.0, ALL_TOO_SMALL, 1.0)
    result = fitted(centres=centres, span=2.0)
    assert [budget.flops for budget in result.budgets] == pytest.approx([BUDGETS[i] for i in (0, 2, 3, 5)])
    assert [(skip.flops, skip.runs, skip.reason) for skip in result.skipped] == [
        (pytest.approx(BUDGETS[1]), 9, iso.MINIMUM_OUTSIDE),
        (pytest.approx(BUDGETS[4]), 9, iso.MINIMUM_OUTSIDE),
    ]
    assert result.a == pytest.approx(LAW.a, abs=0.005)


def test_too_few_bracketed_minima_make_the_fit_unavailable_and_say_why():
    centres = (1.0, ALL_TOO_SMALL, ALL_TOO_SMALL, 1.0, ALL_TOO_SMALL, ALL_TOO_SMALL)
    result = iso.fit_isoflop(*isoflop_grid(centres=centres, span=2.0))
    assert isinstance(result, iso.IsoflopUnavailable)
    assert "6 budgets, 2 of them usable" in result.reason
    assert f"{iso.MINIMUM_OUTSIDE} (4)" in result.reason


def test_profiles_with_too_few_sizes_or_a_loss_that_peaks_are_skipped():
    two_sizes = isoflop_grid(budgets=(3e21,), centres=(1.0,), sizes=2)
    params, tokens, _ = isoflop_grid(budgets=(1e22,), centres=(1.0,))
    peaked = (params, tokens, 5.0 - (np.log(params) - np.log(params).mean()) ** 2)
    runs = (np.concatenate(columns) for columns in zip(isoflop_grid(), two_sizes, peaked, strict=True))
    result = iso.fit_isoflop(*runs)
    assert [(skip.flops, skip.runs, skip.reason) for skip in result.skipped] == [
        (pytest.approx(3e21), 2, iso.FEWER_SIZES),
        (pytest.approx(1e22), 9, iso.NO_MINIMUM),
    ]
    assert len(result.budgets) == len(BUDGETS)


def test_runs_outside_the_planners_compute_range_make_the_fit_unavailable():
    params, tokens, losses = isoflop_grid()
    tokens[7] = 1e-9  # 6·N·D ~ 1 FLOP: a unit mistake, below the planner's 1e6 FLOPs
    result = iso.fit_isoflop(params, tokens, losses)
    assert isinstance(result, iso.IsoflopUnavailable)
    assert result.reason.startswith("run 7: ")


def test_optima_no_computable_power_law_passes_through_make_the_fit_unavailable():
    # Budgets 30% apart whose optima are 1e7x apart: a ~ 60, and k_N = N_opt / C^a ~ e^-2800.
    profiles = [(1e20, 1e3), (1.3e20, 1e10), (1.7e20, 1e17)]
    params = np.concatenate([optimum * np.array([0.25, 1.0, 4.0]) for _, optimum in profiles])
    flops = np.repeat([flops for flops, _ in profiles], 3)
    optima = np.repeat([optimum for _, optimum in profiles], 3)
    result = iso.fit_isoflop(params, flops / (6 * params), 2.0 + 0.1 * np.log(params / optima) ** 2)
    assert isinstance(result, iso.IsoflopUnavailable)
    assert "power law" in result.reason


def test_the_allocation_is_refused_outside_the_budgets_the_planner_accepts():
    result = fitted()
    with pytest.raises(InvalidInput, match="flops"):
        result.optimal_params(0.0)
    with pytest.raises(InvalidInput, match="flops"):
        result.optimal_tokens(1e40)


@st.composite
def sweeps(draw):
    """Runs at a few budgets, each at a few sizes, with losses anywhere from tiny to huge: mostly not an
    IsoFLOP grid, often with bracketed minima by chance, so that every branch of the fit is reached."""
    params, tokens, losses = [], [], []
    for log10_budget in draw(st.lists(st.floats(6.5, 34.5), min_size=1, max_size=6)):
        for log10_params in draw(st.lists(st.floats(0.0, log10_budget - 1.0), min_size=2, max_size=7)):
            log10_flops = log10_budget + draw(st.floats(-0.02, 0.02))
            params.append(10**log10_params)
            tokens.append(10 ** (log10_flops - log10_params) / 6)
            losses.append(draw(st.floats(1.0, 5.0) | st.floats(1e-300, 1e300)))
    return np.array(params), np.array(tokens), np.array(losses)


positive = st.floats(min_value=5e-324, max_value=1.7e308)
any_runs = st.integers(1, 30).flatmap(
    lambda n: st.tuples(*(st.lists(positive, min_size=n, max_size=n).map(np.array) for _ in range(3)))
)


noisy_grids = st.builds(
    isoflop_grid, noise=st.floats(0.0, 0.5), jitter=st.floats(0.0, 0.05), seed=st.integers(0, 2**32 - 1)
)


@given(sweeps() | any_runs | noisy_grids)
def test_the_result_is_a_reason_or_all_finite_numbers(runs):
    result = iso.fit_isoflop(*runs)
    if isinstance(result, iso.IsoflopUnavailable):
        assert result.reason
        return
    numbers = [result.a, result.b, result.params_coefficient, result.tokens_coefficient]
    numbers += list(result.tokens_per_param.values())
    for budget in result.budgets:
        numbers += [budget.flops, budget.optimal_params, budget.optimal_tokens, budget.optimal_loss]
    numbers += [skip.flops for skip in result.skipped]
    assert all(math.isfinite(number) for number in numbers), result
    assert min(result.params_coefficient, result.tokens_coefficient, *result.tokens_per_param.values()) > 0
    assert result.a + result.b == pytest.approx(1.0, abs=1e-9 * max(1.0, abs(result.a)))


# --- Runs that are not an IsoFLOP sweep -------------------------------------------------------------------


def scattered_runs(count=300, seed=0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs of compute spread evenly (in logs) from 1e18 to 1e21 FLOPs, each of a size from 1/4 to 4 times
    the law's optimum at its compute: what teams have when they gather the runs they happen to have made."""
    rng = np.random.default_rng(seed)
    flops = np.exp(rng.uniform(math.log(1e18), math.log(1e21), count))
    params = np.array([LAW.optimal_params(c) for c in flops]) * np.exp(
        rng.uniform(-1, 1, count) * math.log(4)
    )
    tokens = flops / (6 * params)
    return params, tokens, LAW.E + LAW.A / params**LAW.alpha + LAW.B / tokens**LAW.beta


@given(noisy_grids)
def test_the_budgets_of_a_sweep_are_set_apart(runs):
    # Runs a few percent off budgets 4x apart: nothing to say, whatever the noise.
    result = iso.fit_isoflop(*runs)
    assert isinstance(result, iso.IsoflopUnavailable) or result.scattered == ()


def test_budgets_cut_from_scattered_runs_are_named():
    result = iso.fit_isoflop(*scattered_runs())
    assert isinstance(result, iso.IsoflopFit), result  # an answer, but from profiles the grouping made up
    # At 100 runs a decade, every budget has runs of other budgets within the tolerance of its own.
    assert len(result.budgets) >= MIN_BUDGETS
    assert result.scattered == tuple(budget.flops for budget in result.budgets)


def test_a_budget_is_named_when_runs_of_another_come_within_the_tolerance_of_its_own():
    params, tokens, _ = isoflop_grid(budgets=(1e18, 1e19, 1e20), centres=(1.0, 1.0, 1.0))
    tokens[9:18] *= 10 ** np.linspace(0.0, 0.04, 9)  # the 1e19 profile's runs spread over 0.04 decades
    # A run 0.07 decades above 1e19 is beyond the tolerance of the profile's lowest run, so it starts a budget
    # of its own, but within the tolerance of the profile's highest.
    params, tokens = np.r_[params, 2e8], np.r_[tokens, 1e19 * 10**0.07 / (6 * 2e8)]
    result = iso.fit_isoflop(params, tokens, LAW.E + LAW.A / params**LAW.alpha + LAW.B / tokens**LAW.beta)
    assert isinstance(result, iso.IsoflopFit), result
    assert [budget.runs for budget in result.budgets] == [9, 9, 9]
    assert result.scattered == (result.budgets[1].flops,)


def test_budgets_cut_from_scattered_runs_are_a_warning_that_names_them():
    result = iso.fit_isoflop(*scattered_runs())
    [caveat] = caveats.not_an_isoflop_sweep(result)
    assert caveat.code == "not_an_isoflop_sweep"
    assert caveat.details == {
        "budgets": list(result.scattered),
        "budgets_used": len(result.budgets),
        "tolerance_decades": iso.BUDGET_TOLERANCE_DECADES,
    }
    assert f"{len(result.scattered)} of the {len(result.budgets)} budgets" in caveat.message


def test_a_sweep_or_no_isoflop_fit_is_no_warning():
    assert caveats.not_an_isoflop_sweep(fitted(jitter=0.04, seed=7)) == []
    unavailable = iso.fit_isoflop(*isoflop_grid(budgets=(1e19,), centres=(1.0,)))
    assert caveats.not_an_isoflop_sweep(unavailable) == []


@needs_chinchilla
def test_chinchillas_figure_4_runs_are_not_an_isoflop_sweep():
    result = iso.fit_isoflop(*chinchilla_runs())
    assert isinstance(result, iso.IsoflopFit), result
    # Their compute is spread evenly rather than at nine budgets: the grouping makes 51 of them.
    assert len(result.scattered) > 0.8 * len(result.budgets) > 20
