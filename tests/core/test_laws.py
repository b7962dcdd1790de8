"""Parametric laws: closed forms checked against published values and against each other."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.core import allocate
from service.core.laws import KRAJEWSKI_2024, PUBLISHED_LAWS, FineGrainedLaw, MoEDesign, ScalingLaw
from service.core.validation import InvalidInput

CHINCHILLA = PUBLISHED_LAWS["chinchilla-2022"].law
LAWS = [published.law for published in PUBLISHED_LAWS.values()]
DENSE = [slug for slug, published in PUBLISHED_LAWS.items() if published.moe is None]
MOE = [slug for slug, published in PUBLISHED_LAWS.items() if published.moe is not None]
budgets = st.floats(min_value=1e15, max_value=1e30)


def test_the_published_slugs_are_built_in_with_their_sources_and_ranges():
    assert set(PUBLISHED_LAWS) == {
        "chinchilla-2022",
        "chinchilla-2022-rounded",
        "epoch-2024",
        "muennighoff-2023-c4",
        "sardana-2024",
        "krajewski-2024-g1",
        "krajewski-2024-g8",
        "krajewski-2024-g16",
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


@pytest.mark.parametrize("slug", DENSE)
def test_every_dense_law_notes_how_its_allocation_compares_with_chinchillas_70b_on_1_4t(slug):
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


@pytest.mark.parametrize(
    ("params", "tokens", "argument"), [(5.6e-195, 1e9, "params"), (1e9, 1e-300, "tokens")]
)
def test_a_size_whose_loss_no_float_holds_is_refused_by_name_not_overflowed(params, tokens, argument):
    # alpha 2.1 over 5.6e-195 parameters is a term of e^943: computed directly, an OverflowError (a 500).
    steep = ScalingLaw(E=13.6, A=3.9e11, B=3.1e11, alpha=2.1, beta=2.5)
    with pytest.raises(InvalidInput, match=f"^{argument}: too small for this law"):
        steep.loss(params, tokens)


def test_a_tiny_size_whose_loss_a_float_holds_still_has_one():
    assert math.isfinite(CHINCHILLA.loss(1e-100, 1e9))


# --- Whose parameters a law counts --------------------------------------------------------------------------


def test_each_published_law_says_whether_its_n_counts_the_embeddings():
    # Hoffmann et al. 2022 App. F count them, and the laws fitted on their runs or sizes with them
    # (Besiroglu 2024, Muennighoff 2023, Sardana 2024); Krajewski et al. 2024 §5 count non-embedding ones.
    assert {slug: published.counts_embeddings for slug, published in PUBLISHED_LAWS.items()} == {
        "chinchilla-2022": True,
        "chinchilla-2022-rounded": True,
        "epoch-2024": True,
        "muennighoff-2023-c4": True,
        "sardana-2024": True,
        "krajewski-2024-g1": False,
        "krajewski-2024-g8": False,
        "krajewski-2024-g16": False,
    }


# --- Fine-grained mixture of experts (Krajewski et al. 2024) ----------------------------------------------


def test_the_fine_grained_moe_coefficients_are_table_1s_moe_row():
    assert KRAJEWSKI_2024 == FineGrainedLaw(
        a=18.1, alpha=0.115, b=30.8, beta=0.147, g=2.1, gamma=0.58, c=0.47, expansion_rate=64
    )


@pytest.mark.parametrize(
    ("params", "tokens", "granularity", "loss"),
    [
        # Eq. 9 by hand: 0.47 + (2.1/G^0.58 + 18.1)/N^0.115 + 30.8/D^0.147, N total non-embedding parameters.
        # 64x100M (4.3e9 in all) on 4.37B tokens at G = 8, Table 2's first row: 0.47 + 1.4610 + 1.1787.
        (4.3e9, 4.37e9, 8, 3.1097),
        # 64x25M (d_model 512, 8 blocks: 512²·516·8 in all, App. A Table 3) on 16B tokens at G = 1:
        # 0.47 + 1.8468 + 0.9740.
        (512**2 * 516 * 8, 16e9, 1, 3.2907),
    ],
)
def test_the_fine_grained_law_is_eq_9(params, tokens, granularity, loss):
    by_hand = 0.47 + (2.1 / granularity**0.58 + 18.1) / params**0.115 + 30.8 / tokens**0.147

    assert KRAJEWSKI_2024.loss(params, tokens, granularity) == pytest.approx(by_hand, rel=1e-12)
    assert by_hand == pytest.approx(loss, abs=5e-5)


@pytest.mark.parametrize("granularity", [1, 8, 16])
@given(active=st.floats(min_value=1e6, max_value=1e13), tokens=st.floats(min_value=1e8, max_value=1e14))
def test_at_one_granularity_the_law_is_chinchillas_form_in_active_parameters(granularity, active, tokens):
    law = PUBLISHED_LAWS[f"krajewski-2024-g{granularity}"].law

    assert (law.E, law.B, law.alpha, law.beta) == (0.47, 30.8, 0.115, 0.147)
    assert law.A == pytest.approx((2.1 / granularity**0.58 + 18.1) * 43**-0.115, rel=1e-12)
    assert law.loss(active, tokens) == pytest.approx(
        KRAJEWSKI_2024.loss(43 * active, tokens, granularity), rel=1e-12
    )


def test_finer_experts_lower_the_loss_at_the_same_size_and_data():
    losses = [PUBLISHED_LAWS[f"krajewski-2024-g{g}"].law.loss(1e9, 1e11) for g in (1, 8, 16)]
    assert losses == sorted(losses, reverse=True)


def test_the_moe_design_has_e_times_g_experts_g_per_token_each_1_g_of_the_ffn():
    design = PUBLISHED_LAWS["krajewski-2024-g8"].moe

    assert design == MoEDesign(expansion_rate=64, granularity=8)
    assert design.experts == 512
    assert design.experts_per_token == 8
    assert design.expert_ffn(4 * 4096) == 2048


@pytest.mark.parametrize(("expansion_rate", "ratio"), [(64, 43), (16, 11), (1, 1)])
def test_total_over_active_parameters_is_8e_plus_4_over_12_whatever_the_granularity(expansion_rate, ratio):
    # Krajewski §6.1: N = d_model²·(8E + 4)·n_blocks in all, 12·d_model²·n_blocks active; E = 1 is dense.
    for granularity in (1, 4, 64):
        design = MoEDesign(expansion_rate, granularity)
        assert design.total_to_active_params == pytest.approx(ratio, rel=1e-12)
        assert design.total_params(1e9) == pytest.approx(ratio * 1e9, rel=1e-12)


@pytest.mark.parametrize(("d_model", "n_blocks", "granularity"), [(256, 4, 1), (640, 10, 4), (4096, 64, 16)])
def test_flops_per_token_are_eq_10_with_the_router(d_model, n_blocks, granularity):
    design = MoEDesign(64, granularity)
    active = 12 * d_model**2 * n_blocks  # d_model = 64·n_blocks, as the paper's shapes

    assert design.training_flops_per_token(active) == pytest.approx(
        (12 * d_model**2 * 6 + d_model * 64 * granularity * 14) * n_blocks, rel=1e-12
    )


@pytest.mark.parametrize(
    ("slug", "flops"),
    [("krajewski-2024-g1", 1.93e20), ("krajewski-2024-g8", 2.95e18), ("krajewski-2024-g16", 1.93e20)],
)
def test_every_moe_law_notes_its_allocation_its_terms_and_its_range(slug, flops):
    published = PUBLISHED_LAWS[slug]
    allocation = allocate.moe_compute_optimal(flops, published.law, published.moe)
    active = allocation.active_params
    size = f"{active / 1e6:.0f}M" if active < 1e9 else f"{active / 1e9:#.3g}B"
    budget = f"{flops:.3g}".replace("e+", "e")

    assert (
        f"At {budget} FLOPs it allocates {size} active parameters ({allocation.params / 1e9:#.3g}B in all) "
        f"on {allocation.tokens / 1e9:#.3g}B tokens" in published.note
    )
    assert "Its N is active non-embedding parameters" in published.note
    assert "16B to 130B tokens" in published.note
    assert "arXiv:2402.07871" in published.source


def test_granularity_1_is_noted_as_that_much_worse_than_16_at_the_same_budget():
    def loss(granularity: int) -> float:
        published = PUBLISHED_LAWS[f"krajewski-2024-g{granularity}"]
        return allocate.moe_compute_optimal(1.93e20, published.law, published.moe).predicted_loss

    note = PUBLISHED_LAWS["krajewski-2024-g1"].note
    assert f"to a loss {loss(1) - loss(16):.2g} above granularity 16's" in note


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: MoEDesign(0, 8), "expansion_rate"),
        (lambda: MoEDesign(64, 2.5), "granularity"),
        (lambda: MoEDesign(64, 8).training_flops_per_token(-1), "active_params"),
        (lambda: KRAJEWSKI_2024.loss(1e9, 1e10, 0.5), "granularity"),
        (lambda: KRAJEWSKI_2024.at(0), "granularity"),
    ],
)
def test_invalid_moe_arguments_are_refused_by_name(call, argument):
    with pytest.raises(InvalidInput, match=f"^{argument}:"):
        call()
