"""Caveats: how far outside a law's fitted range a plan lies, in words a reader can weigh."""

from __future__ import annotations

import pytest

from service.core.caveats import extrapolation
from service.core.laws import FittedRange

# Bounds like Chinchilla's (Hoffmann et al. 2022): 7e7 to 1.6e10 parameters, 5e9 to 5e11 tokens.
RANGE = FittedRange(7e7, 1.6e10, 5e9, 5e11, None, None)


def caveat_for(**values):
    inside = {"params": 1e9, "tokens": 1e11, "flops": 6e20}
    (found,) = extrapolation(RANGE, **{**inside, **values}, law="chinchilla-2022")
    return found


@pytest.mark.parametrize(
    ("params", "said"),
    [(1.6e10 * 1.0001, "is 0.01% above"), (1.7e10, "is 6.2% above"), (3.1e10, "is 94% above")],
)
def test_a_value_less_than_twice_past_the_range_is_said_in_percent_never_zero_orders(params, said):
    caveat = caveat_for(params=params)

    assert said in caveat.message
    assert "orders of magnitude" not in caveat.message
    assert caveat.details["orders_of_magnitude"] > 0


def test_a_value_below_the_range_is_said_as_the_share_it_falls_short():
    caveat = caveat_for(tokens=4e9)

    assert "tokens = 4e+09 is 20% below the range chinchilla-2022 was fitted on (min 5e+09)" in caveat.message


@pytest.mark.parametrize(
    ("values", "said"),
    [({"params": 5.2e10}, "is a factor of 3.2 above"), ({"tokens": 1e9}, "is a factor of 5 below")],
)
def test_a_value_two_to_ten_times_past_the_range_is_said_as_the_factor(values, said):
    assert said in caveat_for(**values).message


@pytest.mark.parametrize(
    ("values", "said"),
    [
        ({"params": 1.6e11}, "1.0 orders of magnitude above"),
        ({"tokens": 1e8}, "1.7 orders of magnitude below"),
    ],
)
def test_ten_times_past_the_range_and_more_is_said_in_orders_of_magnitude(values, said):
    assert said in caveat_for(**values).message


def test_the_orders_of_magnitude_in_the_details_keep_three_significant_figures():
    just_above = caveat_for(params=1.6e10 * 1.0001)

    assert just_above.details["orders_of_magnitude"] == pytest.approx(4.34e-5, rel=1e-3)
    assert caveat_for(params=1.6e12).details["orders_of_magnitude"] == 2.0
