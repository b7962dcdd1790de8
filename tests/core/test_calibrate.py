"""Refitting the cluster model's large-GEMM efficiency to measured throughput, and the errors it reports."""

from __future__ import annotations

import math

import pytest

from service.core import calibrate, engine, performance
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


def throughput(run: engine.Estimate, calibration: performance.Calibration) -> float:
    step = engine.step_of(run, calibration)
    return step.layout.global_batch * run.shape.sequence_length / step.seconds


def at_efficiency(efficiency: float) -> performance.Calibration:
    return calibrate.with_matmul_efficiency(performance.CALIBRATION, "lab-gpu", efficiency)


def test_the_step_of_a_runs_own_layout_under_its_own_constants_is_the_step_it_was_planned_with():
    for run in modelled_runs():
        assert engine.step_of(run, performance.CALIBRATION) == run.run.search.best


def test_the_fit_recovers_the_efficiency_that_generated_the_measurements():
    runs = modelled_runs()
    measured = [throughput(run, at_efficiency(0.5)) for run in runs]

    fitted = calibrate.fit_matmul_efficiency(
        measured, lambda e: [throughput(run, at_efficiency(e)) for run in runs]
    )

    assert fitted.efficiency == pytest.approx(0.5, abs=1e-3)
    assert fitted.objective == pytest.approx(0, abs=1e-10)
    assert fitted.predicted == pytest.approx(measured, rel=1e-4)
    assert not fitted.at_bound


def test_runs_faster_than_the_peak_allows_fit_at_the_upper_bound_and_say_so():
    runs = modelled_runs()
    measured = [10 * throughput(run, at_efficiency(1.0)) for run in runs]
    fitted = calibrate.fit_matmul_efficiency(
        measured, lambda e: [throughput(run, at_efficiency(e)) for run in runs]
    )
    assert fitted.efficiency == calibrate.EFFICIENCY_BOUNDS[1]
    assert fitted.at_bound


def test_an_efficiency_for_a_slug_comes_before_the_prefix_it_extends_and_replaces_its_own_entry():
    calibration = calibrate.with_matmul_efficiency(performance.CALIBRATION, "h100-sxm", 0.42)
    assert calibration.matmul_efficiency_for("h100-sxm") == 0.42
    default_h100 = performance.CALIBRATION.matmul_efficiency_for("h100")
    assert calibration.matmul_efficiency_for("h100-pcie") == default_h100
    again = calibrate.with_matmul_efficiency(calibration, "h100-sxm", 0.5)
    assert [prefix for prefix, _ in again.matmul_efficiency_by_hardware].count("h100-sxm") == 1
    assert again.matmul_efficiency_for("h100-sxm") == 0.5


def test_an_efficiency_outside_0_to_1_is_refused_naming_it():
    with pytest.raises(InvalidInput, match=r"^matmul_efficiency: must be in \(0, 1\]"):
        calibrate.with_matmul_efficiency(performance.CALIBRATION, "lab-gpu", 1.2)


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
