"""Comparing offers: what an hour of each pricing costs, and which runs no other beats on both time and cost.

A run on an offer takes `days` and costs `cost`. Run a beats run b when it is no slower and no dearer, and
better in one of the two; the Pareto frontier is the runs no other beats: for each one, the cheapest way to
finish that fast. A reserved offer is paid for its whole term whether the run uses it or not, so what it
costs is its price times its accelerators times the longer of the run and the term.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from service.core import validation as v

HOURS_PER_DAY = 24
# How long a preempted spot job waits for capacity before it restarts, when the offer does not say: no
# provider publishes it (docs/research/energy-and-offers.md, 4.3); half an hour is a judgement, and an offer
# of capacity that is scarce should state more.
DEFAULT_REQUEUE_SECONDS = 1_800.0


@dataclass(frozen=True)
class Point:
    """A run on an offer, as the frontier sees it."""

    key: str
    days: float
    cost: Decimal


def frontier(points: Sequence[Point]) -> list[str]:
    """The keys of the runs no other is both no slower and no dearer than (and better in one), fastest
    first; of runs equal in both, the first given."""
    ordered = sorted(points, key=lambda point: (point.days, point.cost))
    kept: list[Point] = []
    for point in ordered:
        if kept and point.cost >= kept[-1].cost:
            continue  # as slow or slower than the last kept, and no cheaper
        kept.append(point)
    return [point.key for point in kept]


def committed_cost(price_per_hour: Decimal, accelerators: int, run_hours: float, term_days: int) -> Decimal:
    """What a reservation of `accelerators` for `term_days` costs a run of `run_hours`: the whole term, or
    the run where it is longer (paid at the reserved price, as renewing the term would be)."""
    hours = max(v.positive("run_hours", run_hours), term_days * HOURS_PER_DAY)
    return (price_per_hour * accelerators * Decimal(repr(hours))).quantize(Decimal("0.01"))


def most_accelerators_reserved(budget: Decimal, price_per_hour: Decimal, term_days: int) -> int:
    """The most accelerators a reservation of `term_days` at `price_per_hour` keeps within `budget`."""
    if price_per_hour == 0:
        return 2**31
    return int(budget / (price_per_hour * term_days * HOURS_PER_DAY))


def owned_price_per_hour(capital_per_hour: Decimal, kwh_per_hour: float, price_per_kwh: Decimal) -> Decimal:
    """An owned accelerator's hour: its amortised capital and the energy it draws at the meter."""
    energy = Decimal(repr(v.in_range("kwh_per_hour", kwh_per_hour, 0.0, 1e3))) * price_per_kwh
    return (capital_per_hour + energy).quantize(Decimal("0.000001"))
