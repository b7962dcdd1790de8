"""How long a training step takes on a cluster, and how much memory it needs, under a parallel layout.

A step is built from the work it does, each part at the rate of the hardware that does it, plus a few
constants calibrated on published runs (`CALIBRATION`, fitted by `bench/calibrate_cluster.py`):

* matrix multiplies at the dense peak times an efficiency that falls for small matrices (Isaev et al. 2023,
  Calculon, model GEMM efficiency by size; here a GEMM of g FLOPs takes g / (peak · e) + τ, a fixed cost τ
  per kernel for its launch and its last partial wave, so its efficiency e · g / (g + τ · peak · e) halves
  at g = τ · peak · e);
* element-wise work (norms, residuals, dropout, activations, softmax) and the optimizer update as bytes moved
  at the HBM bandwidth times an achieved fraction;
* collectives at the link bandwidth times an achieved fraction, ring or tree (whichever is cheaper) with a
  per-hop latency: tensor-parallel all-reduces on the scale-up link, or the network when a group spans
  nodes (Narayanan et al. 2021, §3); pipeline point-to-point transfers; data-parallel and ZeRO traffic
  (Rajbhandari et al. 2020) partly hidden under the backward pass; context-parallel K/V exchange (Llama 3,
  Dubey et al. 2024, §3.3.2);
* the pipeline bubble (p - 1)/(v · m) of the ideal time (Narayanan et al. 2021, §2.2).

Every formula is written once over numpy arrays, so one call evaluates one layout or the thousands a layout
search enumerates (`evaluate`). Each part is a function, with its formula and source, of `step_terms` (one
device's own work) or `parallel_terms` (what spreading the step over devices adds), which `evaluate` composes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from service.core import layout_search, parallel_terms
from service.core import step_terms as terms
from service.core import validation as v
from service.core.frameworks import GENERIC, Framework
from service.core.memory import MAX_MEMORY_BYTES, RECOMPUTATION_MODES, ZERO_STAGES
from service.core.shape import ModelShape

Array = npt.NDArray[np.float64]
Flags = npt.NDArray[np.bool_]
Codes = npt.NDArray[np.int64]

# 1.1.0: mixture of experts (expert parallelism, its all-to-all), latent attention, multi-token prediction;
# in fp8, attention at the bf16 peak and GEMM inputs cached in fp8.
# 1.2.0: efficiencies are the hardware profile's (Efficiency), none looked up by name; uncalibrated hardware
# at the lower calibrated GEMM fraction. 1.3.0: node-aware data-parallel collectives, tensor-parallel overlap,
# frameworks bounding the search, constants fitted on the 81 published step times of the corpus. 1.4.0:
# fused attention at an efficiency of its own on the causal half it computes; constants fitted with priors.
# 1.5.0: ZeRO 2 reduce-scatters each micro-batch's gradients; a framework's own share of the tensor-parallel
# collectives its overlap hides, and what its selective recomputation redoes (torchtitan's per-op policy);
# Transformer Engine's attention at a fraction of its own; constants refitted on the 83 step times. 1.5.1:
# constants refitted on 92 (TPU v4 and v6e, Blackwell in BF16 added), uncalibrated hardware at Blackwell's
# BF16 fraction, the lowest calibrated.
MODEL_VERSION = "1.5.1"


PROVENANCES = ("calibrated", "derived", "uncalibrated")
# What an achieved fraction of a peak may be: below 5% is a measurement (or a layout) gone wrong rather than
# a figure of the hardware; 1 is the peak itself.
EFFICIENCY_RANGE = (0.05, 1.0)


@dataclass(frozen=True)
class Efficiency:
    """What an accelerator achieves of its peaks, as its hardware profile states it, and where that came from.

    `gemm` is the large-GEMM fraction of the dense peak by training precision; `attention` the fraction of
    the BF16 peak fused attention kernels (FlashAttention-2, as PyTorch's and most stacks run it) reach on the
    causal half of the scores they compute, and `attention_transformer_engine` what Transformer Engine's
    fused attention (cuDNN, in Megatron-Core and NeMo) reaches where it differs; `memory` the fraction of
    the HBM bandwidth element-wise kernels reach; `link` the fraction of a link's bandwidth collectives reach
    (NCCL bus bandwidth). A figure left out is the calibration's (`Calibration`). `provenance` says how the
    figures were found: `calibrated` on published or measured runs of this hardware (`basis` names them),
    `derived` from another part's calibration by a stated architectural argument, or `uncalibrated`.
    Nothing in the model reads a hardware's name: two profiles with the same figures give the same answers.
    """

    gemm: Mapping[str, float]
    provenance: str
    basis: str
    memory: float | None = None
    link: float | None = None
    attention: float | None = None
    attention_transformer_engine: float | None = None

    def __post_init__(self) -> None:
        for precision, value in self.gemm.items():
            v.in_range(f"efficiency.gemm.{precision}", value, *EFFICIENCY_RANGE)
        for name in ("memory", "link", "attention", "attention_transformer_engine"):
            value = getattr(self, name)
            if value is not None:
                v.in_range(f"efficiency.{name}", value, *EFFICIENCY_RANGE)
        v.choice("efficiency.provenance", self.provenance, PROVENANCES)

    def as_dict(self) -> dict[str, Any]:
        return {**vars(self), "gemm": dict(self.gemm)}

    def calibrated_at(self, precision: str) -> bool:
        """Whether the GEMM figure at `precision` rests on runs (calibrated) or an argument from them."""
        return self.provenance != "uncalibrated" and precision in self.gemm

    def attention_with(self, transformer_engine: bool) -> float | None:
        """The attention fraction a framework reaches: Transformer Engine's where it uses it and the profile
        states one, else the FlashAttention-2 figure."""
        if transformer_engine and self.attention_transformer_engine is not None:
            return self.attention_transformer_engine
        return self.attention


@dataclass(frozen=True)
class Calibration:
    """The constants the model cannot derive, fitted on published runs (`bench/calibrate_cluster.py`): for
    hardware whose profile states no efficiency of its own, the large-GEMM, memory and link fractions are
    these (an uncalibrated part, which the answer says)."""

    matmul_efficiency: float  # large-GEMM fraction of the dense peak, for hardware without its own
    kernel_seconds: float  # fixed cost of a GEMM kernel besides its FLOPs: launch and the last partial wave
    memory_efficiency: float  # achieved fraction of the HBM bandwidth in element-wise kernels
    link_efficiency: float  # achieved fraction of a link's bandwidth in collectives (NCCL bus bandwidth)
    overlap: float  # fraction of data-parallel / ZeRO traffic hidden under the compute it overlaps
    # Fraction of a layer's tensor-parallel collectives hidden under its compute when the layout overlaps
    # them (0 in the constants of plans from before; `Layout.tensor_parallel_overlap`).
    tensor_parallel_overlap: float = 0.0
    # Fraction of the BF16 peak fused attention reaches on the causal half of the scores, for hardware
    # without its own (None in the constants of plans from before 1.4.0: the whole score matrix at the GEMM
    # fraction, as the model counted it then).
    attention_efficiency: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


# Fitted by `python -m bench.calibrate_cluster` on the 92 published step times of bench/cluster_runs.json
# (6 organisations): least squares on log(predicted / published), each constant within physical bounds and
# drawn towards a stated prior (the fit's docstring), with the GEMM fraction of each accelerator family and
# precision and the fused-attention fraction of each family and kernel, which the catalog's profiles carry
# (A100 0.734, attention 0.438; H100 0.598, fp8 0.507, attention 0.217 with FlashAttention-2 and 0.278 with
# Transformer Engine's; Blackwell 0.477, fp8 0.483, attention 0.360; TPU v4 0.837, v5e 0.913, v5p 0.778,
# v6e 0.661), and torchtitan's share of the tensor-parallel overlap (frameworks.py). The GEMM and attention
# fractions here are what hardware no run calibrates gets: the lowest of the calibrated families' (GEMM:
# Blackwell's in BF16; attention: the H100's with FlashAttention-2), since a part nobody has measured more
# often falls short of its paper advantage than beats it. Megatron-Core's tensor-parallel overlap sits at its
# bound (1): where it overlaps those collectives, the step hides them (bench/RESULTS.md).
CALIBRATION = Calibration(
    matmul_efficiency=0.477,
    kernel_seconds=5e-6,
    memory_efficiency=0.654,
    link_efficiency=0.900,
    overlap=0.348,
    tensor_parallel_overlap=1.0,
    attention_efficiency=0.217,
)


@dataclass(frozen=True)
class Machine:
    """An accelerator as installed in a cluster: what the step-time model reads of it."""

    peak_flops_per_second: float
    memory_bytes: float
    memory_bandwidth_bytes_per_second: float
    accelerators_per_node: int
    scale_up_bytes_per_second: float
    scale_out_bytes_per_second: float
    # The dense peak attention runs at when it differs (training in fp8, attention stays in bf16: Transformer
    # Engine's recipes and DeepSeek-V3 §3.3 keep it out of fp8); None: the peak.
    attention_peak_flops_per_second: float | None = None
    # Achieved fractions of the peak at the training precision, the HBM bandwidth and the links, as the
    # hardware's profile states them (`Efficiency`); None: the calibration's.
    matmul_efficiency: float | None = None
    memory_efficiency: float | None = None
    link_efficiency: float | None = None
    attention_efficiency: float | None = None  # of the attention peak, on the causal half (`Efficiency`)
    # The share of memory a layout leaves free for what the model does not count (`DEFAULT_MEMORY_HEADROOM`).
    memory_headroom: float = 0.0

    def __post_init__(self) -> None:
        v.positive("peak_flops_per_second", self.peak_flops_per_second)
        v.positive("memory_bytes", self.memory_bytes, maximum=MAX_MEMORY_BYTES)
        v.positive("memory_bandwidth_bytes_per_second", self.memory_bandwidth_bytes_per_second)
        v.whole("accelerators_per_node", self.accelerators_per_node)
        v.positive("scale_up_bandwidth_bytes_per_second", self.scale_up_bytes_per_second)
        v.positive("scale_out_bandwidth_bytes_per_second", self.scale_out_bytes_per_second)
        v.in_range("memory_headroom", self.memory_headroom, 0.0, MAX_MEMORY_HEADROOM)

    @property
    def usable_memory_bytes(self) -> float:
        """What a layout may fill: the memory less the headroom."""
        return self.memory_bytes * (1 - self.memory_headroom)


@dataclass(frozen=True)
class Layout:
    """How a run is spread over the cluster (Megatron-LM's and Llama 3's names)."""

    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    micro_batch: int
    global_batch: int  # sequences per step
    context_parallel: int = 1
    interleave: int = 1  # virtual pipeline stages per device
    sequence_parallel: bool = True
    recomputation: str = "none"
    zero_stage: int = 1
    flash_attention: bool = True
    # Ranks of the data-parallel group a mixture-of-experts layer's experts are spread over, and whether their
    # all-to-all runs under another micro-batch's compute (DeepSeek-V3's DualPipe) at the cost of the SMs
    # it takes.
    expert_parallel: int = 1
    expert_overlap: bool = False
    # The tensor-parallel collectives pipelined with the GEMMs they feed and follow (Megatron-Core's
    # --tp-comm-overlap, torchtitan's asynchronous TP), as far as the compute hides them.
    tensor_parallel_overlap: bool = False

    @property
    def accelerators(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel * self.context_parallel

    @property
    def micro_batches(self) -> int:
        """Micro-batches each pipeline runs per step: global batch ÷ (data-parallel degree · micro-batch)."""
        return self.global_batch // (self.data_parallel * self.micro_batch)


LAYOUT_FIELDS = tuple(field.name for field in fields(Layout))
# Layout fields that are counts, at least 1.
WHOLE_LAYOUT_FIELDS = (
    "tensor_parallel",
    "pipeline_parallel",
    "data_parallel",
    "context_parallel",
    "micro_batch",
    "global_batch",
    "interleave",
    "expert_parallel",
)
# The step's parts, in the order a breakdown lists them; they add up to the step time.
BREAKDOWN = (
    "compute",
    "memory_bound",
    "tensor_parallel",
    "context_parallel",
    "pipeline_bubble",
    "pipeline_transfers",
    "expert_parallel",
    "data_parallel",
    "optimizer",
)


# The share of an accelerator's memory a layout the search chooses leaves free for what the model does not
# count (the CUDA context and kernels' workspaces, NCCL's buffers, the caching allocator's fragmentation). By
# default none: Megatron-style runs that published their layouts sit at or just above the model's count
# with those costs paid (Llama 3 405B counts 80.8 GB on its 80 GB H100s, Nemotron-340B 1.005 of its memory,
# NeMo's 405B on B200 1.08), so a reserve would refuse what ran; torchtitan's published peaks sit 0.66-1.08
# of the count, the allocator's reserve what it misses most (bench/RESULTS.md). A request may ask for a
# margin of its own.
DEFAULT_MEMORY_HEADROOM = 0.0
MAX_MEMORY_HEADROOM = 0.5
# A layout given whole (every field the search would choose fixed) that the model counts over memory by at
# most this fraction is answered with a does_not_fit_memory warning rather than refused: published runs fit
# in up to 8% less than the activation count (Korthikanti et al. 2022) gives them (Llama 3 405B 80.8 GB on
# 80 GB H100s, NeMo's 405B on B200, torchtitan's per-op recomputation 10-46% under it; bench/RESULTS.md). A
# search that chooses fields keeps to the memory.
GIVEN_LAYOUT_MEMORY_TOLERANCE = 0.15


@dataclass(frozen=True)
class Step:
    """One layout's step: its time, the parts it is made of, and memory on the busiest accelerator."""

    layout: Layout
    seconds: float
    breakdown: dict[str, float]
    memory_bytes: float
    model_states_bytes: float
    activations_bytes: float
    model_flops: float  # per step: (6N + 12·L·h·s) per token (PaLM's MFU accounting)
    hardware_flops: float  # per step, counting recomputation
    mfu: float
    hfu: float
    fits: bool

    def tokens_per_second_per_accelerator(self, sequence_length: int) -> float:
        return self.layout.global_batch * sequence_length / self.seconds / self.layout.accelerators


def check_layout(shape: ModelShape, layout: Layout, accelerators: int | None = None) -> None:
    """Refuse a layout that cannot run, naming the field: degrees that do not multiply to the accelerator
    count, a tensor-parallel degree that does not divide the heads, a pipeline deeper than the layers, a
    micro-batch that does not divide the batch of a replica (`check_fixed_fields`, every field fixed), and an
    interleaved schedule without a pipeline or with micro-batches in other than multiples of its stages."""
    fixed = {name: getattr(layout, name) for name in LAYOUT_FIELDS}
    count = layout.accelerators if accelerators is None else accelerators
    check_fixed_fields(shape, fixed, count, layout.global_batch)
    if layout.interleave > 1 and layout.pipeline_parallel == 1:
        raise v.InvalidInput("layout.interleave", "needs pipeline_parallel above 1")
    if layout.interleave > 1 and layout.micro_batches % layout.pipeline_parallel:
        raise v.InvalidInput(
            "layout.interleave",
            f"an interleaved schedule needs micro-batches ({layout.micro_batches}) in multiples of "
            f"pipeline_parallel ({layout.pipeline_parallel})",
        )


def _divisors_text(n: int) -> str:
    found = layout_search.divisors(n, 4096)
    shown = ", ".join(str(k) for k in found[:12])
    return shown + (", …" if len(found) > 12 else "")


def step(
    shape: ModelShape,
    machine: Machine,
    layout: Layout,
    *,
    precision: str = "bf16",
    optimizer: str = "adam",
    calibration: Calibration = CALIBRATION,
    framework: Framework = GENERIC,
) -> Step:
    """The step of one layout (checked first), in `framework`."""
    check_layout(shape, layout)
    columns = {name: np.array([getattr(layout, name)]) for name in LAYOUT_FIELDS if name != "recomputation"}
    columns["recomputation"] = np.array([RECOMPUTATION_MODES.index(layout.recomputation)])
    result = evaluate(
        shape,
        machine,
        columns,
        precision=precision,
        optimizer=optimizer,
        calibration=calibration,
        framework=framework,
    )
    return _step_at(result, 0, layout)


def _step_at(result: dict[str, Array], i: int, layout: Layout) -> Step:
    return Step(
        layout=layout,
        seconds=float(result["seconds"][i]),
        breakdown={part: float(result[part][i]) for part in BREAKDOWN},
        memory_bytes=float(result["memory_bytes"][i]),
        model_states_bytes=float(result["model_states_bytes"][i]),
        activations_bytes=float(result["activations_bytes"][i]),
        model_flops=float(result["model_flops"][i]),
        hardware_flops=float(result["hardware_flops"][i]),
        mfu=float(result["mfu"][i]),
        hfu=float(result["hfu"][i]),
        fits=bool(result["fits"][i]),
    )


def evaluate(
    shape: ModelShape,
    machine: Machine,
    columns: dict[str, Any],
    *,
    precision: str = "bf16",
    optimizer: str = "adam",
    calibration: Calibration = CALIBRATION,
    framework: Framework = GENERIC,
) -> dict[str, Array]:
    """Step time, its parts and memory for many layouts at once: `columns` holds one array per `Layout`
    field (recomputation coded 0 none, 1 selective, 2 full; expert_overlap 1, 0 or -1 for whichever is
    faster), the layouts already checked. The parts are `step_terms`' and `parallel_terms`' functions,
    composed: a layer's parts on the busiest pipeline stage times the micro-batches, the bubble,
    data-parallel traffic and the optimizer update."""
    x = terms.Layouts.of(shape, columns)
    rates = _rates(machine, calibration)
    # A framework's own share of the tensor-parallel collectives hidden, where it is measured apart from
    # Megatron-Core's (the calibration's).
    tp_overlap = framework.tensor_parallel_overlap_share
    if tp_overlap is None:
        tp_overlap = calibration.tensor_parallel_overlap
    gemms = terms.layer_gemms(shape, x, rates)
    all_to_all = parallel_terms.expert_all_to_all_layer_seconds(shape, x, rates, precision)
    compute, exposed_all_to_all, overlapped = parallel_terms.expert_overlap(
        shape, x, terms.layer_compute_seconds(gemms, x, framework.selective_matmuls), all_to_all
    )
    layer = parallel_terms.LayerSeconds(
        compute=compute,
        memory_bound=terms.layer_memory_bound_seconds(shape, x, rates),
        tensor_parallel=parallel_terms.exposed_tensor_parallel(
            x,
            parallel_terms.tensor_parallel_layer_seconds(shape, x, rates),
            compute,
            tp_overlap,
        ),
        context_parallel=parallel_terms.context_parallel_layer_seconds(shape, x, rates),
        expert_parallel=exposed_all_to_all,
    )
    output = terms.output_layer(shape, x, rates)
    stages = parallel_terms.pipeline_stages(shape, x, layer, output)
    held = terms.held_params(shape, x, stages.layers_per_stage)
    m, busy = x.micro_batches, stages.busiest_layers
    breakdown = {
        "compute": m * stages.compute_seconds,
        "memory_bound": m * stages.memory_bound_seconds,
        "tensor_parallel": m * busy * layer.tensor_parallel,
        "context_parallel": m * busy * layer.context_parallel,
        "pipeline_bubble": parallel_terms.pipeline_bubble_seconds(x, stages.seconds),
        "pipeline_transfers": m * parallel_terms.pipeline_transfer_seconds(shape, x, rates),
        "expert_parallel": m * busy * layer.expert_parallel,
        "data_parallel": parallel_terms.data_parallel_seconds(x, rates, held, stages.seconds),
        "optimizer": terms.optimizer_seconds(x, rates, held),
    }
    seconds = sum(breakdown.values())
    model_flops, hardware_flops = terms.step_flops(shape, x, gemms, output, framework.selective_matmuls)
    states = terms.model_states_bytes(x, held, precision, optimizer)
    activations = terms.activation_bytes(
        shape,
        x,
        stages.first_stage_layers,
        precision,
        selective_kept=framework.selective_kept,
        logit_bytes=framework.logit_bytes,
    )
    memory = states + activations
    at_peak = seconds * (x.model_parallel * x.data_parallel) * machine.peak_flops_per_second
    return {
        "seconds": seconds,
        **breakdown,
        "model_flops": model_flops * np.ones_like(seconds),
        "hardware_flops": hardware_flops,
        "mfu": model_flops / at_peak,
        "hfu": hardware_flops / at_peak,
        "memory_bytes": memory,
        "model_states_bytes": states,
        "activations_bytes": activations,
        "fits": memory <= machine.usable_memory_bytes,
        "expert_overlap": overlapped,
    }


def _rates(machine: Machine, calibration: Calibration) -> terms.Rates:
    peak = machine.peak_flops_per_second
    link = machine.link_efficiency or calibration.link_efficiency
    memory = machine.memory_efficiency or calibration.memory_efficiency
    return terms.Rates(
        peak_flops_per_second=peak,
        attention_flops_per_second=machine.attention_peak_flops_per_second or peak,
        matmul_efficiency=machine.matmul_efficiency or calibration.matmul_efficiency,
        kernel_seconds=calibration.kernel_seconds,
        memory_bytes_per_second=machine.memory_bandwidth_bytes_per_second * memory,
        accelerators_per_node=float(machine.accelerators_per_node),
        scale_up_bytes_per_second=machine.scale_up_bytes_per_second * link,
        scale_out_bytes_per_second=machine.scale_out_bytes_per_second * link,
        overlap=calibration.overlap,
        attention_efficiency=machine.attention_efficiency or calibration.attention_efficiency,
    )


# --- layout search ------------------------------------------------------------------------------------------

# Searches remembered per process (least recently used out): a search is a pure function of its arguments
# and the costliest part of a plan, and orchestrators send the same run again and again (retries, a plan and
# then its estimate, one run planned for several budgets), and a comparison of 20 offers that allocates a
# budget on each makes about 2 200 (bench/RESULTS.md, issue 51): 4 096 keep it whole for its next asking. A
# Search is about 5 KB: some 20 MB a process at most.
SEARCHES_REMEMBERED = 4096


@dataclass(frozen=True)
class Search:
    """The best layout for a run, a few alternatives, and how many layouts were looked at."""

    best: Step
    alternatives: tuple[Step, ...]
    evaluated: int
    fitting: int


def search(
    shape: ModelShape,
    machine: Machine,
    accelerators: int,
    *,
    global_batch: int,
    fixed: dict[str, Any] | None = None,
    precision: str = "bf16",
    optimizer: str = "adam",
    calibration: Calibration = CALIBRATION,
    framework: Framework = GENERIC,
) -> Search:
    """Every layout of `accelerators` for the fields not in `fixed` that `framework` can run, the ones that
    do not fit memory dropped, ranked by step time (ties: less memory).

    Tensor parallelism runs over the divisors of a node that split the heads (`layout_search.splits_heads`:
    K/V heads fewer than the degree are replicated), the pipeline over the divisors of what is left up to
    the layer count, data parallelism takes the rest; then the
    micro-batch, interleaving, recomputation and ZeRO stage. `global_batch` (sequences) is kept when it is
    fixed; otherwise it is rounded up to a multiple of the data-parallel degree. Sequence parallelism and
    FlashAttention are on unless fixed off; context parallelism is 1 unless fixed. Raises InvalidInput on
    `layout` when nothing fits, saying what comes closest.
    """
    return _search(
        shape,
        machine,
        v.whole("accelerators", accelerators),
        global_batch=global_batch,
        fixed_fields=tuple(sorted((fixed or {}).items())),  # hashable, in one order
        precision=precision,
        optimizer=optimizer,
        calibration=calibration,
        framework=framework,
    )


@functools.lru_cache(maxsize=SEARCHES_REMEMBERED)
def _search(
    shape: ModelShape,
    machine: Machine,
    count: int,
    *,
    global_batch: int,
    fixed_fields: tuple[tuple[str, Any], ...],
    precision: str,
    optimizer: str,
    calibration: Calibration,
    framework: Framework,
) -> Search:
    """`search`, remembered: its result is shared by every caller that asks the same, and never changed."""
    fixed = dict(fixed_fields)
    check_fixed_fields(shape, fixed, count, global_batch)
    columns = layout_search.candidates(
        shape, machine.accelerators_per_node, count, fixed, global_batch, framework=framework
    )
    result = layout_search.in_blocks(
        functools.partial(
            evaluate,
            shape,
            machine,
            precision=precision,
            optimizer=optimizer,
            calibration=calibration,
            framework=framework,
        ),
        columns,
    )
    columns["expert_overlap"] = result["expert_overlap"]  # as chosen where the request left it open
    fitting = int(np.count_nonzero(result["fits"]))
    if fitting == 0:
        if len(columns["tensor_parallel"]) == 1 and result["memory_bytes"][0] <= machine.memory_bytes * (
            1 + GIVEN_LAYOUT_MEMORY_TOLERANCE
        ):
            # A layout given whole, a little over memory by the model's count: answered, not fitting.
            return Search(
                best=_step_at(result, 0, _layout_at(columns, 0)), alternatives=(), evaluated=1, fitting=0
            )
        raise _nothing_fits(count, machine, columns, result)
    best, alternatives = layout_search.ranked(columns, result)
    return Search(
        best=_step_at(result, best, _layout_at(columns, best)),
        alternatives=tuple(_step_at(result, i, _layout_at(columns, i)) for i in alternatives),
        evaluated=len(columns["tensor_parallel"]),
        fitting=fitting,
    )


def _nothing_fits(
    count: int, machine: Machine, columns: dict[str, Any], result: dict[str, Array]
) -> v.InvalidInput:
    """The refusal of a search where no layout fits, saying which comes closest and what would fit."""
    closest = int(np.argmin(result["memory_bytes"]))
    layout = _layout_at(columns, closest)
    return v.InvalidInput(
        "layout",
        f"no layout of {count} accelerators fits {_usable_text(machine)}: the least memory "
        f"needed is {result['memory_bytes'][closest] / 1e9:.1f} GB ({_describe(layout)}); "
        + _what_would_fit(
            result["model_states_bytes"][closest], result["activations_bytes"][closest], machine
        ),
    )


def _usable_text(machine: Machine) -> str:
    whole = f"{machine.memory_bytes / 1e9:.0f} GB"
    if not machine.memory_headroom:
        return whole
    return (
        f"{machine.usable_memory_bytes / 1e9:.1f} GB ({whole} less a {machine.memory_headroom:.0%} headroom)"
    )


def check_fixed_fields(
    shape: ModelShape, fixed: dict[str, Any], accelerators: int, global_batch: int
) -> None:
    """Refuse fixed layout fields no layout of `accelerators` can have, naming the field and what would do:
    the rules of `check_layout`, applied to the fields given."""
    check_model_fields(shape, fixed)
    degrees = ("tensor_parallel", "pipeline_parallel", "data_parallel", "context_parallel")
    ep = fixed.get("expert_parallel", 1)
    if "data_parallel" in fixed and fixed["data_parallel"] % ep:
        raise v.InvalidInput(
            "layout.expert_parallel",
            f"must divide data_parallel ({fixed['data_parallel']}): experts are spread over data-parallel "
            f"ranks, got {ep}",
        )
    t = fixed.get("tensor_parallel")
    if t is not None and not layout_search.splits_heads(shape, t):
        splitting = [
            k for k in layout_search.divisors(shape.heads, 4096) if layout_search.splits_heads(shape, k)
        ]
        shown = ", ".join(str(k) for k in splitting[:12]) + (", …" if len(splitting) > 12 else "")
        raise v.InvalidInput(
            "layout.tensor_parallel",
            f"must divide the heads ({shape.heads}) and divide, or be a multiple of, the key/value heads "
            f"({shape.key_value_heads}, replicated when fewer); {shown} would, got {t}",
        )
    p = fixed.get("pipeline_parallel")
    if p is not None and p > shape.layers:
        raise v.InvalidInput(
            "layout.pipeline_parallel", f"cannot exceed the layers ({shape.layers}), got {p}"
        )
    product = math.prod(fixed.get(name, 1) for name in degrees)
    given = [name for name in degrees if name in fixed]
    if accelerators % product or (len(given) == len(degrees) and product != accelerators):
        raise v.InvalidInput(
            f"layout.{given[0]}" if len(given) == 1 else "layout",
            f"{' · '.join(given)} = {product} must {'equal' if len(given) == len(degrees) else 'divide'} "
            f"the accelerators ({accelerators})",
        )
    c = fixed.get("context_parallel", 1)
    if shape.sequence_length % c:
        raise v.InvalidInput(
            "layout.context_parallel",
            f"must divide the sequence length ({shape.sequence_length}), got {c}",
        )
    if "recomputation" in fixed and fixed["recomputation"] not in RECOMPUTATION_MODES:
        raise v.InvalidInput("layout.recomputation", f"must be one of {', '.join(RECOMPUTATION_MODES)}")
    if "zero_stage" in fixed and fixed["zero_stage"] not in ZERO_STAGES:
        raise v.InvalidInput("layout.zero_stage", "must be 0, 1, 2 or 3")
    d = fixed.get("data_parallel")
    batch = fixed.get("global_batch")
    if d is not None and batch is not None and batch % d:
        raise v.InvalidInput("layout.global_batch", f"must be a multiple of data_parallel ({d}), got {batch}")
    b = fixed.get("micro_batch")
    if b is not None and d is not None:
        replica = (batch if batch is not None else -(-global_batch // d) * d) // d
        if replica % b:
            raise v.InvalidInput(
                "layout.micro_batch",
                f"must divide the batch of a replica ({replica} sequences); {_divisors_text(replica)} "
                f"would, got {b}",
            )
    vi = fixed.get("interleave")
    if vi is not None and p is not None and vi > -(-shape.layers // p):
        raise v.InvalidInput(
            "layout.interleave",
            f"must not exceed the layers per stage ({-(-shape.layers // p)} with {p} stages), got {vi}",
        )


def check_model_fields(shape: ModelShape, fixed: dict[str, Any]) -> None:
    """Refuse fixed layout fields the model cannot have at any accelerator count, naming the field: unknown
    ones, and expert parallelism that a dense model does not have or that does not divide the experts."""
    unknown = set(fixed) - set(LAYOUT_FIELDS)
    if unknown:
        raise v.InvalidInput("layout", f"unknown fields: {', '.join(sorted(unknown))}")
    for name in WHOLE_LAYOUT_FIELDS:
        if name in fixed:
            v.whole(f"layout.{name}", fixed[name])
    ep = fixed.get("expert_parallel", 1)
    if fixed.get("expert_overlap") and not shape.mixture_of_experts:
        raise v.InvalidInput("layout.expert_overlap", "needs a mixture-of-experts shape (experts)")
    if ep > 1 and not shape.mixture_of_experts:
        raise v.InvalidInput(
            "layout.expert_parallel", f"needs a mixture-of-experts shape (experts), got {ep}"
        )
    if shape.experts is not None and shape.experts % ep:
        raise v.InvalidInput(
            "layout.expert_parallel",
            f"must divide the experts ({shape.experts}); {_divisors_text(shape.experts)} would, got {ep}",
        )


def _layout_at(columns: dict[str, Any], i: int) -> Layout:
    values = {name: columns[name][i] for name in LAYOUT_FIELDS if name != "recomputation"}
    return Layout(
        tensor_parallel=int(values["tensor_parallel"]),
        pipeline_parallel=int(values["pipeline_parallel"]),
        data_parallel=int(values["data_parallel"]),
        micro_batch=int(values["micro_batch"]),
        global_batch=int(values["global_batch"]),
        context_parallel=int(values["context_parallel"]),
        interleave=int(values["interleave"]),
        sequence_parallel=bool(values["sequence_parallel"]),
        recomputation=RECOMPUTATION_MODES[int(columns["recomputation"][i])],
        zero_stage=int(values["zero_stage"]),
        flash_attention=bool(values["flash_attention"]),
        expert_parallel=int(values["expert_parallel"]),
        expert_overlap=bool(values["expert_overlap"]),
        tensor_parallel_overlap=bool(values["tensor_parallel_overlap"]),
    )


def _describe(layout: Layout) -> str:
    return (
        f"tensor {layout.tensor_parallel}, pipeline {layout.pipeline_parallel}, data {layout.data_parallel}, "
        f"{f'expert {layout.expert_parallel}, ' if layout.expert_parallel > 1 else ''}"
        f"micro-batch {layout.micro_batch}, {layout.recomputation} recomputation, ZeRO {layout.zero_stage}"
    )


def _what_would_fit(states: float, activations: float, machine: Machine) -> str:
    if states >= machine.usable_memory_bytes:
        return (
            f"the model states alone take {states / 1e9:.1f} GB: more accelerators (for more pipeline stages "
            "or ZeRO sharding) or accelerators with more memory would fit"
        )
    return (
        f"activations take {activations / 1e9:.1f} GB: a shorter sequence, more accelerators or accelerators "
        "with more memory would fit"
    )
