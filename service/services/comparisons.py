"""Comparing offers for one run: each offer sized (the count that meets the deadline or spends the money, with
its layout), costed under its pricing, with its energy and emissions; ranked, and the frontier of days
against cost. Nothing is stored.

The run is a model already chosen (`params` and `tokens`: the fewest accelerators that finish by `days`; or,
with `cost` and no deadline, the most that keep within it, so the fastest for the money; or else the count
the engine chooses), or a budget (`cost`, `days`, `flops`) the engine allocates by a law on each offer, as
POST /v1/allocations does on a hardware profile.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeGuard

from sqlalchemy.orm import Session

from service.core import compare, engine, wall_clock
from service.core.energy import RunEnergy
from service.core.validation import InvalidInput
from service.data.models import Offer
from service.services import planning
from service.services.documents import format_money
from service.services.energy import SiteRequest, estimate_energy, hours_energy
from service.services.errors import InvalidFieldError
from service.services.offers import OfferFilter, find_offers
from service.services.plan_documents import layout_document

MAX_OFFERS = 50  # a comparison sizes each one: about 0.05 s apiece
RANKINGS = ("cost", "days", "compute")


@dataclass(frozen=True, kw_only=True)
class ComparisonRequest:
    """What OfferComparisonRequestSchema loads: the run, the offers it may go to, and how to rank them."""

    params: float | None = None
    tokens: float | None = None
    cost: Decimal | None = None
    currency: str = "USD"
    days: float | None = None
    flops: float | None = None
    law: str | None = None
    tokens_per_param: float | None = None
    hardware: Sequence[str] | None = None
    provider: Sequence[str] | None = None
    region: Sequence[str] | None = None
    pricing: Sequence[str] | None = None
    offers: Sequence[str] | None = None  # slugs
    rank_by: str | None = None  # None: compute for a budget, cost for a model
    precision: str | None = None
    max_accelerators: int | None = None


@dataclass(frozen=True)
class Sized:
    """An offer with the run it can take: its estimate (and the plan, for a budget), what it costs under
    the offer's pricing, its energy; or why it cannot take it."""

    offer: Offer
    run: engine.Estimate | None = None
    plan: engine.Plan | None = None
    cost: Decimal | None = None  # what is paid: a reservation's whole term
    energy: RunEnergy | None = None
    notes: tuple[str, ...] = ()
    reason: str | None = None  # why the offer cannot take the run

    @property
    def days(self) -> float:
        assert self.run is not None, "only offers that take the run have days"
        return self.run.runtime.days

    @property
    def flops(self) -> float:
        assert self.run is not None, "only offers that take the run have its compute"
        return self.run.runtime.flops


# How offers are ranked, best first: the cheapest (ties: the fastest); the fastest (ties: the cheapest); the
# most training compute, so the lowest loss, a budget buys (ties: the cheapest).
RANKING_KEYS: dict[str, Callable[[Sized], tuple[Any, ...]]] = {
    "cost": lambda result: (result.cost, result.days),
    "days": lambda result: (result.days, result.cost),
    "compute": lambda result: (-result.flops, result.cost),
}


@dataclass(frozen=True)
class Comparison:
    rank_by: str
    currency: str
    ranked: list[Sized]  # the offers that take the run, best first
    frontier: list[str]  # slugs of the offers no other beats on days and cost, fastest first
    unable: list[Sized]


def compare_offers(session: Session, request: ComparisonRequest, *, scope: uuid.UUID | None) -> Comparison:
    chosen = OfferFilter(
        hardware=_given(request.hardware),
        provider=_given(request.provider),
        region=_given(request.region),
        pricing=_given(request.pricing),
        slugs=_given(request.offers),
    )
    offers = find_offers(session, chosen, most=MAX_OFFERS + 1)
    if len(offers) > MAX_OFFERS:
        raise InvalidFieldError(
            (), f"More than {MAX_OFFERS} offers match; narrow them by hardware, provider, region or pricing."
        )
    law = planning.resolve_law(session, request.law, scope=scope) if request.law is not None else None
    # Offers of one hardware profile one after the other: their layout searches are the same.
    sized = [_sized(offer, request, law) for offer in sorted(offers, key=lambda o: (o.hardware.slug, o.slug))]
    able = [result for result in sized if result.reason is None]
    rank_by = request.rank_by or ("cost" if request.params is not None else "compute")
    ranked = sorted(able, key=RANKING_KEYS[rank_by])
    points = [
        compare.Point(result.offer.slug, result.days, result.cost)
        for result in ranked
        if result.cost is not None
    ]
    return Comparison(
        rank_by=rank_by,
        currency=request.currency,
        ranked=ranked,
        frontier=compare.frontier(points),
        unable=[result for result in sized if result.reason is not None],
    )


