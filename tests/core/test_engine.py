"""The engine composes the rules: limits, defaults, estimates and caveats."""

from __future__ import annotations

import dataclasses
import math
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core import allocate, engine, wall_clock
from service.core.laws import MoEDesign, ScalingLaw
from service.core.shape import ModelShape
from service.core.units import PF_DAY_FLOPS
from service.core.validation import InvalidInput

H100 = engine.Hardware(
    name="H100",
    slug="h100-sxm",
    peak_flops={"bf16": 989.4e12, "fp8": 1978.9e12},
    memory_bytes=80e9,
    price_per_hour=Decimal("2.50"),
    currency="USD",
)


def cluster(**overrides) -> engine.Cluster:
    return engine.Cluster(**{"hardware": H100, "accelerators": 1024, "mfu": 0.4, **overrides})


def codes(result) -> list[str]:
    return [caveat.code for caveat in result.caveats]


def test_without_a_rule_the_budget_is_split_at_20_tokens_per_parameter():
    result = engine.plan(engine.Budget(pf_days=6000))
    assert result.method == "fixed-ratio"
    assert result.allocation.tokens_per_param == pytest.approx(20)
    assert result.pf_days == pytest.approx(6000)
    assert [(limit.kind, limit.binding) for limit in result.limits] == [("pf_days", True)]


def test_the_tightest_of_several_limits_binds_and_a_caveat_says_which():
    on = cluster()
    one_day = 86_400 * 1024 * 989.4e12 * 0.4
    result = engine.plan(engine.Budget(flops=1e24, days=1), on=on)
    assert result.allocation.flops == pytest.approx(one_day, rel=1e-12)
    assert [(limit.kind, limit.binding) for limit in result.limits] == [("flops", False), ("days", True)]
    assert "binding_limit" in codes(result)
    assert result.estimate.runtime.days == pytest.approx(1, rel=1e-9)


def test_a_money_budget_buys_hours_at_the_price_and_the_estimate_spends_it():
    result = engine.plan(engine.Budget(cost=Decimal("250000.00"), currency="USD"), on=cluster())
    assert result.estimate.runtime.accelerator_hours == pytest.approx(100_000, rel=1e-9)
    assert result.estimate.cost == Decimal("250000.00")


def test_a_money_budget_left_to_choose_its_count_runs_on_the_fewest_that_finish_within_a_year():
    # At a given pace every count buys the same compute: the fewest accelerators would take decades.
    budget = engine.Budget(cost=Decimal("5000000"), currency="USD")
    result = engine.plan(budget, on=cluster(accelerators=None))
    run = result.estimate
    assert run.runtime.days <= wall_clock.LONGEST_RUN_DAYS
    fewer = max(count for count in wall_clock.candidate_counts(8, 32_768) if count < run.accelerators)
    assert run.runtime.days * run.accelerators / fewer > wall_clock.LONGEST_RUN_DAYS
    assert "implausibly_long_run" not in codes(result)


def test_a_run_longer_than_a_year_is_said_to_be_implausibly_long():
    long = engine.estimate(7e10, 1.4e12, cluster(accelerators=8))
    [caveat] = [caveat for caveat in long.caveats if caveat.code == "implausibly_long_run"]
    assert caveat.details["days"] == pytest.approx(long.runtime.days)
    assert caveat.details["accelerators"] == 8
    assert "implausibly_long_run" not in codes(engine.estimate(7e10, 1.4e12, cluster()))


def test_accelerator_hours_are_a_budget_too():
    result = engine.plan(engine.Budget(accelerator_hours=1000), on=cluster())
    assert result.allocation.flops == pytest.approx(1000 * 3600 * 989.4e12 * 0.4, rel=1e-12)


def test_a_target_loss_uses_the_default_law_and_reaches_it():
    result = engine.plan(engine.Budget(target_loss=2.0))
    assert result.law.slug == "chinchilla-2022"
    assert result.allocation.predicted_loss == pytest.approx(2.0, rel=1e-9)
    assert result.limits == []


