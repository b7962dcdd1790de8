"""Published training runs with measured step times: what the cluster model is calibrated and checked on.

The runs are data, in `bench/cluster_runs.json`, the one file that lists every run: each with its
organisation, source, cluster, shape, layout as published and what was measured. This module reads it into
the core's types. `CALIBRATION_RUNS` (role "calibration") are the runs of
../shared/reference/distributed-training.md, which the constants of `service.core.performance.CALIBRATION`
are fitted on (`python -m bench.calibrate_cluster`). `HELD_OUT_RUNS` ("held-out") are published runs the fit
never sees: what a user gets is the error on those.

Sources:
* Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
  Table 1 (Selene, DGX A100 80GB; s = 2048, V = 51 200, full recomputation). The table reports TFLOP/s per
  GPU by §5.1's accounting (eq. 3), from which the step time follows. The micro-batch is not in the table:
  1 is assumed (Megatron-LM's published GPT-3 scripts use 1), with the non-interleaved schedule.
* Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", Table 5 (same
  cluster): seconds per iteration with full recomputation, and with sequence parallelism + selective
  recomputation. Micro-batch and interleaving as in their §6 set-up (Calculon's validation configurations
  of the same runs agree: 22B micro-batch 4; 175B and 530B interleaved 3 ways; micro-batch 1 otherwise).
* Dubey et al. 2024, "The Llama 3 Herd of Models", Table 4 and §3.3: 405B on H100 80GB (8 per node,
  NVLink 4, 400 Gb/s RoCE per GPU), 16M tokens a step, TFLOP/s per GPU by the PaLM accounting (6N + 12·L·h·s
  per token), no activation checkpointing, FlashAttention. Interleaved 8 ways: §3.3.2 gives the first stage's
  first chunk only the embedding and the last stage's last chunk only the output layer, so a chunk is one
  layer (126 layers + 2 = 16 stages x 8 chunks).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.core import engine
from service.core.performance import Efficiency, Layout, Machine
from service.core.shape import ModelShape
from service.data.catalog import builtin_hardware

RUNS_FILE = Path(__file__).with_name("cluster_runs.json")


@dataclass(frozen=True)
class Run:
    name: str
    shape: ModelShape
    machine: Machine
    layout: Layout
    seconds: float  # measured step time
    source: str
    organisation: str
    hardware: str  # the built-in profile the cluster is
    cluster: str
    framework: str
    precision: str = "bf16"


# --- What a published figure says of a step's time ----------------------------------------------------------
# A source reports a step time, GPU-hours per trillion tokens, or model TFLOP/s per accelerator, which are
# FLOPs per step by the source's own count (its `accounting`) over the step time.


def narayanan_flops_per_step(shape: ModelShape, global_batch: int) -> float:
    """Narayanan et al. 2021 eq. 3: FLOPs per iteration with full recomputation."""
    layers, d, s, vocabulary = shape.layers, shape.d_model, shape.sequence_length, shape.vocabulary
    assert vocabulary is not None, "eq. 3 counts the output layer"
    return 96 * global_batch * s * layers * d**2 * (1 + s / (6 * d) + vocabulary / (16 * layers * d))


def palm_flops_per_step(shape: ModelShape, global_batch: int) -> float:
    """The PaLM accounting Llama 3 reports in (Chowdhery et al. 2022, appendix B): 6N + 12·L·h·s FLOPs a
    token, N the non-embedding parameters and half the embedding ones (the output layer)."""
    sequence = shape.sequence_length
    per_token = (
        6 * (shape.layers * shape.layer_params + shape.embedding_params / 2)
        + 12 * shape.layers * shape.d_model * sequence
    )
    return per_token * global_batch * sequence


def megatron_flops_per_step(shape: ModelShape, batch: int) -> float:
    """Megatron-LM's count (training.py, 2024) for a grouped-query SwiGLU mixture of experts."""
    L, h, s, a = shape.layers, shape.d_model, shape.sequence_length, shape.heads
    attention = 1 + shape.key_value_heads / a + s / h
    mlp = shape.ffn_width / h * (shape.experts_per_token or 1) * (1.5 if shape.activation == "swiglu" else 1)
    return 12 * batch * s * L * h * h * (attention + mlp + (shape.vocabulary or 0) / (2 * L * h))


def maxtext_2023_flops_per_step(shape: ModelShape, batch: int) -> float:
    """MaxText's count before its causal fix (train.py, October 2023): 6N + 12·L·H·d_h·s a token, N every
    parameter (embedding included), the attention scores over the full s x s matrix."""
    s = shape.sequence_length
    per_token = 6 * shape.params + 12 * shape.layers * shape.heads * shape.head_width * s
    return per_token * batch * s


def maxtext_causal_flops_per_step(shape: ModelShape, batch: int) -> float:
    """MaxText's causal count (maxtext_utils.py, 2024): 6N + 6·L·H·d_h·s a token, half the attention
    matrix."""
    s = shape.sequence_length
    per_token = 6 * shape.params + 6 * shape.layers * shape.heads * shape.head_width * s
    return per_token * batch * s


def maxtext_6n_flops_per_step(shape: ModelShape, batch: int) -> float:
    """MaxText's first count (train.py, March-April 2023): 6N a token, no attention term."""
    return 6 * shape.params * batch * shape.sequence_length


ACCOUNTINGS = {
    "narayanan-2021-eq3": narayanan_flops_per_step,
    "palm": palm_flops_per_step,
    "megatron-moe-2024": megatron_flops_per_step,
    "maxtext-2023": maxtext_2023_flops_per_step,
    "maxtext-causal": maxtext_causal_flops_per_step,
    "maxtext-6n-2023": maxtext_6n_flops_per_step,
}