def _given(values: Sequence[str] | None) -> tuple[str, ...] | None:
    return tuple(values) if values else None


def _sized(offer: Offer, request: ComparisonRequest, law: engine.NamedLaw | None) -> Sized:
    price = offer.current_price
    if price is None:
        return Sized(offer, reason="it has no price in force")
    if price.currency != request.currency:
        return Sized(
            offer,
            reason=f"it is priced in {price.currency}, the comparison in {request.currency}: amounts in "
            "different currencies are never mixed",
        )
    try:
        hourly, notes = _hourly_price(offer)
        on = _cluster(offer, request, hourly)
        run, plan = _run(on, request, law)
        paid = _paid(offer, run)
        if (
            offer.pricing == "reserved"
            and request.cost is not None
            and paid is not None
            and paid > request.cost
        ):
            # A reservation is paid for its term: fewer accelerators keep the whole of it within the money.
            most = compare.most_accelerators_reserved(request.cost, hourly, offer.term_days or 1)
            if most < 1:
                return Sized(
                    offer,
                    reason=f"its {offer.term_days}-day term costs more than the budget on one accelerator",
                )
            run, plan = _run(
                dataclasses.replace(on, max_accelerators=min(most, on.max_accelerators or most)), request, law
            )
            paid = _paid(offer, run)
    except InvalidInput as error:
        return Sized(offer, reason=f"{error.argument}: {error.message}")
    if request.cost is not None and paid is not None and paid > request.cost:
        return Sized(
            offer, reason=f"the run costs {paid} {request.currency}, over the budget's {request.cost}"
        )
    energy, energy_notes = _energy(offer, run)
    return Sized(offer, run=run, plan=plan, cost=paid, energy=energy, notes=(*notes, *energy_notes))


def _hourly_price(offer: Offer) -> tuple[Decimal, tuple[str, ...]]:
    """An accelerator-hour of the offer: its price, and an owned one's energy at the meter."""
    price = offer.current_price
    assert price is not None, "an offer without a price is not sized"
    if offer.pricing != "owned":
        return price.price_per_hour, ()
    assert price.price_per_kwh is not None, "an owned offer's price has the energy's (OfferSchema)"
    drawn = hours_energy(
        1.0, hardware=offer.hardware.slug, tdp_watts=offer.hardware.tdp_watts, site=_site(offer, grid=False)
    )
    if drawn.energy is None:
        raise InvalidInput(
            "hardware", f"{offer.hardware.slug} states no power figure: its energy cannot be priced"
        )
    hourly = compare.owned_price_per_hour(price.price_per_hour, drawn.energy.energy_kwh, price.price_per_kwh)
    drawn_kwh = drawn.energy.energy_kwh
    note = f"an accelerator-hour draws {drawn_kwh:.3g} kWh at the meter, at {price.price_per_kwh} a kWh"
    return hourly, (note,)


def _cluster(offer: Offer, request: ComparisonRequest, hourly: Decimal) -> engine.Cluster:
    hardware = planning.hardware_of(offer.hardware, offer.hardware.slug)
    hardware = dataclasses.replace(hardware, price_per_hour=hourly, currency=offer.currency)
    spot = offer.pricing == "spot"
    return engine.Cluster(
        hardware=hardware,
        precision=request.precision or engine.DEFAULT_PRECISION,
        max_accelerators=request.max_accelerators,
        count_multiple=offer.accelerators_per_instance,  # instances are rented whole
        preemptions_per_accelerator_hour=(offer.preemptions_per_instance_hour or 0.0)
        / offer.accelerators_per_instance
        if spot
        else 0.0,
        requeue_seconds=(
            compare.DEFAULT_REQUEUE_SECONDS if offer.requeue_seconds is None else offer.requeue_seconds
        )
        if spot
        else 0.0,
    )


