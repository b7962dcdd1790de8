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
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from itertools import islice
from typing import Any

from sqlalchemy import Result, SQLColumnExpression, func, select
from sqlalchemy.orm import Session

from service.core.units import CENT
from service.data.models import Budget, Organization, Plan, UsageDay
from service.services import reports
from service.services.reports import (
    ENERGY_METRICS,
    CostQuery,
    group_column,
    group_slugs,
    key_order,
    next_period,
    period_bounds,
    period_column,
    period_floor,
    plan_filters,
    planned_periods,
    planned_scope,
    streamed,
    summed_columns,
    summed_cost,
    too_many_rows,
    usage_per_plan,
)

# The planned energy and emissions of the plans (reports.ENERGY_METRICS), with the plans that have none.
PLANNED_ENERGY_METRICS = tuple(f"planned_{name}" for name in ENERGY_METRICS)
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
# The planned energy last, so that the columns before them stay where finance files have read them.
FINANCE_METRICS = (*PLANNED_METRICS, *ACTUAL_METRICS, *VARIANCE_METRICS, *PLANNED_ENERGY_METRICS)
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
        return key_columns(self.query)

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


def key_columns(query: CostQuery) -> list[str]:
    """A row's period and groups (names beside ids) and its currency, in order: a finance CSV's first
    columns."""
    period = [] if query.granularity == "none" else ["period_start", "period_end"]
    groups: list[str] = []
    for name in query.group_by:
        groups += [name, NAMED_GROUPS[name]] if name in NAMED_GROUPS else [name]
    return [*period, *groups, "currency"]


def spend_report(session: Session, query: CostQuery, *, scope: uuid.UUID | None) -> SpendReport:
    """What the plans planned to spend in [start, end) (measure planned or both) and what their runs spent on
    the UTC days in it (actual or both), side by side per (period, groups, currency), with the variance
    (actual - planned, measure both), and the totals per currency: spend_stream's rows, at most MAX_ROWS of
    them (a larger report is refused: its CSV streams).
    """
    found = spend_stream(session, query, scope=scope)
    if found.periods * max(len(found.combinations), 1) > reports.MAX_ROWS:
        raise too_many_rows()  # known before any row is read: the periods times the groups seen
    rows = list(islice(found.rows, reports.MAX_ROWS + 1))
    if len(rows) > reports.MAX_ROWS:
        raise too_many_rows()
    return SpendReport(query, rows, found.totals(rows))


