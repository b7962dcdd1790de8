"""Planned against actual: what plans set aside beside what their runs spent, for the finance teams who follow
spend against forecast by month and by budget, organisation, hardware or label (GET /v1/reports/costs with
measure=both, or measure=actual for the actual side alone, as JSON or CSV; the console's cost report and its
charts).

The planned side is the cost report's (reports.planned_sums): the plans of the query's statuses (by default
those whose money is committed), each spread over the periods of its schedule pro rata to time. The actual
side is what those plans' runs spent on the UTC days of the window, from their daily sums (models.UsageDay),
by the period of each day. The variance is actual minus planned (positive: over plan), and that as a
percentage of planned.

It is made for people to read: organisation and budget names beside their ids; every period of the window
present, with zeros where nothing was planned or spent, so that a month without spend reads as zero rather
than as missing; totals per currency, in which a plan counts once however many periods it spans.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import SQLColumnExpression, func, select
from sqlalchemy.orm import Session

from service.core.units import CENT
from service.data.models import Budget, Organization, Plan, UsageDay
from service.services.reports import (
    MAX_ROWS,
    CostQuery,
    Planned,
    at_most_max_rows,
    group_column,
    group_slugs,
    key_order,
    next_period,
    period_bounds,
    period_column,
    period_floor,
    plan_filters,
    planned_sums,
    summed_columns,
    summed_cost,
    too_many_rows,
    usage_per_plan,
)

PLANNED_METRICS = ("planned_plans", "planned_accelerator_hours", "planned_cost")
# Of the actual, what usage off the plans' schedules used and spent (records before a plan's start_at or
# after its end_at: accepted, and flagged).
ACTUAL_METRICS = (
    "actual_plans",
    "actual_accelerator_hours",
    "actual_cost",
    "off_schedule_accelerator_hours",
    "off_schedule_cost",
)
VARIANCE_METRICS = ("variance_cost", "variance_percent")
# The columns of every finance CSV, whatever the measure (a side not measured is blank).
FINANCE_METRICS = (*PLANNED_METRICS, *ACTUAL_METRICS, *VARIANCE_METRICS)
# Groups whose value is an id or slug: a person also reads the name beside it.
NAMED_GROUPS = {"organization": "organization_name", "budget": "budget_name"}
HUNDRED = Decimal(100)


@dataclass
class SpendReport:
    """Planned, actual and their variance per (period, groups, currency), as the measure asks (the sides it
    does not measure are None); `totals` has the same metrics per currency."""

    query: CostQuery
    rows: list[dict[str, Any]]
    totals: list[dict[str, Any]]

    @property
    def key_columns(self) -> list[str]:
        period = [] if self.query.granularity == "none" else ["period_start", "period_end"]
        groups: list[str] = []
        for name in self.query.group_by:
            groups += [name, NAMED_GROUPS[name]] if name in NAMED_GROUPS else [name]
        return [*period, *groups, "currency"]

    @property
    def metrics(self) -> list[str]:
        if self.query.measure == "actual":
            return list(ACTUAL_METRICS)
        return list(FINANCE_METRICS)

    @property
    def columns(self) -> list[str]:
        return [*self.key_columns, *self.metrics]

    @property
    def total_rows(self) -> list[dict[str, Any]]:
        return self.totals


def spend_report(session: Session, query: CostQuery, *, scope: uuid.UUID | None) -> SpendReport:
    """What the plans planned to spend in [start, end) (measure planned or both) and what their runs spent on
    the UTC days in it (actual or both), side by side per (period, groups, currency), with the variance
    (actual - planned, measure both).

    A group seen in the window has a row in every period of it (zeros where it has nothing); a window with
    nothing at all still has a row per period, of zeros, so that a month without spend reads as zero rather
    than as missing.
    """
    planned = Planned([], {}) if query.measure == "actual" else planned_sums(session, query, scope)
    actual = [] if query.measure == "planned" else _actual(session, query, scope)
    offset = 0 if query.granularity == "none" else 1
    names = group_slugs(session, query.group_by, [*planned.rows, *actual], offset=offset)
    display = _display_names(session, query.group_by, [*planned.rows, *actual], offset=offset)
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}

    def row_of(record: Sequence[Any]) -> tuple[dict[str, Any], list[Any]]:
        values = list(record)
        key: dict[str, Any] = {}
        if query.granularity != "none":
            key.update(period_bounds(values.pop(0), query.granularity))
        for name in query.group_by:
            raw = values.pop(0)
            key[name] = names.get((name, raw), raw)
            if name in NAMED_GROUPS:
                key[NAMED_GROUPS[name]] = display.get((name, raw))
        key["currency"] = values.pop(0)
        row = rows.setdefault(tuple(key.values()), {**key, **_zeros(key["currency"], query.measure)})
        return row, values

    for record in planned.rows:
        row, (plans, hours, _flops, cost) = row_of(record)
        row.update(planned_plans=plans, planned_accelerator_hours=hours, planned_cost=cost)
    for record in actual:
        row, (plans, hours, off_hours, *sums) = row_of(record)
        cost, off_cost = sums[: len(sums) // 2], sums[len(sums) // 2 :]
        row.update(
            actual_plans=plans,
            actual_accelerator_hours=hours,
            actual_cost=summed_cost(cost) or Decimal(0),
            off_schedule_accelerator_hours=off_hours,
            off_schedule_cost=summed_cost(off_cost) or Decimal(0),
        )
    if query.granularity != "none":
        _fill_periods(rows, query)
    ordered = [_with_variance(rows[key], query.measure) for key in sorted(rows, key=key_order)]
    actual_plans = {} if query.measure == "planned" else _actual_plans(session, query, scope)
    return SpendReport(query, ordered, _spend_totals(ordered, query.measure, planned.plans, actual_plans))


def _actual(session: Session, query: CostQuery, scope: uuid.UUID | None) -> Sequence[Any]:
    """Per (period, groups, currency): plans with usage, accelerator_hours, off-schedule accelerator-hours
    and the cost sums, then the off-schedule cost sums, of the usage days in the window.

    Summed per plan and period first, over usage_days alone (its (organization_id, day) index serves an
    organisation's window), so that the join to plans for their groups and filters meets one row per plan
    and period rather than one per day.
    """
    dialect = session.get_bind().dialect.name
    period = period_column(query.granularity, dialect, UsageDay.day)
    inner_keys: list[SQLColumnExpression[Any]] = [
        UsageDay.plan_id,
        *([period] if period is not None else []),
        UsageDay.currency,
    ]
    per_plan = usage_per_plan(inner_keys, query, scope, dialect)
    groups = [group_column(name) for name in query.group_by]
    keys: list[SQLColumnExpression[Any]] = [
        *([per_plan.c.period] if period is not None else []),
        *groups,
        per_plan.c.currency,
    ]
    sums = [
        func.sum(column)
        for name in ("cost", "off_schedule_cost")
        for column in summed_columns(per_plan, dialect, name)
    ]
    stmt = (
        select(
            *keys,
            func.count(func.distinct(per_plan.c.plan_id)).label("plans"),
            func.sum(per_plan.c.accelerator_hours).label("accelerator_hours"),
            func.sum(per_plan.c.off_schedule_accelerator_hours),
            *sums,
        )
        .join_from(per_plan, Plan, Plan.id == per_plan.c.plan_id)
        .group_by(*keys)
        .order_by(*keys)
        .limit(MAX_ROWS + 1)
    )
    stmt = stmt.where(Plan.status.in_(query.statuses))
    return at_most_max_rows(session.execute(plan_filters(stmt, query)).all())


def _actual_plans(session: Session, query: CostQuery, scope: uuid.UUID | None) -> dict[str | None, int]:
    """Per currency, the plans with usage in the window: each once, however many periods it spent in."""
    dialect = session.get_bind().dialect.name
    per_plan = usage_per_plan([UsageDay.plan_id, UsageDay.currency], query, scope, dialect)
    stmt = (
        select(per_plan.c.currency, func.count(func.distinct(per_plan.c.plan_id)))
        .join_from(per_plan, Plan, Plan.id == per_plan.c.plan_id)
        .where(Plan.status.in_(query.statuses))
        .group_by(per_plan.c.currency)
    )
    return dict(session.execute(plan_filters(stmt, query)).all())


def _display_names(
    session: Session, group_by: Sequence[str], found: Sequence[Any], *, offset: int
) -> dict[tuple[str, Any], str]:
    """The names of the organisations and budgets that rows are grouped by, by their ids."""
    names: dict[tuple[str, Any], str] = {}
    for position, name in enumerate(group_by, start=offset):
        if name not in NAMED_GROUPS:
            continue
        ids = {record[position] for record in found} - {None}
        model = Organization if name == "organization" else Budget
        pairs = session.execute(select(model.id, model.name).where(model.id.in_(ids)))
        names.update(((name, key), value) for key, value in pairs)
    return names


def _zeros(currency: str | None, measure: str) -> dict[str, Any]:
    """A row's figures before any plan or day is added: zeros on the sides measured, None on the other."""
    planned = measure != "actual"
    actual = measure != "planned"
    return {
        "planned_plans": 0 if planned else None,
        "planned_accelerator_hours": 0.0 if planned else None,
        # Plans without a price (no currency) have no planned cost, rather than a cost of zero.
        "planned_cost": Decimal(0) if planned and currency is not None else None,
        "actual_plans": 0 if actual else None,
        "actual_accelerator_hours": 0.0 if actual else None,
        "actual_cost": Decimal(0) if actual else None,
        "off_schedule_accelerator_hours": 0.0 if actual else None,
        "off_schedule_cost": Decimal(0) if actual else None,
    }


def _with_variance(row: dict[str, Any], measure: str) -> dict[str, Any]:
    planned, actual = row["planned_cost"], row["actual_cost"]
    variance = None if planned is None or actual is None or measure != "both" else actual - planned
    row["variance_cost"] = variance
    row["variance_percent"] = (
        None if variance is None or not planned else float((variance / planned * HUNDRED).quantize(CENT))
    )
    return row


def _fill_periods(rows: dict[tuple[Any, ...], dict[str, Any]], query: CostQuery) -> None:
    """Adds a row of zeros for every period of the window that a group seen in it has no row in."""
    periods = _periods(query)
    combinations = {key[2:]: rows[key] for key in rows} or {(): {}}
    if len(periods) * len(combinations) > MAX_ROWS:
        raise too_many_rows()
    for bounds in periods:
        for rest, example in combinations.items():
            key = (bounds["period_start"], bounds["period_end"], *rest)
            if key not in rows:
                group = {name: example.get(name) for name in example if name not in _METRIC_NAMES}
                group.update(bounds)
                group.setdefault("currency", None)
                rows[key] = {**group, **_zeros(group["currency"], query.measure)}


_METRIC_NAMES = frozenset(FINANCE_METRICS)


def _periods(query: CostQuery) -> list[dict[str, str]]:
    """The bounds of every period that [start, end) touches (at most MAX_ROWS + 1 of them)."""
    periods: list[dict[str, str]] = []
    first = period_floor(query.start, query.granularity)
    while first < query.end and len(periods) <= MAX_ROWS:
        periods.append(period_bounds(first, query.granularity))
        first = next_period(first, query.granularity)
    return periods


def _spend_totals(
    rows: list[dict[str, Any]],
    measure: str,
    planned_plans: dict[str | None, int],
    actual_plans: dict[str | None, int],
) -> list[dict[str, Any]]:
    """Per currency; a plan spread over (or spending in) several periods counts once."""
    by_currency: dict[str | None, dict[str, Any]] = {}
    counted = {"planned_plans": planned_plans, "actual_plans": actual_plans}
    for row in rows:
        currency = row["currency"]
        totals = by_currency.get(currency)
        if totals is None:
            totals = by_currency[currency] = {"currency": currency, **_zeros(currency, measure)}
            for name, plans in counted.items():
                if totals[name] is not None:
                    totals[name] = plans.get(currency, 0)
        for name in (*PLANNED_METRICS, *ACTUAL_METRICS):
            if name not in counted and row[name] is not None and totals[name] is not None:
                totals[name] += row[name]
    ordered = sorted(by_currency.items(), key=lambda item: item[0] or "")
    return [_with_variance(totals, measure) for _, totals in ordered]
