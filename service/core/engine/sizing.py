"""Sizing a model to a budget on a cluster: a budget in money, hours or days buys FLOPs at the utilisation the
model it buys achieves, so the allocation is repeated until the two agree; without an accelerator count, each
candidate count is sized so and the policy chooses among them. The rounds allocate and model the run only;
the plan (caveats, intervals, hyperparameters, serving) is built once, for the answer
(docs/decisions/0004-sizing-offers-fast.md)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

from service.core import cluster, units, wall_clock
from service.core import validation as v
from service.core.engine.inputs import Budget, Cluster, Hardware, NamedLaw, price_of
from service.core.engine.limits import CLUSTER_LIMITS, DEFAULT_MFU
from service.core.engine.plans import Plan, Round, allocation_plan, sizing_round
from service.core.engine.rules import Rules, checked
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
    count is sized so, and of the plans within reach (wall_clock.chosen: the budget's days, or else a
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


@dataclass(frozen=True)
class _Answer:
    """A count's plan, before it is built: the cluster it is planned on (its count and utilisation), the
    compute it trains on and its run's seconds."""

    cluster: Cluster
    flops: float
    seconds: float


def _plan_on(budget: Budget, rules: Rules, on: Cluster) -> Plan:
    """The plan of a budget in money, hours or days on the cluster's accelerators."""
    if on.mfu is not None:  # the pace is given: the budget's FLOPs follow at once
        return allocation_plan(budget, rules, on)
    answer = _Sizer.of(budget, rules, on).answer(on)
    return allocation_plan(budget, rules, answer.cluster)


def _plan_choosing_count(budget: Budget, rules: Rules, on: Cluster) -> Plan:
    """The plan on the count `wall_clock.chosen` for a budget: of the counts whose plans are within reach,
    the one whose limits buy the most compute (of those within 0.1% of it, the fewest accelerators). Each
    count is sized in lean rounds (`_Sizer.answer`); the plan is built once, on the count chosen."""
    machine, _ = machine_of(on)
    most = on.max_accelerators or wall_clock.DEFAULT_MAX_ACCELERATORS
    counts = wall_clock.candidate_counts(machine.accelerators_per_node, most)
    answers: dict[int, _Answer] = {}  # by the index of their count
    refused: set[int] = set()  # indices of counts no plan fits

    def planned(indices: Iterable[int]) -> list[int]:
        """The indices of the counts planned so far that have a plan, after planning `indices`."""
        for index in sorted(set(indices) - answers.keys() - refused):
            try:
                count = replace(on, accelerators=counts[index])
                answers[index] = _Sizer.of(budget, rules, count).answer(count)
            except v.InvalidInput:
                refused.add(index)
        return sorted(answers)

    def seconds(index: int) -> float:
        return answers[index].seconds

    def flops(index: int) -> float:
        return answers[index].flops

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
    best = allocation_plan(
        budget, rules, answers[wall_clock.chosen(tried, seconds, most_compute, days=budget.days)].cluster
    )
    run = best.estimate
    assert run is not None, "a plan on a cluster has its estimate"
    if run.run is None:  # at a given MFU: the count is the sizing
        return best
    return replace(best, estimate=replace(run, sizing=Sizing(run.run, "budget", most, len(tried))))


@dataclass(frozen=True)
class _Tried:
    """A round at a rate (the utilisation the limits are turned into FLOPs at), and how far its run goes
    past the tightest limit (1: exactly at it)."""

    rate: float
    round: Round
    excess: float
    achieved: float  # the utilisation its run achieves: the allocation's FLOPs per accelerator-second

    @property
    def flops(self) -> float:
        return self.round.allocation.flops


@dataclass(frozen=True)
class _Sizer:
    """What sizing a budget on a cluster needs at every count: the rules checked, and the price."""

    budget: Budget
    rules: Rules
    price: Decimal | None

    @classmethod
    def of(cls, budget: Budget, rules: Rules, on: Cluster) -> _Sizer:
        price, _ = price_of(on.hardware, budget.price_per_hour, budget.currency)
        return cls(budget, checked(budget, rules), price)

    def answer(self, on: Cluster) -> _Answer:
        """The count's plan with the most compute within every limit that `_most_compute` finds; at a given
        MFU, the plan at it. Raises InvalidInput where a round does, or none keeps within the limits."""
        if on.mfu is not None:
            result = allocation_plan(self.budget, self.rules, on)
            assert result.estimate is not None, "a plan on a cluster has its estimate"
            return _Answer(on, result.allocation.flops, result.estimate.runtime.seconds)
        best = self._most_compute(on)
        if best is None:
            limit = next(name for name in CLUSTER_LIMITS if getattr(self.budget, name) is not None)
            raise v.InvalidInput(
                limit,
                f"buys no run on {on.accelerators} accelerators that the cluster model keeps within it, "
                "however small the model: give more, or fewer accelerators",
            )
        return _Answer(replace(on, utilisation=best.rate), best.flops, best.round.run.seconds)

    def _most_compute(self, on: Cluster) -> _Tried | None:
        """The round with the most compute whose run keeps within the limits that a safeguarded search
        finds: a utilisation r turns the limits into FLOPs; the achieved utilisation (over the excess, when
        a limit was passed) is the next r when it falls inside the bracket known so far, the bracket's
        geometric middle otherwise (plain repetition can oscillate: a larger model can be laid out less
        efficiently, and vice versa). It ends at a run spending 99.5-100% of the tightest limit, or a bracket
        0.5% wide.

        It starts at DEFAULT_MFU at every count, because where it starts decides what it finds: the shape
        assumed for a model changes every few tenths of a percent of its size, and the step time by up to
        ~15% with it, so the runs within the limits are not an interval of r (docs/decisions/0004)."""
        best: _Tried | None = None
        low, high = 0.0, 1.0
        rate = DEFAULT_MFU
        for _ in range(MAX_ROUNDS):
            tried = self._tried(on, rate)
            if tried.excess <= 1:
                low = rate
                if best is None or tried.flops > best.flops:
                    best = tried
                if tried.excess >= 1 - UTILISATION_TOLERANCE:
                    break
            else:
                high = rate
            if high / max(low, 1e-300) <= 1 + UTILISATION_TOLERANCE:
                break
            guess = tried.achieved / tried.excess
            rate = guess if low < guess < high else (math.sqrt(low * high) if low > 0 else high / 4)
        return best

    def _tried(self, on: Cluster, rate: float) -> _Tried:
        result = sizing_round(self.budget, self.rules, replace(on, utilisation=rate))
        run = result.run
        achieved = result.allocation.flops / (
            run.accelerator_hours * units.SECONDS_PER_HOUR * on.peak_flops_per_second
        )
        return _Tried(rate, result, self._excess(run), achieved)

    def _excess(self, run: wall_clock.ClusterRun) -> float:
        """How far the run goes past the budget's tightest limit (1: exactly at it; below 1: within). Its
        cost is priced whether or not money limits it: a plan refuses a run that costs more than any amount
        of money may reach, and so does a round."""
        budget, ratios = self.budget, [1e-300]
        cost = None if self.price is None else cluster.training_cost(run.accelerator_hours, self.price)
        if budget.cost is not None and cost is not None:
            ratios.append(float(cost) / float(budget.cost))
        if budget.accelerator_hours is not None:
            ratios.append(run.accelerator_hours / budget.accelerator_hours)
        if budget.days is not None:
            ratios.append(run.seconds / units.SECONDS_PER_DAY / budget.days)
        return max(ratios)
