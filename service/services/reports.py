"""Cost reports: what plans cost, summed in the database by period and group, money exact.

A plan counts in the period of its `start_at` (when its spend begins): the window [from, to) and the day,
week (ISO, from Monday) or month buckets are in UTC. Amounts are summed as NUMERIC on PostgreSQL and as
integer millionths on SQLite (see models.Money), so totals are exact; the currency is always part of a row's
group, so amounts in different currencies are never added together.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, TypeVarTuple

from sqlalchemy import ColumnElement, Integer, Label, Select, SQLColumnExpression, String, cast, func, select
from sqlalchemy.orm import Session

from service.core.units import CENT
from service.models import MONEY_SCALE, Budget, HardwareProfile, Organization, Plan, PlanStatus, id_by_slug
from service.services.budgets import get_budget
from service.services.errors import InvalidParameterError

GRANULARITIES = ("day", "week", "month", "none")
GROUPS = ("organization", "budget", "hardware", "status")  # and label:<key>
MAX_ROWS = 100_000
MILLION = 10**MONEY_SCALE
LAST_DAY = datetime(9999, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class CostQuery:
    start: datetime  # inclusive
    end: datetime  # exclusive
    granularity: str = "none"
    group_by: tuple[str, ...] = ()
    organization: str | None = None
    budget_id: uuid.UUID | None = None
    hardware: str | None = None
    status: str = PlanStatus.COMMITTED


@dataclass
class Totals:
    currency: str | None
    plans: int = 0
    accelerator_hours: float = 0.0
    flops: float = 0.0
    cost: Decimal | None = None


METRICS = ("currency", "plans", "accelerator_hours", "flops", "cost", "estimated")


@dataclass
class CostReport:
    query: CostQuery
    rows: list[dict[str, Any]]
    totals: list[Totals] = field(default_factory=list)

    @property
    def columns(self) -> list[str]:
        """Each row's members, in order: the period, the groups, then the metrics (as in the CSV)."""
        period = [] if self.query.granularity == "none" else ["period_start", "period_end"]
        return [*period, *self.query.group_by, *METRICS]


def cost_report(session: Session, query: CostQuery, *, scope: uuid.UUID | None) -> CostReport:
    """Plans starting in [start, end), grouped by period and `group_by`, with their sums per currency."""
    dialect = session.get_bind().dialect.name
    period = _period(query.granularity, dialect)
    groups = [_group_column(name) for name in query.group_by]
    keys: list[SQLColumnExpression[Any]] = [*([period] if period is not None else []), *groups, Plan.currency]
    stmt = (
        select(
            *keys,
            func.count().label("plans"),
            func.sum(Plan.accelerator_hours).label("accelerator_hours"),
            func.sum(Plan.flops).label("flops"),
            *_cost_sums(dialect),
        )
        .where(Plan.start_at >= query.start, Plan.start_at < query.end)
        .group_by(*keys)
        .order_by(*keys)
        .limit(MAX_ROWS + 1)
    )
    stmt = _filtered(stmt, query, scope)
    found = session.execute(stmt).all()
    if len(found) > MAX_ROWS:
        raise InvalidParameterError(
            "granularity",
            f"The report would have more than {MAX_ROWS} rows; narrow the window, coarsen the granularity "
            "or group by less.",
        )
    names = _names(session, query.group_by, found, offset=1 if period is not None else 0)
    rows = []
    for record in found:
        values = list(record)
        row: dict[str, Any] = {}
        if period is not None:
            row.update(_bounds(values.pop(0), query.granularity))
        for name in query.group_by:
            raw = values.pop(0)
            row[name] = names.get((name, raw), raw)
        row["currency"] = values.pop(0)
        row.update(zip(("plans", "accelerator_hours", "flops"), values[:3], strict=True))
        row["cost"] = _cost(values[3:])
        rows.append(row)
    return CostReport(query, rows, _totals(rows))


