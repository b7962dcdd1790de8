"""Fit the cluster model's constants on published runs, and judge it on organisations it never saw.

    .venv/bin/python -m bench.calibrate_cluster            # the whole report (a few minutes)
    .venv/bin/python -m bench.calibrate_cluster --quick    # the constants in the core only: no refits

Reads every run of `bench/cluster_runs.json` whose step time and layout are published (roles
"calibration", "held-out" and "check") and every whole run ("whole-run"), and prints markdown for
bench/RESULTS.md:

* **Through the API, as shipped**: each run sent as a user would send it (`POST /v1/estimates` with the
  shape, the layout as published, the accelerators, the precision and the hardware inline as its catalog
  profile shows it, network as installed), the step time answered against the published one; then the same
  request with the layout left to the search (only the global batch, context parallelism and the fused
  attention kernel given: the batch is a training choice, context parallelism is not searched, and a
  kernel the publishing team's software did not have is not the search's to pick), its signed error
  (negative: the search promises more than the publishing team got); and each whole run's
  accelerator-hours against the published total.
* **Leave one organisation out** (not with --quick): the constants (kernel cost, memory and link
  efficiency, overlap, and the large-GEMM efficiency of each accelerator family at each precision) fitted
  on the other organisations' runs, least squares on log(predicted / published) within physical bounds, and
  the left-out organisation's runs predicted with them, by category and overall: the error a user from an
  organisation the model has not seen gets. A family or precision that only the left-out organisation ran
  gets the default of uncalibrated hardware, as in the service.
* The constants fitted on every run, to compare with the core's.

The core's evaluation and the API's agree to the last digit for the constants in the core (checked here for
every run); the refits run in the core, where the constants can be swapped.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from bench import moe_runs
from bench.machine import describe
from bench.published_runs import (
    CLUSTERS,
    STEP_ENTRIES,
    WHOLE_RUN_ENTRIES,
    Run,
    hardware_request,
    run_of,
    shape_of,
)
from service import create_app
from service.core import accuracy, frameworks, goodput, performance
from service.core.performance import CALIBRATION, Calibration
from service.infra import migrate
from service.infra.db import get_db
from service.services import keys

# The accelerator families whose large-GEMM efficiency one fit shares: the profiles of one chip (the catalog
# derives the others' from the calibrated one). fp16 and bf16 run at the same peak on the same tensor cores.
FAMILY = {
    "a100-40gb": "a100",
    "a100-80gb": "a100",
    "h100-sxm": "h100",
    "h100-pcie": "h100",
    "h200": "h100",
    "b200": "b200",
    "gb200": "b200",
}
# (name, lower bound, upper bound, prior centre, prior spread) of the constants every run shares: a kernel's
# fixed cost (log10 seconds: a launch alone takes a few microseconds, a partial last wave on a large GEMM
# tens), the achieved HBM fraction (STREAM-like copies reach 80-90%, unfused element-wise kernels less), the
# achieved link fraction (NCCL bus bandwidth, about 0.8 of the line rate), the overlap of data-parallel
# traffic with compute and of tensor-parallel traffic where the layout overlaps it (anything from none to
# all: wide priors).
SHARED = (
    ("kernel_seconds", math.log10(2e-6), math.log10(2e-4), math.log10(5e-6), math.log10(3)),
    ("memory_efficiency", 0.3, 0.95, 0.70, 0.12),
    ("link_efficiency", 0.3, 0.95, 0.80, 0.12),
    ("overlap", 0.0, 1.0, 0.5, 0.35),
    ("tensor_parallel_overlap", 0.0, 1.0, 0.6, 0.4),
)
# Large GEMMs: cuBLAS reaches 65-90% of a dense peak, a whole model's mix of shapes less. Fused attention
# on the causal half it computes: FlashAttention-2 reaches 50-70% of an A100's peak and 35% of an H100's,
# FlashAttention-3 and cuDNN 60-75% of an H100's (Dao 2023, Fig. 4; Shah et al. 2024, Fig. 1).
GEMM_BOUNDS, GEMM_PRIOR = (0.3, 0.95), (0.65, 0.15)
ATTENTION_BOUNDS, ATTENTION_PRIOR = (0.15, 0.95), (0.45, 0.15)
# A framework's own share of the tensor-parallel collectives its overlap hides: SHARED's prior.
OVERLAP_BOUNDS, OVERLAP_PRIOR = (0.0, 1.0), (0.6, 0.4)
# The spread of a run's log error the priors are weighed against: the in-sample error of the fit (about
# 7%), so that a constant one prior spread from its centre costs what one run 10% off does.
RUN_SPREAD = 0.1
UNCALIBRATED = "uncalibrated hardware"
TE = "/te"  # an attention key's suffix for Transformer Engine's kernel
LONG_CONTEXT = 16_384
LARGE_SCALE = 1_024  # accelerators


def gemm_key(run: Run) -> str:
    precision = "bf16" if run.precision == "fp16" else run.precision
    return f"{FAMILY.get(run.hardware, run.hardware)}/{precision}"


def attention_key(run: Run) -> str:
    """Attention runs in bf16 whatever the GEMMs' precision: one figure per family and kernel, Transformer
    Engine's (`/te`) where the framework runs it."""
    family = FAMILY.get(run.hardware, run.hardware)
    te = frameworks.framework_named(run.framework).transformer_engine_attention
    return f"{family}{TE}" if te else family


