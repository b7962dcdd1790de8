"""Cost reports: what plans cost and what their runs spent, summed in the database by period and group,
money exact.

A plan counts in the period of its `start_at` (when its spend begins); a run's spend counts in the period of
each UTC day it was used (models.UsageDay, the daily sums of its usage records). The window [from, to) and
the day, week (ISO, from Monday) or month buckets are in UTC. Amounts are summed as NUMERIC on PostgreSQL and
as integer millionths on SQLite (see models.Money), so totals are exact; the currency is always part of a
row's group, so amounts in different currencies are never added together.

Three measures: `planned` is the report as it always was (plans of one status, `estimated`), kept unchanged
for the clients that read it; `actual` and `both` are the finance report of planned against actual, with
names beside ids, every period of the window present and totals (see spend_report).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, TypeVarTuple

from sqlalchemy import (
    ColumnElement,
    DateTime,
    Integer,
    Label,
    Select,
    SQLColumnExpression,
    String,
    Subquery,
    cast,
    func,
    select,
)
from sqlalchemy.orm import Session

from service.core.units import CENT
from service.data.models import (
    CHARGED_STATUSES,
    MONEY_SCALE,
    Budget,
    HardwareProfile,
    Organization,
    Plan,
    PlanStatus,
    UsageDay,
    id_by_slug,
)
from service.services.budgets import get_budget
from service.services.errors import InvalidParameterError

GRANULARITIES = ("day", "week", "month", "none")
MEASURES = ("planned", "actual", "both")
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
    # None: committed for the planned measure (as it always was); for actual and both, plans whose cost is
    # reserved or spent (committed, running, completed, failed) on the planned side and any on the actual.
    status: str | None = None
    measure: str = "planned"


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

    @property
    def metrics(self) -> list[str]:
        return list(METRICS[1:])

    @property
    def total_rows(self) -> list[dict[str, Any]]:
        return [dataclasses.asdict(totals) for totals in self.totals]


def cost_report(session: Session, query: CostQuery, *, scope: uuid.UUID | None) -> CostReport:
    """Plans starting in [start, end), grouped by period and `group_by`, with their sums per currency."""
    found = _planned(session, query, scope, statuses=(query.status or PlanStatus.COMMITTED,))
    names = _names(session, query.group_by, found, offset=0 if query.granularity == "none" else 1)
    rows = []
    for record in found:
        values = list(record)
        row: dict[str, Any] = {}
        if query.granularity != "none":
            row.update(_bounds(values.pop(0), query.granularity))
        for name in query.group_by:
            raw = values.pop(0)
            row[name] = names.get((name, raw), raw)
        row["currency"] = values.pop(0)
        row.update(zip(("plans", "accelerator_hours", "flops"), values[:3], strict=True))
        row["cost"] = _cost(values[3:])
        rows.append(row)
    return CostReport(query, rows, _totals(rows))


def _planned(
    session: Session, query: CostQuery, scope: uuid.UUID | None, *, statuses: Sequence[str]
) -> Sequence[Any]:
    """Per (period, groups, currency): plans, accelerator_hours, flops and the cost sums (see _cost_sums) of
    the plans in `statuses` starting in the window."""
    dialect = session.get_bind().dialect.name
    period = _period(query.granularity, dialect, Plan.start_at)
    groups = [_group_column(name) for name in query.group_by]
    keys: list[SQLColumnExpression[Any]] = [*([period] if period is not None else []), *groups, Plan.currency]
    stmt = (
        select(
            *keys,
            func.count().label("plans"),
            func.sum(Plan.accelerator_hours).label("accelerator_hours"),
            func.sum(Plan.flops).label("flops"),
            *_cost_sums(dialect, Plan.cost),
        )
        .where(Plan.start_at >= query.start, Plan.start_at < query.end)
        .where(Plan.status.in_(statuses) if len(statuses) > 1 else Plan.status == statuses[0])
        .group_by(*keys)
        .order_by(*keys)
        .limit(MAX_ROWS + 1)
    )
    if scope is not None:
        stmt = stmt.where(Plan.organization_id == scope)
    if query.organization is not None:
        stmt = stmt.where(Plan.organization_id == id_by_slug(Organization, query.organization))
    return _at_most_max_rows(session.execute(_plan_filters(stmt, query)).all())


def _too_many_rows() -> InvalidParameterError:
    return InvalidParameterError(
        "granularity",
        f"The report would have more than {MAX_ROWS} rows; narrow the window, coarsen the granularity "
        "or group by less.",
    )


def _at_most_max_rows(found: Sequence[Any]) -> Sequence[Any]:
    if len(found) > MAX_ROWS:
        raise _too_many_rows()
    return found


def _cost_sums(
    dialect: str, amount: SQLColumnExpression[Decimal | None]
) -> list[Label[Decimal | None]] | list[Label[int]]:
    """Exact sums of amounts. SQLite holds amounts as integer millionths, whose 64-bit sum overflows past
    9.2e12: there, whole units and millionths are summed apart (each far from overflowing)."""
    if dialect != "sqlite":
        return [func.sum(amount).label("cost")]
    stored = cast(amount, Integer)
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


def _plan_filters(stmt: Select[*Columns], query: CostQuery) -> Select[*Columns]:
    """The filters on a plan's own columns but its organisation's (which each measure takes where its
    index has it)."""
    if query.budget_id is not None:
        stmt = stmt.where(Plan.budget_id == query.budget_id)
    if query.hardware is not None:
        stmt = stmt.where(Plan.hardware_id == id_by_slug(HardwareProfile, query.hardware))
    return stmt


def _period(
    granularity: str, dialect: str, moment: SQLColumnExpression[datetime] | SQLColumnExpression[date]
) -> ColumnElement[str | datetime] | None:
    """The period of a UTC timestamp or date column, as cheap to compute per row as each database allows: on
    SQLite the day's or month's prefix of the stored text, or the week's Monday; on PostgreSQL date_trunc in
    UTC (a date taken as a timestamp without time zone, never in the session's zone)."""
    if granularity == "none":
        return None
    if (
        dialect == "sqlite"
    ):  # datetimes are stored as 'YYYY-MM-DD HH:MM:SS.ffffff' (UTC here), dates as the day
        if granularity == "week":
            # The Monday on or before; from the day alone, since SQLite rounds a time to the millisecond
            # (23:59:59.9999 would count in the next day).
            return func.date(func.substr(moment, 1, 10), "-6 days", "weekday 1").label("period")
        return func.substr(moment, 1, 10 if granularity == "day" else 7).label("period")
    instant = cast(moment, DateTime) if moment is UsageDay.day else func.timezone("UTC", moment)
    return func.date_trunc(granularity, instant).label("period")


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


# --- Planned against actual ------------------------------------------------------------------------------

PLANNED_METRICS = ("planned_plans", "planned_accelerator_hours", "planned_cost")
ACTUAL_METRICS = ("actual_plans", "actual_accelerator_hours", "actual_cost")
VARIANCE_METRICS = ("variance_cost", "variance_percent")
# Groups whose value is an id or slug: a person also reads the name beside it.
NAMED_GROUPS = {"organization": "organization_name", "budget": "budget_name"}
HUNDRED = Decimal(100)


@dataclass
class SpendReport:
    """Planned (measure both), actual and their variance per (period, groups, currency); `totals` has the
    same metrics per currency."""

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
        return [*PLANNED_METRICS, *ACTUAL_METRICS, *VARIANCE_METRICS]

    @property
    def columns(self) -> list[str]:
        return [*self.key_columns, *self.metrics]

    @property
    def total_rows(self) -> list[dict[str, Any]]:
        return self.totals


def spend_report(session: Session, query: CostQuery, *, scope: uuid.UUID | None) -> SpendReport:
    """What plans starting in [start, end) planned to spend (measure both) and what runs spent on the UTC days
    in it, side by side per (period, groups, currency), with the variance (actual - planned).

    A group seen in the window has a row in every period of it (zeros where it has nothing); a window with
    nothing at all still has a row per period, of zeros, so that a month without spend reads as zero rather
    than as missing.
    """
    planned = (
        []
        if query.measure == "actual"
        else _planned(session, query, scope, statuses=_planned_statuses(query))
    )
    actual = _actual(session, query, scope)
    offset = 0 if query.granularity == "none" else 1
    names = _names(session, query.group_by, [*planned, *actual], offset=offset)
    display = _display_names(session, query.group_by, [*planned, *actual], offset=offset)
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}

    def row_of(record: Sequence[Any]) -> tuple[dict[str, Any], list[Any]]:
        values = list(record)
        key: dict[str, Any] = {}
        if query.granularity != "none":
            key.update(_bounds(values.pop(0), query.granularity))
        for name in query.group_by:
            raw = values.pop(0)
            key[name] = names.get((name, raw), raw)
            if name in NAMED_GROUPS:
                key[NAMED_GROUPS[name]] = display.get((name, raw))
        key["currency"] = values.pop(0)
        row = rows.setdefault(tuple(key.values()), {**key, **_zeros(key["currency"])})
        return row, values

    for record in planned:
        row, (plans, hours, _flops, *sums) = row_of(record)
        row.update(planned_plans=plans, planned_accelerator_hours=hours, planned_cost=_cost(sums))
    for record in actual:
        row, (plans, hours, *sums) = row_of(record)
        row.update(actual_plans=plans, actual_accelerator_hours=hours, actual_cost=_cost(sums) or Decimal(0))
    if query.granularity != "none":
        _fill_periods(rows, query)
    ordered = [_with_variance(rows[key]) for key in sorted(rows, key=_sort_key)]
    return SpendReport(query, ordered, _spend_totals(ordered))


