"""From a compute budget (or a target loss) to a model size and a token count.

Four rules, from the simplest to the most informed, and one for mixtures of experts:

* a fixed tokens-per-parameter ratio (the Chinchilla rule of thumb, ~20);
* the compute-optimal frontier of a parametric law (Hoffmann et al. 2022, closed form);
* data-constrained: a limited number of unique tokens, repeated for several epochs (Muennighoff et al. 2023);
* inference-aware: the cheapest model over its lifetime of training plus inference (Sardana et al. 2024),
  for a target loss or for the loss a training budget reaches;
* fine-grained mixture of experts: total and active parameters, experts and tokens on the frontier of a
  law in active parameters, the router's compute counted (Krajewski et al. 2024).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from service.core import validation as v
from service.core.laws import MoEDesign, ScalingLaw
from service.core.units import MAX_FLOPS, MAX_PARAMS, MAX_TOKENS, MIN_TOKENS, budget_flops

DEFAULT_TOKENS_PER_PARAM = 20.0

# Muennighoff et al. 2023, Eq. 5 and 6 (fitted on C4): how fast repeated tokens and excess parameters
# lose their value.
REPEATED_TOKENS_DECAY = 15.387756  # R_D*
EXCESS_PARAMS_DECAY = 5.309743  # R_N*


@dataclass(frozen=True)
class Allocation:
    """`params` counts every parameter the law counts; for a mixture of experts, all of them, of which each
    token uses `active_params` (its `experts_per_token` of `experts` experts). None for dense models."""

    params: float
    tokens: float
    flops: float
    predicted_loss: float | None = None
    unique_tokens: float | None = None
    active_params: float | None = None
    experts: int | None = None
    experts_per_token: int | None = None

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params

    @property
    def epochs(self) -> float | None:
        """Passes over the unique data (None when the data is not constrained)."""
        return None if self.unique_tokens is None else self.tokens / self.unique_tokens


def fixed_ratio(flops: float, tokens_per_param: float = DEFAULT_TOKENS_PER_PARAM) -> Allocation:
    """N = sqrt(C / (6r)), D = r·N: with C = 6·N·D and D = r·N (Hoffmann et al. 2022's ~20 tokens/param)."""
    C = budget_flops("flops", flops)
    r = v.positive("tokens_per_param", tokens_per_param, maximum=1e6)
    N = math.sqrt(C / (6 * r))
    return Allocation(params=N, tokens=r * N, flops=C)


def compute_optimal(flops: float, law: ScalingLaw) -> Allocation:
    """The loss-minimising N and D for C = 6·N·D under `law` (Hoffmann et al. 2022, Eq. 4)."""
    N, D = law.optimal_params(flops), law.optimal_tokens(flops)
    return Allocation(params=N, tokens=D, flops=flops, predicted_loss=law.frontier_loss(flops))


def moe_compute_optimal(flops: float, law: ScalingLaw, design: MoEDesign) -> Allocation:
    """The loss-minimising fine-grained MoE for a budget, Krajewski et al. 2024 §6.2 at a fixed granularity:
    minimise L(N_act, D) subject to C = D·(6·N_act + router(N_act)) (MoEDesign.training_flops_per_token, the
    paper's Eq. 10 with its d_model = 64·n_blocks), `law` in active parameters (FineGrainedLaw.at).

    The router term makes it a one-dimensional search over log N_act (the paper uses Brent's method too),
    around the closed-form optimum without the router; the router, dearer for narrow models, moves it to a
    wider one (at granularity 8, 8% more active parameters at 3e18 FLOPs, 3% at 1e21).
    """
    C = budget_flops("flops", flops)
    ratio = design.total_to_active_params

    def tokens_at(log_active: float) -> float:
        return C / design.training_flops_per_token(math.exp(log_active))

    def loss_at(log_active: float) -> float:
        return law.loss(math.exp(log_active), tokens_at(log_active))

    center = math.log(law.optimal_params(C))
    # 4 orders of magnitude either side, within what the law accepts: from the lower end up, D is below
    # C/(6·N_act) and so below MAX_TOKENS, and up to the upper end the total is below MAX_PARAMS.
    low = max(center - 4 * math.log(10), math.log(C) - math.log(6 * MAX_TOKENS) + 1e-9)
    high = min(center + 4 * math.log(10), math.log(MAX_PARAMS / ratio))
    if low > high:
        raise v.InvalidInput("flops", f"no mixture of experts the law accepts spends {C:g}")
    log_active = _minimise(loss_at, low, high)
    N = math.exp(log_active)
    return Allocation(
        params=design.total_params(N),
        tokens=tokens_at(log_active),
        flops=C,
        predicted_loss=loss_at(log_active),
        active_params=N,
        experts=design.experts,
        experts_per_token=design.experts_per_token,
    )


def for_target_loss(target_loss: float, law: ScalingLaw) -> Allocation:
    """The least compute that reaches `target_loss`, allocated on the frontier (Hoffmann et al. 2022)."""
    return compute_optimal(law.flops_for_loss(target_loss), law)


def data_constrained_loss(law: ScalingLaw, params: float, tokens: float, unique_tokens: float) -> float:
    """Loss with repeated data, Muennighoff et al. 2023, Eq. 5-7 (reference code: huggingface/datablations).

    With U unique tokens of which min(U, D) are seen, and R_D = D/U - 1 repeats:
        D' = U + U·R_D*·(1 - exp(-R_D/R_D*))
        N' = U_N + U_N·R_N*·(1 - exp(-R_N/R_N*)),  U_N = min(N, N_opt(U)),  R_N = N/U_N - 1
        L  = E + A/N'^alpha + B/D'^beta
    where N_opt(U) = G·(U·G)^(a/b) is the compute-optimal size for U tokens under the law. As in the
    reference code, parameters beyond N_opt(U) are discounted even when nothing is repeated; at the
    compute-optimal allocation both terms vanish and the law is the base law.
    """
    N = v.positive("params", params)
    D = v.positive("tokens", tokens, maximum=MAX_TOKENS)
    U = min(v.positive("unique_tokens", unique_tokens, minimum=MIN_TOKENS, maximum=MAX_TOKENS), D)
    R_D = D / U - 1
    D_eff = U + U * REPEATED_TOKENS_DECAY * -math.expm1(-R_D / REPEATED_TOKENS_DECAY)
    U_N = min(N, law.G * math.exp((law.a / law.b) * (math.log(U) + math.log(law.G))))
    R_N = N / U_N - 1
    N_eff = U_N + U_N * EXCESS_PARAMS_DECAY * -math.expm1(-R_N / EXCESS_PARAMS_DECAY)
    return law.loss(N_eff, D_eff)


def data_constrained(flops: float, unique_tokens: float, law: ScalingLaw) -> Allocation:
    """The loss-minimising N and D = C/(6N) when only `unique_tokens` distinct tokens exist.

    A one-dimensional search over log N of `data_constrained_loss` (Muennighoff et al. 2023, §5).
    """
    C = budget_flops("flops", flops)
    U = v.positive("unique_tokens", unique_tokens, minimum=MIN_TOKENS, maximum=MAX_TOKENS)
    unconstrained = compute_optimal(C, law)
    if unconstrained.tokens <= U:
        return Allocation(unconstrained.params, unconstrained.tokens, C, unconstrained.predicted_loss, U)

    def loss_at(log_params: float) -> float:
        N = math.exp(log_params)
        return data_constrained_loss(law, N, C / (6 * N), U)

    center = math.log(unconstrained.params)
    # Search 4 orders of magnitude either side of the unconstrained optimum, within the sizes the law
    # accepts (D = C/(6N) must stay below MAX_TOKENS and N below MAX_PARAMS); the 1e-9 keeps D's rounding
    # at the lower end from stepping over MAX_TOKENS.
    low = max(center - 4 * math.log(10), math.log(C) - math.log(6 * MAX_TOKENS) + 1e-9)
    high = min(center + 4 * math.log(10), math.log(MAX_PARAMS))
    if low > high:  # C > 6·MAX_PARAMS·MAX_TOKENS: no size the law accepts spends the budget
        raise v.InvalidInput(
            "flops", f"at most {6 * MAX_PARAMS * MAX_TOKENS:.0e} can be spent on repeated data, got {C:g}"
        )
    log_N = _minimise(loss_at, low, high)
    N = math.exp(log_N)
    return Allocation(params=N, tokens=C / (6 * N), flops=C, predicted_loss=loss_at(log_N), unique_tokens=U)


@dataclass(frozen=True)
class InferenceAwareAllocation:
    """Sardana et al. 2024: the model that reaches a loss at the least lifetime compute.

    `compute_optimal` is the compute-optimal model of the same loss (trained on less, served at more);
    `compute_optimal_at_budget`, for a training budget, the compute-optimal model of that budget (a lower
    loss, served at more)."""

    allocation: Allocation
    compute_optimal: Allocation
    inference_tokens: float
    compute_optimal_at_budget: Allocation | None = None

    @property
    def inference_flops(self) -> float:
        return _inference_flops(self.allocation, self.inference_tokens)

    @property
    def lifetime_flops(self) -> float:
        return _lifetime_flops(self.allocation, self.inference_tokens)

    @property
    def compute_optimal_lifetime_flops(self) -> float:
        return _lifetime_flops(self.compute_optimal, self.inference_tokens)

    @property
    def fraction_saved(self) -> float:
        """Share of the compute-optimal model's lifetime FLOPs that the inference-aware model saves."""
        # Negative only by rounding (the optimum at its loss costs no more), as where inference is slight.
        return max(0.0, 1 - self.lifetime_flops / self.compute_optimal_lifetime_flops)


def _inference_flops(allocation: Allocation, inference_tokens: float) -> float:
    # About 2·N FLOPs per generated or processed token (Kaplan et al. 2020, §2.1).
    return 2 * allocation.params * inference_tokens


def _lifetime_flops(allocation: Allocation, inference_tokens: float) -> float:
    return allocation.flops + _inference_flops(allocation, inference_tokens)


def tokens_for_loss(law: ScalingLaw, params: float, target_loss: float) -> float:
    """D(N) = (B / (l - E - A/N^alpha))^(1/beta): tokens a model of `params` needs to reach `target_loss`."""
    gap = target_loss - law.E - law.A * math.exp(-law.alpha * math.log(params))
    if gap <= 0:
        return math.inf
    return math.exp(math.log(law.B / gap) / law.beta)


def inference_aware(target_loss: float, inference_tokens: float, law: ScalingLaw) -> InferenceAwareAllocation:
    """Minimise 6·N·D + 2·N·D_inf subject to L(N, D) = target_loss (Sardana et al. 2024, §2).

    No closed form: a one-dimensional search over log N with D(N) from `tokens_for_loss`. N must exceed
    (A / (l - E))^(1/alpha), the size whose loss with infinite data is the target.
    """
    D_inf = v.positive("inference_tokens", inference_tokens, maximum=MAX_TOKENS * 1e3)
    optimal = for_target_loss(target_loss, law)  # validates target_loss against E and MAX_FLOPS

    def log_lifetime_flops(log_params: float) -> float:
        N = math.exp(log_params)
        D = tokens_for_loss(law, N, target_loss)
        if not math.isfinite(D):
            return math.inf
        return math.log(6 * N * D + 2 * N * D_inf)

    smallest = math.log(law.A / (target_loss - law.E)) / law.alpha  # log of the size that needs D = inf
    log_N = _minimise(log_lifetime_flops, smallest + 1e-9, math.log(optimal.params) + 1e-9)
    N = math.exp(log_N)
    D = tokens_for_loss(law, N, target_loss)
    if 6 * N * D > MAX_FLOPS:
        raise v.InvalidInput(
            "target_loss", f"needs more than {MAX_FLOPS:g} training FLOPs; choose a higher target"
        )
    chosen = Allocation(params=N, tokens=D, flops=6 * N * D, predicted_loss=law.loss(N, D))
    return InferenceAwareAllocation(chosen, optimal, D_inf)


def inference_aware_within(
    flops: float, inference_tokens: float, law: ScalingLaw
) -> InferenceAwareAllocation:
    """The model a training budget buys when its lifetime inference counts: Sardana et al. 2024's optimum
    (least 6·N·D + 2·N·D_inf at a loss) for the loss at which that optimum's training spends the budget.

    With 6·N·D fixed at C, lifetime FLOPs alone would be least for the smallest model, whatever its loss, and
    the loss alone for the compute-optimal one, whatever its serving: neither weighs inference. Sardana et al.
    fix the loss instead; their optimum satisfies the Lagrange condition of minimising 6ND + 2N·D_inf on
    L(N, D) = l, which does not involve l:

        alpha·A/N^alpha = beta·B/D^beta · (1 + D_inf/(3·D))

    (without inference, the compute-optimal condition of Hoffmann et al. 2022). On C = 6·N·D its left side
    falls and its right side rises with N, so one N satisfies it: the optimum, for the loss it reaches, whose
    training is the budget. No model reaches that loss at fewer lifetime FLOPs, and none trained within the
    budget is lifetime-optimal at a lower loss (the optimum's training compute rises as the target falls).
    """
    C = budget_flops("flops", flops)
    D_inf = v.positive("inference_tokens", inference_tokens, maximum=MAX_TOKENS * 1e3)
    at_budget = compute_optimal(C, law)

    def imbalance(log_params: float) -> float:  # log of left over right side; falls with N
        log_tokens = math.log(C / 6) - log_params
        excess = math.log(D_inf / 3) - log_tokens  # log(D_inf / (3·D))
        log1p_excess = excess + math.log1p(math.exp(-excess)) if excess > 0 else math.log1p(math.exp(excess))
        return (
            math.log(law.alpha * law.A)
            - law.alpha * log_params
            - math.log(law.beta * law.B)
            + law.beta * log_tokens
            - log1p_excess
        )

    # The root is below the compute-optimal size (where the imbalance is -log(1 + D_inf/(3·D)) < 0) and
    # above the size that would be trained on MAX_TOKENS.
    low, high = math.log(C) - math.log(6 * MAX_TOKENS), math.log(at_budget.params)
    if low >= high:
        raise v.InvalidInput(
            "flops", f"even the compute-optimal model of {C:g} trains on more than {MAX_TOKENS:g} tokens"
        )
    if imbalance(low) <= 0:
        raise v.InvalidInput(
            "inference_tokens",
            f"{D_inf:g} of them on {C:g} FLOPs favour a model trained on more than {MAX_TOKENS:g} tokens",
        )
    if imbalance(high) >= 0:  # inference so slight that log(1 + D_inf/(3·D)) is lost in the rounding
        N = at_budget.params
    else:
        from scipy.optimize import brentq  # noqa: PLC0415 (see _minimise)

        N = math.exp(brentq(imbalance, low, high, xtol=1e-12, rtol=1e-14))
    D = C / (6 * N)
    loss = law.loss(N, D)
    chosen = Allocation(params=N, tokens=D, flops=C, predicted_loss=loss)
    try:
        same_loss = for_target_loss(loss, law)
    except v.InvalidInput:  # a loss beyond the engine's 100, or one the frontier reaches with under MIN_FLOPS
        raise v.InvalidInput(
            "flops",
            f"is too small for {D_inf:g} inference tokens: the model it buys would reach a loss of "
            f"{loss:.3g} nats/token; give a larger budget or fewer inference tokens",
        ) from None
    return InferenceAwareAllocation(chosen, same_loss, D_inf, compute_optimal_at_budget=at_budget)


def isoflop_curve(law: ScalingLaw, flops: float, points: int = 41, span: float = 10.0) -> list[Allocation]:
    """Loss against model size at a fixed budget (an IsoFLOP profile, Hoffmann et al. 2022 Fig. 3):
    `points` sizes spaced evenly in log N from N_opt/span to N_opt·span, each trained on D = C/(6N)."""
    C = budget_flops("flops", flops)
    count = v.whole("points", points, minimum=3)
    ratio = v.in_range("span", span, 1.0, 1e4, low_inclusive=False)
    center = math.log(law.optimal_params(C))
    curve = []
    for i in range(count):
        N = math.exp(center + math.log(ratio) * (2 * i / (count - 1) - 1))
        D = C / (6 * N)
        curve.append(Allocation(params=N, tokens=D, flops=C, predicted_loss=law.loss(N, D)))
    return curve


def frontier(law: ScalingLaw, min_flops: float, max_flops: float, points: int = 21) -> list[Allocation]:
    """The compute-optimal allocation at `points` budgets spaced evenly in log C."""
    low = budget_flops("min_flops", min_flops)
    high = budget_flops("max_flops", max_flops)
    if high <= low:
        raise v.InvalidInput("max_flops", "must be greater than min_flops")
    count = v.whole("points", points, minimum=2)
    step = math.log(high / low) / (count - 1)
    return [compute_optimal(math.exp(math.log(low) + step * i), law) for i in range(count)]


def _minimise(function: Callable[[float], float], low: float, high: float, grid: int = 48) -> float:
    """The argmin of a one-dimensional function on [low, high]: a coarse grid finds the basin (the losses
    here have kinks where a min() switches branch), then bounded Brent polishes it."""
    step = (high - low) / grid
    values = [function(low + i * step) for i in range(grid + 1)]
    best = min(range(grid + 1), key=values.__getitem__)
    left, right = low + max(best - 1, 0) * step, low + min(best + 1, grid) * step
    # Imported here: scipy.optimize takes half a second to import, which every process of the service (the
    # server's, each command's) would pay at start for plans that most of them never make.
    from scipy.optimize import minimize_scalar  # noqa: PLC0415

    result = minimize_scalar(function, bounds=(left, right), method="bounded", options={"xatol": 1e-10})
    return result.x if result.fun <= values[best] else low + best * step
