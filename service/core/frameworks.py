"""Training frameworks as what they can run: the layout search stays inside the framework a request names.

A layout field the framework cannot vary is fixed at what it runs (no pipeline in PyTorch FSDP, no
interleaving outside Megatron and torchtitan, ZeRO stages it implements); an optimisation it implements is
taken (Megatron-Core's tensor-parallel communication overlap). Fields a request fixes are taken as given: they
say what the request's own stack does. Without a framework the search stays inside `GENERIC`, what the common
stacks all run, so that no layout needing a special capability is chosen silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.core import validation as v
from service.core.memory import ZERO_STAGES


@dataclass(frozen=True)
class Framework:
    name: str
    source: str
    tensor_parallel: bool = True  # Megatron-style tensor (and sequence) parallelism
    pipeline: bool = True
    interleave: bool = False  # virtual pipeline stages (interleaved 1F1B)
    zero_stages: tuple[int, ...] = ZERO_STAGES
    tensor_parallel_overlap: bool = False  # TP collectives pipelined with the GEMMs
    expert_overlap: bool = False  # an expert all-to-all under another micro-batch's compute (DualPipe)
    # The share of what the GEMMs could hide of the TP collectives that its overlap does hide, where it is
    # measured apart from Megatron-Core's (the calibration's `tensor_parallel_overlap`); None: that one.
    tensor_parallel_overlap_share: float | None = None
    # The share of a layer's matmuls (beyond attention's scores and values) its selective recomputation
    # redoes in the backward pass: 0 for Megatron's (Korthikanti et al. 2022, attention alone).
    selective_matmuls: float = 0.0
    # Whether its attention is Transformer Engine's fused kernel (cuDNN), which the hardware's profile may
    # state a fraction of its own for (`Efficiency.attention_transformer_engine`).
    transformer_engine_attention: bool = False
    # What its selective recomputation keeps of a layer's tensors besides the attention scores (1 in
    # Megatron's), and the bytes its loss holds per logit (4: Megatron's fused cross-entropy, fp32).
    selective_kept: float = 1.0
    logit_bytes: float = 4.0

    def fixed(self, given: dict[str, Any]) -> dict[str, Any]:
        """`given` with the fields the framework cannot vary fixed at what it runs (the given ones kept); the
        ZeRO stages it runs bound the search's own options (`layout_search.candidates`)."""
        imposed: dict[str, Any] = {"tensor_parallel_overlap": self.tensor_parallel_overlap}
        if not self.tensor_parallel:
            imposed["tensor_parallel"] = 1
        if not self.pipeline:
            imposed["pipeline_parallel"] = 1
        if not self.interleave:
            imposed["interleave"] = 1
        if not self.expert_overlap:
            imposed["expert_overlap"] = False
        return {**imposed, **given}


# Fitted by `python -m bench.calibrate_cluster` with the other constants (bench/RESULTS.md): torchtitan's
# published layouts with and without asynchronous TP (Llama 3.1 8B and 70B, bench/cluster_runs.json) and its
# Llama 3.1 405B run pin it. Far below Megatron-Core's: its asynchronous TP hid a tenth of a 70B step at most.
TORCHTITAN_ASYNC_TP_SHARE = 0.301

# What PyTorch's FSDP runs as ZeRO stages: resharding after forward (3) or not (2), each reduce-scattering
# every micro-batch's gradients; or, under no_sync, whole gradients accumulated and reduced once, which holds
# and moves what ZeRO 1 does (its weights whole too, without resharding).
FSDP_STAGES = (1, 2, 3)