def _run(
    on: engine.Cluster, request: ComparisonRequest, law: engine.NamedLaw | None
) -> tuple[engine.Estimate, engine.Plan | None]:
    """The run the request asks of the offer's cluster, and the plan when it is a budget's."""
    if request.params is None:
        budget = engine.Budget(
            flops=request.flops, cost=request.cost, currency=request.currency, days=request.days
        )
        plan = engine.plan(budget, tokens_per_param=request.tokens_per_param, law=law, on=on)
        assert plan.estimate is not None, "a plan on a cluster has its estimate"
        return plan.estimate, plan
    params, tokens = request.params, request.tokens
    assert tokens is not None, "OfferComparisonRequestSchema requires tokens with params"
    if request.days is None and request.cost is not None:
        return _fastest_within(params, tokens, request.cost, on, law), None
    return engine.estimate(params, tokens, dataclasses.replace(on, deadline_days=request.days), law=law), None


def _fastest_within(
    params: float, tokens: float, money: Decimal, on: engine.Cluster, law: engine.NamedLaw | None
) -> engine.Estimate:
    """The fastest run within `money`: a bisection over the counts the engine chooses among finds the most
    accelerators whose cost keeps within it (more accelerators cost more, as each one's share of the work
    shrinks and the communication grows), and the fastest of it and the two counts below is the answer."""
    machine, _ = engine.machine_of(on)
    counts = wall_clock.candidate_counts(
        machine.accelerators_per_node,
        on.max_accelerators or wall_clock.DEFAULT_MAX_ACCELERATORS,
        on.count_multiple,
    )

    @functools.cache  # the bisection's last counts are looked at again below
    def run_on(count: int) -> engine.Estimate | None:
        try:
            return engine.estimate(params, tokens, dataclasses.replace(on, accelerators=count), law=law)
        except InvalidInput:  # no layout of so few accelerators fits the model
            return None

    low, high, most = 0, len(counts) - 1, None
    while low <= high:
        middle = (low + high) // 2
        run = run_on(counts[middle])
        if run is None:
            low = middle + 1
        elif _within(run, money):
            most, low = middle, middle + 1
        else:
            high = middle - 1
    if most is None:
        raise InvalidInput("cost", f"no cluster of this offer trains the model within {money}")
    # The most accelerators are not always the fastest: a count whose nodes factor badly (a prime number of
    # them) lays the model out worse than one a step below, and far past what a model needs, communication
    # grows faster than each one's share of the work shrinks. Of the count found and the two below, the
    # fastest.
    nearby = [run for run in map(run_on, counts[max(0, most - 2) : most + 1]) if _within(run, money)]
    return min(nearby, key=lambda run: run.runtime.seconds)


def _within(run: engine.Estimate | None, money: Decimal) -> TypeGuard[engine.Estimate]:
    return run is not None and run.cost is not None and run.cost <= money


def _paid(offer: Offer, run: engine.Estimate) -> Decimal | None:
    """What the run costs as paid under the offer's pricing (`_paid_at` of its cost)."""
    return None if run.cost is None else _paid_at(offer, run, run.cost)


def _site(offer: Offer, *, grid: bool = True) -> SiteRequest:
    region = offer.grid_region or (f"{offer.provider}:{offer.region}" if offer.region else None)
    return SiteRequest(region=region if grid else None, pue=offer.pue)


def _energy(offer: Offer, run: engine.Estimate) -> tuple[RunEnergy, tuple[str, ...]]:
    """The run's energy at the offer's site; without a carbon figure for its region, without emissions (and a
    note saying so) rather than without the offer."""
    site = _site(offer)
    try:
        return estimate_energy(run, tdp_watts=offer.hardware.tdp_watts, site=site), ()
    except InvalidInput as error:
        if error.argument != "site.region":
            raise
    return (
        estimate_energy(run, tdp_watts=offer.hardware.tdp_watts, site=_site(offer, grid=False)),
        (f"no carbon figure for region {site.region!r}: no emissions (set the offer's grid_region)",),
    )


# --- Documents (schemas/comparisons.py describes them) ----------------------------------------------------