def categories(run: Run, others: Sequence[Run] | None = None) -> list[str]:
    """The groups of judged runs `run` is in, as the service groups them for its intervals; with `others`,
    as the constants fitted on them see it (hardware only its own organisation ran is uncalibrated there)."""
    efficiency = performance.Efficiency(**hardware_request(run.cluster)["efficiency"])
    calibrated = efficiency.calibrated_at(run.precision)
    if others is not None:
        calibrated &= any(o.organisation != run.organisation and gemm_key(o) == gemm_key(run) for o in others)
    return accuracy.run_categories(run.layout, run.shape, calibrated=calibrated, precision=run.precision)


# Every step-time run of the corpus: what the constants of a fold leaving one organisation out were fitted on
# is the others' runs among these.
CORPUS = [run_of(entry) for entry in STEP_ENTRIES]


def log_error(errors: Sequence[float]) -> accuracy.LogError:
    """log(published / predicted) of runs whose predicted / published - 1 are `errors`."""
    logs = [-math.log1p(e) for e in errors]
    spread = statistics.stdev(logs) if len(logs) > 1 else abs(logs[0])
    return accuracy.LogError(mean=statistics.fmean(logs), spread=spread, runs=len(logs))


def family_spread(constants: Constants) -> float:
    """How far the calibrated accelerator families' large-GEMM fractions in BF16 lie from each other: the
    standard deviation of their logs."""
    return statistics.stdev(math.log(value) for key, value in constants.gemm.items() if key.endswith("/bf16"))


def error_table(
    runs: Sequence[Run], errors: Sequence[float], moe: Sequence[float], constants: Constants
) -> dict[str, accuracy.LogError]:
    """The judged errors by group of `runs`, whose errors the `constants` (fitted without them) gave.

    A part nobody calibrated errs by its missing calibration whatever else the run exercises, and runs of
    such parts are too few to measure it (one organisation's family at a time): its group is a prior, not a
    measurement. It gets the lowest calibrated family's fractions, and a new part may lie as far from those,
    either way, as the calibrated families lie from each other (Blackwell below every earlier family, the
    TPUs above): no lean, and the families' spread beside the model's own on calibrated hardware."""
    groups: dict[str, list[float]] = defaultdict(list)
    calibrated = []
    for run, value in zip(runs, errors, strict=True):
        found = categories(run, CORPUS)
        if UNCALIBRATED in found:
            continue
        calibrated.append(value)
        for group in found:
            groups[group].append(value)
    if moe:
        groups["mixture of experts"] = list(moe)
    table = {group: log_error(values) for group, values in groups.items()}
    model = log_error(calibrated)
    table[UNCALIBRATED] = accuracy.LogError(
        mean=0.0, spread=math.hypot(family_spread(constants), model.spread), runs=model.runs
    )
    return table