def _cost_sums(dialect: str) -> list[Label[Decimal | None]] | list[Label[int]]:
    """Exact sums of plan costs. SQLite holds amounts as integer millionths, whose 64-bit sum overflows past
    9.2e12: there, whole units and millionths are summed apart (each far from overflowing)."""
    if dialect != "sqlite":
        return [func.sum(Plan.cost).label("cost")]
    stored = cast(Plan.cost, Integer)
    return [
        func.sum(stored // MILLION).label("cost_units"),
        func.sum(stored % MILLION).label("cost_millionths"),
    ]


def _cost(sums: Sequence[Decimal | int | None]) -> Decimal | None:
    """The cost of a row from what _cost_sums summed: None when no plan in it has one."""
    if len(sums) == 1:
        return None if sums[0] is None else Decimal(sums[0])
    units, millionths = sums
    if units is None or millionths is None:  # NULL together: sums of the same column over the same rows
        return None
    return Decimal(units) + Decimal(millionths).scaleb(-MONEY_SCALE)


Columns = TypeVarTuple("Columns")


def _filtered(stmt: Select[*Columns], query: CostQuery, scope: uuid.UUID | None) -> Select[*Columns]:
    stmt = stmt.where(Plan.status == query.status)
    if scope is not None:
        stmt = stmt.where(Plan.organization_id == scope)
    if query.organization is not None:
        stmt = stmt.where(Plan.organization_id == id_by_slug(Organization, query.organization))
    if query.budget_id is not None:
        stmt = stmt.where(Plan.budget_id == query.budget_id)
    if query.hardware is not None:
        stmt = stmt.where(Plan.hardware_id == id_by_slug(HardwareProfile, query.hardware))
    return stmt


def _period(granularity: str, dialect: str) -> ColumnElement[str | datetime] | None:
    """A plan's period, as cheap to compute per row as each database allows: on SQLite the day's or
    month's prefix of the stored text, or the week's Monday; on PostgreSQL date_trunc in UTC."""
    if granularity == "none":
        return None
    if dialect == "sqlite":  # SQLAlchemy stores datetimes as 'YYYY-MM-DD HH:MM:SS.ffffff', UTC here
        if granularity == "week":
            # The Monday on or before; from the day alone, since SQLite rounds a time to the millisecond
            # (23:59:59.9999 would count in the next day).
            return func.date(func.substr(Plan.start_at, 1, 10), "-6 days", "weekday 1").label("period")
        return func.substr(Plan.start_at, 1, 10 if granularity == "day" else 7).label("period")
    return func.date_trunc(granularity, func.timezone("UTC", Plan.start_at)).label("period")


def _bounds(period: str | datetime, granularity: str) -> dict[str, str]:
    if isinstance(period, datetime):
        first = period.date()
    else:
        first = date.fromisoformat(period if len(period) == 10 else period + "-01")
    if granularity == "day":
        end = first + timedelta(days=1)
    elif granularity == "week":
        end = first + timedelta(days=7)
    else:
        end = date(first.year + first.month // 12, first.month % 12 + 1, 1)
    return {"period_start": first.isoformat(), "period_end": end.isoformat()}


def _group_column(name: str) -> SQLColumnExpression[uuid.UUID | str | None]:
    if name == "organization":
        return Plan.organization_id
    if name == "budget":
        return Plan.budget_id
    if name == "hardware":
        return Plan.hardware_id
    if name == "status":
        return Plan.status
    return cast(Plan.labels[name.removeprefix("label:")].as_string(), String).label(name)


def _names(
    session: Session, group_by: Sequence[str], found: Sequence[Any], *, offset: int
) -> dict[tuple[str, Any], Any]:
    """Slugs for the ids rows are grouped by (organisations, hardware), and budget ids as strings."""
    names: dict[tuple[str, Any], Any] = {}
    for position, name in enumerate(group_by, start=offset):
        ids = {record[position] for record in found} - {None}
        pairs: Iterable[tuple[uuid.UUID, str]]
        if name == "organization":
            pairs = session.execute(
                select(Organization.id, Organization.slug).where(Organization.id.in_(ids))
            )
        elif name == "hardware":
            pairs = session.execute(
                select(HardwareProfile.id, HardwareProfile.slug).where(HardwareProfile.id.in_(ids))
            )
        elif name == "budget":
            pairs = ((budget_id, str(budget_id)) for budget_id in ids)
        else:
            continue
        names.update(((name, key), value) for key, value in pairs)
    return names


def _totals(rows: list[dict[str, Any]]) -> list[Totals]:
    by_currency: dict[str | None, Totals] = {}
    for row in rows:
        totals = by_currency.setdefault(row["currency"], Totals(row["currency"]))
        totals.plans += row["plans"]
        totals.accelerator_hours += row["accelerator_hours"]
        totals.flops += row["flops"]
        if row["cost"] is not None:
            totals.cost = (totals.cost or Decimal(0)) + row["cost"]
    return sorted(by_currency.values(), key=lambda totals: totals.currency or "")


# --- Budget utilisation -----------------------------------------------------------------------------------


MAX_LISTED_MONTHS = 1200


def _months(start: datetime, end: datetime) -> list[str]:
    """Every month (YYYY-MM) that [start, end) touches; [] if more than MAX_LISTED_MONTHS."""
    first, last = start.year * 12 + start.month - 1, end.year * 12 + end.month - 1
    if end == datetime(end.year, end.month, 1, tzinfo=UTC):
        last -= 1  # a period ending at midnight on the 1st does not touch that month
    if last - first >= MAX_LISTED_MONTHS:
        return []
    return [f"{index // 12:04d}-{index % 12 + 1:02d}" for index in range(first, last + 1)]


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
    """A budget's committed plans month by month (by start_at) over its period, and its burn rate."""
    budget = get_budget(session, budget_id, scope=scope)
    report = cost_report(
        session,
        CostQuery(start=budget.period_start, end=budget.period_end, granularity="month", budget_id=budget.id),
        scope=scope,
    )
    found = {row["period_start"][:7]: row for row in report.rows}
    months, cumulative = [], Decimal(0)
    for month in _months(budget.period_start, budget.period_end) or sorted(found):
        row = found.get(month, {"plans": 0, "cost": None})
        committed = row["cost"] or Decimal(0)
        cumulative += committed
        months.append(MonthUse(month, row["plans"], committed, cumulative))
    elapsed = (min(now, budget.period_end) - budget.period_start).total_seconds() / 86_400
    if elapsed <= 0:
        return Utilization(budget, now, months, None, None)
    rate = budget.committed / Decimal(elapsed)
    runs_out = None
    days_left = (LAST_DAY - budget.period_start).days
    if rate > 0 and budget.amount / rate < days_left:  # beyond year 9998 it never runs out, in practice
        runs_out = budget.period_start + timedelta(days=float(budget.amount / rate))
    return Utilization(budget, now, months, rate.quantize(CENT, ROUND_HALF_UP), runs_out)
