"""Sizing a model to a budget on a cluster: a budget in money, hours or days buys FLOPs at the utilisation the
model it buys achieves, so the allocation is repeated until the two agree; without an accelerator count, each
candidate count is sized so and the policy chooses among them. The rounds allocate and model the run only;
the plan (caveats, intervals, hyperparameters, serving) is built once, for the answer
(docs/decisions/0004-sizing-offers-fast.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
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
    """The plan on the count `wall_clock.chosen` for a budget: of the counts planned whose plans are within
    reach, the one whose limits buy the most compute (of those within 0.1% of it, the fewest accelerators).
    Which counts are planned is `_Counts.climb`'s (a dense model) or `_Counts.scan`'s (a mixture of
    experts). Each count is sized in lean rounds (`_Sizer.answer`); the plan is built once, on the count
    chosen."""
    machine, _ = machine_of(on)
    most = on.max_accelerators or wall_clock.DEFAULT_MAX_ACCELERATORS
    sizer = _Sizer.of(budget, rules, on)
    candidates = wall_clock.candidate_counts(machine.accelerators_per_node, most, on.count_multiple)
    counts = _Counts(candidates, sizer, on, budget.days)
    if rules.law is not None and rules.law.moe is not None:
        counts.scan()
    else:
        counts.climb(_anchor(counts.counts, budget, sizer.price))
    best = counts.best()
    if best is None:
        raise v.InvalidInput(
            "max_accelerators",
            f"no cluster of up to {most} accelerators runs a model this budget buys; allow more accelerators",
        )
    result = allocation_plan(budget, rules, counts.answers[best].cluster)
    run = result.estimate
    assert run is not None, "a plan on a cluster has its estimate"
    if run.run is None:  # at a given MFU: the count is the sizing
        return result
    sizing = Sizing(run.run, "budget", most, len(counts.answers))
    return replace(result, estimate=replace(run, sizing=sizing))


def _anchor(counts: Sequence[int], budget: Budget, price: Decimal | None) -> int:
    """The index of the count nearest (by ratio) to the one whose run spends the budget's accelerator-hours
    (its money at the price, or its hours, whichever fewer) in exactly its days, or a year without a
    deadline: fewer accelerators cannot use the money in time, more run at a lower utilisation for the
    same money. A budget of days only buys the more the more accelerators run it: the largest count."""
    hours = [] if budget.accelerator_hours is None else [budget.accelerator_hours]
    if budget.cost is not None and price:
        hours.append(float(budget.cost / price))
    if not hours:
        return len(counts) - 1
    days = wall_clock.LONGEST_RUN_DAYS if budget.days is None else budget.days
    balanced = max(min(hours) / (days * 24.0), 1.0)
    return min(range(len(counts)), key=lambda index: abs(math.log(counts[index] / balanced)))


# Counts planned either side of the anchor before the climb: a dense model's compute against the count has
# dips of up to ~10% at counts whose nodes factor badly (a prime number of nodes leaves the pipeline and
# data-parallel degrees one way to split them), which a window of one either side stopped at (every 5th
# budget of the sizing grid against a scan of every count, docs/decisions/0004: 13% less compute at worst
# with one, 5% with two).
WINDOW = 2


@dataclass
class _Counts:
    """The candidate counts of a budget's sizing, and the answers of those planned (by index)."""

    counts: list[int]
    sizer: _Sizer
    on: Cluster
    days: float | None
    answers: dict[int, _Answer] = field(default_factory=dict)
    refused: set[int] = field(default_factory=set)  # no plan fits

    def plan(self, index: int, start: float = DEFAULT_MFU) -> bool:
        """Plan the count at `index` (once), its search for the utilisation starting at `start`; whether it
        has a plan."""
        if index not in self.answers and index not in self.refused:
            try:
                on = replace(self.on, accelerators=self.counts[index])
                self.answers[index] = self.sizer.answer(on, start)
            except v.InvalidInput:
                self.refused.add(index)
        return index in self.answers

    def best(self) -> int | None:
        """The count `wall_clock.chosen` among those planned: within reach, the most compute (of those
        within 0.1% of it, the fewest accelerators)."""
        if not self.answers:
            return None
        return wall_clock.chosen(sorted(self.answers), self._seconds, self._fewest_most, days=self.days)

    def climb(self, anchor: int) -> None:
        """A dense model's counts: the anchor and WINDOW counts either side, then one more count at a time
        beyond whichever end holds the best (more accelerators while none has a plan) until the best is
        inside. The compute rises with the count while the deadline binds and falls slowly once money
        does, so the best is near the anchor (`_anchor`). The anchor's search starts at DEFAULT_MFU and
        the others' at the utilisation the anchor's run achieved: they are a few percent apart, and a
        search that starts near its answer takes 3-4 rounds instead of 5-6."""
        start = DEFAULT_MFU
        if self.plan(anchor):
            start = self.answers[anchor].cluster.utilisation or DEFAULT_MFU  # None at a given MFU
        low, high = max(0, anchor - WINDOW), min(len(self.counts) - 1, anchor + WINDOW)
        for index in range(low, high + 1):
            self.plan(index, start)
        while True:
            best = self.best()
            if best in (None, high) and high < len(self.counts) - 1:
                high += 1
                self.plan(high, start)
            elif best in (None, low) and low > 0:
                low -= 1
                if not self.plan(low, start) and best is not None:
                    return  # fewer accelerators than a count no plan fits: none fit either
            else:
                return

    def scan(self) -> None:
        """A mixture of experts' counts: every doubling, then every count around the best doubling. Its
        compute jumps by up to 30% between neighbouring counts (the experts must spread evenly over the
        data-parallel ranks), so the climb's best-inside-a-window stops short (docs/decisions/0004)."""
        step = wall_clock.COUNT_STEPS_PER_DOUBLING
        for index in {*range(0, len(self.counts), step), len(self.counts) - 1}:
            self.plan(index)
        around = 0
        if self.answers:
            around = wall_clock.chosen(
                sorted(self.answers),
                self._seconds,
                lambda within: max(within, key=lambda i: (self.answers[i].flops, -i)),
                days=self.days,
            )
        for index in range(max(0, around - step + 1), min(len(self.counts), around + step)):
            self.plan(index)

    def _seconds(self, index: int) -> float:
        return self.answers[index].seconds

    def _fewest_most(self, within: Sequence[int]) -> int:
        most = max(self.answers[index].flops for index in within)
        return min(
            (index for index in within if self.answers[index].flops >= most * (1 - 1e-3)),
            key=self.counts.__getitem__,
        )


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

    def answer(self, on: Cluster, start: float = DEFAULT_MFU) -> _Answer:
        """The count's plan with the most compute within every limit that `_most_compute` finds; at a given
        MFU, the plan at it. Raises InvalidInput where a round does, or none keeps within the limits."""
        if on.mfu is not None:
            result = allocation_plan(self.budget, self.rules, on)
            assert result.estimate is not None, "a plan on a cluster has its estimate"
            return _Answer(on, result.allocation.flops, result.estimate.runtime.seconds)
        best = self._most_compute(on, start)
        if best is None:
            limit = next(name for name in CLUSTER_LIMITS if getattr(self.budget, name) is not None)
            raise v.InvalidInput(
                limit,
                f"buys no run on {on.accelerators} accelerators that the cluster model keeps within it, "
                "however small the model: give more, or fewer accelerators",
            )
        return _Answer(replace(on, utilisation=best.rate), best.flops, best.round.run.seconds)

    def _most_compute(self, on: Cluster, start: float) -> _Tried | None:
        """The round with the most compute whose run keeps within the limits that a safeguarded search
        finds. A utilisation r turns the limits into FLOPs, and the run of the model they buy achieves a
        utilisation a, so it spends r/a of the tightest limit (its excess): the run that spends exactly the
        limit is a fixed point r = a. The next r is a when the run kept within the limits, and a over the
        excess when it passed one (a step further down, to land within); the bracket's geometric middle when
        that falls outside the bracket known so far (a larger model can be laid out less efficiently, and
        vice versa). It ends at a run spending 99.5-100% of the tightest limit, or a bracket 0.5% wide.

        It starts at `start`: DEFAULT_MFU, or near the utilisation a neighbouring count achieved
        (`_Counts.climb`). Until engine 2.5 the next r was a over the excess on either side: below the limit
        that overshoots, to about as far past as the round before was below, and the rounds alternated until
        the bracket closed (docs/decisions/0004)."""
        best: _Tried | None = None
        low, high = 0.0, 1.0
        rate = start
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
            guess = tried.achieved / tried.excess if tried.excess > 1 else tried.achieved
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