@dataclass
class SpendStream:
    """A report's rows as they are read (`rows`, an iterator), once what the query names is known to exist
    and the groups seen in the window (`combinations`) and their names are read: what can be refused is
    refused before the first row. `planned_plans` fills as the rows are read."""

    session: Session
    query: CostQuery
    scope: uuid.UUID | None
    combinations: list[tuple[Any, ...]]
    periods: int  # how many periods the window has (1 with granularity none)
    rows: Iterator[dict[str, Any]]
    planned_plans: dict[str | None, int]

    def totals(self, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per currency, over `rows` (this stream's, read once); a plan counts once however many periods it
        spans."""
        measure = self.query.measure
        summed = _spend_totals(rows, measure)
        actual = {} if measure == "planned" else _actual_plans(self.session, self.query, self.scope)
        without = (
            {} if measure == "actual" else reports.plans_without_energy(self.session, self.query, self.scope)
        )
        for totals in summed:
            for name, plans in (("planned_plans", self.planned_plans), ("actual_plans", actual)):
                if totals[name] is not None:
                    totals[name] = plans.get(totals["currency"], 0)
            if measure != "actual":  # each plan once, however many periods it spans
                no_energy, no_emissions = without.get(totals["currency"], (0, 0))
                totals.update(
                    planned_plans_without_energy=no_energy, planned_plans_without_emissions=no_emissions
                )
                # A sum over plans none of which has the figure is not zero: it is not known.
                for name, lacking in (
                    ("planned_energy_kwh", no_energy),
                    ("planned_emissions_kg_co2e", no_emissions),
                ):
                    if totals["planned_plans"] and lacking == totals["planned_plans"]:
                        totals[name] = None
        return summed


def spend_stream(
    session: Session, query: CostQuery, *, scope: uuid.UUID | None, stream: bool = False
) -> SpendStream:
    """spend_report's rows one period at a time, in its order, with bounded memory: a period's rows, the
    groups seen in the window and the pieces of plans still crossing into later periods are held, never the
    whole report. With `stream`, rows are read from the database as they are needed (a server-side cursor
    on PostgreSQL: the session must be in a transaction, infra.db.export_session).

    A group seen in the window has a row in every period of it (zeros where it has nothing); a window with
    nothing at all still has a row per period, of zeros, so that a month without spend reads as zero rather
    than as missing.
    """
    combinations = _combinations(session, query, scope)
    names = group_slugs(session, query.group_by, combinations, offset=0)
    display = _display_names(session, query.group_by, combinations, offset=0)
    planned_plans: dict[str | None, int] = {}

    def key_of(values: list[Any]) -> dict[str, Any]:
        """The group and currency members of a row from (groups..., currency, ...), consumed from `values`."""
        key: dict[str, Any] = {}
        for name in query.group_by:
            raw = values.pop(0)
            key[name] = names.get((name, raw), raw)
            if name in NAMED_GROUPS:
                key[NAMED_GROUPS[name]] = display.get((name, raw))
        key["currency"] = values.pop(0)
        return key

    groups = [key_of(list(combination)) for combination in combinations]
    rows = _spend_rows(
        session,
        query,
        scope=scope,
        stream=stream,
        key_of=key_of,
        groups=groups,
        periods=_periods(query),
        planned_plans=planned_plans,
    )
    return SpendStream(session, query, scope, combinations, _period_count(query), rows, planned_plans)


def _spend_rows(
    session: Session,
    query: CostQuery,
    *,
    scope: uuid.UUID | None,
    stream: bool,
    key_of: Callable[[list[Any]], dict[str, Any]],
    groups: list[dict[str, Any]],
    periods: Iterable[dict[str, str] | None],
    planned_plans: dict[str | None, int],
) -> Iterator[dict[str, Any]]:
    planned: Iterator[tuple[Any, reports.PeriodSums]] = (
        iter(())
        if query.measure == "actual"
        else planned_periods(session, query, scope, counted=planned_plans, stream=stream)
    )
    found = None if query.measure == "planned" else _actual(session, query, scope, stream=stream)
    try:  # closed however the stream ends: a server-side cursor is not left to the garbage collector
        rows = _merged_rows(
            query, key_of=key_of, groups=groups, periods=periods, planned=planned, actual=iter(found or ())
        )
        yield from rows
    finally:
        if isinstance(planned, Generator):
            planned.close()
        if found is not None:
            found.close()


def _merged_rows(
    query: CostQuery,
    *,
    key_of: Callable[[list[Any]], dict[str, Any]],
    groups: list[dict[str, Any]],
    periods: Iterable[dict[str, str] | None],
    planned: Iterator[tuple[Any, reports.PeriodSums]],
    actual: Iterator[Any],
) -> Iterator[dict[str, Any]]:
    """Each period's rows, in order: its planned sums and actual rows (both in period order) merged, every
    group seen in the window given a row of zeros where it had nothing."""
    next_planned, next_actual = next(planned, None), next(actual, None)
    for bounds in periods:
        rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        if next_planned is not None and _in_period(next_planned[0], bounds, query.granularity):
            for key, (plans, hours, _flops, cost, *energy) in next_planned[1].items():
                row = _row(rows, bounds, key_of(list(key[1:] if bounds is not None else key)), query.measure)
                row.update(planned_plans=plans, planned_accelerator_hours=hours, planned_cost=cost)
                row.update(zip(PLANNED_ENERGY_METRICS, energy, strict=True))
            next_planned = next(planned, None)
        while next_actual is not None and _in_period(next_actual[0], bounds, query.granularity):
            values = list(next_actual)[1:] if bounds is not None else list(next_actual)
            row = _row(rows, bounds, key_of(values), query.measure)
            plans, hours, off_hours, *sums = values
            cost, off_cost = sums[: len(sums) // 2], sums[len(sums) // 2 :]
            row.update(
                actual_plans=plans,
                actual_accelerator_hours=hours,
                actual_cost=summed_cost(cost) or Decimal(0),
                off_schedule_accelerator_hours=off_hours,
                off_schedule_cost=summed_cost(off_cost) or Decimal(0),
            )
            next_actual = next(actual, None)
        if bounds is not None:  # every group seen in the window, in every period: zeros where it had nothing
            for group in groups or [{"currency": None}]:
                _row(rows, bounds, group, query.measure)
        for key in sorted(rows, key=key_order):
            yield _with_variance(rows[key], query.measure)


def _in_period(period: Any, bounds: dict[str, str] | None, granularity: str) -> bool:
    """Whether a database's period (or a planned period's start) is the one of `bounds` (None: the window)."""
    return bounds is None or period_bounds(period, granularity) == bounds


def _row(
    rows: dict[tuple[Any, ...], dict[str, Any]],
    bounds: dict[str, str] | None,
    group: dict[str, Any],
    measure: str,
) -> dict[str, Any]:
    """The row of `group` in the period of `bounds`, of zeros until something is added."""
    key = {**(bounds or {}), **group}
    return rows.setdefault(tuple(key.values()), {**key, **_zeros(key["currency"], measure)})


def _combinations(session: Session, query: CostQuery, scope: uuid.UUID | None) -> list[tuple[Any, ...]]:
    """The (groups..., currency) the window has planned or spent in, on the measure's sides: the groups a
    row of every period is given, read before any row."""
    found: set[tuple[Any, ...]] = set()
    groups = [group_column(name) for name in query.group_by]
    if query.measure != "actual":
        planned = planned_scope(select(*groups, Plan.currency).distinct(), query, scope)
        found.update(tuple(record) for record in session.execute(planned))
    if query.measure != "planned":
        dialect = session.get_bind().dialect.name
        per_plan = usage_per_plan([UsageDay.plan_id, UsageDay.currency], query, scope, dialect)
        spent = (
            select(*groups, per_plan.c.currency)
            .distinct()
            .join_from(per_plan, Plan, Plan.id == per_plan.c.plan_id)
            .where(Plan.status.in_(query.statuses))
        )
        found.update(tuple(record) for record in session.execute(plan_filters(spent, query)))
    return sorted(found, key=key_order)


def _actual(
    session: Session, query: CostQuery, scope: uuid.UUID | None, *, stream: bool = False
) -> Result[Any]:
    """Per (period, groups, currency), in that order: plans with usage, accelerator_hours, off-schedule
    accelerator-hours and the cost sums, then the off-schedule cost sums, of the usage days in the window.

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
    )
    stmt = stmt.where(Plan.status.in_(query.statuses))
    return session.execute(streamed(plan_filters(stmt, query), stream))


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
        "planned_energy_kwh": 0.0 if planned else None,
        "planned_emissions_kg_co2e": 0.0 if planned else None,
        "planned_plans_without_energy": 0 if planned else None,
        "planned_plans_without_emissions": 0 if planned else None,
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


