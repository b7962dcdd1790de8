"""Published mixture-of-experts runs, predicted by the cluster model (issue 22): `python -m bench.moe_runs`.

Nothing here is fitted: the calibration is the dense one (`service.core.performance.CALIBRATION`, fitted on
the dense runs), and the runs below only check it. The runs are data in bench/cluster_runs.json (role
"moe-check"), with the layout fields each source states; the rest are searched.

Sources:
* DeepSeek-V3: DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", arXiv:2412.19437. Shape: §4.2 (61 layers of
  width 7168, 128 heads of 128 + 64 rotary channels, KV latent 512, query latent 1536, the first 3 layers
  dense with an MLP of 18 432, then 1 shared and 256 routed experts of 2048, 8 per token, one multi-token
  prediction module, vocabulary 129 280 (§4.1... 128K BPE, 129 280 in the released config), 4K context).
  Batch: 15 360 sequences of 4 096 after the first 469B tokens (§4.2). Cluster: 2 048 H800, 8 per node on
  NVLink, InfiniBand between nodes (§3.1; 160 GB/s NVLink and 50 GB/s IB achieved, §3.2.2). Layout: 16-way
  pipeline (DualPipe), 64-way expert parallelism over 8 nodes, ZeRO-1 data parallelism, no tensor
  parallelism (§3.2); FP8 GEMMs (§3.3); the all-to-all overlapped with compute, 20 of 132 SMs for it.
  Measured: "180K H800 GPU hours" per trillion tokens, "3.7 days on our cluster" (§1, Table 1).
  Memory: the report gives no per-GPU figure; it says the layout trains without tensor parallelism on the
  H800's 80 GB thanks to recomputing RMSNorm and MLA up-projections, FP8 activation caching and the EMA in
  CPU memory (§3.2.3, §3.3). Its KV cache (Zhao et al. 2025, "Insights into DeepSeek-V3", Table 1):
  70.272 KB per token.
* DeepSeek-V2: DeepSeek-AI 2024, "DeepSeek-V2", arXiv:2405.04434. Shape: §3.1.2 (60 layers of width 5120,
  128 heads of 128 + 64 rotary channels, KV latent 512, query latent 1536, the first layer dense (MLP 12 288),
  then 2 shared and 160 routed experts of 1536, 6 per token, vocabulary 100K (102 400 in the released
  config), 4K context), batch 9 216 sequences after the first 225B tokens (§3.1.3). Layout (§3.1.4): 16-way
  zero-bubble pipeline, 8-way expert parallelism, ZeRO-1 data parallelism, no tensor parallelism, BF16, on
  H800s; the GPU count is not given (1 024 and 2 048 are shown). Measured: "172.8K GPU hours" per trillion
  tokens (§3.1.4), against 300.6K for the dense DeepSeek 67B on the same cluster.
* Mixtral 8x7B: Jiang et al. 2024, "Mixtral of Experts", arXiv:2401.04088, Table 1 (32 layers of width
  4096, 32 heads with 8 KV heads, 8 experts of MLP width 14 336, 2 per token, vocabulary 32 000); trained by
  Megatron-Core v0.9 at "468 TFLOPS" per GPU in bf16, its reference mapping on 64 H100 (8 per node, NVLink 4,
  8x 400 Gb/s InfiniBand): TP 1, EP 8, PP 4, micro-batch 1, global batch 256, sequence 4 096, dropless
  all-to-all dispatcher (NVIDIA/Megatron-LM, megatron/core/transformer/moe/README.md, "Reference Best Parallel
  Mapping"; its "VP" column is left to the search). The TFLOP/s are by Megatron's count
  (megatron/training/training.py, num_floating_point_operations, 2024): 12·B·s·L·h²·((1 + g/a + s/h) +
  (ffn/h)·top-k·3/2 + V/(2·L·h)) per step.
* H800: an H100 SXM (989.4 TFLOP/s bf16, 1 978.9 fp8, 80 GB, 3.35 TB/s) with NVLink cut to 400 GB/s
  bidirectional, 200 GB/s a direction (NVIDIA H800 datasheet); one 400 Gb/s NIC per GPU, 50 GB/s.
* FLOPs per token as DeepSeek count them (Zhao et al. 2025, Table 2, 4K context): DeepSeek-V2 155 GFLOPs,
  DeepSeek-V3 250 GFLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.published_runs import MOE_ENTRIES, SHAPES, machine, published_step_seconds, shape_of
from service.core import performance
from service.core.frameworks import FRAMEWORKS
from service.core.performance import Machine
from service.core.shape import ModelShape

H800 = machine("deepseek-h800")
H800_FP8 = machine("deepseek-h800", "fp8")
H100 = machine("megatron-h100")
DEEPSEEK_V3 = SHAPES["deepseek-v3"]
DEEPSEEK_V2 = SHAPES["deepseek-v2"]
MIXTRAL_8X7B = SHAPES["mixtral-8x7b"]


@dataclass(frozen=True)
class MoERun:
    name: str
    shape: ModelShape
    machine: Machine
    accelerators: int
    global_batch: int
    fixed: dict[str, Any]  # the layout fields the source states; the rest are searched
    precision: str
    framework: str
    published_step_seconds: float  # from the published figure, as `published` says
    published: str
    source: str

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.shape.sequence_length


def _run(entry: dict[str, Any]) -> MoERun:
    shape, batch, accelerators = shape_of(entry), entry["global_batch"], entry["accelerators"]
    return MoERun(
        entry["name"],
        shape,
        machine(entry["cluster"], entry["precision"]),
        accelerators,
        batch,
        entry["fixed_layout"],
        entry["precision"],
        entry["framework"],
        published_step_seconds(entry["measured"], shape, batch, accelerators),
        entry["published"],
        entry["source"],
    )


RUNS = tuple(_run(entry) for entry in MOE_ENTRIES)


def predict(run: MoERun) -> performance.Search:
    return performance.search(
        run.shape,
        run.machine,
        run.accelerators,
        global_batch=run.global_batch,
        fixed=run.fixed,
        precision=run.precision,
        framework=FRAMEWORKS[run.framework],
    )


def flops_per_token_as_deepseek_count(shape: ModelShape) -> float:
    """Zhao et al. 2025 count 6·N_active (without the input embedding and the prediction module) plus the
    causal attention scores, 3·L·s·a·(d_qk + d_v) per token: half the full matrix."""
    active = shape.non_embedding_active_params + shape.embedding_params / 2
    return 6 * active + 3 * shape.layers * shape.sequence_length * shape.heads * (
        shape.query_key_width + shape.head_width
    )


def main() -> None:
    print(
        "| run | published | layout (searched where the source is silent) | step s: published | predicted | "
        "error | GPU-h / 1T tokens: predicted | memory GB | MFU |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for run in RUNS:
        best = predict(run).best
        layout = best.layout
        gpu_hours = 1e12 / run.tokens_per_step * best.seconds * run.accelerators / 3600
        described = (
            f"t{layout.tensor_parallel} p{layout.pipeline_parallel} d{layout.data_parallel} "
            f"e{layout.expert_parallel}{' overlapped' if layout.expert_overlap else ''}, interleave "
            f"{layout.interleave}, micro-batch "
            f"{layout.micro_batch}, {layout.recomputation} recomputation, ZeRO {layout.zero_stage}"
        )
        print(
            f"| {run.name} | {run.published} | {described} | {run.published_step_seconds:.2f} | "
            f"{best.seconds:.2f} | {best.seconds / run.published_step_seconds - 1:+.1%} | "
            f"{gpu_hours / 1e3:.1f}K | {best.memory_bytes / 1e9:.1f} | {best.mfu:.1%} |"
        )
    print()
    for name, shape, published in (("DeepSeek-V3", DEEPSEEK_V3, 250e9), ("DeepSeek-V2", DEEPSEEK_V2, 155e9)):
        counted = flops_per_token_as_deepseek_count(shape)
        print(
            f"{name}: {shape.params / 1e9:.1f}B parameters, {shape.active_params / 1e9:.2f}B active, "
            f"KV cache {shape.kv_cache_bytes_per_token:.0f} bytes/token, {counted / 1e9:.1f} GFLOPs/token as "
            f"DeepSeek count them (published {published / 1e9:.0f}, {counted / published - 1:+.1%})"
        )


if __name__ == "__main__":
    main()