def comparison_document(comparison: Comparison) -> dict[str, Any]:
    on_frontier = set(comparison.frontier)
    return {
        "rank_by": comparison.rank_by,
        "currency": comparison.currency,
        "offers": [
            {"rank": rank, "on_frontier": result.offer.slug in on_frontier, **_row(result)}
            for rank, result in enumerate(comparison.ranked, start=1)
        ],
        "frontier": comparison.frontier,
        "unable": [
            {**_offer_document(result.offer), "reason": result.reason} for result in comparison.unable
        ],
    }


def _offer_document(offer: Offer) -> dict[str, Any]:
    return {
        "offer": offer.slug,
        "hardware": offer.hardware.slug,
        "provider": offer.provider,
        "region": offer.region,
        "pricing": offer.pricing,
        "instance_type": offer.instance_type,
    }


def _row(result: Sized) -> dict[str, Any]:
    run = result.run
    assert run is not None, "only offers that take the run are ranked"
    best = run.run.search.best if run.run is not None else None
    goodput = run.run.goodput if run.run is not None else None
    spread = run.intervals
    return {
        **_offer_document(result.offer),
        "price_per_hour": run.price_per_hour,
        "term_days": result.offer.term_days,
        "accelerators": run.accelerators,
        "params": run.params,
        "tokens": run.tokens,
        "flops": run.runtime.flops,
        "predicted_loss": result.plan.allocation.predicted_loss
        if result.plan is not None
        else run.predicted_loss,
        "days": run.runtime.days,
        "accelerator_hours": run.runtime.accelerator_hours,
        "run_cost": run.cost,
        "cost": result.cost,
        "intervals": None
        if spread is None
        else {
            "confidence": spread.confidence,
            "days": list(spread.days),
            "cost": None
            if spread.cost is None
            else [_paid_at(result.offer, run, bound) for bound in spread.cost],
        },
        "mfu": run.mfu,
        "layout": None if best is None else layout_document(best.layout),
        "goodput": None
        if goodput is None
        else {
            "useful_fraction": goodput.useful_fraction,
            "interruptions": goodput.interruptions,
            "preemptions": goodput.preemptions,
            "checkpoint_interval_seconds": None
            if goodput.checkpoint_interval_seconds == float("inf")
            else goodput.checkpoint_interval_seconds,
        },
        "energy": result.energy,  # EnergySchema shows it
        "notes": list(result.notes),
        "plan": _plan_request(result),
    }


def _plan_request(result: Sized) -> dict[str, Any]:
    """The body of POST /v1/plans that keeps this run as a plan (less its organisation): the model on the
    offer's hardware, count and hourly price, a spot offer's preemptions, the site its energy was counted at,
    and the offer in its labels."""
    offer, run = result.offer, result.run
    assert run is not None, "only offers that take the run are saved"
    on = run.cluster
    body: dict[str, Any] = {
        "name": f"{run.params:.3g} parameters on {offer.slug}",
        "labels": {"offer": offer.slug, "pricing": offer.pricing},
        "params": run.params,
        "tokens": run.tokens,
        "hardware": offer.hardware.slug,
        "accelerators": run.accelerators,
        "precision": on.precision,
        "price_per_hour": format_money(run.price_per_hour) if run.price_per_hour is not None else None,
        "currency": run.currency,
    }
    if on.preemptions_per_accelerator_hour:
        body["reliability"] = {
            "preemptions_per_accelerator_hour": on.preemptions_per_accelerator_hour,
            "requeue_seconds": on.requeue_seconds,
        }
    site = _site(offer, grid=result.energy is not None and result.energy.site.grid is not None)
    body["site"] = {
        name: value for name, value in (("region", site.region), ("pue", site.pue)) if value is not None
    }
    return {name: value for name, value in body.items() if value not in (None, {})}


def _paid_at(offer: Offer, run: engine.Estimate, run_cost: Decimal) -> Decimal:
    """`run_cost` (the run's, or a bound of its interval) as paid under the offer's pricing: a reservation's
    whole term at least (its hours are the cost's at the run's price and count)."""
    if offer.pricing != "reserved" or run.price_per_hour in (None, 0) or offer.term_days is None:
        return run_cost
    assert run.price_per_hour is not None
    hours = float(run_cost / (run.price_per_hour * run.accelerators))
    return compare.committed_cost(run.price_per_hour, run.accelerators, max(hours, 1e-9), offer.term_days)
