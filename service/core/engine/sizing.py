"""Sizing a model to a budget on a cluster: a budget in money, hours or days buys FLOPs at the utilisation the
model it buys achieves, so the allocation is repeated until the two agree; without an accelerator count, each
candidate count is planned so and the policy chooses among them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
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
    count is planned so, and of the plans within reach (wall_clock.chosen: the budget's days, or else a
    year) the one that trains on the most compute wins (fewer accelerators on a tie).
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
    """The plan on the count `wall_clock.chosen` for a budget: of the counts whose plans are within reach,
    the one whose limits buy the most compute (of those within 0.1% of it, the fewest accelerators)."""
    machine, _ = machine_of(on)
    most = on.max_accelerators or wall_clock.DEFAULT_MAX_ACCELERATORS
    counts = wall_clock.candidate_counts(machine.accelerators_per_node, most)
    plans: dict[int, Plan] = {}  # by the index of their count
    refused: set[int] = set()  # indices of counts no plan fits

    def planned(indices: Iterable[int]) -> list[int]:
        """The indices of the counts planned so far that have a plan, after planning `indices`."""
        for index in sorted(set(indices) - plans.keys() - refused):
            try:
                plans[index] = _plan_on(budget, rules, replace(on, accelerators=counts[index]))
            except v.InvalidInput:
                refused.add(index)
        return sorted(plans)

    def seconds(index: int) -> float:
        return _run_of(plans[index]).runtime.seconds

    def flops(index: int) -> float:
        return plans[index].allocation.flops

    def most_compute(within: Sequence[int]) -> int:
        most_flops = max(flops(index) for index in within)
        return min(
            (index for index in within if flops(index) >= most_flops * (1 - 1e-3)), key=counts.__getitem__
        )

    # The compute a count's limits buy rises with the count while the deadline binds and falls slowly once
    # money does: every doubling first, then every count around the best doubling.
    step = wall_clock.COUNT_STEPS_PER_DOUBLING
    coarse = planned({*range(0, len(counts), step), len(counts) - 1})
    around = 0
    if coarse:
        around = wall_clock.chosen(
            coarse, seconds, lambda within: max(within, key=lambda i: (flops(i), -i)), days=budget.days
        )
    tried = planned(range(max(0, around - step + 1), min(len(counts), around + step)))
    if not tried:
        raise v.InvalidInput(
            "max_accelerators",
            f"no cluster of up to {most} accelerators runs a model this budget buys; allow more accelerators",
        )
    best = plans[wall_clock.chosen(tried, seconds, most_compute, days=budget.days)]
    run = _run_of(best)
    if run.run is None:  # at a given MFU: the count is the sizing
        return best
    sizing = Sizing(run.run, "budget", most, len(tried))
    return replace(best, estimate=replace(run, sizing=sizing))


def _run_of(plan: Plan) -> Estimate:
    assert plan.estimate is not None, "a plan on a cluster has its estimate"
    return plan.estimate


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