def test_unique_tokens_default_to_the_datablations_law_and_warn_about_many_epochs():
    result = engine.plan(engine.Budget(flops=1e23), unique_tokens=1e11)
    assert result.method == "data-constrained"
    assert result.law.slug == "muennighoff-2023-c4"
    assert result.allocation.epochs > 4
    assert "repeated_data" in codes(result)


@pytest.mark.parametrize("slug", ["chinchilla-2022", "epoch-2024"])
def test_repetition_constants_applied_to_a_law_other_than_the_c4_fit_they_came_with_get_a_caveat(slug):
    result = engine.plan(engine.Budget(flops=1e23), unique_tokens=1e11, law=engine.published(slug))

    caveat = next(caveat for caveat in result.caveats if caveat.code == "repetition_constants_from_c4")
    assert slug in caveat.message
    assert "muennighoff-2023-c4" in caveat.message
    assert caveat.details == {"law": slug, "fitted_with": "muennighoff-2023-c4"}


def test_the_c4_law_with_its_own_repetition_constants_gets_no_provenance_caveat():
    c4 = engine.published("muennighoff-2023-c4")
    same_coefficients = engine.NamedLaw(c4.law, name="inline law")

    for law in (None, c4, same_coefficients):
        result = engine.plan(engine.Budget(flops=1e23), unique_tokens=1e11, law=law)
        assert "repetition_constants_from_c4" not in codes(result)
    unconstrained = engine.plan(engine.Budget(flops=1e23), law=engine.published("epoch-2024"))
    assert "repetition_constants_from_c4" not in codes(unconstrained)


def test_repetition_far_past_any_gain_gets_its_own_caveat():
    result = engine.plan(engine.Budget(flops=1e25), unique_tokens=1e10)
    assert result.allocation.epochs > engine.EPOCHS_WITHOUT_GAIN
    assert "repetition_without_gain" in codes(result)


def test_inference_tokens_with_a_target_loss_plan_the_cheapest_model_over_its_lifetime():
    result = engine.plan(engine.Budget(target_loss=2.0), inference_tokens=1e13)
    assert result.method == "inference-aware"
    assert result.inference.fraction_saved > 0
    assert result.allocation.params < result.inference.compute_optimal.params


def test_a_training_budget_with_inference_tokens_buys_the_model_cheapest_over_its_lifetime_for_its_loss():
    result = engine.plan(engine.Budget(flops=1e23), inference_tokens=1e13)

    assert result.method == "inference-aware"
    assert result.law.slug == "chinchilla-2022"
    assert result.allocation.flops == 1e23
    assert [(limit.kind, limit.binding) for limit in result.limits] == [("flops", True)]
    summary = result.inference
    assert summary.constraint == "budget"
    assert summary.inference_flops == pytest.approx(2 * result.allocation.params * 1e13, rel=1e-12)
    assert summary.lifetime_flops == pytest.approx(1e23 + summary.inference_flops, rel=1e-12)
    # Against the same loss reached on the frontier (less training, more serving) and the budget's own
    # compute-optimal model (a lower loss, more serving still).
    assert summary.compute_optimal.predicted_loss == pytest.approx(result.allocation.predicted_loss, rel=1e-9)
    assert 0 < summary.fraction_saved < 1
    assert summary.compute_optimal_at_budget.flops == 1e23
    assert summary.compute_optimal_at_budget.params > result.allocation.params


def test_with_a_target_loss_the_inference_summary_says_the_loss_was_the_constraint():
    summary = engine.plan(engine.Budget(target_loss=2.0), inference_tokens=1e13).inference
    assert summary.constraint == "target_loss"
    assert summary.compute_optimal_at_budget is None


H100_SERVING = dataclasses.replace(H100, memory_bandwidth_bytes_per_second=3.35e12)


