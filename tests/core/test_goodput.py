"""Goodput: Young/Daly checkpoint intervals and the useful fraction, against Llama 3's reported figures."""

from __future__ import annotations

import math

import pytest

from service.core.goodput import LLAMA3_FAILURES_PER_ACCELERATOR_HOUR, goodput
from service.core.validation import InvalidInput


def test_llama3s_failure_rate_is_419_interruptions_in_54_days_on_16384_gpus():
    assert LLAMA3_FAILURES_PER_ACCELERATOR_HOUR == pytest.approx(1.97e-5, rel=0.01)


def test_llama3_scale_keeps_more_than_90_percent_effective_training_time():
    # Llama 3 reports > 90% effective training time on 16 384 H100 (§3.3.4); 405B's states at 2 TB/s.
    result = goodput(54 * 86_400.0, 16_384, 405e9, checkpoint_write_bytes_per_second=2e12)
    assert result.useful_fraction > 0.9
    # 419 unexpected interruptions in 54 days: the expected count over the wall-clock time.
    assert result.interruptions == pytest.approx(419 / result.useful_fraction, rel=0.02)


def test_the_interval_is_youngs_square_root_less_daly_correction():
    result = goodput(1e6, 1000, 1e9)
    delta, M = result.checkpoint_seconds, result.mean_time_between_failures_seconds
    assert delta == pytest.approx(16e9 / 100e9)
    assert result.checkpoint_interval_seconds == pytest.approx(math.sqrt(2 * delta * M) - delta)
    expected = (
        1 - delta / result.checkpoint_interval_seconds - (600 + result.checkpoint_interval_seconds / 2) / M
    )
    assert result.useful_fraction == pytest.approx(expected)
    assert result.wall_clock_seconds == pytest.approx(1e6 / expected)


def test_more_accelerators_fail_more_often_and_keep_less():
    small, large = goodput(1e6, 1000, 1e11), goodput(1e6, 100_000, 1e11)
    assert large.useful_fraction < small.useful_fraction
    assert large.checkpoint_interval_seconds < small.checkpoint_interval_seconds


def test_hardware_that_never_fails_loses_nothing():
    result = goodput(1e6, 1000, 1e11, failures_per_accelerator_hour=0.0)
    assert result.useful_fraction == 1.0
    assert result.wall_clock_seconds == 1e6


def test_a_job_that_fails_faster_than_it_checkpoints_is_refused_naming_the_rate():
    with pytest.raises(InvalidInput) as refused:
        goodput(1e6, 100_000, 1e12, failures_per_accelerator_hour=0.01, checkpoint_write_bytes_per_second=1e9)
    assert refused.value.argument == "failures_per_accelerator_hour"


def test_a_checkpoint_too_small_to_take_time_costs_nothing_rather_than_failing():
    """16 bytes of a denormal parameter count underflow to a checkpoint of 0 seconds (found by fuzzing)."""
    useful = goodput(3600.0, 1024, 5e-324)
    assert useful.checkpoint_seconds == 0
    assert 0 < useful.useful_fraction < 1


def test_the_run_overhead_takes_its_share_of_the_wall_clock_time():
    steady = goodput(1e6, 1000, 1e9)
    whole = goodput(1e6, 1000, 1e9, run_overhead=0.25)
    assert whole.run_overhead == 0.25
    assert whole.useful_fraction == pytest.approx(0.75 * steady.useful_fraction)
    assert whole.wall_clock_seconds == pytest.approx(steady.wall_clock_seconds / 0.75)
    never_fails = goodput(1e6, 1000, 1e9, failures_per_accelerator_hour=0.0, run_overhead=0.2)
    assert never_fails.wall_clock_seconds == pytest.approx(1.25e6)


@pytest.mark.parametrize("overhead", [-0.1, 0.95, math.nan])
def test_a_run_overhead_outside_0_to_0_9_is_refused_naming_it(overhead):
    with pytest.raises(InvalidInput) as refused:
        goodput(1e6, 1000, 1e9, run_overhead=overhead)
    assert refused.value.argument == "run_overhead"


def test_preemptions_add_to_failures_and_each_costs_the_requeue_too():
    """A spot job is interrupted at the sum of the rates; the interval is chosen for the combined rate, and
    a preemption's restart waits for capacity as well (docs/research/energy-and-offers.md, section 5)."""
    failures = LLAMA3_FAILURES_PER_ACCELERATOR_HOUR
    preemptions = 1.44e-4 / 8  # AWS's 10% bucket per 8-GPU instance-hour, per GPU
    result = goodput(1e6, 1024, 7e10, preemptions_per_accelerator_hour=preemptions, requeue_seconds=1800.0)
    M = 3600.0 / (1024 * (failures + preemptions))
    delta = result.checkpoint_seconds
    assert result.mean_time_between_failures_seconds == pytest.approx(M)
    assert result.checkpoint_interval_seconds == pytest.approx(math.sqrt(2 * delta * M) - delta)
    restart = 600.0 + 1800.0 * preemptions / (failures + preemptions)
    assert result.restart_seconds == pytest.approx(restart)
    expected = (
        1
        - delta / result.checkpoint_interval_seconds
        - (restart + result.checkpoint_interval_seconds / 2) / M
    )
    assert result.useful_fraction == pytest.approx(expected)
    hours = result.wall_clock_seconds / 3600.0
    assert result.preemptions == pytest.approx(hours * 1024 * preemptions)
    assert result.interruptions == pytest.approx(hours * 1024 * (failures + preemptions))


def test_slow_checkpoints_make_preemptions_dearer_than_fast_ones():
    on_demand = goodput(1e6, 1024, 4e11, checkpoint_write_bytes_per_second=2e10)
    spot = goodput(
        1e6, 1024, 4e11, checkpoint_write_bytes_per_second=2e10, preemptions_per_accelerator_hour=3e-5
    )
    fast = goodput(
        1e6, 1024, 4e11, checkpoint_write_bytes_per_second=2e12, preemptions_per_accelerator_hour=3e-5
    )
    assert spot.useful_fraction < on_demand.useful_fraction
    assert (1 - spot.useful_fraction) > 2 * (1 - fast.useful_fraction)


def test_no_preemptions_leave_the_goodput_of_failures_alone():
    assert goodput(1e6, 1000, 1e9, requeue_seconds=3600.0) == goodput(1e6, 1000, 1e9)


@pytest.mark.parametrize(
    ("name", "value"), [("preemptions_per_accelerator_hour", -1e-5), ("requeue_seconds", -1.0)]
)
def test_negative_preemption_figures_are_refused_naming_them(name, value):
    with pytest.raises(InvalidInput) as refused:
        goodput(1e6, 1000, 1e9, **{name: value})
    assert refused.value.argument == name
