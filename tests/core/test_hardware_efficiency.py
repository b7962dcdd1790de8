"""What hardware achieves of its peaks is a figure of its profile, never read from its name (issue 48)."""

from __future__ import annotations

import dataclasses

import pytest

from service.core import caveats, engine, performance
from service.core.validation import InvalidInput

H100_FIGURES = engine.Hardware(
    name="NVIDIA H100 SXM",
    slug="h100-sxm",
    peak_flops={"bf16": 989.4e12, "fp8": 1978.9e12},
    memory_bytes=80e9,
    memory_bandwidth_bytes_per_second=3.35e12,
    accelerators_per_node=8,
    scale_up_bandwidth_bytes_per_second=450e9,
    scale_out_bandwidth_bytes_per_second=50e9,
    efficiency=performance.Efficiency(gemm={"bf16": 0.609}, provenance="calibrated", basis="Llama 3 405B"),
)


def estimated(hardware: engine.Hardware, precision: str = "bf16") -> engine.Estimate:
    return engine.estimate(
        7e9, 1.4e11, engine.Cluster(hardware=hardware, accelerators=64, precision=precision)
    )


def codes(run: engine.Estimate) -> set[str]:
    return {note.code for note in run.caveats}


def test_the_same_figures_under_any_name_or_none_give_the_same_answer():
    named = estimated(H100_FIGURES)
    for other in ("acme-h100", "a100-80gb", None):
        renamed = dataclasses.replace(H100_FIGURES, name="Acme GPU", slug=other)
        assert estimated(renamed).runtime.seconds == named.runtime.seconds


def test_the_gemm_efficiency_the_profile_states_sets_the_pace():
    slower = dataclasses.replace(
        H100_FIGURES, efficiency=dataclasses.replace(H100_FIGURES.efficiency, gemm={"bf16": 0.4})
    )
    assert estimated(slower).runtime.seconds > 1.2 * estimated(H100_FIGURES).runtime.seconds


def test_hardware_stating_no_efficiency_runs_at_the_uncalibrated_default_and_says_so():
    bare = dataclasses.replace(H100_FIGURES, efficiency=None)
    run = estimated(bare)
    assert caveats.UNCALIBRATED_HARDWARE in codes(run)
    assert caveats.UNCALIBRATED_HARDWARE not in codes(estimated(H100_FIGURES))
    note = next(note for note in run.caveats if note.code == caveats.UNCALIBRATED_HARDWARE)
    assert note.details == {
        "precision": "bf16",
        "matmul_efficiency": performance.CALIBRATION.matmul_efficiency,
    }


def test_a_precision_the_profile_does_not_calibrate_is_uncalibrated():
    assert caveats.UNCALIBRATED_HARDWARE in codes(estimated(H100_FIGURES, "fp8"))


def test_an_uncalibrated_provenance_warns_even_with_figures():
    guessed = dataclasses.replace(
        H100_FIGURES,
        efficiency=performance.Efficiency(gemm={"bf16": 0.7}, provenance="uncalibrated", basis="a guess"),
    )
    run = estimated(guessed)
    note = next(note for note in run.caveats if note.code == caveats.UNCALIBRATED_HARDWARE)
    assert note.details["matmul_efficiency"] == 0.7


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"gemm": {"bf16": 1.2}}, r"^efficiency\.gemm\.bf16: must be in \[0.05, 1\]"),
        ({"gemm": {"bf16": 0.6}, "link": 0.0}, r"^efficiency\.link: must be in \[0.05, 1\]"),
        ({"gemm": {"bf16": 0.6}, "provenance": "measured"}, r"^efficiency\.provenance: must be one of"),
    ],
)
def test_an_efficiency_out_of_range_is_refused_naming_it(fields, message):
    with pytest.raises(InvalidInput, match=message):
        performance.Efficiency(**{"provenance": "derived", "basis": "x", **fields})
