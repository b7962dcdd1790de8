"""A budget's limits as the FLOPs each allows: compute as given, money, accelerator-hours and days through
the cluster at a utilisation; the smallest binds."""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from service.core import caveats, units
from service.core import validation as v
from service.core.engine.inputs import Budget, Cluster, price_of

if TYPE_CHECKING:
    from service.core.engine.estimate import Estimate

# The MFU of plans that give one but no figure (the cluster model sets the pace otherwise), and where a budget
# in money, hours or days starts its search for what the model achieves.
DEFAULT_MFU = 0.4
CLUSTER_LIMITS = ("cost", "accelerator_hours", "days")


@dataclass(frozen=True)
class Limit:
    kind: str  # the request field that set it: flops, pf_days, cost, accelerator_hours or days
    flops: float
    binding: bool
    # The share of the limit the plan leaves unspent (of the money, hours or days its run takes, or the
    # compute allocated); None until the run is estimated, and for a limit the run does not measure.
    unspent: float | None = None


def limits(budget: Budget, on: Cluster | None) -> list[Limit]:
    """Each limit as the FLOPs it allows; the smallest binds."""
    if budget.flops is not None and budget.pf_days is not None:
        raise v.InvalidInput("pf_days", "give the compute budget once: flops or pf_days, not both")
    found: list[tuple[str, float]] = []
    if budget.flops is not None:
        found.append(("flops", units.budget_flops("flops", budget.flops)))
    if budget.pf_days is not None:
        found.append(("pf_days", units.pf_days_to_flops(budget.pf_days)))
    cluster_limits = [name for name in CLUSTER_LIMITS if getattr(budget, name) is not None]
    if cluster_limits:
        if on is None:
            raise v.InvalidInput("hardware", f"is required to turn {cluster_limits[0]} into compute")
        found += _cluster_limits(budget, on)
    if not found:
        raise v.InvalidInput(
            "flops", "give a budget: flops, pf_days, target_loss, cost, accelerator_hours or days"
        )
    smallest = min(flops for _, flops in found)
    binding = next(kind for kind, flops in found if flops == smallest)
    return [Limit(kind, flops, kind == binding) for kind, flops in found]


def _cluster_limits(budget: Budget, on: Cluster) -> list[tuple[str, float]]:
    """The limits that the cluster turns into FLOPs: cost, accelerator_hours and days."""
    found: list[tuple[str, float]] = []
    if budget.cost is not None:
        price, _ = price_of(on.hardware, budget.price_per_hour, budget.currency)
        if price is None:
            raise v.InvalidInput(
                "hardware", f"{on.hardware.name} has no price; give price_per_hour and currency"
            )
        if budget.currency is None:
            raise v.InvalidInput("currency", "is required with cost")
        hours = units.accelerator_hours_for_cost(budget.cost, price)
        found.append(("cost", _flops_for_hours("cost", hours, on)))
    if budget.accelerator_hours is not None:
        hours = v.positive("accelerator_hours", budget.accelerator_hours)
        found.append(("accelerator_hours", _flops_for_hours("accelerator_hours", hours, on)))
    if budget.days is not None:
        if on.accelerators is None:
            raise v.InvalidInput("accelerators", "is required to turn days into compute")
        flops = units.flops_for_deadline(budget.days, on.accelerators, on.peak_flops_per_second, _rate(on))
        found.append(("days", units.budget_flops("days", flops)))
    return found


def _rate(on: Cluster) -> float:
    """The utilisation a budget in money, hours or days is turned into FLOPs at: the MFU given, or what the
    cluster model achieves (found by `plan`), or DEFAULT_MFU as the first guess."""
    if on.mfu is not None:
        return on.mfu
    return DEFAULT_MFU if on.utilisation is None else min(on.utilisation, 1.0)


def _flops_for_hours(argument: str, hours: float, on: Cluster) -> float:
    flops = units.flops_for_accelerator_hours(hours, on.peak_flops_per_second, _rate(on))
    if not units.MIN_FLOPS <= flops <= units.MAX_FLOPS:
        raise v.InvalidInput(
            argument,
            f"buys {flops:.3g} FLOPs on this cluster; a budget must be "
            f"{units.MIN_FLOPS:g} to {units.MAX_FLOPS:g}",
        )
    return flops


def with_unspent(found: list[Limit], budget: Budget, flops: float, run: Estimate | None) -> list[Limit]:
    """The limits with the share of each the plan leaves unspent (a model size and token count are whole
    numbers of what the budget buys, and a run's pace is not exactly the one the limit was turned into FLOPs
    at)."""
    return [
        replace(limit, unspent=_share_left(*_used_and_allowed(limit, budget, flops, run))) for limit in found
    ]


def _used_and_allowed(limit: Limit, budget: Budget, flops: float, run: Estimate | None) -> tuple[Any, Any]:
    """What the plan uses of a limit and what the limit allows, in its own unit: the compute allocated
    against a compute limit, else its run's cost, accelerator-hours or days (None, None without a run to
    measure, or a cost in another currency)."""
    if limit.kind in ("flops", "pf_days"):
        return flops, limit.flops
    if run is None:
        return None, None
    if limit.kind == "cost":
        same_currency = budget.currency is None or run.currency in (None, budget.currency)
        return (run.cost if same_currency else None), budget.cost
    return getattr(run.runtime, limit.kind), getattr(budget, limit.kind)  # accelerator_hours or days


def _share_left(used: Any, limit: Any) -> float | None:
    if used is None or limit is None or not limit:
        return None
    # To a millionth: what float sums leave of an exact fit (-5e-15) is not a run past its limit.
    return round(float(1 - Decimal(str(used)) / Decimal(str(limit))), 6) + 0.0


def binding_caveat(limits: list[Limit]) -> list[caveats.Caveat]:
    if len(limits) < 2:
        return []
    binding = next(limit for limit in limits if limit.binding)
    others = ", ".join(f"{limit.kind} would allow {limit.flops:.3g}" for limit in limits if not limit.binding)
    left = "" if binding.unspent is None else f"; the plan leaves {binding.unspent:.2%} of it unspent"
    return [
        caveats.Caveat(
            caveats.BINDING_LIMIT,
            f"The {binding.kind} limit binds at {binding.flops:.3g} FLOPs ({others}){left}.",
            {"binding": binding.kind, "flops": binding.flops, "unspent": binding.unspent},
        )
    ]
