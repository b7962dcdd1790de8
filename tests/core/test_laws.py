"""Parametric laws: closed forms checked against published values and against each other."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.core.laws import PUBLISHED_LAWS, ScalingLaw
from service.core.validation import InvalidInput

CHINCHILLA = PUBLISHED_LAWS["chinchilla-2022"].law
LAWS = [published.law for published in PUBLISHED_LAWS.values()]
budgets = st.floats(min_value=1e15, max_value=1e30)


def test_the_published_slugs_are_built_in_with_their_sources_and_ranges():
    assert set(PUBLISHED_LAWS) == {
        "chinchilla-2022",
        "chinchilla-2022-rounded",
        "epoch-2024",
        "muennighoff-2023-c4",
        "sardana-2024",
    }
    for published in PUBLISHED_LAWS.values():
        assert "arXiv" in published.source
        assert published.fitted_range.max_params is not None


def test_the_coefficient_sets_are_the_published_ones():
    assert PUBLISHED_LAWS["chinchilla-2022"].law == ScalingLaw(
        1.6933737, 406.40102, 410.72283, 0.33917084, 0.2849083
    )
    assert PUBLISHED_LAWS["chinchilla-2022-rounded"].law == ScalingLaw(1.69, 406.4, 410.7, 0.34, 0.28)
    assert PUBLISHED_LAWS["epoch-2024"].law == ScalingLaw(1.8172, 482.01, 2085.43, 0.3478, 0.3658)
    assert PUBLISHED_LAWS["sardana-2024"].law == ScalingLaw(1.69, 406.4, 410.7, 0.336, 0.283)
    c4 = PUBLISHED_LAWS["muennighoff-2023-c4"].law
    assert (c4.E, c4.A, c4.B) == pytest.approx((1.869144, 520.825, 1487.716), rel=1e-6)


def test_chinchilla_unrounded_gives_40b_at_the_gopher_budget_and_the_rounded_set_32b():
    # Hoffmann et al. 2022 Fig. 4 ("40B"); derived values in reference/science.md.
    assert CHINCHILLA.optimal_params(5.76e23) == pytest.approx(4.036e10, rel=1e-3)
    assert PUBLISHED_LAWS["chinchilla-2022-rounded"].law.optimal_params(5.76e23) == pytest.approx(
        3.219e10, rel=1e-3
    )


@pytest.mark.parametrize("slug", list(PUBLISHED_LAWS))
def test_every_built_in_law_notes_how_its_allocation_compares_with_chinchillas_70b_on_1_4t(slug):
    published = PUBLISHED_LAWS[slug]
    # Hoffmann et al. 2022 trained Chinchilla, 70B parameters on 1.4T tokens, with Gopher's 5.76e23 FLOPs.
    N, D = published.law.optimal_params(5.76e23), published.law.optimal_tokens(5.76e23)

    assert f"{N / 1e9:.0f}B parameters on {D / 1e12:.1f}T tokens ({D / N:.0f} tokens per parameter)" in (
        published.note
    )
    assert "70B on 1.4T" in published.note


def test_the_approach_3_note_says_40b_on_2_4t_where_the_paper_recommends_70b_on_1_4t():
    note = PUBLISHED_LAWS["chinchilla-2022"].note

    assert "Approach 3" in note
    assert "40B parameters on 2.4T tokens (59 tokens per parameter)" in note
    assert "20 tokens per parameter" in note


def test_the_epoch_set_puts_about_20_4_tokens_per_parameter_at_1e22_flops():
    law = PUBLISHED_LAWS["epoch-2024"].law
    assert law.optimal_tokens(1e22) / law.optimal_params(1e22) == pytest.approx(20.4, abs=0.05)


def test_chinchilla_approach_3_exponent_a_is_0_46():
    # Hoffmann et al. 2022, Table 2 (Approach 3): N_opt ∝ C^0.46.
    assert CHINCHILLA.a == pytest.approx(0.46, abs=0.005)
    assert CHINCHILLA.a + CHINCHILLA.b == pytest.approx(1, rel=1e-12)


@pytest.mark.parametrize("law", LAWS)
@given(flops=budgets)
def test_the_frontier_spends_exactly_the_budget(law, flops):
    assert 6 * law.optimal_params(flops) * law.optimal_tokens(flops) == pytest.approx(flops, rel=1e-9)


@pytest.mark.parametrize("law", LAWS)
@given(flops=budgets)
def test_the_frontier_loss_is_the_law_at_the_optimal_allocation(law, flops):
    N, D = law.optimal_params(flops), law.optimal_tokens(flops)
    assert law.frontier_loss(flops) == pytest.approx(law.loss(N, D), rel=1e-9)


@pytest.mark.parametrize("law", LAWS)
@given(flops=budgets, shift=st.floats(min_value=0.01, max_value=2))
def test_no_other_size_at_the_same_budget_has_a_lower_loss(law, flops, shift):
    N = law.optimal_params(flops)
    for other in (N * math.exp(shift), N * math.exp(-shift)):
        assert law.loss(other, flops / (6 * other)) > law.frontier_loss(flops)


@pytest.mark.parametrize("law", LAWS)
@given(flops=budgets)
def test_compute_for_a_target_loss_inverts_the_frontier(law, flops):
    assert law.flops_for_loss(law.frontier_loss(flops)) == pytest.approx(flops, rel=1e-9)


@pytest.mark.parametrize("law", LAWS)
@given(flops=budgets)
def test_the_budget_where_a_size_is_optimal_inverts_the_optimal_size(law, flops):
    assert law.flops_where_optimal(law.optimal_params(flops)) == pytest.approx(flops, rel=1e-9)


@given(low=budgets, factor=st.floats(min_value=1.01, max_value=1e4))
def test_more_compute_buys_a_bigger_model_more_tokens_and_a_lower_loss(low, factor):
    high = low * factor
    assert CHINCHILLA.optimal_params(high) > CHINCHILLA.optimal_params(low)
    assert CHINCHILLA.optimal_tokens(high) > CHINCHILLA.optimal_tokens(low)
    assert CHINCHILLA.frontier_loss(high) < CHINCHILLA.frontier_loss(low)


def test_a_target_loss_at_or_below_the_irreducible_loss_is_refused():
    with pytest.raises(InvalidInput, match="target_loss: must be above the law's irreducible loss"):
        CHINCHILLA.flops_for_loss(CHINCHILLA.E)


def test_a_target_loss_that_needs_absurd_compute_is_refused():
    with pytest.raises(InvalidInput, match="target_loss: needs more than 1e\\+35 FLOPs"):
        CHINCHILLA.flops_for_loss(CHINCHILLA.E + 1e-9)


@pytest.mark.parametrize(
    ("coefficients", "argument"),
    [
        ({"E": 0}, "E"),
        ({"A": -1}, "A"),
        ({"B": math.inf}, "B"),
        ({"alpha": 0}, "alpha"),
        ({"beta": math.nan}, "beta"),
    ],
)
def test_invalid_coefficients_are_refused_by_name(coefficients, argument):
    values = {"E": 1.7, "A": 400.0, "B": 400.0, "alpha": 0.3, "beta": 0.3, **coefficients}
    with pytest.raises(InvalidInput, match=f"^{argument}:"):
        ScalingLaw(**values)


@pytest.mark.parametrize(("params", "tokens"), [(0, 1e9), (1e9, -1), (math.nan, 1e9), (1e9, math.inf)])
def test_loss_refuses_non_positive_or_non_finite_sizes(params, tokens):
    with pytest.raises(InvalidInput, match=r"^(params|tokens):"):
        CHINCHILLA.loss(params, tokens)


# --- Whose parameters a law counts --------------------------------------------------------------------------


def test_each_published_law_says_whether_its_n_counts_the_embeddings():
    # Hoffmann et al. 2022 App. F count them, and the laws fitted on their runs or sizes with them
    # (Besiroglu 2024, Muennighoff 2023, Sardana 2024).
    assert {slug: published.counts_embeddings for slug, published in PUBLISHED_LAWS.items()} == {
        "chinchilla-2022": True,
        "chinchilla-2022-rounded": True,
        "epoch-2024": True,
        "muennighoff-2023-c4": True,
        "sardana-2024": True,
    }