def _periods(query: CostQuery) -> Iterator[dict[str, str] | None]:
    """The bounds of every period that [start, end) touches, in order; None, the window, with granularity
    none."""
    if query.granularity == "none":
        yield None
        return
    first = period_floor(query.start, query.granularity)
    while first < query.end:
        yield period_bounds(first, query.granularity)
        first = next_period(first, query.granularity)


def _period_count(query: CostQuery) -> int:
    """How many periods _periods gives, without listing them."""
    if query.granularity == "none":
        return 1
    first = period_floor(query.start, query.granularity)
    if query.granularity == "month":
        last = period_floor(query.end - timedelta.resolution, "month")
        return (last.year - first.year) * 12 + last.month - first.month + 1
    length = timedelta(days=7 if query.granularity == "week" else 1)
    return -(-(query.end - first) // length)


def _spend_totals(rows: Iterable[dict[str, Any]], measure: str) -> list[dict[str, Any]]:
    """Per currency, the rows' sums (read once, as they stream); the plans are counted by the caller."""
    by_currency: dict[str | None, dict[str, Any]] = {}
    for row in rows:
        currency = row["currency"]
        totals = by_currency.get(currency)
        if totals is None:
            totals = by_currency[currency] = {"currency": currency, **_zeros(currency, measure)}
        for name in (*PLANNED_METRICS, *ACTUAL_METRICS, *PLANNED_ENERGY_METRICS):
            if name not in COUNTS and row[name] is not None and totals[name] is not None:
                totals[name] += row[name]
    ordered = sorted(by_currency.items(), key=lambda item: item[0] or "")
    return [_with_variance(totals, measure) for _, totals in ordered]


COUNTS = ("planned_plans", "actual_plans", "planned_plans_without_energy", "planned_plans_without_emissions")
