"""A plan: a budget allocated by a rule at one utilisation of the cluster (`sizing` searches for it), or a
model already chosen; with the run's estimate, hyperparameter hints, intervals and caveats."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal

from service.core import allocate, caveats, hyper, units, wall_clock
from service.core.engine.estimate import Estimate, estimate, law_params
from service.core.engine.inputs import Budget, Cluster, NamedLaw
from service.core.engine.intervals import Intervals, intervals_over
from service.core.engine.limits import Limit, binding_caveat, limits, with_unspent
from service.core.engine.rules import InferenceSummary, Rules, allocated, checked, repetition_caveats
from service.core.engine.run import model_run
from service.core.engine.serving import serving
from service.core.hyper import Hyperparameters, hyperparameters_for
from service.core.wall_clock import ClusterRun


@dataclass(frozen=True)
class Plan:
    """An allocation and what follows from it. Its `caveats` are its own, then its estimate's."""

    method: str  # fixed-ratio, compute-optimal, data-constrained or inference-aware
    allocation: allocate.Allocation
    limits: list[Limit]
    law: NamedLaw | None
    inference: InferenceSummary | None
    estimate: Estimate | None
    hyperparameters: Hyperparameters
    caveats: list[caveats.Caveat] = field(default_factory=list)
    intervals: Intervals | None = None

    @property
    def pf_days(self) -> float:
        return self.allocation.flops / units.PF_DAY_FLOPS


def allocation_plan(budget: Budget, rules: Rules, on: Cluster | None) -> Plan:
    """One allocation of the budget by `rules` at the cluster's utilisation (see `sizing.plan`), and the
    estimate of its run when a cluster is given."""
    rules = checked(budget, rules)
    law = rules.law
    notes: list[caveats.Caveat] = []
    found: list[Limit] = []
    flops: float | None = None  # the training compute the budget allows; None when it is a target loss
    if budget.target_loss is None:
        found = limits(budget, on)
        flops = min(limit.flops for limit in found)
    allocation, method, inference = allocated(budget, rules, flops, None if law is None else law.law)
    if method == "data-constrained" and law is not None:
        notes += repetition_caveats(allocation, law)
    spread = (
        None
        if law is None
        else intervals_over(law.samples, lambda rule: allocated(budget, rules, flops, rule)[0])
    )
    if law is not None and law.fitted_range is not None:
        notes += caveats.extrapolation(
            law.fitted_range, allocation.params, allocation.tokens, allocation.flops, law.slug or "the law"
        )
    if inference is not None:
        served = serving(
            allocation.params,
            inference.inference_tokens,
            hardware=rules.inference_hardware,
            batch=rules.inference_batch,
            budget=budget,
            on=on,
        )
        inference = replace(inference, serving=served)
    run = None
    if on is not None:
        run_params, run_on, assumed = _the_model_the_law_sized(allocation, law, on)
        price, currency = budget.price_per_hour, budget.currency
        run = estimate(run_params, allocation.tokens, run_on, price_per_hour=price, currency=currency)
        notes += assumed + run.caveats
    if found:
        found = with_unspent(found, budget, allocation.flops, run)
        notes = binding_caveat(found) + notes
    return Plan(
        method=method,
        allocation=allocation,
        limits=found,
        law=law,
        inference=inference,
        estimate=run,
        hyperparameters=_hyperparameters(allocation, on),
        caveats=notes,
        intervals=spread,
    )


@dataclass(frozen=True)
class Round:
    """One round of a sizing: the allocation at the cluster's utilisation and its modelled run, without the
    rest of a plan (caveats, intervals, hyperparameters, serving), which is built once, for the answer."""

    allocation: allocate.Allocation
    run: ClusterRun


def sizing_round(budget: Budget, rules: Rules, on: Cluster) -> Round:
    """`allocation_plan`'s allocation and modelled run, and nothing else; `rules` are `checked` already."""
    flops = min(limit.flops for limit in limits(budget, on))
    law = rules.law
    allocation, _, _ = allocated(budget, rules, flops, None if law is None else law.law)
    run_params, run_on, _ = _the_model_the_law_sized(allocation, law, on)
    run, _, _, _ = model_run(run_params, allocation.tokens, run_on)
    return Round(allocation, run)


def _the_model_the_law_sized(
    allocation: allocate.Allocation, law: NamedLaw | None, on: Cluster
) -> tuple[float, Cluster, list[caveats.Caveat]]:
    """The parameters and cluster an allocation's run is modelled with. A mixture of experts the law sized
    (its experts, top-k, active parameters) or a law whose N leaves the embeddings out gets the assumed shape
    of that model, its embeddings counted on top (and said so); otherwise the allocation as it is."""
    if on.shape is not None or law is None or (law.moe is None and law.counts_embeddings):
        return allocation.params, on, []
    multiple = on.layout.get("tensor_parallel", 1)
    if allocation.active_params is not None and allocation.experts and allocation.experts_per_token:
        shape = wall_clock.designed_moe_shape(
            allocation.active_params,
            allocation.experts,
            allocation.experts_per_token,
            counts_embeddings=law.counts_embeddings,
            heads_multiple=multiple,
        )
    else:
        shape = wall_clock.assumed_shape_without_embeddings(allocation.params, heads_multiple=multiple)
    return shape.params, replace(on, shape=shape), [caveats.assumed_shape(shape)]


def fixed(
    params: float,
    tokens: float,
    on: Cluster,
    *,
    law: NamedLaw | None = None,
    price_per_hour: Decimal | None = None,
    currency: str | None = None,
) -> Plan:
    """A plan for a model already chosen: nothing to allocate, only the run to estimate (and, with a law,
    the loss to predict)."""
    run = estimate(params, tokens, on, price_per_hour=price_per_hour, currency=currency, law=law)
    allocation = allocate.Allocation(
        params=params, tokens=tokens, flops=run.runtime.flops, predicted_loss=run.predicted_loss
    )
    moe = run.shape if run.shape is not None and run.shape.mixture_of_experts else None
    if moe is not None:  # what the request gave, or the share of the modelled shape's
        active = on.active_params or params * moe.active_params / moe.params
        allocation = replace(
            allocation, active_params=active, experts=moe.experts, experts_per_token=moe.experts_per_token
        )
    return Plan(
        method="fixed",
        allocation=allocation,
        limits=[],
        law=law,
        inference=None,
        estimate=run,
        hyperparameters=_hyperparameters(allocation, on),
        caveats=list(run.caveats),
        intervals=None
        if law is None
        else intervals_over(
            law.samples,
            lambda rule: allocate.Allocation(
                params, tokens, run.runtime.flops, rule.loss(law_params(law, params, on), tokens)
            ),
            fixed=True,
        ),
    )


def _hyperparameters(allocation: allocate.Allocation, on: Cluster | None) -> Hyperparameters:
    """DeepSeek's hints at their own compute M·D when the model's shape is known, else at the plan's FLOPs,
    which are 6·N·D without a shape."""
    if on is None or on.shape is None:
        return hyperparameters_for(allocation.flops)
    flops = hyper.deepseek_flops(allocation.tokens, on.shape)
    return hyperparameters_for(flops, definition=hyper.DEEPSEEK_FLOPS)
