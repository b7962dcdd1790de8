"""Batch size and learning rate hints from DeepSeek LLM 2024 (§3.1)."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.core import units
from service.core.hyper import DEEPSEEK_FLOPS, SIX_N_D_FLOPS, deepseek_flops, hyperparameters_for
from service.core.shape import ModelShape
from service.core.validation import InvalidInput


def test_hints_at_1e20_flops_follow_the_deepseek_power_laws():
    # Derived: 0.2920 · (1e20)^0.3271 and 0.3118 · (1e20)^-0.125 = 0.3118 · 10^-2.5.
    hints = hyperparameters_for(1e20)

    assert hints.batch_tokens == pytest.approx(1.01714e6, rel=1e-5)
    assert hints.learning_rate == pytest.approx(0.3118 * 10**-2.5, rel=1e-12)
    assert "DeepSeek" in hints.source


def test_hints_say_which_compute_they_were_given():
    assert (hyperparameters_for(1e20).flops, hyperparameters_for(1e20).flops_definition) == (1e20, "6ND")
    assert hyperparameters_for(1e20, definition=DEEPSEEK_FLOPS).flops_definition == "MD"
    assert SIX_N_D_FLOPS == "6ND"


def test_deepseeks_compute_counts_72_l_d2_plus_12_l_d_s_flops_per_token():
    # DeepSeek LLM 2024: M = 72·n_layer·d_model² + 12·n_layer·d_model·l_seq non-embedding FLOPs per token
    # (attention included), C = M·D. LLaMA-65B's shape: 80 layers, d_model 8192, context 2048.
    shape = ModelShape(layers=80, d_model=8192, heads=64, sequence_length=2048)

    flops = deepseek_flops(1.4e12, shape)

    assert flops == pytest.approx((72 * 80 * 8192**2 + 12 * 80 * 8192 * 2048) * 1.4e12, rel=1e-15)


def test_deepseeks_compute_refuses_a_shape_that_takes_it_past_the_largest_budget():
    huge = ModelShape(layers=10**8, d_model=10**8, heads=1, sequence_length=10**8)

    with pytest.raises(InvalidInput, match=r"^shape:"):
        deepseek_flops(1e12, huge)


@pytest.mark.parametrize("definition", ["6nd", "M·D", None])
def test_hyperparameters_for_rejects_an_unknown_definition_of_compute(definition):
    with pytest.raises(InvalidInput, match=r"^definition:"):
        hyperparameters_for(1e20, definition=definition)


def test_ten_times_the_compute_scales_batch_and_learning_rate_by_the_fitted_exponents():
    small = hyperparameters_for(1e21)
    large = hyperparameters_for(1e22)

    assert large.batch_tokens / small.batch_tokens == pytest.approx(10**0.3271, rel=1e-12)
    assert large.learning_rate / small.learning_rate == pytest.approx(10**-0.1250, rel=1e-12)


def test_more_compute_means_larger_batches_and_smaller_learning_rates():
    budgets = [1e17, 1e19, 1e21, 1e23, 1e25]

    hints = [hyperparameters_for(flops) for flops in budgets]

    assert all(a.batch_tokens < b.batch_tokens for a, b in itertools.pairwise(hints))
    assert all(a.learning_rate > b.learning_rate for a, b in itertools.pairwise(hints))


@pytest.mark.parametrize("flops", [0.0, -1e20, math.nan, math.inf, -math.inf, 1e36, "lots"])
def test_hyperparameters_for_rejects_flops_that_are_not_a_positive_bounded_number(flops):
    with pytest.raises(InvalidInput, match=r"^flops:"):
        hyperparameters_for(flops)


@given(flops=st.floats(allow_nan=True, allow_infinity=True))
def test_hyperparameters_for_returns_finite_positive_hints_or_rejects_the_input(flops):
    try:
        hints = hyperparameters_for(flops)
    except InvalidInput:
        return

    assert math.isfinite(hints.batch_tokens)
    assert hints.batch_tokens > 0
    assert math.isfinite(hints.learning_rate)
    assert hints.learning_rate > 0
    assert flops <= units.MAX_FLOPS