def coverage(
    runs: Sequence[Run], errors: Sequence[float], moe: Sequence[float], folds: dict[str, Constants]
) -> list[tuple[bool, float]]:
    """For each run, whether the 80% step-time interval built from the other organisations' judged errors
    (and the families their fit calibrated, `folds`: by the organisation left out) holds its published step
    time, and the interval's half-width (of the point value)."""
    found: list[tuple[bool, float]] = [(False, 0.0)] * len(runs)
    for organisation in sorted({run.organisation for run in runs}):
        others = [(r, e) for r, e in zip(runs, errors, strict=True) if r.organisation != organisation]
        table = error_table([r for r, _ in others], [e for _, e in others], moe, folds[organisation])
        pooled = log_error([e for r, e in others if UNCALIBRATED not in categories(r, CORPUS)])
        for i, (run, value) in enumerate(zip(runs, errors, strict=True)):
            if run.organisation == organisation:
                low, high = accuracy.widest(categories(run, CORPUS), table, pooled).interval(1.0)
                found[i] = (low <= 1 / (1 + value) <= high, (high - low) / 2)
    return found


def held(found: Sequence[tuple[bool, float]]) -> str:
    inside = [ok for ok, _ in found]
    return (
        f"{100 * sum(inside) / len(inside):.0f}% of {len(inside)} hold the published step time, median "
        f"half-width {100 * statistics.median(width for _, width in found):.0f}%"
    )


def overlap_key(run: Run) -> str | None:
    """The framework whose own share of the tensor-parallel collectives hidden `run` measures, if any: an
    overlapped layout in a framework the core gives a share of its own (the others share Megatron-Core's,
    the calibration's)."""
    overlapped = run.layout.tensor_parallel_overlap and run.layout.tensor_parallel > 1
    own = frameworks.framework_named(run.framework).tensor_parallel_overlap_share is not None
    return run.framework if overlapped and own else None


@dataclass(frozen=True)
class Constants:
    calibration: Calibration
    gemm: dict[str, float]  # by gemm_key
    attention: dict[str, float]  # by attention_key
    tp_overlap: dict[str, float]  # by framework, where it has its own (overlap_key)

    def machine(self, run: Run) -> performance.Machine:
        gemm = self.gemm.get(gemm_key(run), self.calibration.matmul_efficiency)
        # A kernel no run of the family measured runs at the family's other figure, as a profile stating
        # only one does (`Efficiency.attention_with`).
        key = attention_key(run)
        family = self.attention.get(key.removesuffix(TE), self.calibration.attention_efficiency)
        attention = self.attention.get(key, family)
        return dataclasses.replace(run.machine, matmul_efficiency=gemm, attention_efficiency=attention)

    def constants(self, run: Run) -> Calibration:
        share = self.tp_overlap.get(run.framework, self.calibration.tensor_parallel_overlap)
        return dataclasses.replace(self.calibration, tensor_parallel_overlap=share)


def in_core(runs: Iterable[Run]) -> Constants:
    """The constants the service runs at: the core's, each run's profile's fractions (the catalog) and its
    framework's share of the tensor-parallel collectives hidden."""
    gemm: dict[str, float] = {}
    attention: dict[str, float] = {}
    for run in runs:
        if run.machine.matmul_efficiency is not None:
            gemm.setdefault(gemm_key(run), run.machine.matmul_efficiency)
        if run.machine.attention_efficiency is not None:
            attention.setdefault(attention_key(run), run.machine.attention_efficiency)
    tp_overlap = {
        name: framework.tensor_parallel_overlap_share
        for name, framework in frameworks.FRAMEWORKS.items()
        if framework.tensor_parallel_overlap_share is not None
    }
    return Constants(CALIBRATION, gemm, attention, tp_overlap)


