"""The intervals an answer carries: the judged error of the groups of runs it is in (core/accuracy.py)."""

from __future__ import annotations

import math

import pytest

from service.core import accuracy
from service.core.accuracy import LogError
from service.core.validation import InvalidInput


def test_an_interval_is_the_point_times_the_lean_and_z_spreads_either_way():
    low, high = LogError(mean=0.1, spread=0.2, runs=10).interval(100.0)
    assert low == pytest.approx(100 * math.exp(0.1 - accuracy.Z * 0.2))
    assert high == pytest.approx(100 * math.exp(0.1 + accuracy.Z * 0.2))
    # Φ(z) = 0.9: 80% between the two.
    assert 0.5 * (1 + math.erf(accuracy.Z / math.sqrt(2))) == pytest.approx(0.9)


def test_a_wider_spread_given_wins_and_keeps_its_own_lean():
    narrow, wide = LogError(0.0, 0.1, 10), LogError(0.5, 0.3, 10)
    assert narrow.interval(1.0, widest=wide) == pytest.approx(
        (math.exp(-accuracy.Z * 0.3), math.exp(accuracy.Z * 0.3))
    )


def groups_of(**run) -> list[str]:
    """The groups of a dense bf16 run of 8 accelerators on calibrated hardware, with `run`'s changes."""
    traits = {
        "calibrated": True,
        "precision": "bf16",
        "model_parallel": 1,
        "zero_stage": 1,
        "sequence_length": 4096,
        "accelerators": 8,
        "mixture_of_experts": False,
    }
    return accuracy.categories(**{**traits, **run})


def test_a_run_takes_the_widest_of_its_groups():
    groups = groups_of(calibrated=False, model_parallel=8, accelerators=64)
    assert groups == ["uncalibrated hardware", "parallelism"]
    judged = [accuracy.STEP_ERRORS[group] for group in groups]
    assert accuracy.widest(groups).spread == max(
        error.spread if error.runs >= accuracy.MIN_RUNS else accuracy.POOLED.spread for error in judged
    )


def test_a_dense_bf16_step_on_one_calibrated_device_is_the_baseline():
    assert groups_of() == ["baseline"]


def test_fp8_and_hardware_nobody_calibrated_are_groups_of_their_own():
    assert groups_of(precision="fp8") == ["fp8"]
    assert groups_of(calibrated=False, precision="fp8") == ["uncalibrated hardware", "fp8"]


def test_the_widest_of_a_judges_table_takes_the_pooled_error_for_groups_it_judged_on_too_few_runs():
    errors = {
        "fp8": LogError(mean=0.1, spread=0.2, runs=10),
        "parallelism": LogError(mean=-0.1, spread=0.3, runs=10),
        "scale": LogError(mean=0.0, spread=0.5, runs=2),
    }
    pooled = LogError(mean=0.0, spread=0.25, runs=40)
    assert accuracy.widest(["fp8", "parallelism"], errors, pooled) == errors["parallelism"]
    assert accuracy.widest(["fp8", "scale"], errors, pooled) == pooled  # scale: 2 runs
    assert accuracy.widest(["context length"], errors, pooled) == pooled  # not judged at all


def test_a_group_judged_on_too_few_runs_takes_the_pooled_error():
    few = [group for group, error in accuracy.STEP_ERRORS.items() if error.runs < accuracy.MIN_RUNS]
    assert few, "the table has a group judged on few runs (baseline)"
    assert accuracy.widest([few[0]]) == accuracy.POOLED


def test_every_group_is_judged_on_runs_and_an_unknown_one_is_refused():
    assert all(error.runs > 0 and error.spread > 0 for error in accuracy.STEP_ERRORS.values())
    assert accuracy.POOLED.runs >= sum(
        error.runs for group, error in accuracy.STEP_ERRORS.items() if group == "parallelism"
    )
    with pytest.raises(InvalidInput):
        accuracy.widest(["weather"])


def test_a_quantile_is_read_off_the_log_normal_the_interval_came_from():
    error = LogError(mean=0.1, spread=0.2, runs=10)
    interval = error.interval(100.0)
    assert accuracy.at_quantile(100.0, interval, 0.9) == pytest.approx(interval[1])
    assert accuracy.at_quantile(100.0, interval, 0.1) == pytest.approx(interval[0])
    assert accuracy.at_quantile(100.0, interval, 0.5) == pytest.approx(100 * math.exp(0.1))
    with pytest.raises(InvalidInput):
        accuracy.at_quantile(100.0, interval, 1.0)