def _planned_statuses(query: CostQuery) -> tuple[str, ...]:
    return (query.status,) if query.status is not None else tuple(CHARGED_STATUSES)


def _usage_per_plan(
    keys: list[SQLColumnExpression[Any]], query: CostQuery, scope: uuid.UUID | None, dialect: str
) -> Subquery:
    """The days of usage in the query's window summed per plan and `keys` (the plan, its period, its
    currency), in the caller's scope and the query's organisation: what reports of spend join to plans."""
    first_day, end_day = _days(query)
    stmt = (
        select(
            *keys,
            func.sum(UsageDay.accelerator_hours).label("accelerator_hours"),
            *_cost_sums(dialect, UsageDay.cost),
        )
        .where(UsageDay.day >= first_day, UsageDay.day < end_day)
        .group_by(*keys)
    )
    if scope is not None:
        stmt = stmt.where(UsageDay.organization_id == scope)
    if query.organization is not None:
        stmt = stmt.where(UsageDay.organization_id == id_by_slug(Organization, query.organization))
    return stmt.subquery("per_plan")


def _days(query: CostQuery) -> tuple[date, date]:
    """The UTC days that begin in [start, end), as [first, end): a day of spend counts, like a plan, when it
    begins in the window."""

    def first_on_or_after(moment: datetime) -> date:
        day = moment.date()
        return day if moment.time() == datetime.min.time() else day + timedelta(days=1)

    return first_on_or_after(query.start), first_on_or_after(query.end)