def predicted(run: Run, constants: Constants) -> float:
    return performance.step(
        run.shape,
        constants.machine(run),
        run.layout,
        precision=run.precision,
        calibration=constants.constants(run),
        framework=dataclasses.replace(
            frameworks.framework_named(run.framework), tensor_parallel_overlap_share=None
        ),
    ).seconds


def error(run: Run, seconds: float) -> float:
    """predicted / published - 1: negative when the model promises a faster step than the run got."""
    return seconds / run.seconds - 1


def fit(runs: Sequence[Run], start: Constants) -> Constants:
    """The constants that best predict `runs`: least squares on log(predicted / published), each constant
    within physical bounds and drawn towards its prior (a maximum a posteriori fit; without the priors, an
    organisation's runs left out let a poorly determined constant, such as the kernel's fixed cost, run to
    a bound that predicts the left-out runs 30-60% too slow)."""
    gemm_keys = sorted({gemm_key(run) for run in runs})
    attention_keys = sorted({attention_key(run) for run in runs})
    overlap_keys = sorted({key for run in runs if (key := overlap_key(run)) is not None})
    fractions = (
        [(GEMM_BOUNDS, GEMM_PRIOR)] * len(gemm_keys)
        + [(ATTENTION_BOUNDS, ATTENTION_PRIOR)] * len(attention_keys)
        + [(OVERLAP_BOUNDS, OVERLAP_PRIOR)] * len(overlap_keys)
    )
    bounds = [b for b, _ in fractions] + [(low, high) for _, low, high, _, _ in SHARED]
    priors = [p for _, p in fractions] + [(centre, spread) for *_, centre, spread in SHARED]
    low, high = np.array(bounds).T
    centre, spread = np.array(priors).T

    def unpack(y: np.ndarray) -> Constants:
        values = iter(float(value) for value in y)
        gemm = {key: next(values) for key in gemm_keys}
        attention = {key: next(values) for key in attention_keys}
        own_overlap = {key: next(values) for key in overlap_keys}
        kernel, memory, link, overlap, tp_overlap = values
        # What a family no run left calibrates gets, chosen as the core chooses it: the lowest figures.
        calibration = dataclasses.replace(
            start.calibration,
            matmul_efficiency=min(value for key, value in gemm.items() if key.endswith("/bf16")),
            attention_efficiency=min(value for key, value in attention.items() if not key.endswith(TE)),
            kernel_seconds=10**kernel,
            memory_efficiency=memory,
            link_efficiency=link,
            overlap=overlap,
            tensor_parallel_overlap=tp_overlap,
        )
        return Constants(calibration, gemm, attention, own_overlap)

    def residuals(y: np.ndarray) -> np.ndarray:
        constants = unpack(y)
        errors = [math.log(predicted(run, constants) / run.seconds) for run in runs]
        return np.concatenate([errors, RUN_SPREAD * (y - centre) / spread])

    y0 = np.clip(centre, low + 1e-9, high - 1e-9)
    return unpack(least_squares(residuals, y0, bounds=(low, high), x_scale="jac").x)


# --- Through the API ----------------------------------------------------------------------------------------


def estimate_body(entry: dict[str, Any], layout: dict[str, Any] | None) -> dict[str, Any]:
    """The request a user sends for a published run: its shape, hardware as installed and framework, at its
    precision."""
    shape = shape_of(entry)
    fields = dataclasses.asdict(shape)
    body: dict[str, Any] = {
        "params": shape.params,
        "hardware": hardware_request(entry["cluster"]),
        "precision": entry.get("precision", "bf16"),
        "framework": entry["framework"],
        "shape": {
            name: value for name, value in fields.items() if value is not None and name != "micro_batch"
        },
    }
    if layout is not None:
        body["layout"] = layout
    return body


