"""Starting points for batch size and peak learning rate, from the compute budget alone."""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.core import units
from service.core import validation as v
from service.core.shape import ModelShape

DEEPSEEK_LLM_2024 = "DeepSeek-AI 2024, DeepSeek LLM (arXiv 2401.02954), §3.1"
# Which compute C the hints were evaluated at: the plan's 6·N·D, or DeepSeek's own M·D (a shape is given).
SIX_N_D_FLOPS = "6ND"
DEEPSEEK_FLOPS = "MD"
FLOPS_DEFINITIONS = (SIX_N_D_FLOPS, DEEPSEEK_FLOPS)


@dataclass(frozen=True)
class Hyperparameters:
    batch_tokens: float
    learning_rate: float
    source: str
    flops: float  # the C the power laws were evaluated at
    flops_definition: str = SIX_N_D_FLOPS


def deepseek_flops(tokens: float, shape: ModelShape) -> float:
    """DeepSeek LLM 2024's training compute C = M·D, §3: M = 72·n_layer·d_model² + 12·n_layer·d_model·l_seq
    non-embedding FLOPs per token, the attention scores included, and D the tokens.

    6·N·D counts the embedding parameters and no attention, so it overstates C for small models, whose
    embeddings are a large share of N, and understates it for long contexts.
    """
    D = v.positive("tokens", tokens, maximum=units.MAX_TOKENS)
    if not isinstance(shape, ModelShape):
        raise v.InvalidInput("shape", f"must be a ModelShape, got {type(shape).__name__}")
    n_layer, d_model, l_seq = float(shape.layers), float(shape.d_model), float(shape.sequence_length)
    M = 72.0 * n_layer * d_model**2 + 12.0 * n_layer * d_model * l_seq
    C = M * D
    if C > units.MAX_FLOPS:
        raise v.InvalidInput("shape", f"DeepSeek's M·D = {C:.3g} FLOPs is past {units.MAX_FLOPS:g}")
    return C


def hyperparameters_for(flops: float, *, definition: str = SIX_N_D_FLOPS) -> Hyperparameters:
    """Near-optimal global batch size (tokens) and peak learning rate for a training budget of `flops`.

    DeepSeek LLM 2024, §3.1: B_opt = 0.2920·C^0.3271 tokens per batch and η_opt = 0.3118·C^(-0.1250), C in
    FLOPs. DeepSeek count C = M·D (`deepseek_flops`); without a model shape 6·N·D stands in for it, and
    `definition` records which of the two `flops` is. The fit comes from grid searches on small budgets,
    with AdamW and a multi-step schedule, extrapolated to large ones; the paper finds a wide band of batch
    sizes and learning rates around it near-optimal, so the result is a starting point, not a prescription.
    Powers are taken in log space.
    """
    C = v.positive("flops", flops, maximum=units.MAX_FLOPS)
    if definition not in FLOPS_DEFINITIONS:
        allowed = ", ".join(FLOPS_DEFINITIONS)
        raise v.InvalidInput("definition", f"must be one of {allowed}; got {definition!r}")
    log_C = math.log(C)
    B_opt = 0.2920 * math.exp(0.3271 * log_C)
    eta_opt = 0.3118 * math.exp(-0.1250 * log_C)
    return Hyperparameters(B_opt, eta_opt, DEEPSEEK_LLM_2024, flops=C, flops_definition=definition)