def test_inference_is_served_on_the_training_hardware_at_its_price_by_default():
    result = engine.plan(engine.Budget(flops=1e23), inference_tokens=1e12, on=cluster(hardware=H100_SERVING))

    serving = result.inference.serving
    assert serving.hardware == H100_SERVING
    assert serving.decoding.bound == "memory_bandwidth"
    tokens_per_second = 3.35e12 / (2 * result.allocation.params)
    assert serving.decoding.accelerator_hours == pytest.approx(1e12 / tokens_per_second / 3600, rel=1e-12)
    expected = Decimal(repr(serving.decoding.accelerator_hours)) * Decimal("2.50")
    assert serving.cost == expected.quantize(Decimal("0.01"))
    assert (serving.price_per_hour, serving.currency) == (Decimal("2.50"), "USD")


def test_a_price_given_for_the_cluster_is_the_price_of_serving_on_it_too():
    budget = engine.Budget(flops=1e23, price_per_hour=Decimal("1.25"), currency="USD")
    serving = engine.plan(budget, inference_tokens=1e12, on=cluster(hardware=H100_SERVING)).inference.serving
    assert serving.price_per_hour == Decimal("1.25")


def test_inference_hardware_of_its_own_serves_at_its_price_and_in_its_currency_with_a_batch():
    l4 = engine.Hardware(
        name="L4",
        peak_flops={"bf16": 121e12},
        memory_bytes=24e9,
        memory_bandwidth_bytes_per_second=300e9,
        price_per_hour=Decimal("0.70"),
        currency="EUR",
    )
    one = engine.plan(engine.Budget(target_loss=2.2), inference_tokens=1e12, inference_hardware=l4)
    batched = engine.plan(
        engine.Budget(target_loss=2.2), inference_tokens=1e12, inference_hardware=l4, inference_batch=16
    )

    assert one.estimate is None  # serving needs no training cluster
    assert (one.inference.serving.hardware, one.inference.serving.currency) == (l4, "EUR")
    assert batched.inference.serving.decoding.batch == 16
    hours = one.inference.serving.decoding.accelerator_hours
    assert batched.inference.serving.decoding.accelerator_hours == pytest.approx(hours / 16, rel=1e-12)


def test_without_a_memory_bandwidth_there_is_no_serving_estimate_on_the_training_hardware():
    result = engine.plan(engine.Budget(flops=1e23), inference_tokens=1e12, on=cluster())
    assert result.inference.serving is None


def test_a_plan_far_outside_the_fitted_range_says_how_far():
    result = engine.plan(engine.Budget(flops=1e27), law=engine.published("chinchilla-2022"))
    extrapolations = {c.details["quantity"]: c.details["orders_of_magnitude"] for c in result.caveats}
    assert set(extrapolations) == {"params", "tokens", "flops"}
    assert extrapolations["flops"] == pytest.approx(math.log10(1e27 / 5e23), abs=0.01)


def test_a_model_that_does_not_fit_in_memory_gets_a_caveat_and_the_fewest_accelerators_that_fit():
    on = cluster(layout={"zero_stage": 3})
    result = engine.plan(engine.Budget(flops=1e24), law=engine.published("chinchilla-2022"), on=on)
    memory = result.estimate.memory
    assert memory.fits
    tight = engine.estimate(
        result.allocation.params, result.allocation.tokens, cluster(accelerators=8, layout={"zero_stage": 3})
    )
    assert not tight.memory.fits
    assert "does_not_fit_memory" in [c.code for c in tight.caveats]
    assert tight.memory.min_accelerators > 8


def test_advice_for_a_model_that_does_not_fit_names_recomputation_only_when_activations_are_counted():
    # Without a shape, no activations are counted: recomputing them could not help.
    shapeless = engine.estimate(7e10, 1.4e12, cluster(accelerators=8))
    [advice] = [c.message for c in shapeless.caveats if c.code == "does_not_fit_memory"]
    assert "a higher ZeRO stage or more tensor parallelism" in advice
    assert "recomputation" not in advice
    shape = ModelShape(layers=80, d_model=8192, heads=64, sequence_length=2048)
    shaped = engine.estimate(7e10, 1.4e12, dataclasses.replace(cluster(accelerators=8), shape=shape))
    [advice] = [c.message for c in shaped.caveats if c.code == "does_not_fit_memory"]
    assert "activation recomputation" in advice