def published_step_seconds(
    measured: dict[str, Any], shape: ModelShape, global_batch: int, accelerators: int
) -> float:
    """The step time a run's `measured` figure gives."""
    tokens_per_step = global_batch * shape.sequence_length
    if "step_seconds" in measured:
        return float(measured["step_seconds"])
    if "tokens_per_second_per_accelerator" in measured:
        return tokens_per_step / (measured["tokens_per_second_per_accelerator"] * accelerators)
    if "gpu_hours_per_trillion_tokens" in measured:
        return measured["gpu_hours_per_trillion_tokens"] * 3600 / accelerators * tokens_per_step / 1e12
    flops = ACCOUNTINGS[measured["accounting"]](shape, global_batch)
    return flops / (measured["model_tflops_per_accelerator"] * 1e12 * accelerators)


# --- The data file ------------------------------------------------------------------------------------------


def _fields(entry: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in entry.items() if name != "source"}


_DATA = json.loads(RUNS_FILE.read_text())
# A cluster: a built-in hardware profile as installed (its network in the catalog's units).
CLUSTERS: dict[str, dict[str, Any]] = _DATA["clusters"]
SHAPE_FIELDS = {name: _fields(entry) for name, entry in _DATA["shapes"].items()}
SHAPES = {name: ModelShape(**fields) for name, fields in SHAPE_FIELDS.items()}
_CATALOG = {spec.slug: spec for spec in builtin_hardware()}
_GIGA = 1e9


def hardware_request(cluster: str) -> dict[str, Any]:
    """The cluster as a request's inline `hardware` gives it: what a user copies from GET /v1/hardware/{slug}
    and sets the network of."""
    entry = CLUSTERS[cluster]
    spec = _CATALOG[entry["hardware"]]
    # A cluster may say its parts differ from the profile's (Meta's Grand Teton H100s: 96 GB at 2.4 TB/s).
    memory = entry.get("memory_gb", spec.memory_bytes / _GIGA) * _GIGA
    bandwidth = (
        entry.get("memory_bandwidth_tb_per_second", spec.memory_bandwidth_bytes_per_second / 1e12) * 1e12
    )
    # And that its peaks are below the profile's (Grand Teton's H100s at 500 W: between the SXM's and NVL's).
    scale = entry.get("peak_flops_scale", 1.0)
    request = {
        "name": f"{spec.name} ({cluster})",
        "peak_flops": {precision: scale * peak for precision, peak in spec.peak_flops.items()},
        "memory_bytes": memory,
        "memory_bandwidth_bytes_per_second": bandwidth,
        "accelerators_per_node": entry["accelerators_per_node"],
        "scale_up_bandwidth_bytes_per_second": entry["scale_up_gb_per_second_per_direction"] * _GIGA,
        "efficiency": spec.efficiency,
    }
    # Left out where nobody publishes it (TPU v4 between slices): a run inside one slice does not use it.
    if (scale_out := entry["scale_out_gb_per_second_per_direction"]) is not None:
        request["scale_out_bandwidth_bytes_per_second"] = scale_out * _GIGA
    return request


def machine(cluster: str, precision: str = "bf16", framework: str | None = None) -> Machine:
    """The cluster as the core's step-time model reads it, training at `precision` in `framework`: what the
    engine makes of the same request (`engine.machine_of`)."""
    fields = hardware_request(cluster)
    hardware = engine.Hardware(**{**fields, "efficiency": Efficiency(**fields["efficiency"])})
    on = engine.Cluster(hardware=hardware, precision=precision, framework=framework)
    return engine.machine_of(on)[0]


def shape_of(entry: dict[str, Any]) -> ModelShape:
    """A run's shape: one the file names (at the run's own sequence length, if it gives one), or its own."""
    if not isinstance(entry["shape"], str):
        return ModelShape(**entry["shape"])
    shape = SHAPES[entry["shape"]]
    if "sequence_length" in entry:
        return dataclasses.replace(shape, sequence_length=entry["sequence_length"])
    return shape


def run_of(entry: dict[str, Any]) -> Run:
    shape, layout = shape_of(entry), Layout(**entry["layout"])
    return Run(
        name=entry["name"],
        shape=shape,
        machine=machine(entry["cluster"], entry.get("precision", "bf16"), entry["framework"]),
        layout=layout,
        seconds=published_step_seconds(entry["measured"], shape, layout.global_batch, layout.accelerators),
        source=entry["source"],
        organisation=entry["organisation"],
        hardware=CLUSTERS[entry["cluster"]]["hardware"],
        cluster=entry["cluster"],
        framework=entry["framework"],
        precision=entry.get("precision", "bf16"),
    )


CALIBRATION_RUNS = tuple(run_of(entry) for entry in _DATA["runs"] if entry["role"] == "calibration")
HELD_OUT_RUNS = tuple(run_of(entry) for entry in _DATA["runs"] if entry["role"] == "held-out")
# Every run whose step time and whole layout are published, of every organisation (the judge's corpus).
STEP_ENTRIES = tuple(
    entry for entry in _DATA["runs"] if entry["role"] in ("calibration", "held-out", "check")
)
WHOLE_RUN_ENTRIES = tuple(entry for entry in _DATA["runs"] if entry["role"] == "whole-run")
# The mixture-of-experts runs ("moe-check"), whose layouts are partly searched, are bench/moe_runs.py's.
MOE_ENTRIES = tuple(entry for entry in _DATA["runs"] if entry["role"] == "moe-check")

SELENE = machine("selene")
LLAMA3_CLUSTER = machine("llama3")
# Llama 3 405B (Llama 3 paper, Table 3), as a request's `shape` gives it.
LLAMA3_405B_FIELDS = SHAPE_FIELDS["llama3-405b"]
LLAMA3_405B = SHAPES["llama3-405b"]