def _actual(session: Session, query: CostQuery, scope: uuid.UUID | None) -> Sequence[Any]:
    """Per (period, groups, currency): plans with usage, accelerator_hours and the cost sums of the usage days
    in the window.

    Summed per plan and period first, over usage_days alone (its (organization_id, day) index serves an
    organisation's window), so that the join to plans for their groups and filters meets one row per plan
    and period rather than one per day.
    """
    dialect = session.get_bind().dialect.name
    period = _period(query.granularity, dialect, UsageDay.day)
    inner_keys: list[SQLColumnExpression[Any]] = [
        UsageDay.plan_id,
        *([period] if period is not None else []),
        UsageDay.currency,
    ]
    per_plan = _usage_per_plan(inner_keys, query, scope, dialect)
    groups = [_group_column(name) for name in query.group_by]
    keys: list[SQLColumnExpression[Any]] = [
        *([per_plan.c.period] if period is not None else []),
        *groups,
        per_plan.c.currency,
    ]
    sums = (
        [func.sum(per_plan.c.cost).label("cost")]
        if dialect != "sqlite"
        else [
            func.sum(per_plan.c.cost_units).label("cost_units"),
            func.sum(per_plan.c.cost_millionths).label("cost_millionths"),
        ]
    )
    stmt = (
        select(
            *keys,
            func.count(func.distinct(per_plan.c.plan_id)).label("plans"),
            func.sum(per_plan.c.accelerator_hours).label("accelerator_hours"),
            *sums,
        )
        .join_from(per_plan, Plan, Plan.id == per_plan.c.plan_id)
        .group_by(*keys)
        .order_by(*keys)
        .limit(MAX_ROWS + 1)
    )
    if query.status is not None:
        stmt = stmt.where(Plan.status == query.status)
    return _at_most_max_rows(session.execute(_plan_filters(stmt, query)).all())


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


def _zeros(currency: str | None) -> dict[str, Any]:
    # Plans without a price (no currency) have no planned cost, rather than a cost of zero.
    cost = None if currency is None else Decimal(0)
    return {
        "planned_plans": 0,
        "planned_accelerator_hours": 0.0,
        "planned_cost": cost,
        "actual_plans": 0,
        "actual_accelerator_hours": 0.0,
        "actual_cost": Decimal(0),
    }