def test_an_mfu_outside_what_large_runs_achieve_gets_a_caveat():
    assert "unusual_mfu" in codes(engine.plan(engine.Budget(flops=1e22), on=cluster(mfu=0.9)))
    assert "unusual_mfu" not in codes(engine.plan(engine.Budget(flops=1e22), on=cluster(mfu=0.45)))


def test_hyperparameter_hints_come_with_every_plan():
    result = engine.plan(engine.Budget(flops=1e22))
    assert result.hyperparameters.batch_tokens == pytest.approx(0.2920 * 1e22**0.3271, rel=1e-9)


def test_without_a_shape_the_hints_are_taken_at_the_plans_6nd():
    result = engine.fixed(7e9, 1e12, cluster())

    assert result.hyperparameters.flops == pytest.approx(6 * 7e9 * 1e12, rel=1e-15)
    assert result.hyperparameters.flops_definition == "6ND"


def test_with_a_shape_the_hints_are_taken_at_deepseeks_own_compute_m_times_d():
    # DeepSeek LLM 2024 fit their hints against C = M·D, M = 72·L·d² + 12·L·d·s FLOPs per token.
    llama_65b = ModelShape(layers=80, d_model=8192, heads=64, sequence_length=2048)
    M = 72 * 80 * 8192**2 + 12 * 80 * 8192 * 2048

    result = engine.fixed(65.2e9, 1.4e12, cluster(shape=llama_65b, layout={"zero_stage": 3}))

    assert result.hyperparameters.flops == pytest.approx(M * 1.4e12, rel=1e-12)
    assert result.hyperparameters.flops_definition == "MD"
    assert result.hyperparameters.batch_tokens == pytest.approx(0.2920 * (M * 1.4e12) ** 0.3271, rel=1e-9)


def test_the_estimate_spends_the_flops_at_the_effective_rate():
    run = engine.estimate(7e9, 1e12, cluster(accelerators=512))
    assert run.runtime.seconds == pytest.approx(6 * 7e9 * 1e12 / (512 * 989.4e12 * 0.4), rel=1e-12)
    assert run.cost == (Decimal(repr(run.runtime.accelerator_hours)) * Decimal("2.50")).quantize(
        Decimal("0.01")
    )
    assert run.runtime.pf_days == pytest.approx(6 * 7e9 * 1e12 / PF_DAY_FLOPS)


