"""planning.cluster_sizes: an estimate's run on every count the planner tries, for the console's chart of
where more accelerators stop paying."""

from __future__ import annotations

import pytest

from service.core import engine, wall_clock
from service.services import planning
from service.services.catalog import load_builtin_hardware
from service.services.errors import InvalidFieldError

RUN = {"hardware": "h100-sxm", "params": 38e9, "tokens": 8e11}


@pytest.fixture
def estimate_of(session):
    load_builtin_hardware(session)

    def estimate(**fields) -> engine.Estimate:
        return planning.make_estimate(session, planning.EstimateRequest(**(RUN | fields)), scope=None)

    return estimate


def test_the_estimates_own_count_is_among_the_counts_the_planner_tries_as_it_was_estimated(estimate_of):
    estimate = estimate_of(accelerators=1000)  # not a count the planner tries: added
    sizes = planning.cluster_sizes(estimate, max_accelerators=4096)
    counts = [size.accelerators for size in sizes]
    assert counts == sorted(set(counts))
    assert set(counts) - {1000} <= set(wall_clock.candidate_counts(8, 4096))
    [own] = [size for size in sizes if size.accelerators == 1000]
    assert own.days == pytest.approx(estimate.runtime.days)
    assert own.cost == estimate.cost
    assert own.mfu == pytest.approx(estimate.mfu)


def test_each_count_is_the_same_run_estimated_on_that_many_accelerators(estimate_of):
    estimate = estimate_of(accelerators=512, layout={"zero_stage": 1})
    sizes = planning.cluster_sizes(estimate, max_accelerators=2048)
    largest = sizes[-1]
    assert largest.accelerators == max(wall_clock.candidate_counts(8, 2048))
    again = estimate_of(accelerators=largest.accelerators, layout={"zero_stage": 1}, shape=estimate.shape)
    assert largest.days == pytest.approx(again.runtime.days)
    assert largest.cost == again.cost


def test_counts_no_layout_fits_are_left_out(estimate_of):
    estimate = estimate_of(params=4e11, tokens=1e12, accelerators=4096)
    counts = [size.accelerators for size in planning.cluster_sizes(estimate, max_accelerators=4096)]
    assert counts[0] > 8  # 400B parameters need far more than a node's memory
    with pytest.raises(InvalidFieldError, match="fits"):
        estimate_of(params=4e11, tokens=1e12, accelerators=counts[0] // 2, shape=estimate.shape)


def test_an_estimate_at_a_given_mfu_has_no_counts_to_compare(estimate_of):
    estimate = estimate_of(accelerators=1024, mfu=0.4)
    assert estimate.run is None
    assert planning.cluster_sizes(estimate) == []