def _with_variance(row: dict[str, Any]) -> dict[str, Any]:
    planned, actual = row["planned_cost"], row["actual_cost"]
    variance = None if planned is None else actual - planned
    row["variance_cost"] = variance
    row["variance_percent"] = (
        None if variance is None or not planned else float((variance / planned * HUNDRED).quantize(CENT))
    )
    return row


def _sort_key(key: tuple[Any, ...]) -> tuple[tuple[bool, str], ...]:
    return tuple((value is not None, str(value)) for value in key)  # nulls first, as the database orders them


def _fill_periods(rows: dict[tuple[Any, ...], dict[str, Any]], query: CostQuery) -> None:
    """Adds a row of zeros for every period of the window that a group seen in it has no row in."""
    periods = _periods(query)
    combinations = {key[2:]: rows[key] for key in rows} or {(): {}}
    if len(periods) * len(combinations) > MAX_ROWS:
        raise _too_many_rows()
    for bounds in periods:
        for rest, example in combinations.items():
            key = (bounds["period_start"], bounds["period_end"], *rest)
            if key not in rows:
                group = {name: example.get(name) for name in example if name not in _METRIC_NAMES}
                group.update(bounds)
                group.setdefault("currency", None)
                rows[key] = {**group, **_zeros(group["currency"])}


_METRIC_NAMES = frozenset((*PLANNED_METRICS, *ACTUAL_METRICS, *VARIANCE_METRICS))


def _periods(query: CostQuery) -> list[dict[str, str]]:
    """The bounds of every period that [start, end) touches (at most MAX_ROWS + 1 of them)."""
    periods: list[dict[str, str]] = []
    moment = query.start
    while moment < query.end and len(periods) <= MAX_ROWS:
        first = moment.date()
        if query.granularity == "week":
            first -= timedelta(days=first.weekday())
        elif query.granularity == "month":
            first = first.replace(day=1)
        bounds = _bounds(datetime(first.year, first.month, first.day, tzinfo=UTC), query.granularity)
        periods.append(bounds)
        end = date.fromisoformat(bounds["period_end"])
        moment = datetime(end.year, end.month, end.day, tzinfo=UTC)
    return periods


def _spend_totals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_currency: dict[str | None, dict[str, Any]] = {}
    for row in rows:
        totals = by_currency.setdefault(
            row["currency"], {"currency": row["currency"], **_zeros(row["currency"])}
        )
        for name in (*PLANNED_METRICS, *ACTUAL_METRICS):
            if row[name] is not None and totals[name] is not None:
                totals[name] += row[name]
    return [
        _with_variance(totals) for _, totals in sorted(by_currency.items(), key=lambda item: item[0] or "")
    ]


# --- FOCUS -----------------------------------------------------------------------------------------------

# FinOps Open Cost and Usage Specification 1.1 (https://focus.finops.org/focus-specification/v1-1/): the
# columns it names for a usage charge, in the order a reader meets them, then one of ours (x_, as FOCUS asks
# of columns it does not define).
FOCUS_VERSION = "1.1"
FOCUS_COLUMNS = (
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "BillingCurrency",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ChargeCategory",
    "ChargeClass",
    "ChargeFrequency",
    "ChargeDescription",
    "BillingAccountId",
    "BillingAccountName",
    "SubAccountId",
    "SubAccountName",
    "ProviderName",
    "PublisherName",
    "InvoiceIssuerName",
    "ServiceName",
    "ServiceCategory",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "SkuId",
    "SkuPriceId",
    "ConsumedQuantity",
    "ConsumedUnit",
    "PricingQuantity",
    "PricingUnit",
    "PricingCategory",
    "Tags",
    "x_PlanStatus",
)
FOCUS_GRANULARITIES = ("day", "month")
PROVIDER = "Compute Planner"
ACCELERATOR_HOURS_UNIT = "Accelerator-Hours"
# Tags the service sets itself carry its prefix, so that they never collide with a plan's own labels.
TAG_PREFIX = "planner/"