def test_a_price_override_needs_a_currency_and_foreign_currencies_are_never_mixed():
    with pytest.raises(InvalidInput, match=r"^currency: is required"):
        engine.estimate(7e9, 1e12, cluster(), price_per_hour=Decimal("3"))
    with pytest.raises(InvalidInput, match=r"^currency: H100 is priced in USD"):
        engine.plan(engine.Budget(cost=Decimal("1000"), currency="EUR"), on=cluster())
    euros = engine.plan(
        engine.Budget(cost=Decimal("1000"), currency="EUR", price_per_hour=Decimal("2.00")), on=cluster()
    )
    assert (euros.estimate.cost, euros.estimate.currency) == (Decimal("1000.00"), "EUR")


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: engine.plan(engine.Budget()), "flops"),
        (lambda: engine.plan(engine.Budget(flops=1e22, pf_days=10)), "pf_days"),
        (lambda: engine.plan(engine.Budget(days=3)), "hardware"),
        (
            lambda: engine.plan(engine.Budget(flops=1e22), inference_tokens=1e12, unique_tokens=1e9),
            "unique_tokens",
        ),
        (
            lambda: engine.plan(engine.Budget(flops=1e22), inference_tokens=1e12, tokens_per_param=20),
            "tokens_per_param",
        ),
        (
            lambda: engine.plan(engine.Budget(flops=1e22), inference_hardware=H100_SERVING),
            "inference_hardware",
        ),
        (lambda: engine.plan(engine.Budget(flops=1e22), inference_batch=8), "inference_batch"),
        (
            lambda: engine.plan(engine.Budget(flops=1e22), inference_tokens=1e12, inference_hardware=H100),
            "inference_hardware",
        ),
        (
            lambda: engine.plan(
                engine.Budget(flops=1e22),
                inference_tokens=1e12,
                inference_hardware=H100_SERVING,
                inference_batch=0,
            ),
            "inference_batch",
        ),
        (lambda: engine.plan(engine.Budget(target_loss=2.0), unique_tokens=1e9), "unique_tokens"),
        (lambda: engine.plan(engine.Budget(target_loss=2.0), tokens_per_param=20), "tokens_per_param"),
        (
            lambda: engine.plan(
                engine.Budget(flops=1e22), tokens_per_param=20, law=engine.published("epoch-2024")
            ),
            "tokens_per_param",
        ),
        (lambda: engine.plan(engine.Budget(flops=1e22), on=cluster(precision="fp32")), "precision"),
        (
            lambda: engine.plan(engine.Budget(flops=1e22), on=cluster(layout={"tensor_parallel": 3})),
            "layout.tensor_parallel",
        ),
        (lambda: engine.plan(engine.Budget(target_loss=1.5)), "target_loss"),
    ],
)
def test_rules_that_do_not_go_together_are_refused_by_name(call, argument):
    with pytest.raises(InvalidInput, match=f"^{argument}:"):
        call()


def test_hardware_without_a_price_cannot_turn_money_into_compute():
    unpriced = cluster(hardware=engine.Hardware(name="TPU", peak_flops={"bf16": 275e12}, memory_bytes=32e9))
    with pytest.raises(InvalidInput, match=r"^hardware: TPU has no price"):
        engine.plan(engine.Budget(cost=Decimal("100"), currency="USD"), on=unpriced)
    assert engine.plan(engine.Budget(flops=1e21), on=unpriced).estimate.cost is None


any_float = st.floats(allow_nan=True, allow_infinity=True)


# No deadline: the first inference-aware example imports scipy.optimize, which takes half a second.
@settings(deadline=None)
@given(
    flops=any_float | st.floats(min_value=1e6, max_value=1e35),  # the second, budgets the engine takes
    days=st.none() | any_float,
    mfu=any_float,
    unique=st.none() | any_float,
    inference=st.none() | any_float | st.floats(min_value=1, max_value=1e21),
    batch=st.none() | st.integers(min_value=-1, max_value=10**7),
    accelerators=st.integers(min_value=-5, max_value=10**8),
    stage=st.integers(min_value=-1, max_value=4),
)
def test_every_plan_is_all_finite_numbers_or_a_clean_refusal(
    flops, days, mfu, unique, inference, batch, accelerators, stage
):
    try:
        result = engine.plan(
            engine.Budget(flops=flops, days=days),
            unique_tokens=unique,
            inference_tokens=inference,
            inference_batch=None if inference is None else batch,
            on=cluster(
                hardware=H100_SERVING, mfu=mfu, accelerators=accelerators, layout={"zero_stage": stage}
            ),
        )
    except InvalidInput:
        return
    allocation, run = result.allocation, result.estimate
    numbers = [allocation.params, allocation.tokens, allocation.flops, result.pf_days]
    numbers += [run.runtime.seconds, run.runtime.accelerator_hours, run.memory.total_bytes]
    numbers += [result.hyperparameters.batch_tokens, result.hyperparameters.learning_rate]
    numbers += [limit.flops for limit in result.limits]
    if result.inference is not None:
        serving = result.inference.serving
        numbers += [result.inference.lifetime_flops, serving.decoding.accelerator_hours]
        assert serving.cost.is_finite()
    assert all(math.isfinite(number) and number > 0 for number in numbers), numbers
    assert run.cost.is_finite()


