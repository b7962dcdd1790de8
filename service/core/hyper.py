"""Starting points for batch size and peak learning rate, from the compute budget alone."""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.core import units
from service.core import validation as v

DEEPSEEK_LLM_2024 = "DeepSeek-AI 2024, DeepSeek LLM (arXiv 2401.02954), §3.1"


@dataclass(frozen=True)
class Hyperparameters:
    batch_tokens: float
    learning_rate: float
    source: str


def hyperparameters_for(flops: float) -> Hyperparameters:
    """Near-optimal global batch size (tokens) and peak learning rate for a training budget of `flops`.

    DeepSeek LLM 2024, §3.1: B_opt = 0.2920·C^0.3271 tokens per batch and η_opt = 0.3118·C^(-0.1250), C in
    FLOPs. DeepSeek count C = M·D with M the non-embedding FLOPs per token (attention included), which
    6·N·D approximates. The fit comes from grid searches on small budgets, with AdamW and a multi-step
    schedule, extrapolated to large ones; the paper finds a wide band of batch sizes and learning rates around
    it near-optimal, so the result is a starting point, not a prescription. Powers are taken in log space.
    """
    C = v.positive("flops", flops, maximum=units.MAX_FLOPS)
    log_C = math.log(C)
    B_opt = 0.2920 * math.exp(0.3271 * log_C)
    eta_opt = 0.3118 * math.exp(-0.1250 * log_C)
    return Hyperparameters(batch_tokens=B_opt, learning_rate=eta_opt, source=DEEPSEEK_LLM_2024)
