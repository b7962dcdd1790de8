"""Allocating a budget: the four rules against their published values and their defining properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from service.core import allocate
from service.core.laws import PUBLISHED_LAWS
from service.core.units import pf_days_to_flops
from service.core.validation import InvalidInput

CHINCHILLA = PUBLISHED_LAWS["chinchilla-2022"].law
C4 = PUBLISHED_LAWS["muennighoff-2023-c4"].law
SARDANA = PUBLISHED_LAWS["sardana-2024"].law
G8 = PUBLISHED_LAWS["krajewski-2024-g8"]
# Below the budget (~7e29 FLOPs) whose optimal mixture of experts would pass MAX_PARAMS in all.
moe_budgets = st.floats(min_value=1e15, max_value=1e28)


def test_6000_pf_days_at_20_tokens_per_parameter_is_65_7b_parameters_on_1_31t_tokens():
    allocation = allocate.fixed_ratio(pf_days_to_flops(6000), tokens_per_param=20)
    assert allocation.params == pytest.approx(65.7e9, rel=1e-3)
    assert allocation.tokens == pytest.approx(1.3145e12, rel=1e-3)


@pytest.mark.parametrize(
    ("params", "flops", "tokens"),
    [
        (400e6, 1.92e19, 8.0e9),
        (1e9, 1.21e20, 20.2e9),
        (10e9, 1.23e22, 205.1e9),
        (67e9, 5.76e23, 1.5e12),
        (175e9, 3.85e24, 3.7e12),
    ],
)
def test_chinchilla_table_3_projections_are_about_20_tokens_per_parameter_at_6nd(params, flops, tokens):
    # Hoffmann et al. 2022, Table 3 (Approach 1); printed to 2-4 significant figures (67B on "1.5T" is
    # 4.7% off 6ND), hence 5% on the identity and 3% on the size.
    assert 6 * params * tokens == pytest.approx(flops, rel=0.05)
    allocation = allocate.fixed_ratio(flops, tokens_per_param=tokens / params)
    assert allocation.params == pytest.approx(params, rel=0.03)
    assert 19 < tokens / params < 23


@given(flops=st.floats(min_value=1e15, max_value=1e33), ratio=st.floats(min_value=0.1, max_value=1e4))
def test_a_fixed_ratio_spends_the_budget_at_that_ratio(flops, ratio):
    allocation = allocate.fixed_ratio(flops, ratio)
    assert 6 * allocation.params * allocation.tokens == pytest.approx(flops, rel=1e-9)
    assert allocation.tokens_per_param == pytest.approx(ratio, rel=1e-9)
    assert allocation.predicted_loss is None


def test_the_compute_optimal_allocation_is_the_closed_form_and_predicts_its_loss():
    allocation = allocate.compute_optimal(5.76e23, CHINCHILLA)
    assert allocation.params == pytest.approx(4.036e10, rel=1e-3)
    assert allocation.flops == pytest.approx(5.76e23, rel=1e-9)
    assert allocation.predicted_loss == pytest.approx(CHINCHILLA.frontier_loss(5.76e23), rel=1e-12)


def test_a_target_loss_is_reached_by_the_least_compute_on_the_frontier():
    allocation = allocate.for_target_loss(2.0, CHINCHILLA)
    assert allocation.predicted_loss == pytest.approx(2.0, rel=1e-9)
    assert allocation.flops == pytest.approx(CHINCHILLA.flops_for_loss(2.0), rel=1e-9)


# Muennighoff et al. 2023, huggingface/datablations README (Figure 1, right): the two models.
def test_the_data_constrained_law_reproduces_the_datablations_reference_values():
    assert allocate.data_constrained_loss(C4, 6.34e9, 242e9, 25e9) == pytest.approx(
        2.2256440889984477, abs=1e-9
    )
    assert allocate.data_constrained_loss(C4, 8.67e9, 178e9, 25e9) == pytest.approx(
        2.2269634075087867, abs=1e-9
    )


def test_without_repetition_at_the_optimum_the_data_constrained_law_is_the_base_law():
    plain = allocate.compute_optimal(1e21, C4)
    assert allocate.data_constrained_loss(C4, plain.params, plain.tokens, plain.tokens * 10) == pytest.approx(
        plain.predicted_loss, rel=1e-12
    )


def test_repeating_25b_tokens_the_optimum_beats_both_models_of_figure_1():
    flops = 6 * 8.67e9 * 178e9
    allocation = allocate.data_constrained(flops, unique_tokens=25e9, law=C4)
    assert allocation.flops == pytest.approx(flops, rel=1e-12)
    assert 6 * allocation.params * allocation.tokens == pytest.approx(flops, rel=1e-9)
    assert allocation.predicted_loss <= allocate.data_constrained_loss(C4, 8.67e9, 178e9, 25e9)
    assert allocation.predicted_loss <= allocate.data_constrained_loss(C4, 6.34e9, 242e9, 25e9) + 1e-4
    assert allocation.epochs == pytest.approx(allocation.tokens / 25e9)
    assert allocation.epochs > 4  # less data than the unconstrained optimum would use


@pytest.mark.parametrize(("flops", "unique_tokens"), [(1e21, 1e9), (1e22, 25e9), (1e23, 1e11), (1e24, 3e12)])
def test_the_data_constrained_search_finds_the_minimum_of_a_dense_scan(flops, unique_tokens):
    allocation = allocate.data_constrained(flops, unique_tokens, C4)
    center = math.log(allocation.params)
    scan = [
        allocate.data_constrained_loss(C4, math.exp(x), flops / (6 * math.exp(x)), unique_tokens)
        for x in (center + 3 * (i / 2000 - 0.5) * math.log(10) for i in range(2001))
    ]
    assert allocation.predicted_loss <= min(scan) + 1e-12
    best = center + 3 * (scan.index(min(scan)) / 2000 - 0.5) * math.log(10)
    assert math.exp(best) == pytest.approx(allocation.params, rel=5e-3)


@pytest.mark.parametrize("flops", [1e6, 1e21, 5e34])
def test_a_single_unique_token_still_gets_a_finite_allocation(flops):
    allocation = allocate.data_constrained(flops, 1.0, C4)
    assert 6 * allocation.params * allocation.tokens == pytest.approx(flops, rel=1e-9)
    assert math.isfinite(allocation.predicted_loss)
    assert allocation.predicted_loss > C4.E


def test_plenty_of_unique_data_changes_nothing():
    plain = allocate.compute_optimal(1e22, C4)
    constrained = allocate.data_constrained(1e22, plain.tokens * 2, C4)
    assert (constrained.params, constrained.tokens) == (plain.params, plain.tokens)
    assert constrained.epochs == pytest.approx(0.5)


@given(unique=st.floats(min_value=1e8, max_value=1e12))
def test_less_unique_data_never_lowers_the_achievable_loss(unique):
    fewer = allocate.data_constrained(1e22, unique, C4)
    more = allocate.data_constrained(1e22, unique * 2, C4)
    assert more.predicted_loss <= fewer.predicted_loss + 1e-9


def test_sardana_a_13_6b_model_on_2_84x_the_data_matches_a_chinchilla_30b_at_1e13_inference_tokens():
    # Sardana et al. 2024: the quality of a Chinchilla-optimal 30B model (loss ≈ 1.958) with 1e13
    # inference tokens is reached by a 13.6B model on 2.84x the data, with 28% fewer total FLOPs.
    target = SARDANA.frontier_loss(SARDANA.flops_where_optimal(30e9))
    assert target == pytest.approx(1.958, abs=5e-4)

    result = allocate.inference_aware(target, inference_tokens=1e13, law=SARDANA)

    assert result.compute_optimal.params == pytest.approx(30e9, rel=1e-9)
    assert result.allocation.params == pytest.approx(13.6e9, rel=5e-3)
    assert result.allocation.tokens / result.compute_optimal.tokens == pytest.approx(2.84, rel=5e-3)
    assert result.fraction_saved == pytest.approx(0.28, abs=5e-3)
    assert result.allocation.predicted_loss == pytest.approx(target, rel=1e-9)


@given(inference_tokens=st.floats(min_value=1e6, max_value=1e16))
def test_the_inference_aware_model_never_costs_more_over_its_lifetime(inference_tokens):
    result = allocate.inference_aware(2.1, inference_tokens, SARDANA)
    assert result.lifetime_flops <= result.compute_optimal_lifetime_flops * (1 + 1e-9)
    assert result.allocation.params <= result.compute_optimal.params * (1 + 1e-9)


def test_more_inference_favours_a_smaller_model():
    sizes = [allocate.inference_aware(2.1, d, SARDANA).allocation.params for d in (1e10, 1e12, 1e14)]
    assert sizes == sorted(sizes, reverse=True)


def test_sardana_figure_1_a_7b_model_on_more_data_matches_a_13b_at_2t_inference_tokens_for_17_percent_less():
    # Sardana et al. 2024, Figure 1: a 13B Chinchilla-optimal model with 2T tokens of inference demand is
    # matched by a 7B model trained on more data, saving 1.7e22 FLOPs (17%) over the model's lifetime.
    target = SARDANA.frontier_loss(SARDANA.flops_where_optimal(13e9))

    result = allocate.inference_aware(target, inference_tokens=2e12, law=SARDANA)

    assert result.allocation.params == pytest.approx(7e9, rel=0.01)
    assert result.fraction_saved == pytest.approx(0.17, abs=5e-3)
    assert result.compute_optimal_lifetime_flops - result.lifetime_flops == pytest.approx(1.7e22, rel=0.01)


# Figure 1's 7B model trained on its own training compute: what a training budget with inference tokens buys.
FIGURE_1_TARGET = SARDANA.frontier_loss(SARDANA.flops_where_optimal(13e9))
FIGURE_1_BUDGET = allocate.inference_aware(FIGURE_1_TARGET, 2e12, SARDANA).allocation.flops


def test_a_training_budget_with_inference_tokens_buys_sardanas_7b_model_of_figure_1():
    result = allocate.inference_aware_within(FIGURE_1_BUDGET, inference_tokens=2e12, law=SARDANA)

    assert result.allocation.flops == FIGURE_1_BUDGET
    assert 6 * result.allocation.params * result.allocation.tokens == pytest.approx(FIGURE_1_BUDGET, rel=1e-9)
    assert result.allocation.params == pytest.approx(7e9, rel=0.01)
    assert result.allocation.predicted_loss == pytest.approx(FIGURE_1_TARGET, rel=1e-7)
    assert result.compute_optimal.params == pytest.approx(13e9, rel=1e-6)  # the same loss, at less training
    assert result.fraction_saved == pytest.approx(0.17, abs=5e-3)
    assert result.inference_flops == pytest.approx(2 * result.allocation.params * 2e12, rel=1e-12)


@given(
    flops=st.floats(min_value=1e18, max_value=1e27),
    inference_tokens=st.floats(min_value=1e6, max_value=1e16),
)
def test_within_a_budget_the_model_is_the_lifetime_cheapest_for_the_loss_it_reaches(flops, inference_tokens):
    within = allocate.inference_aware_within(flops, inference_tokens, SARDANA)
    at_its_loss = allocate.inference_aware(within.allocation.predicted_loss, inference_tokens, SARDANA)

    assert 6 * within.allocation.params * within.allocation.tokens == pytest.approx(flops, rel=1e-9)
    assert within.allocation.params == pytest.approx(at_its_loss.allocation.params, rel=1e-4)
    assert within.allocation.params <= within.compute_optimal_at_budget.params
    assert within.allocation.predicted_loss >= within.compute_optimal_at_budget.predicted_loss - 1e-12
    assert within.lifetime_flops <= within.compute_optimal_lifetime_flops * (1 + 1e-9)


@pytest.mark.parametrize("flops", [1.2345e32, 1.2345e34])
def test_within_a_budget_inference_too_small_to_register_leaves_the_compute_optimal_model(flops):
    # log(1 + D_inf/(3·D)) falls below the rounding of the other terms of the condition.
    within = allocate.inference_aware_within(flops, 1.0, CHINCHILLA)
    assert within.allocation.params == pytest.approx(CHINCHILLA.optimal_params(flops), rel=1e-9)


def test_within_a_budget_more_inference_favours_a_smaller_model_and_none_the_compute_optimal_one():
    sizes = [allocate.inference_aware_within(1e23, d, SARDANA).allocation.params for d in (1e10, 1e12, 1e14)]
    assert sizes == sorted(sizes, reverse=True)
    scarcely = allocate.inference_aware_within(1e23, 1.0, SARDANA)
    assert scarcely.allocation.params == pytest.approx(SARDANA.optimal_params(1e23), rel=1e-6)


def test_the_isoflop_curve_has_its_minimum_at_the_optimal_size():
    curve = allocate.isoflop_curve(CHINCHILLA, 1e21, points=41)
    losses = [point.predicted_loss for point in curve]
    assert losses.index(min(losses)) == 20
    assert curve[20].params == pytest.approx(CHINCHILLA.optimal_params(1e21), rel=1e-9)
    assert all(point.flops == 1e21 for point in curve)


def test_the_frontier_runs_from_the_smallest_to_the_largest_budget():
    points = allocate.frontier(CHINCHILLA, 1e18, 1e24, points=7)
    assert [p.flops for p in points] == pytest.approx([1e18, 1e19, 1e20, 1e21, 1e22, 1e23, 1e24], rel=1e-9)
    losses = [p.predicted_loss for p in points]
    assert losses == sorted(losses, reverse=True)


# --- Fine-grained mixture of experts (Krajewski et al. 2024) ----------------------------------------------


def moe(flops: float, slug: str = "krajewski-2024-g8") -> allocate.Allocation:
    published = PUBLISHED_LAWS[slug]
    return allocate.moe_compute_optimal(flops, published.law, published.moe)


@pytest.mark.parametrize(
    ("granularity", "flops", "active", "tokens", "loss"),
    [
        (8, 2.95e18, 100e6, 4.37e9, 3.133),
        (16, 1.93e20, 1e9, 28.94e9, 2.491),
        (16, 1.41e21, 3e9, 72.90e9, 2.245),
    ],
)
def test_the_moe_allocation_reproduces_krajewski_table_2_at_its_granularity(
    granularity, flops, active, tokens, loss
):
    # Krajewski et al. 2024 Table 2, "64 x N_act" rows at the granularities of the built-in laws. The table
    # was computed before Table 1 was rounded to 2-3 figures (alpha = 0.115 moves N^-alpha by ~1% at these
    # sizes): hence 5% on the sizes and 1% on the loss, which comes out ~0.02 lower throughout.
    allocation = moe(flops, f"krajewski-2024-g{granularity}")

    assert allocation.active_params == pytest.approx(active, rel=0.05)
    assert allocation.tokens == pytest.approx(tokens, rel=0.05)
    assert allocation.predicted_loss == pytest.approx(loss, rel=0.01)


def test_an_moe_allocation_gives_total_and_active_parameters_experts_and_experts_per_token():
    allocation = moe(1e21)

    assert allocation.params == pytest.approx(43 * allocation.active_params, rel=1e-12)
    assert (allocation.experts, allocation.experts_per_token) == (512, 8)
    assert allocation.unique_tokens is None


@given(flops=moe_budgets)
def test_an_moe_allocation_spends_the_budget_on_6_n_active_d_and_the_router(flops):
    allocation = moe(flops)
    N, D = allocation.active_params, allocation.tokens
    d_model = (16 * N / 3) ** (1 / 3)  # Krajewski §6.1: N = 12·d_model²·n_blocks with d_model = 64·n_blocks

    assert allocation.flops == flops
    assert D * G8.moe.training_flops_per_token(N) == pytest.approx(flops, rel=1e-9)
    # 6·N_act·D is the budget but for the router's share, 14·E·G/(72·d_model) of it (Eq. 10, App. E).
    assert 6 * N * D * (1 + 14 * 64 * 8 / (72 * d_model)) == pytest.approx(flops, rel=1e-9)
    assert allocation.predicted_loss == pytest.approx(G8.law.loss(N, D), rel=1e-12)


@given(flops=moe_budgets, shift=st.floats(min_value=0.01, max_value=2))
def test_no_other_active_size_at_the_same_budget_has_a_lower_loss(flops, shift):
    allocation = moe(flops)
    for other in (allocation.active_params * math.exp(shift), allocation.active_params * math.exp(-shift)):
        tokens = flops / G8.moe.training_flops_per_token(other)
        assert G8.law.loss(other, tokens) > allocation.predicted_loss


def test_the_router_moves_the_optimum_to_a_somewhat_wider_model_than_6_n_d_alone_would():
    # At 2.95e18 FLOPs the router costs 12% on top of 6·N·D for a 100M-active model (d_model ≈ 820), a share
    # that falls as the model widens (14·E·G/(72·d_model)).
    allocation = moe(2.95e18)
    without_router = allocate.compute_optimal(2.95e18, G8.law)

    assert allocation.active_params > without_router.params
    assert allocation.active_params == pytest.approx(without_router.params, rel=0.15)
    assert allocation.tokens < without_router.tokens


def test_dense_allocations_name_no_active_parameters_or_experts():
    for allocation in (allocate.compute_optimal(1e21, CHINCHILLA), allocate.fixed_ratio(1e21)):
        assert allocation.active_params is None
        assert (allocation.experts, allocation.experts_per_token) == (None, None)


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: moe(-1), "flops"),
        (lambda: moe(math.nan), "flops"),
        # No total under MAX_PARAMS trains on under MAX_TOKENS with that much compute.
        (lambda: moe(1e35), "flops"),
        (lambda: allocate.fixed_ratio(-1), "flops"),
        (lambda: allocate.fixed_ratio(1e21, 0), "tokens_per_param"),
        (lambda: allocate.data_constrained(1e21, 0, C4), "unique_tokens"),
        # Below one token: a unit mistake, and small enough to underflow log(U·G) (found by hypothesis).
        (lambda: allocate.data_constrained(1e21, 5e-324, C4), "unique_tokens"),
        (lambda: allocate.data_constrained(1e21, 0.5, C4), "unique_tokens"),
        # Beyond 6·MAX_PARAMS·MAX_TOKENS no model the law accepts can spend the budget on repeated data.
        (lambda: allocate.data_constrained(1e35, 1.0, C4), "flops"),
        (lambda: allocate.data_constrained(math.nan, 1e9, C4), "flops"),
        (lambda: allocate.inference_aware(1.5, 1e12, SARDANA), "target_loss"),
        (lambda: allocate.inference_aware(2.0, -5, SARDANA), "inference_tokens"),
        (lambda: allocate.inference_aware_within(1e22, 0, SARDANA), "inference_tokens"),
        (lambda: allocate.inference_aware_within(1e22, math.inf, SARDANA), "inference_tokens"),
        (lambda: allocate.inference_aware_within(0, 1e12, SARDANA), "flops"),
        # A million FLOPs buy a model of loss ~250 nats/token: beyond what the engine answers for.
        (lambda: allocate.inference_aware_within(1e6, 1e6, SARDANA), "flops"),
        # So much inference favours a model trained on more than the 1e18 tokens the engine answers for.
        (lambda: allocate.inference_aware_within(1e27, 1e21, SARDANA), "inference_tokens"),
        (lambda: allocate.isoflop_curve(CHINCHILLA, 1e21, points=2), "points"),
        (lambda: allocate.frontier(CHINCHILLA, 1e22, 1e21), "max_flops"),
    ],
)
def test_invalid_arguments_are_refused_by_name(call, argument):
    with pytest.raises(InvalidInput, match=f"^{argument}:"):
        call()


@example(flops=1e21, unique=5e-324, target=2.0, inference=1e12)  # log(U·G) once underflowed here
@given(
    flops=st.floats(allow_nan=True, allow_infinity=True),
    unique=st.floats(allow_nan=True, allow_infinity=True),
    target=st.floats(allow_nan=True, allow_infinity=True),
    inference=st.floats(allow_nan=True, allow_infinity=True),
)
def test_every_answer_is_finite_or_a_clean_refusal(flops, unique, target, inference):
    calls = [
        lambda: allocate.fixed_ratio(flops),
        lambda: allocate.compute_optimal(flops, CHINCHILLA),
        lambda: allocate.data_constrained(flops, unique, C4),
        lambda: allocate.for_target_loss(target, CHINCHILLA),
        lambda: allocate.inference_aware(target, inference, SARDANA),
        lambda: allocate.inference_aware_within(flops, inference, SARDANA),
        lambda: moe(flops),
    ]
    for call in calls:
        try:
            result = call()
        except InvalidInput:
            continue
        allocation = getattr(result, "allocation", result)
        for value in (
            allocation.params,
            allocation.tokens,
            allocation.flops,
            allocation.predicted_loss or 0.0,
        ):
            assert math.isfinite(value)
            assert value >= 0