@settings(deadline=None)  # as above
@given(
    flops=st.floats(min_value=1e6, max_value=1e35),
    inference=st.floats(min_value=1e-3, max_value=1e21),
    batch=st.none() | st.integers(min_value=1, max_value=10**6),
)
def test_every_inference_aware_plan_is_served_in_finite_numbers_or_cleanly_refused(flops, inference, batch):
    try:
        result = engine.plan(
            engine.Budget(flops=flops),
            inference_tokens=inference,
            inference_batch=batch,
            on=cluster(hardware=H100_SERVING),
        )
    except InvalidInput:
        return
    summary, serving = result.inference, result.inference.serving
    numbers = [
        result.allocation.params,
        summary.inference_flops,
        summary.lifetime_flops,
        summary.fraction_saved,
    ]
    numbers += [serving.decoding.tokens_per_second, serving.decoding.accelerator_hours]
    assert all(math.isfinite(number) and number >= 0 for number in numbers), numbers
    assert serving.cost.is_finite()


def test_a_published_law_says_whether_its_n_counts_the_embeddings_and_an_inline_one_is_taken_to():
    assert engine.published("chinchilla-2022").counts_embeddings is True
    assert engine.NamedLaw(engine.published("epoch-2024").law, name="inline law").counts_embeddings is True


def test_a_published_moe_law_carries_its_design_and_a_dense_one_none():
    assert engine.published("krajewski-2024-g8").moe == MoEDesign(expansion_rate=64, granularity=8)
    assert engine.published("krajewski-2024-g8").counts_embeddings is False
    assert engine.published("chinchilla-2022").moe is None


# --- Intervals from a law's bootstrap fits ----------------------------------------------------------------

CENTRE = engine.published("chinchilla-2022").law


def spread_law(count: int = 41) -> engine.NamedLaw:
    """A fitted law with bootstrap fits whose exponents spread evenly around its own."""
    samples = tuple(
        ScalingLaw(E=CENTRE.E, A=CENTRE.A, B=CENTRE.B, alpha=CENTRE.alpha + shift, beta=CENTRE.beta)
        for shift in [0.002 * (k - count // 2) for k in range(count)]
    )
    return engine.NamedLaw(CENTRE, slug="ours", samples=samples)


def test_a_law_with_bootstrap_fits_gives_intervals_around_the_allocation():
    result = engine.plan(engine.Budget(flops=1e23), law=spread_law())
    spread = result.intervals
    assert spread.confidence == 0.95
    assert spread.samples == 41
    for name in ("params", "tokens", "predicted_loss"):
        low, high = getattr(spread, name)
        assert low < getattr(result.allocation, name) < high, name
    # The bounds are the 2.5th and 97.5th percentiles of the allocations under each fit.
    sizes = [allocate.compute_optimal(1e23, sample).params for sample in spread_law().samples]
    assert spread.params == pytest.approx(tuple(np.percentile(sizes, [2.5, 97.5])), rel=1e-12)


def test_laws_without_bootstrap_fits_give_no_intervals():
    assert engine.plan(engine.Budget(flops=1e23), law=engine.published("chinchilla-2022")).intervals is None
    assert engine.plan(engine.Budget(flops=1e23)).intervals is None


def test_a_fixed_model_gets_an_interval_for_its_loss_only():
    result = engine.fixed(7e9, 1.4e11, cluster(), law=spread_law())
    assert result.intervals.params is None
    assert result.intervals.tokens is None
    low, high = result.intervals.predicted_loss
    assert low < result.allocation.predicted_loss < high


def test_fits_that_cannot_reach_a_target_are_left_out_of_its_interval():
    law = spread_law()
    samples = (*law.samples, ScalingLaw(E=2.5, A=CENTRE.A, B=CENTRE.B, alpha=0.34, beta=0.28))
    result = engine.plan(engine.Budget(target_loss=2.2), law=engine.NamedLaw(CENTRE, samples=samples))
    assert result.intervals.samples == 41  # the fit with E = 2.5 cannot reach 2.2
