"""Refitting the cluster model's large-GEMM efficiency to measured throughput, and the errors it reports."""

from __future__ import annotations

import math

import pytest

from service.core import calibrate, engine, goodput, performance
from service.core.validation import InvalidInput

LAB_GPU = engine.Hardware(
    name="Lab GPU",
    slug="lab-gpu",
    peak_flops={"bf16": 1e15},
    memory_bytes=80e9,
    memory_bandwidth_bytes_per_second=2e12,
    accelerators_per_node=8,
    scale_up_bandwidth_bytes_per_second=4.5e11,
    scale_out_bandwidth_bytes_per_second=5e10,
)
# Three runs the model lays out differently: one node, two nodes, a larger model over four.
RUNS = ((1e9, 2e10, 8), (3e9, 6e10, 16), (7e9, 1.4e11, 32))


def modelled_runs() -> list[engine.Estimate]:
    return [
        engine.estimate(params, tokens, engine.Cluster(hardware=LAB_GPU, accelerators=count))
        for params, tokens, count in RUNS
    ]


def throughput(run: engine.Estimate, efficiency: float) -> float:
    step = engine.step_of(run, efficiency)
    return step.layout.global_batch * run.shape.sequence_length / step.seconds


def test_the_step_of_a_runs_own_layout_at_its_own_efficiency_is_the_step_it_was_planned_with():
    for run in modelled_runs():
        # Lab GPU states no efficiency: it runs at the default of uncalibrated hardware.
        assert engine.step_of(run, performance.CALIBRATION.matmul_efficiency) == run.run.search.best


def test_the_fit_recovers_the_efficiency_that_generated_the_measurements():
    runs = modelled_runs()
    measured = [throughput(run, 0.5) for run in runs]

    fitted = calibrate.fit_matmul_efficiency(measured, lambda e: [throughput(run, e) for run in runs])

    assert fitted.efficiency == pytest.approx(0.5, abs=1e-3)
    assert fitted.objective == pytest.approx(0, abs=1e-10)
    assert fitted.predicted == pytest.approx(measured, rel=1e-4)
    assert not fitted.at_bound


def test_runs_faster_than_the_peak_allows_fit_at_the_upper_bound_and_say_so():
    runs = modelled_runs()
    measured = [10 * throughput(run, 1.0) for run in runs]
    fitted = calibrate.fit_matmul_efficiency(measured, lambda e: [throughput(run, e) for run in runs])
    assert fitted.efficiency == calibrate.EFFICIENCY_BOUNDS[1]
    assert fitted.at_bound


def test_errors_are_measured_over_predicted_less_one_and_summarised_with_the_worst_signed():
    assert calibrate.relative_error(110.0, 100.0) == pytest.approx(0.1)
    summary = calibrate.summarise([0.1, -0.3, 0.05])
    assert summary.runs == 3
    assert summary.mean == pytest.approx(-0.05)
    assert summary.median == pytest.approx(0.05)
    assert summary.rms == pytest.approx(math.sqrt((0.01 + 0.09 + 0.0025) / 3))
    assert summary.worst == -0.3


def test_a_plan_at_a_given_mfu_has_no_modelled_step_to_refit():
    run = engine.estimate(1e9, 2e10, engine.Cluster(hardware=LAB_GPU, accelerators=8, mfu=0.4))
    with pytest.raises(InvalidInput, match=r"^mfu: the run was planned at a given MFU"):
        engine.step_of(run, performance.CALIBRATION)


def test_the_run_overhead_is_the_share_of_the_actual_hours_the_pace_does_not_explain():
    # 100 and 300 hours at their pace took 125 and 375: a fifth of the hours went elsewhere.
    fit = calibrate.fit_run_overhead([125.0, 375.0], [100.0, 300.0])
    assert fit.run_overhead == pytest.approx(0.2, rel=1e-12)
    assert (fit.runs, fit.paced_accelerator_hours, fit.actual_accelerator_hours, fit.clipped) == (
        2,
        400.0,
        500.0,
        False,
    )
    # Weighed by hours: a long run that lost 10% and a short one that lost 50%.
    assert calibrate.fit_run_overhead([900.0, 100.0], [810.0, 50.0]).run_overhead == pytest.approx(0.14)


def test_runs_faster_than_their_pace_fit_no_overhead_and_a_hopeless_one_the_most():
    faster = calibrate.fit_run_overhead([90.0], [100.0])
    assert (faster.run_overhead, faster.clipped) == (0.0, True)
    hopeless = calibrate.fit_run_overhead([1000.0], [1.0])
    assert (hopeless.run_overhead, hopeless.clipped) == (goodput.MAX_RUN_OVERHEAD, True)
    with pytest.raises(InvalidInput, match="actual_hours"):
        calibrate.fit_run_overhead([], [])
