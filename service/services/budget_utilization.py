"""A budget's utilisation: how much of it committed plans take month by month over its period, how fast it is
committed and when, at that pace, its amount runs out. For the budget's owner and the finance teams who
watch it (GET /v1/budgets/{id}/utilization, and the console's budget page).

A month's figure is the money the budget's ledger holds for its plans (committed, running, completed or
failed: a plan's cost until its run finishes, then what it spent of it), each plan's spread over its schedule
pro rata to time as the cost report spreads it (reports.planned_sums): the months add up to the budget's
`committed`. The burn rate is `committed` over the days of its period elapsed; a period that has ended runs
out on no date.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from sqlalchemy.orm import Session

from service.core.units import CENT
from service.data.models import Budget
from service.services.budgets import get_budget
from service.services.reports import CostQuery, planned_sums

LAST_DAY = datetime(9999, 1, 1, tzinfo=UTC)
MAX_LISTED_MONTHS = 1200


@dataclass(frozen=True)
class MonthUse:
    month: str  # YYYY-MM
    plans: int
    committed: Decimal
    cumulative: Decimal


@dataclass(frozen=True)
class Utilization:
    budget: Budget
    as_of: datetime
    months: list[MonthUse]
    burn_rate_per_day: Decimal | None  # committed over the days of the period elapsed; None before it starts
    runs_out_at: datetime | None  # when the amount is spent at that rate; None if it never is


def utilization(
    session: Session, budget_id: uuid.UUID, *, scope: uuid.UUID | None, now: datetime
) -> Utilization:
    """A budget's committed money month by month over its period (each plan's spread over its schedule), and
    its burn rate."""
    budget = get_budget(session, budget_id, scope=scope)
    query = CostQuery(
        start=budget.period_start, end=budget.period_end, granularity="month", budget_id=budget.id
    )
    found = {
        f"{period:%Y-%m}": (plans, cost)
        for period, _currency, plans, _hours, _flops, cost, *_energy in planned_sums(
            session, query, scope, charged=True
        ).rows
    }
    months, cumulative = [], Decimal(0)
    for month in _months(budget.period_start, budget.period_end) or sorted(found):
        plans, committed = found.get(month, (0, None))
        committed = committed or Decimal(0)
        cumulative += committed
        months.append(MonthUse(month, plans, committed, cumulative))
    elapsed = (min(now, budget.period_end) - budget.period_start).total_seconds() / 86_400
    if elapsed <= 0:
        return Utilization(budget, now, months, None, None)
    rate = budget.committed / Decimal(elapsed)
    runs_out = None
    days_left = (LAST_DAY - budget.period_start).days
    # A period that has ended commits nothing more: it runs out on no date.
    if now < budget.period_end and rate > 0 and budget.amount / rate < days_left:
        runs_out = budget.period_start + timedelta(days=float(budget.amount / rate))
    return Utilization(budget, now, months, rate.quantize(CENT, ROUND_HALF_UP), runs_out)


def _months(start: datetime, end: datetime) -> list[str]:
    """Every month (YYYY-MM) that [start, end) touches; [] if more than MAX_LISTED_MONTHS."""
    first, last = start.year * 12 + start.month - 1, end.year * 12 + end.month - 1
    if end == datetime(end.year, end.month, 1, tzinfo=UTC):
        last -= 1  # a period ending at midnight on the 1st does not touch that month
    if last - first >= MAX_LISTED_MONTHS:
        return []
    return [f"{index // 12:04d}-{index % 12 + 1:02d}" for index in range(first, last + 1)]
