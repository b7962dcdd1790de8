"""The rule that allocates a budget (fixed ratio, compute-optimal, data-constrained, inference-aware), the
checks that the rules asked for go together, and the caveats of repeated data."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from service.core import allocate, caveats
from service.core import validation as v
from service.core.engine.inputs import Budget, Hardware, NamedLaw, published
from service.core.engine.serving import Serving, check_serving
from service.core.laws import DATA_CONSTRAINED_LAW, DEFAULT_LAW, PUBLISHED_LAWS, ScalingLaw

# Past this many epochs a repeated token is worth less than a tenth of a fresh one: the marginal value of
# data, dD'/dD = exp(-R_D/R_D*), falls below 0.1 at R_D = R_D*·ln 10 repeats (Muennighoff et al. 2023, Eq. 5).
EPOCHS_WITHOUT_GAIN = 1 + allocate.REPEATED_TOKENS_DECAY * math.log(10)


@dataclass(frozen=True)
class Rules:
    """How a budget is allocated and its inference served: `tokens_per_param` (fixed ratio, default 20) or
    `law` (compute-optimal frontier); with `unique_tokens` the data-constrained optimum; with
    `inference_tokens` the inference-aware optimum, for the `target_loss` or for the loss the compute budget
    reaches. A rule that needs a law and has none uses chinchilla-2022, or muennighoff-2023-c4 for
    data-constrained allocation (its repetition constants were fitted with it). Inference is served on
    `inference_hardware` (by default the cluster's hardware, when its memory bandwidth is known),
    `inference_batch` sequences at a time (default 1)."""

    tokens_per_param: float | None = None
    law: NamedLaw | None = None
    unique_tokens: float | None = None
    inference_tokens: float | None = None
    inference_hardware: Hardware | None = None
    inference_batch: int | None = None


@dataclass(frozen=True)
class InferenceSummary:
    """Inference-aware allocation: what was held fixed (`constraint`: the target_loss, or the budget's
    training compute), the lifetime FLOPs that were minimised under it, and what they are compared with."""

    constraint: str  # target_loss or budget
    inference_tokens: float
    inference_flops: float
    lifetime_flops: float
    compute_optimal: allocate.Allocation
    compute_optimal_lifetime_flops: float
    fraction_saved: float
    compute_optimal_at_budget: allocate.Allocation | None
    serving: Serving | None


def checked(budget: Budget, rules: Rules) -> Rules:
    """The rules, refused where they do not go together, with the law to use (a default where one is
    needed)."""
    law = _law_for(budget, rules.tokens_per_param, rules.law, rules.unique_tokens, rules.inference_tokens)
    _check_moe_law(law, budget, rules.unique_tokens, rules.inference_tokens)
    check_serving(rules.inference_tokens, rules.inference_hardware, rules.inference_batch)
    return replace(rules, law=law)


def allocated(
    budget: Budget, rules: Rules, flops: float | None, rule: ScalingLaw | None
) -> tuple[allocate.Allocation, str, InferenceSummary | None]:
    """The allocation of the budget (`flops`, or its target loss) by `rules` (`checked`), with `rule` for
    their law's coefficients (a bootstrap fit's, for intervals); the method's name; the inference-aware
    summary, when it is one."""
    # checked() gives every rule but the fixed ratio a law, and the limits every budget but a loss its FLOPs.
    if budget.target_loss is not None:
        assert rule is not None
        if rules.inference_tokens is not None:
            result = allocate.inference_aware(budget.target_loss, rules.inference_tokens, rule)
            return _inference_aware(result, "target_loss")
        return allocate.for_target_loss(budget.target_loss, rule), "compute-optimal", None
    assert flops is not None
    if rule is None:
        ratio = rules.tokens_per_param
        if ratio is None:
            ratio = allocate.DEFAULT_TOKENS_PER_PARAM
        return allocate.fixed_ratio(flops, ratio), "fixed-ratio", None
    if rules.inference_tokens is not None:
        within = allocate.inference_aware_within(flops, rules.inference_tokens, rule)
        return _inference_aware(within, "budget")
    if rules.unique_tokens is not None:
        return allocate.data_constrained(flops, rules.unique_tokens, rule), "data-constrained", None
    law = rules.law
    optimum = (
        allocate.compute_optimal(flops, rule)
        if law is None or law.moe is None
        else allocate.moe_compute_optimal(flops, rule, law.moe)
    )
    return optimum, "compute-optimal", None


def _law_for(
    budget: Budget,
    tokens_per_param: float | None,
    law: NamedLaw | None,
    unique_tokens: float | None,
    inference_tokens: float | None,
) -> NamedLaw | None:
    """Check that the rules asked for go together; the law to use (a default where one is needed)."""
    if tokens_per_param is not None and law is not None:
        raise v.InvalidInput("tokens_per_param", "give either tokens_per_param or law, not both")
    needs_law = budget.target_loss is not None or unique_tokens is not None or inference_tokens is not None
    if needs_law and tokens_per_param is not None:
        raise v.InvalidInput(
            "tokens_per_param",
            "a fixed ratio cannot honour target_loss, unique_tokens or inference_tokens; give a law instead",
        )
    if inference_tokens is not None and unique_tokens is not None:
        raise v.InvalidInput(
            "unique_tokens",
            "cannot be combined with inference_tokens: inference-aware plans assume fresh data",
        )
    if budget.target_loss is not None and unique_tokens is not None:
        raise v.InvalidInput("unique_tokens", "cannot be combined with target_loss; give a compute budget")
    if needs_law and law is None:
        return published(DATA_CONSTRAINED_LAW if unique_tokens is not None else DEFAULT_LAW)
    return law


def _check_moe_law(
    law: NamedLaw | None, budget: Budget, unique_tokens: float | None, inference_tokens: float | None
) -> None:
    """A mixture-of-experts law sizes a model for a compute budget (Krajewski et al. 2024 §6.2): the other
    rules are derived for dense laws and are refused with it, naming the field."""
    if law is None or law.moe is None:
        return
    for name, value in (
        ("target_loss", budget.target_loss),
        ("unique_tokens", unique_tokens),
        ("inference_tokens", inference_tokens),
    ):
        if value is not None:
            raise v.InvalidInput(
                name,
                f"is not planned with the mixture-of-experts law {law.slug}: it sizes a model for a compute, "
                "money, hours or days budget only",
            )


def _inference_aware(
    result: allocate.InferenceAwareAllocation, constraint: str
) -> tuple[allocate.Allocation, str, InferenceSummary]:
    summary = InferenceSummary(
        constraint=constraint,
        inference_tokens=result.inference_tokens,
        inference_flops=result.inference_flops,
        lifetime_flops=result.lifetime_flops,
        compute_optimal=result.compute_optimal,
        compute_optimal_lifetime_flops=result.compute_optimal_lifetime_flops,
        fraction_saved=result.fraction_saved,
        compute_optimal_at_budget=result.compute_optimal_at_budget,
        serving=None,
    )
    return result.allocation, "inference-aware", summary


def repetition_caveats(allocation: allocate.Allocation, law: NamedLaw) -> list[caveats.Caveat]:
    """Of a data-constrained allocation: what its repeated tokens are worth, and whose constants say so."""
    return _repeated_data(allocation) + _repetition_constants(law)


def _repetition_constants(law: NamedLaw) -> list[caveats.Caveat]:
    """Muennighoff et al. 2023 fitted R_D* and R_N* jointly with their C4 law; with another law (another
    corpus, another model family) they are borrowed, not fitted."""
    if law.law == PUBLISHED_LAWS[DATA_CONSTRAINED_LAW].law:
        return []
    return [
        caveats.Caveat(
            caveats.REPETITION_CONSTANTS_FROM_C4,
            f"The repetition constants R_D* = {allocate.REPEATED_TOKENS_DECAY:.4g} and R_N* = "
            f"{allocate.EXCESS_PARAMS_DECAY:.4g} (how fast repeated tokens and excess parameters lose their "
            "value) were fitted by Muennighoff et al. 2023 together with their C4 law, "
            f"{DATA_CONSTRAINED_LAW}; applied to {law.slug or 'this law'} they are an assumption, not a fit.",
            {"law": law.slug, "fitted_with": DATA_CONSTRAINED_LAW},
        )
    ]


def _repeated_data(allocation: allocate.Allocation) -> list[caveats.Caveat]:
    epochs = allocation.epochs or 0.0
    if epochs > EPOCHS_WITHOUT_GAIN:
        return [
            caveats.Caveat(
                caveats.REPETITION_WITHOUT_GAIN,
                f"{epochs:.1f} epochs: past {EPOCHS_WITHOUT_GAIN:.0f} epochs a repeated token is worth less "
                "than a tenth of a fresh one; more unique data, not more compute, would lower the loss.",
                {"epochs": epochs},
            )
        ]
    if epochs > caveats.MAX_WORTHWHILE_EPOCHS:
        return [
            caveats.Caveat(
                caveats.REPEATED_DATA,
                f"{epochs:.1f} epochs over the unique data: beyond about 4, repeated tokens are worth "
                "noticeably less than fresh ones (Muennighoff et al. 2023).",
                {"epochs": epochs},
            )
        ]
    return []