GENERIC = Framework(
    "generic",
    "What Megatron-LM, DeepSpeed and PyTorch's stacks all run: tensor, pipeline (one stage per device) and "
    "data parallelism with ZeRO 0-3, no communication overlap beyond the data-parallel one.",
)
FRAMEWORKS = {
    framework.name: framework
    for framework in (
        GENERIC,
        Framework(
            "megatron-core",
            "Megatron-Core, NeMo and Megatron-Bridge: tensor and sequence parallelism, interleaved "
            "pipelines, context parallelism, the distributed optimizer (ZeRO 1), and tensor-parallel "
            "communication overlapped with the GEMMs (--tp-comm-overlap; Megatron-LM README, 'Training "
            "speed and scalability'), and Transformer Engine's fused attention (cuDNN).",
            interleave=True,
            zero_stages=(0, 1),
            tensor_parallel_overlap=True,
            transformer_engine_attention=True,
        ),
        Framework(
            "megatron-lm",
            "Megatron-LM before Megatron-Core's communication overlap (2021-2023 releases, and "
            "Megatron-DeepSpeed): tensor, sequence and interleaved pipeline parallelism, ZeRO 0-1.",
            interleave=True,
            zero_stages=(0, 1),
        ),
        Framework(
            "deepspeed",
            "DeepSpeed: ZeRO 0-3, pipeline parallelism without interleaving, Megatron tensor parallelism.",
        ),
        Framework(
            "fsdp",
            "PyTorch FSDP (llm-foundry, Hugging Face Accelerate): data parallelism sharded as ZeRO 2 "
            "(SHARD_GRAD_OP) or 3 (FULL_SHARD), or as ZeRO 1 when it accumulates whole gradients under "
            "no_sync and reduces them once; no tensor or pipeline parallelism.",
            tensor_parallel=False,
            pipeline=False,
            zero_stages=FSDP_STAGES,
        ),
        Framework(
            "torchtitan",
            "PyTorch torchtitan: FSDP2 (ZeRO 2-3, or 1 accumulating whole gradients and reducing them on "
            "the last micro-batch, as its pipeline schedules do), tensor and sequence parallelism with "
            "asynchronous TP "
            "overlapping its collectives, interleaved pipeline schedules, context parallelism. Its "
            "asynchronous TP hides less than Megatron-Core's: 1.09-1.10x over the same layouts without it "
            "(torchtitan's 2025-06 async-TP study; the share fitted on its runs, bench/RESULTS.md). Its "
            "selective recomputation (per op) redoes every second matmul.",
            interleave=True,
            zero_stages=FSDP_STAGES,
            tensor_parallel_overlap=True,
            tensor_parallel_overlap_share=TORCHTITAN_ASYNC_TP_SHARE,
            # Its selective activation checkpointing per op saves the output of every compute-heavy op but
            # every second matmul, which the backward pass recomputes (torchtitan's
            # activation_checkpoint.py, `_custom_policy`: "Saves output of all compute ops, except every
            # second mm").
            selective_matmuls=0.5,
            # Of a Llama block's tensors (its input, Q, K, V, the attention output, the projection's and
            # the MLP's), the per-op policy keeps the block's input, Q, V, the attention output and the
            # gate's and the down-projection's outputs, the others redone: about half (72 of 139 KB a token
            # for Llama 3.1 8B). Its loss upcasts the logits to fp32 and keeps their log-softmax and its
            # gradient beside the bf16 ones (torchtitan's cross_entropy_loss: `pred.float()`): about 10 bytes.
            selective_kept=0.5,
            logit_bytes=10.0,
        ),
        Framework(
            "maxtext",
            "Google MaxText (JAX/XLA, TPU and GPU): fully sharded data parallelism (ZeRO 3) or plain data "
            "parallelism across slices, tensor parallelism with XLA's collective matmul overlapping its "
            "collectives, no pipeline.",
            pipeline=False,
            zero_stages=(0, 3),
            tensor_parallel_overlap=True,
        ),
        Framework(
            "dualpipe",
            "DeepSeek-V3's own (HAI-LLM): pipeline and expert parallelism with the all-to-all overlapped "
            "(DualPipe), ZeRO 1 (DeepSeek-V3 report, §3.2).",
            zero_stages=(1,),
            expert_overlap=True,
        ),
    )
}


def framework_named(name: str | None) -> Framework:
    """The framework `name` names; GENERIC for None."""
    if name is None:
        return GENERIC
    return FRAMEWORKS[v.choice("framework", name, tuple(FRAMEWORKS))]
