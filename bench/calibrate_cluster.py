"""Fit the cluster model's constants on the published runs, and say how well it predicts runs it never saw.

    .venv/bin/python -m bench.calibrate_cluster

Fits `service.core.performance.Calibration` (least squares on log(predicted / published) step time, each
constant within physical bounds) to `bench.published_runs.CALIBRATION_RUNS`, then prints:

* per run, the published and predicted step time under the constants in the core (`CALIBRATION`), and the
  freshly fitted ones (paste them into the core when they move);
* leave-one-out: each run predicted by constants fitted on the others, which is the error a user gets;
* the held-out runs (`HELD_OUT_RUNS`), which no fit sees.

Takes a few seconds. Prints markdown for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from bench.machine import describe
from bench.published_runs import CALIBRATION_RUNS, HELD_OUT_RUNS, Run
from service.core import performance
from service.core.performance import CALIBRATION, Calibration

# (name, lower bound, upper bound): large-GEMM efficiency of the A100 80GB and the H100 SXM, the profiles
# the runs train on (cuBLAS reaches 80-90% of the A100's peak and 65-80% of the H100's on large bf16 GEMMs),
# a kernel's fixed cost (a launch alone takes a few microseconds; a partial last wave on a large GEMM tens),
# the achieved HBM fraction, the achieved link fraction (NCCL bus bandwidth) and the overlap of
# data-parallel traffic with compute.
BOUNDS = (
    ("a100-80gb", 0.5, 0.95),
    ("h100-sxm", 0.4, 0.95),
    ("kernel_seconds", 2e-6, 2e-4),
    ("memory_efficiency", 0.3, 0.95),
    ("link_efficiency", 0.3, 0.95),
    ("overlap", 0.0, 1.0),
)
PROFILES = ("a100-80gb", "h100-sxm")


@dataclass(frozen=True)
class Constants:
    """What the fit sets: the hardware-independent constants and each profile's large-GEMM efficiency
    (which the catalog's profiles carry)."""

    calibration: Calibration
    gemm: dict[str, float]


def constants_from(x: np.ndarray) -> Constants:
    a100, h100, kernel, memory, link, overlap = (float(value) for value in x)
    calibration = dataclasses.replace(
        CALIBRATION, kernel_seconds=kernel, memory_efficiency=memory, link_efficiency=link, overlap=overlap
    )
    return Constants(calibration, {"a100-80gb": a100, "h100-sxm": h100})


def as_vector(constants: Constants) -> np.ndarray:
    calibration = constants.calibration
    return np.array(
        [
            *(constants.gemm[profile] for profile in PROFILES),
            calibration.kernel_seconds,
            calibration.memory_efficiency,
            calibration.link_efficiency,
            calibration.overlap,
        ]
    )


IN_CORE = Constants(
    CALIBRATION, {run.hardware: run.machine.matmul_efficiency or 0.0 for run in CALIBRATION_RUNS}
)


def predicted(run: Run, constants: Constants) -> float:
    gemm = constants.gemm.get(run.hardware)  # None: no run left calibrates the profile
    machine = dataclasses.replace(run.machine, matmul_efficiency=gemm)
    return performance.step(run.shape, machine, run.layout, calibration=constants.calibration).seconds


def fit(runs: tuple[Run, ...] | list[Run], start: Constants = IN_CORE) -> Constants:
    # The kernel cost spans decades, so the optimizer works on its logarithm.
    low = np.array([b[1] for b in BOUNDS])
    high = np.array([b[2] for b in BOUNDS])
    log_index = 2

    def unpack(y: np.ndarray) -> np.ndarray:
        x = y.copy()
        x[log_index] = 10 ** y[log_index]
        return x

    def residuals(y: np.ndarray) -> np.ndarray:
        constants = constants_from(unpack(y))
        return np.array([math.log(predicted(run, constants) / run.seconds) for run in runs])

    y0 = as_vector(start)
    y0[log_index] = math.log10(y0[log_index])
    lower, upper = low.copy(), high.copy()
    lower[log_index], upper[log_index] = math.log10(low[log_index]), math.log10(high[log_index])
    y0 = np.clip(y0, lower + 1e-9, upper - 1e-9)
    result = least_squares(residuals, y0, bounds=(lower, upper), x_scale="jac")
    return constants_from(unpack(result.x))


def errors(runs, constants: Constants) -> list[float]:
    return [predicted(run, constants) / run.seconds - 1 for run in runs]


def summary(values: list[float]) -> str:
    absolute = [abs(value) for value in values]
    return f"mean absolute error {100 * statistics.mean(absolute):.2f}%, worst {100 * max(absolute):.2f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    print(describe())
    fitted = fit(CALIBRATION_RUNS)
    print("\nConstants in the core:", CALIBRATION.as_dict(), "GEMM by profile:", IN_CORE.gemm)
    print(
        "Freshly fitted:       ",
        {k: round(v, 4) if v < 1e3 else v for k, v in fitted.calibration.as_dict().items()},
        "GEMM by profile:",
        {k: round(v, 4) for k, v in fitted.gemm.items()},
    )

    in_core = errors(CALIBRATION_RUNS, IN_CORE)
    left_out = []
    for i, run in enumerate(CALIBRATION_RUNS):
        others = [other for j, other in enumerate(CALIBRATION_RUNS) if j != i]
        refitted = fit(others, start=fitted)
        if not any(other.hardware == run.hardware for other in others):
            # Nothing left calibrates this profile's efficiency: it gets the default of uncalibrated
            # hardware, chosen as the core chooses it (the lowest of the profiles the runs calibrate).
            gemm = {k: v for k, v in refitted.gemm.items() if k != run.hardware}
            default = dataclasses.replace(refitted.calibration, matmul_efficiency=min(gemm.values()))
            refitted = Constants(default, gemm)
        left_out.append(predicted(run, refitted) / run.seconds - 1)

    print(
        "\n| run | layout (t·p·d, micro-batch, interleave, recomputation) | published s | predicted s "
        "| error | left out |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for run, error, loo in zip(CALIBRATION_RUNS, in_core, left_out, strict=True):
        layout = run.layout
        print(
            f"| {run.name} | {layout.tensor_parallel}·{layout.pipeline_parallel}·{layout.data_parallel}"
            f"{'·cp' + str(layout.context_parallel) if layout.context_parallel > 1 else ''}, "
            f"{layout.micro_batch}, "
            f"{layout.interleave}, {layout.recomputation} | {run.seconds:.3f} | "
            f"{run.seconds * (1 + error):.3f} | {100 * error:+.1f}% | {100 * loo:+.1f}% |"
        )
    print(f"\nCalibration: {summary(in_core)}.")
    print(f"Leave-one-out: {summary(left_out)}.")

    print("\n| held-out run | published s | predicted s | error |")
    print("|---|---:|---:|---:|")
    held = errors(HELD_OUT_RUNS, IN_CORE)
    for run, error in zip(HELD_OUT_RUNS, held, strict=True):
        print(f"| {run.name} | {run.seconds:.3f} | {run.seconds * (1 + error):.3f} | {100 * error:+.1f}% |")
    print(f"\nHeld out: {summary(held)}.")
    changed = {
        field.name
        for field in dataclasses.fields(Calibration)
        if field.name != "matmul_efficiency"
        and not math.isclose(
            getattr(fitted.calibration, field.name), getattr(CALIBRATION, field.name), rel_tol=0.02
        )
    } | {
        profile
        for profile in PROFILES
        if not math.isclose(fitted.gemm[profile], IN_CORE.gemm[profile], rel_tol=0.02)
    }
    if changed:
        print(
            f"\nThe fit moved {', '.join(sorted(changed))} by more than 2%: paste the fitted constants into "
            "the core and the GEMM efficiencies into the catalog's profiles."
        )


if __name__ == "__main__":
    main()
