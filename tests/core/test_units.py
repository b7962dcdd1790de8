"""Units of compute, time and money."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest

from service.core import units
from service.core.validation import InvalidInput


def test_a_pf_day_is_8_64e19_flops():
    assert units.pf_days_to_flops(1) == 8.64e19
    assert units.flops_to_pf_days(8.64e19) == 1


@pytest.mark.parametrize(
    ("params", "tokens", "pf_days"),
    [(174_600e6, 300e9, 3.64e3), (12_850e6, 300e9, 2.68e2), (1_320e6, 300e9, 2.75e1)],
    ids=["gpt3-175b", "gpt3-13b", "gpt3-xl"],
)
def test_gpt3_table_d1_compute_is_6nd_in_pf_days(params, tokens, pf_days):
    # Brown et al. 2020, Table D.1, printed to three significant figures.
    assert units.flops_to_pf_days(6 * params * tokens) == pytest.approx(pf_days, rel=5e-3)


def test_accelerator_hours_and_flops_are_inverse():
    hours = units.accelerator_hours_for_flops(3.14e23, 989.4e12, 0.4)
    assert units.flops_for_accelerator_hours(hours, 989.4e12, 0.4) == pytest.approx(3.14e23, rel=1e-12)
    assert hours == pytest.approx(3.14e23 / (989.4e12 * 0.4) / 3600, rel=1e-12)


def test_money_buys_hours_at_the_price_and_hours_cost_money_to_the_cent():
    assert units.accelerator_hours_for_cost(Decimal("250000.00"), Decimal("2.50")) == 100_000
    assert units.cost_of_accelerator_hours(100_000, Decimal("2.50")) == Decimal("250000.00")
    assert units.cost_of_accelerator_hours(1.005, Decimal("1")) == Decimal("1.01")  # half-up, no float drift
    assert units.cost_of_accelerator_hours(0.1 + 0.2, Decimal("10")) == Decimal("3.00")


def test_a_deadline_on_a_cluster_is_seconds_times_accelerators_times_effective_peak():
    flops = units.flops_for_deadline(days=10, accelerators=1024, peak_flops_per_second=989.4e12, mfu=0.4)
    assert flops == pytest.approx(10 * 86_400 * 1024 * 989.4e12 * 0.4, rel=1e-12)


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: units.pf_days_to_flops(0), "pf_days"),
        (lambda: units.pf_days_to_flops(math.nan), "pf_days"),
        (lambda: units.flops_to_pf_days(math.inf), "flops"),
        (lambda: units.flops_to_pf_days(1e36), "flops"),
        (lambda: units.accelerator_hours_for_flops(1e20, 1e15, 0), "mfu"),
        (lambda: units.accelerator_hours_for_flops(1e20, 1e15, 1.01), "mfu"),
        (lambda: units.accelerator_hours_for_flops(1e20, -1, 0.4), "peak_flops_per_second"),
        (lambda: units.accelerator_hours_for_cost(Decimal("-1"), Decimal("2")), "cost"),
        (lambda: units.accelerator_hours_for_cost(Decimal("10"), Decimal("0")), "price_per_hour"),
        (lambda: units.accelerator_hours_for_cost(Decimal("NaN"), Decimal("2")), "cost"),
        (lambda: units.cost_of_accelerator_hours(-1, Decimal("2")), "accelerator_hours"),
        (lambda: units.flops_for_deadline(0, 8, 1e15, 0.4), "days"),
        (lambda: units.flops_for_deadline(1, 0, 1e15, 0.4), "accelerators"),
        (lambda: units.flops_for_deadline(1, 2.5, 1e15, 0.4), "accelerators"),
    ],
)
def test_invalid_arguments_are_refused_by_name(call, argument):
    with pytest.raises(InvalidInput, match=f"^{argument}:") as raised:
        call()
    assert raised.value.argument == argument


def test_deepseek_v3_gpu_hours_at_2_dollars_cost_5_576_million():
    # DeepSeek-V3 technical report: 2.788M H800 GPU-hours, $5.576M at $2 per GPU-hour.
    assert units.cost_of_accelerator_hours(2.788e6, Decimal("2")) == Decimal("5576000.00")


def test_a_cost_beyond_a_trillion_is_refused_rather_than_overflowing_decimal_arithmetic():
    with pytest.raises(InvalidInput, match=r"^run: would cost"):
        units.cost_of_accelerator_hours(1e30, Decimal("2.50"))


def test_a_cost_that_rounds_up_to_the_money_limit_is_refused():
    with pytest.raises(InvalidInput, match="beyond"):
        units.cost_of_accelerator_hours(200, Decimal("4999999999.99998"))  # 999999999999.996 -> 1e12
