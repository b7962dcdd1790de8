"""Sizing a model to a budget on a cluster: a budget in money, hours or days buys FLOPs at the utilisation the
model it buys achieves, so the allocation is repeated until the two agree; without an accelerator count, each
candidate count is planned so and the policy chooses among them."""

from __future__ import annotations

import math
from dataclasses import replace

from service.core import units, wall_clock
from service.core import validation as v
from service.core.engine.estimate import Estimate
from service.core.engine.inputs import Budget, Cluster, Hardware, NamedLaw
from service.core.engine.limits import CLUSTER_LIMITS, DEFAULT_MFU
from service.core.engine.plans import Plan, allocation_plan
from service.core.engine.rules import Rules
from service.core.engine.run import machine_of
from service.core.wall_clock import Sizing

# The search for the utilisation the cluster model achieves on the allocation a budget buys stops when two
# rounds agree this closely; a plan never exceeds a limit, whatever the last round.
UTILISATION_TOLERANCE = 0.005
MAX_ROUNDS = 24


def plan(
    budget: Budget,
    *,
    tokens_per_param: float | None = None,
    law: NamedLaw | None = None,
    unique_tokens: float | None = None,
    inference_tokens: float | None = None,
    inference_hardware: Hardware | None = None,
    inference_batch: int | None = None,
    on: Cluster | None = None,
) -> Plan:
    """Allocate a budget to a model size and token count (`Rules` says how the arguments do), and estimate
    the run when a cluster is given.

    When the cluster model sets the pace (no `mfu`) and the budget is money, accelerator-hours or days, the
    FLOPs they buy depend on the model the budget buys: the allocation is repeated at the utilisation the
    model achieved until the two agree, and never exceeds a limit. Without `accelerators`, each candidate
    count is planned so, and the count whose plan trains on the most compute wins (fewer on a tie).
    """
    rules = Rules(
        tokens_per_param=tokens_per_param,
        law=law,
        unique_tokens=unique_tokens,
        inference_tokens=inference_tokens,
        inference_hardware=inference_hardware,
        inference_batch=inference_batch,
    )
    priced = any(getattr(budget, name) is not None for name in CLUSTER_LIMITS)
    if on is None or not priced or budget.target_loss is not None:
        return allocation_plan(budget, rules, on)
    if on.accelerators is not None:
        return _plan_on(budget, rules, on)
    return _plan_choosing_count(budget, rules, on)


def _plan_on(budget: Budget, rules: Rules, on: Cluster) -> Plan:
    """The plan of a budget in money, hours or days on the cluster's accelerators."""
    if on.mfu is not None:  # the pace is given: the budget's FLOPs follow at once
        return allocation_plan(budget, rules, on)
    return _plan_at_achieved_rate(budget, rules, on)


def _plan_choosing_count(budget: Budget, rules: Rules, on: Cluster) -> Plan:
    """The plan on the count whose limits buy the most compute (of counts within 0.1% of it, the fewest)."""
    machine, _ = machine_of(on)
    most = on.max_accelerators or wall_clock.DEFAULT_MAX_ACCELERATORS
    counts = wall_clock.candidate_counts(machine.accelerators_per_node, most)
    plans: dict[int, Plan | None] = {}

    def plan_at(index: int) -> Plan | None:
        if index not in plans:
            try:
                plans[index] = _plan_on(budget, rules, replace(on, accelerators=counts[index]))
            except v.InvalidInput:
                plans[index] = None
        return plans[index]

    def flops_at(index: int) -> float:
        found = plan_at(index)
        return -1.0 if found is None else found.allocation.flops

    # The compute a count's limits buy rises with the count while the deadline binds and falls slowly once
    # money does: every doubling first, then every count around the best doubling.
    step = wall_clock.COUNT_STEPS_PER_DOUBLING
    coarse = sorted({*range(0, len(counts), step), len(counts) - 1})
    around = max(coarse, key=lambda index: (flops_at(index), -index))
    for index in range(max(0, around - step + 1), min(len(counts), around + step)):
        flops_at(index)
    tried = sum(found is not None for found in plans.values())
    candidates = [found for found in plans.values() if found is not None]
    # Most compute; of counts within 0.1% of it, the fewest accelerators.
    most_flops = max((found.allocation.flops for found in candidates), default=0.0)
    best = min(
        (found for found in candidates if found.allocation.flops >= most_flops * (1 - 1e-3)),
        key=lambda found: found.estimate.accelerators if found.estimate is not None else 0,
        default=None,
    )
    if best is None or best.estimate is None:
        raise v.InvalidInput(
            "max_accelerators",
            f"no cluster of up to {most} accelerators runs a model this budget buys; allow more accelerators",
        )
    if best.estimate.run is None:  # at a given MFU: the count is the sizing
        return best
    sizing = Sizing(best.estimate.run, "budget", most, tried)
    return replace(best, estimate=replace(best.estimate, sizing=sizing))


def _plan_at_achieved_rate(budget: Budget, rules: Rules, on: Cluster) -> Plan:
    """The plan that trains on the most compute its modelled run keeps within every limit.

    A utilisation r turns the limits into FLOPs; the model the budget then buys has a modelled run, which
    keeps within the limits when r is at most what that run achieves. The largest such r is found by a
    safeguarded search: the achieved utilisation (over the excess, when a limit was passed) is the next guess
    when it falls inside the bracket known so far, the bracket's geometric middle otherwise. (Plain
    repetition can oscillate: a larger model can be laid out less efficiently, and vice versa.)
    """
    low, high = 0.0, 1.0
    rate = DEFAULT_MFU
    best: Plan | None = None
    for _ in range(MAX_ROUNDS):
        result = allocation_plan(budget, rules, replace(on, utilisation=rate))
        assert result.estimate is not None, "a plan on a cluster has its estimate"
        runtime = result.estimate.runtime
        achieved = result.allocation.flops / (
            runtime.accelerator_hours * units.SECONDS_PER_HOUR * on.peak_flops_per_second
        )
        excess = _excess(budget, result.estimate)
        if excess <= 1:
            low = rate
            if best is None or result.allocation.flops > best.allocation.flops:
                best = result
            if excess >= 1 - UTILISATION_TOLERANCE:
                break
        else:
            high = rate
        if high / max(low, 1e-300) <= 1 + UTILISATION_TOLERANCE:
            break
        guess = achieved / excess
        rate = guess if low < guess < high else (math.sqrt(low * high) if low > 0 else high / 4)
    if best is None:
        limit = next(name for name in CLUSTER_LIMITS if getattr(budget, name) is not None)
        raise v.InvalidInput(
            limit,
            f"buys no run on {on.accelerators} accelerators that the cluster model keeps within it, however "
            "small the model: give more, or fewer accelerators",
        )
    return best


def _excess(budget: Budget, run: Estimate) -> float:
    """How far the run goes past the budget's tightest limit (1: exactly at it; below 1: within)."""
    ratios = [1e-300]
    if budget.cost is not None and run.cost is not None:
        ratios.append(float(run.cost) / float(budget.cost))
    if budget.accelerator_hours is not None:
        ratios.append(run.runtime.accelerator_hours / budget.accelerator_hours)
    if budget.days is not None:
        ratios.append(run.runtime.days / budget.days)
    return max(ratios)