def focus_rows(session: Session, query: CostQuery, *, scope: uuid.UUID | None) -> list[dict[str, Any]]:
    """What runs spent, one FOCUS usage charge per plan per UTC day (or month) of the window: billed charges,
    so actual spend only (plans are forecasts, which FOCUS does not describe).

    The service knows one price per run, the one charged: list, contracted, billed and effective cost are
    that amount alike (no discount or commitment to amortise). The billing account is the organisation, the
    sub-account the budget the plan is charged to; the SKU is the hardware profile; the tags are the plan's
    labels and its budget.
    """
    if query.granularity not in FOCUS_GRANULARITIES or query.group_by:
        raise ValueError("FOCUS charges are one plan's in a day or a month")  # the schema keeps them so
    dialect = session.get_bind().dialect.name
    period = _period(query.granularity, dialect, UsageDay.day)
    assert period is not None  # a day or a month
    keys: list[SQLColumnExpression[Any]] = [period, UsageDay.plan_id, UsageDay.currency]
    per_plan = _usage_per_plan(keys, query, scope, dialect)
    sums = [per_plan.c.cost] if dialect != "sqlite" else [per_plan.c.cost_units, per_plan.c.cost_millionths]
    stmt = (
        select(
            per_plan.c.period,
            per_plan.c.currency,
            per_plan.c.accelerator_hours,
            *sums,
            Plan.id,
            Plan.name,
            Plan.labels,
            Plan.status,
            Organization.slug,
            Organization.name,
            Budget.id,
            Budget.name,
            HardwareProfile.slug,
        )
        .join_from(per_plan, Plan, Plan.id == per_plan.c.plan_id)
        .join(Organization, Organization.id == Plan.organization_id)
        .outerjoin(Budget, Budget.id == Plan.budget_id)
        .outerjoin(HardwareProfile, HardwareProfile.id == Plan.hardware_id)
        .order_by(per_plan.c.period, Plan.id)
        .limit(MAX_ROWS + 1)
    )
    if query.status is not None:
        stmt = stmt.where(Plan.status == query.status)
    found = _at_most_max_rows(session.execute(_plan_filters(stmt, query)).all())
    return [_focus_row(record, query.granularity, cost_columns=len(sums)) for record in found]


def _focus_row(record: Sequence[Any], granularity: str, *, cost_columns: int) -> dict[str, Any]:
    values = list(record)
    period, currency, hours = values[:3]
    cost = _cost(values[3 : 3 + cost_columns]) or Decimal(0)
    plan_id, plan_name, labels, status, org_slug, org_name, budget_id, budget_name, hardware = values[
        3 + cost_columns :
    ]
    charge = _bounds(period, granularity)
    billing = _bounds(charge["period_start"][:7], "month")  # the calendar month of the charge
    tags = dict(labels or {})
    if budget_id is not None:
        tags[f"{TAG_PREFIX}budget_id"] = str(budget_id)
        tags[f"{TAG_PREFIX}budget"] = budget_name
    sku = hardware or "custom"  # hardware given inline with the plan has no profile
    return {
        "BilledCost": cost,
        "EffectiveCost": cost,
        "ListCost": cost,
        "ContractedCost": cost,
        "BillingCurrency": currency,
        "BillingPeriodStart": _focus_time(billing["period_start"]),
        "BillingPeriodEnd": _focus_time(billing["period_end"]),
        "ChargePeriodStart": _focus_time(charge["period_start"]),
        "ChargePeriodEnd": _focus_time(charge["period_end"]),
        "ChargeCategory": "Usage",
        "ChargeClass": None,  # not a correction of an earlier period's charge
        "ChargeFrequency": "Usage-Based",
        "ChargeDescription": f"{hours:.2f} accelerator-hours on {sku} for plan {plan_name or plan_id}",
        "BillingAccountId": org_slug,
        "BillingAccountName": org_name,
        "SubAccountId": None if budget_id is None else str(budget_id),
        "SubAccountName": budget_name,
        "ProviderName": PROVIDER,
        "PublisherName": PROVIDER,
        "InvoiceIssuerName": PROVIDER,
        "ServiceName": "Model training",
        "ServiceCategory": "AI and Machine Learning",
        "ResourceId": str(plan_id),
        "ResourceName": plan_name,
        "ResourceType": "Training run",
        "SkuId": sku,
        "SkuPriceId": None,
        "ConsumedQuantity": hours,
        "ConsumedUnit": ACCELERATOR_HOURS_UNIT,
        "PricingQuantity": hours,
        "PricingUnit": ACCELERATOR_HOURS_UNIT,
        "PricingCategory": "Standard",
        "Tags": json.dumps(tags, ensure_ascii=False, sort_keys=True, separators=(",", ":")),
        "x_PlanStatus": status,
    }


def _focus_time(day: str) -> str:
    return f"{day}T00:00:00Z"


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