class Api:
    """The service in process, on a fresh SQLite database: requests as a user sends them."""

    def __init__(self, directory: str) -> None:
        self.app = create_app({"database_url": f"sqlite:///{directory}/judge.db", "log_level": "WARNING"})
        database = get_db(self.app)
        migrate.upgrade(database.engine)
        with database.sessionmaker() as session:
            key = keys.create_key(session, keys.NewKey(role="admin", name="cluster judge")).key
        self.headers = {"Authorization": f"Bearer {key}"}
        self.client = self.app.test_client()

    def estimate(self, body: dict[str, Any]) -> dict[str, Any]:
        response = self.client.post("/v1/estimates", json=body, headers=self.headers)
        if response.status_code != 200:
            return {"problem": response.get_json()}
        answer: dict[str, Any] = response.get_json()
        return answer


def best_of_jobs(runs: Sequence[Run]) -> list[Run]:
    """The fastest published run of each job (one shape on one hardware at one precision, accelerator count
    and global batch): what the publishing team tuned, where a paper also ran the job worse on purpose (the
    full-recomputation baselines of Korthikanti et al. 2022, torchtitan's TP without its overlap)."""
    fastest: dict[tuple[Any, ...], Run] = {}
    for run in runs:
        job = (run.shape, run.hardware, run.precision, run.layout.accelerators, run.layout.global_batch)
        if job not in fastest or run.seconds < fastest[job].seconds:
            fastest[job] = run
    return list(fastest.values())


def step_request(entry: dict[str, Any], run: Run, *, searched: bool) -> dict[str, Any]:
    layout = dataclasses.asdict(run.layout)
    if searched:
        # What the publishing team's software fixed stays given: the batch, context parallelism (not
        # searched), whether it had a fused attention kernel (Megatron-LM's 2021 runs had none) and the
        # fields the corpus says its software offered no choice of (`search_keeps`).
        fixed = entry.get("search_keeps", {}).get("fields", [])
        kept = ["global_batch", "context_parallel", "flash_attention", *fixed]
        layout = {name: getattr(run.layout, name) for name in kept}
    # Tokens for ten steps: the step time does not depend on them.
    body = estimate_body(entry, layout)
    body |= {
        "tokens": 10.0 * run.layout.global_batch * run.shape.sequence_length,
        "accelerators": run.layout.accelerators,
    }
    return body


def whole_run_request(entry: dict[str, Any]) -> dict[str, Any]:
    body = estimate_body(entry, entry.get("layout"))
    body["tokens"] = entry["measured"]["tokens"]
    if "accelerators" in entry:
        body["accelerators"] = entry["accelerators"]
    if "global_batch" in entry:
        body.setdefault("layout", {})["global_batch"] = entry["global_batch"]
    return body


# --- Reporting ----------------------------------------------------------------------------------------------


def pct(value: float) -> str:
    return f"{100 * value:+.1f}%"


def stats(errors: Sequence[float]) -> str:
    absolute = [abs(e) for e in errors]
    return (
        f"{len(errors)} runs: median |error| {100 * statistics.median(absolute):.1f}%, mean "
        f"{100 * statistics.fmean(absolute):.1f}%, worst {pct(max(errors, key=abs))}, signed mean "
        f"{pct(statistics.fmean(errors))}, within 15%: {sum(a <= 0.15 for a in absolute)}"
    )


