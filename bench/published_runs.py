"""Published training runs with measured step times: what the cluster model is calibrated and checked on.

`CALIBRATION_RUNS` are the runs of ../shared/reference/distributed-training.md, which the constants of
`service.core.performance.CALIBRATION` are fitted on (`python -m bench.calibrate_cluster`). `HELD_OUT_RUNS`
are published runs the fit never sees: what a user gets is the error on those.

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
from dataclasses import dataclass

from service.core.performance import Layout, Machine
from service.core.shape import ModelShape

SELENE = Machine(
    peak_flops_per_second=312e12,
    memory_bytes=80e9,
    memory_bandwidth_bytes_per_second=2.039e12,
    accelerators_per_node=8,
    scale_up_bytes_per_second=300e9,
    scale_out_bytes_per_second=25e9,
    slug="a100-80gb",
)
LLAMA3_CLUSTER = Machine(
    peak_flops_per_second=989e12,
    memory_bytes=80e9,
    memory_bandwidth_bytes_per_second=3.35e12,
    accelerators_per_node=8,
    scale_up_bytes_per_second=450e9,
    scale_out_bytes_per_second=50e9,
    slug="h100-sxm",
)


@dataclass(frozen=True)
class Run:
    name: str
    shape: ModelShape
    machine: Machine
    layout: Layout
    seconds: float  # measured step time
    source: str


def megatron_seconds(layers: int, d: int, batch: int, gpus: int, tflops: float) -> float:
    """Narayanan et al. 2021 eq. 3: FLOPs per iteration with full recomputation, at the reported TFLOP/s."""
    V, s = 51_200, 2048
    flops = 96 * batch * s * layers * d**2 * (1 + s / (6 * d) + V / (16 * layers * d))
    return flops / (tflops * 1e12 * gpus)


def _megatron(  # noqa: PLR0917 -- a row of Narayanan et al. 2021, Table 1, in its column order
    params: str, layers: int, d: int, heads: int, gpus: int, t: int, p: int, batch: int, tflops: float
) -> Run:
    return Run(
        name=f"Megatron-LM {params}",
        shape=ModelShape(layers=layers, d_model=d, heads=heads, sequence_length=2048, vocabulary=51_200),
        machine=SELENE,
        layout=Layout(
            tensor_parallel=t,
            pipeline_parallel=p,
            data_parallel=gpus // (t * p),
            micro_batch=1,
            global_batch=batch,
            sequence_parallel=False,
            recomputation="full",
            zero_stage=0,
            flash_attention=False,
        ),
        seconds=megatron_seconds(layers, d, batch, gpus, tflops),
        source=f"Narayanan et al. 2021, Table 1 ({tflops:g} TFLOP/s per GPU on {gpus} A100)",
    )


MODES = {"full": "full recomputation", "selective": "sequence-parallel + selective"}


def _korthikanti(  # noqa: PLR0917 -- a row of Korthikanti et al. 2022, Table 5, in its column order
    params: str,
    layers: int,
    d: int,
    heads: int,
    gpus: int,
    p: int,
    batch: int,
    micro: int,
    v: int,
    full: float,
    present: float,
) -> list[Run]:
    shape = ModelShape(layers=layers, d_model=d, heads=heads, sequence_length=2048, vocabulary=51_200)
    runs = []
    for mode, seconds in (("full", full), ("selective", present)):
        runs.append(
            Run(
                name=f"Korthikanti {params} {MODES[mode]}",
                shape=shape,
                machine=SELENE,
                layout=Layout(
                    tensor_parallel=8,
                    pipeline_parallel=p,
                    data_parallel=gpus // (8 * p),
                    micro_batch=micro,
                    global_batch=batch,
                    interleave=v,
                    sequence_parallel=mode == "selective",
                    recomputation=mode,
                    zero_stage=0,
                    flash_attention=False,
                ),
                seconds=seconds,
                source=f"Korthikanti et al. 2022, Table 5 ({seconds} s per iteration)",
            )
        )
    return runs


# Llama 3 405B (Llama 3 paper, Table 3), as a request's `shape` gives it.
LLAMA3_405B_FIELDS = {
    "layers": 126,
    "d_model": 16_384,
    "heads": 128,
    "kv_heads": 8,
    "ffn": 53_248,
    "activation": "swiglu",
    "vocabulary": 128_256,
    "sequence_length": 8192,
}
LLAMA3_405B = ModelShape(**LLAMA3_405B_FIELDS)  # type: ignore[arg-type]


def _llama3(gpus: int, cp: int, dp: int, sequence: int, tflops: float) -> Run:
    shape = dataclasses.replace(LLAMA3_405B, sequence_length=sequence)
    batch = 16 * 2**20 // sequence  # 16M tokens a step
    layout = Layout(
        tensor_parallel=8,
        pipeline_parallel=16,
        data_parallel=dp,
        context_parallel=cp,
        micro_batch=1,
        global_batch=batch,
        interleave=8,
        sequence_parallel=True,
        recomputation="none",
        zero_stage=1,
        flash_attention=True,
    )
    per_token = (
        6 * (shape.layers * shape.layer_params + shape.embedding_params / 2)
        + 12 * shape.layers * shape.d_model * sequence
    )
    seconds = per_token * batch * sequence / (tflops * 1e12 * gpus)
    return Run(
        name=f"Llama 3 405B, {gpus} H100, context {sequence}",
        shape=shape,
        machine=LLAMA3_CLUSTER,
        layout=layout,
        seconds=seconds,
        source=f"Dubey et al. 2024, Table 4 ({tflops:g} TFLOP/s per GPU, TP 8, CP {cp}, PP 16, DP {dp})",
    )


CALIBRATION_RUNS: tuple[Run, ...] = (
    _megatron("1.7B", 24, 2304, 24, 32, 1, 1, 512, 137),
    _megatron("7.5B", 36, 4096, 32, 128, 4, 1, 512, 142),
    _megatron("18.4B", 40, 6144, 48, 256, 8, 1, 1024, 135),
    _megatron("39.1B", 48, 8192, 64, 512, 8, 2, 1536, 138),
    _megatron("145.6B", 80, 12288, 96, 1536, 8, 8, 2304, 148),
    _megatron("310.1B", 96, 16384, 128, 1920, 8, 16, 2160, 155),
    _megatron("529.6B", 105, 20480, 128, 2520, 8, 35, 2520, 163),
    _megatron("1008B", 128, 25600, 160, 3072, 8, 64, 3072, 163),
    *_korthikanti("22B", 48, 6144, 64, 8, 1, 4, 4, 1, 1.42, 1.10),
    *_korthikanti("175B", 96, 12288, 96, 64, 8, 64, 1, 3, 18.13, 13.75),
    *_korthikanti("530B", 105, 20480, 128, 280, 35, 280, 1, 3, 49.05, 37.83),
    *_korthikanti("1T", 128, 25600, 160, 512, 64, 512, 1, 1, 94.42, 71.49),
    _llama3(8192, 1, 64, 8192, 430),
)

# Runs the calibration never sees: the two rows of Narayanan et al. 2021 Table 1 the reference leaves out,
# and Llama 3's two larger configurations (Table 4).
HELD_OUT_RUNS: tuple[Run, ...] = (
    _megatron("3.6B", 30, 3072, 32, 64, 2, 1, 512, 138),
    _megatron("76.1B", 60, 10240, 80, 1024, 8, 4, 1792, 140),
    _llama3(16_384, 1, 128, 8192, 400),
    _llama3(16_384, 16, 8, 131_072, 380),
)