def grouped(runs: Sequence[Run], errors: Sequence[float], key: Callable[[Run], Iterable[str]]) -> None:
    groups: dict[str, list[float]] = defaultdict(list)
    for run, value in zip(runs, errors, strict=True):
        for name in key(run):
            groups[name].append(value)
    print("\n| group | runs | median abs | mean abs | worst | signed mean |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, values in sorted(groups.items()):
        absolute = [abs(v) for v in values]
        print(
            f"| {name} | {len(values)} | {100 * statistics.median(absolute):.1f}% | "
            f"{100 * statistics.fmean(absolute):.1f}% | {pct(max(values, key=abs))} | "
            f"{pct(statistics.fmean(values))} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the constants in the core only: no refits")
    args = parser.parse_args()
    print(describe())
    entries = list(STEP_ENTRIES)
    runs = CORPUS
    shipped = in_core(runs)
    organisations = sorted({run.organisation for run in runs})
    hardware = sorted({CLUSTERS[e["cluster"]]["hardware"] for e in (*entries, *WHOLE_RUN_ENTRIES)})
    print(
        f"\n{len(runs)} step-time runs from {len(organisations)} organisations ({', '.join(organisations)}), "
        f"{len(WHOLE_RUN_ENTRIES)} whole runs; accelerators: {', '.join(hardware)}."
    )
    with tempfile.TemporaryDirectory() as directory:
        api = Api(directory)
        steps_through_api(api, entries, runs, shipped)
        memory_through_api(api, entries, runs)
        whole_runs_through_api(api)
    if not args.quick:
        leave_one_organisation_out(runs, shipped)


def steps_through_api(api: Api, entries: list[dict[str, Any]], runs: list[Run], shipped: Constants) -> None:
    print("\n## Through the API, as shipped (POST /v1/estimates, the published layout)\n")
    print(
        "| run | organisation | hardware, precision | layout t·p·d·c | published s | API s | error "
        "| searched s | search error |"
    )
    print("|---|---|---|---|---:|---:|---:|---:|---:|")
    api_errors, search_errors, refused = [], [], []
    searched_runs = []  # the runs whose search answered, in search_errors' order
    for entry, run in zip(entries, runs, strict=True):
        answer = api.estimate(step_request(entry, run, searched=False))
        core = predicted(run, shipped)
        if "problem" in answer:
            # The published layout does not fit memory by the model's count: the service refuses the
            # request; its step time is the core's, and the refusal is counted.
            refused.append(run.name)
            seconds = core
        else:
            seconds = answer["performance"]["step_seconds"]
            assert math.isclose(seconds, core, rel_tol=1e-9), (run.name, seconds, core)
        api_errors.append(error(run, seconds))
        searched = api.estimate(step_request(entry, run, searched=True))
        if "problem" in searched:
            found = "refused | "
        else:
            search_seconds = searched["performance"]["step_seconds"]
            search_errors.append(error(run, search_seconds))
            searched_runs.append(run)
            found = f"{search_seconds:.3f} | {pct(search_errors[-1])}"
        layout = run.layout
        shown = f"{seconds:.3f}{' (refused)' if refused and refused[-1] == run.name else ''}"
        print(
            f"| {run.name} | {run.organisation} | {run.hardware} {run.precision} | {layout.tensor_parallel}·"
            f"{layout.pipeline_parallel}·{layout.data_parallel}·{layout.context_parallel} | "
            f"{run.seconds:.3f} | {shown} | {pct(api_errors[-1])} | {found} |"
        )
    print(f"\nPublished layouts: {stats(api_errors)}.")
    print(
        f"Refused by the API as not fitting memory, though published: {len(refused)} "
        f"({'; '.join(refused) or 'none'}); their error above is the core's step time."
    )
    print(f"Searched layouts: {stats(search_errors)}.")
    tuned = best_of_jobs(runs)
    best = [e for run, e in zip(searched_runs, search_errors, strict=True) if run in tuned]
    print(
        "Searched layouts against the publishing team's best run of each job (the fastest published run of "
        f"one model on one cluster at one batch; without the ablation baselines beside it): {stats(best)}."
    )
    grouped(runs, api_errors, lambda run: [run.organisation])
    grouped(runs, api_errors, categories)


def memory_through_api(api: Api, entries: list[dict[str, Any]], runs: list[Run]) -> None:
    """The model's memory per accelerator at the published layout beside the peak a source reports
    (`measured.memory_gib`: torchtitan logs PyTorch's max reserved memory, which holds the allocator's
    fragmentation, the CUDA context and NCCL's buffers besides what the model counts)."""
    print("\n## Memory per accelerator: the model's count against the published peak\n")
    print("| run | framework | recomputation | published GiB | model GiB | model / published |")
    print("|---|---|---|---:|---:|---:|")
    ratios = []
    for entry, run in zip(entries, runs, strict=True):
        published = entry["measured"].get("memory_gib")
        if published is None:
            continue
        answer = api.estimate(step_request(entry, run, searched=False))
        counted = answer["performance"]["memory_bytes"] / 2**30
        ratios.append(counted / published)
        print(
            f"| {run.name} | {run.framework} | {run.layout.recomputation} | {published:.1f} | "
            f"{counted:.1f} | {ratios[-1]:.2f} |"
        )
    low, high = min(ratios), max(ratios)
    print(f"\n{len(ratios)} runs: the model counts {low:.2f} to {high:.2f} of the published peaks.")


def whole_runs_through_api(api: Api) -> None:
    print("\n## Whole runs through the API, as shipped\n")
    print("| run | organisation | hardware | tokens | accelerators | published GPU-h | API GPU-h | error |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    errors, judged = [], []  # and the organisation of each
    for entry in WHOLE_RUN_ENTRIES:
        answer = api.estimate(whole_run_request(entry))
        published = entry["measured"]["gpu_hours"]
        if "problem" in answer:
            print(
                f"| {entry['name']} | {entry['organisation']} | refused: {answer['problem'].get('errors')} |"
            )
            continue
        hours = answer["accelerator_hours"]
        errors.append(hours / published - 1)
        judged.append(entry["organisation"])
        print(
            f"| {entry['name']} | {entry['organisation']} | {CLUSTERS[entry['cluster']]['hardware']} | "
            f"{entry['measured']['tokens']:.3g} | {answer['accelerators']} | {published:,.0f} | "
            f"{hours:,.0f} | {pct(errors[-1])} |"
        )
    print(f"\nWhole runs: {stats(errors)}.")
    found = log_error(errors)
    print(f"    WHOLE_RUN = LogError(mean={found.mean:.4f}, spread={found.spread:.4f}, runs={found.runs})")
    refitted = matching_overhead(errors)
    print(
        f"Run overhead that would match every whole run on average: {refitted:.3f} (the core's: "
        f"{goodput.DEFAULT_RUN_OVERHEAD})."
    )
    # What a user from an organisation whose whole runs the default was not fitted on gets: each
    # organisation's runs at the overhead matching the other organisations' runs.
    held_out = []
    for organisation in sorted(set(judged)):
        others = [e for e, whose in zip(errors, judged, strict=True) if whose != organisation]
        kept = (1 - goodput.DEFAULT_RUN_OVERHEAD) / (1 - matching_overhead(others))
        held_out += [
            kept * (1 + e) - 1 for e, whose in zip(errors, judged, strict=True) if whose == organisation
        ]
    print(f"Whole runs, each organisation at the overhead matching the others': {stats(held_out)}.")
    inside, widths = [], []
    for organisation in sorted(set(judged)):
        others = [e for e, whose in zip(errors, judged, strict=True) if whose != organisation]
        low, high = log_error(others).interval(1.0)
        for value, whose in zip(errors, judged, strict=True):
            if whose == organisation:
                inside.append(low <= 1 / (1 + value) <= high)
                widths.append((high - low) / 2)
    print(
        f"80% accelerator-hour intervals built for each organisation from the others' whole runs: "
        f"{100 * sum(inside) / len(inside):.0f}% hold the published total, median half-width "
        f"{100 * statistics.median(widths):.0f}%."
    )


def leave_one_organisation_out(runs: list[Run], shipped: Constants) -> None:
    print("\n## Leave one organisation out (constants refitted on the others, in the core)\n")
    left_out = [0.0] * len(runs)
    folds = {}
    for organisation in sorted({run.organisation for run in runs}):
        constants = folds[organisation] = fit(
            [run for run in runs if run.organisation != organisation], shipped
        )
        for i, run in enumerate(runs):
            if run.organisation == organisation:
                left_out[i] = error(run, predicted(run, constants))
    print(f"Leave one organisation out: {stats(left_out)}.")
    # A family only the left-out organisation ran (Google's TPUs, NVIDIA's Blackwell) is uncalibrated in
    # its fold: its runs err by the missing calibration, the others by the model.
    calibrated = [UNCALIBRATED not in categories(run, runs) for run in runs]
    for name, keep in (
        ("on hardware calibrated in the fold", True),
        ("on hardware uncalibrated in it", False),
    ):
        print(f"  {name}: {stats([e for e, c in zip(left_out, calibrated, strict=True) if c == keep])}.")
    grouped(runs, left_out, lambda run: [run.organisation])
    grouped(runs, left_out, lambda run: categories(run, runs))
    moe = [moe_runs.predict(run).best.seconds / run.published_step_seconds - 1 for run in moe_runs.RUNS]
    found = coverage(runs, left_out, moe, folds)
    print(
        "\n80% step-time intervals built for each organisation from the other organisations' errors: "
        f"{held(found)}."
    )
    for name, keep in (("calibrated in the fold", True), ("uncalibrated in it", False)):
        print(
            f"  on hardware {name}: {held([f for f, c in zip(found, calibrated, strict=True) if c == keep])}."
        )
    print("\nJudged errors for service/core/accuracy.py (log(published / predicted): mean, spread, runs):")
    for group, found in sorted(error_table(runs, left_out, moe, shipped).items()):
        print(
            f'    "{group}": LogError(mean={found.mean:.4f}, spread={found.spread:.4f}, runs={found.runs}),'
        )
    found = log_error([e for e, c in zip(left_out, calibrated, strict=True) if c])
    print(f"    POOLED = LogError(mean={found.mean:.4f}, spread={found.spread:.4f}, runs={found.runs})")
    print(f"(The calibrated families' BF16 GEMM fractions spread {family_spread(shipped):.4f} in log.)")

    everything = fit(runs, shipped)
    print("\nFitted on every run:", {k: round(v, 6) for k, v in everything.calibration.as_dict().items()})
    print("GEMM by family/precision:", {k: round(v, 4) for k, v in sorted(everything.gemm.items())})
    print("Attention by family:", {k: round(v, 4) for k, v in sorted(everything.attention.items())})
    print("Tensor-parallel overlap by framework:", {k: round(v, 4) for k, v in everything.tp_overlap.items()})
    in_core_gemm = {k: round(v, 4) for k, v in sorted(shipped.gemm.items())}
    in_core_attention = {k: round(v, 4) for k, v in sorted(shipped.attention.items())}
    print("In the core:", shipped.calibration.as_dict(), in_core_gemm, in_core_attention)
    print(f"In-sample with them: {stats(errors_of(runs, everything))}.")


def matching_overhead(errors: Sequence[float]) -> float:
    """The run overhead that would make the geometric mean of published over predicted 1 for whole runs
    predicted `errors` off at the core's overhead: useful fractions scale by (1 - o), so the published totals
    ask for (1 - o_new) = (1 - o) · exp(-mean log(published / predicted))."""
    return 1 - (1 - goodput.DEFAULT_RUN_OVERHEAD) * math.exp(-log_error(errors).mean)


def errors_of(runs: Sequence[Run], constants: Constants) -> list[float]:
    return [error(run, predicted(run, constants)) for run in runs]


if __name__ == "__main__":
    main()
