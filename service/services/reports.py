"""The cost report, and the pieces every report of money is built from.

The cost report (`cost_report`: GET /v1/reports/costs with measure=planned, the default) is what plans are
estimated to cost: plans of one status (committed unless the query names another) by the period of their
start_at and by organisation, budget, hardware, status or label, with totals per currency. Finance teams and
their scripts have read it, as JSON or CSV, since before the service knew what runs spent: its rows and
columns stay as they are. A budget's utilisation (budget_utilization.py) is this report for one budget, month
by month.

The other reports are built from the pieces here: planned against actual (spend.py, measures actual and both)
and the FOCUS export of what runs spent (focus.py). What they share keeps their money right:

* A plan counts in the period of its `start_at` (when its spend begins); a run's spend counts in the period of
  each UTC day it was used (models.UsageDay, the daily sums of its usage records).
* The window [from, to) and the day, week (ISO, from Monday) or month buckets are in UTC.
* Amounts are summed as NUMERIC on PostgreSQL and as integer millionths on SQLite (see models.Money), so
  totals are exact; the currency is always part of a row's group, so amounts in different currencies are
  never added together.
* A report has at most MAX_ROWS rows: a larger one is refused rather than cut short.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
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

from service.data.models import (
    MONEY_SCALE,
    HardwareProfile,
    Organization,
    Plan,
    PlanStatus,
    UsageDay,
    id_by_slug,
)
from service.services.errors import InvalidParameterError

MAX_ROWS = 100_000
MILLION = 10**MONEY_SCALE


@dataclass(frozen=True)
class CostQuery:
    """What every report is asked for: the window, its periods, the groups, the filters and the measure."""

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
    found = planned_sums(session, query, scope, statuses=(query.status or PlanStatus.COMMITTED,))
    names = group_slugs(session, query.group_by, found, offset=0 if query.granularity == "none" else 1)
    rows = []
    for record in found:
        values = list(record)
        row: dict[str, Any] = {}
        if query.granularity != "none":
            row.update(period_bounds(values.pop(0), query.granularity))
        for name in query.group_by:
            raw = values.pop(0)
            row[name] = names.get((name, raw), raw)
        row["currency"] = values.pop(0)
        row.update(zip(("plans", "accelerator_hours", "flops"), values[:3], strict=True))
        row["cost"] = summed_cost(values[3:])
        rows.append(row)
    return CostReport(query, rows, _totals(rows))


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


def planned_sums(
    session: Session, query: CostQuery, scope: uuid.UUID | None, *, statuses: Sequence[str]
) -> Sequence[Any]:
    """Per (period, groups, currency): plans, accelerator_hours, flops and the cost sums (see cost_sums) of
    the plans in `statuses` starting in the window."""
    dialect = session.get_bind().dialect.name
    period = period_column(query.granularity, dialect, Plan.start_at)
    groups = [group_column(name) for name in query.group_by]
    keys: list[SQLColumnExpression[Any]] = [*([period] if period is not None else []), *groups, Plan.currency]
    stmt = (
        select(
            *keys,
            func.count().label("plans"),
            func.sum(Plan.accelerator_hours).label("accelerator_hours"),
            func.sum(Plan.flops).label("flops"),
            *cost_sums(dialect, Plan.cost),
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
    return at_most_max_rows(session.execute(plan_filters(stmt, query)).all())


# --- What the reports share ---------------------------------------------------------------------------------


def too_many_rows() -> InvalidParameterError:
    return InvalidParameterError(
        "granularity",
        f"The report would have more than {MAX_ROWS} rows; narrow the window, coarsen the granularity "
        "or group by less.",
    )


def at_most_max_rows(found: Sequence[Any]) -> Sequence[Any]:
    if len(found) > MAX_ROWS:
        raise too_many_rows()
    return found


def cost_sums(
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


def summed_cost(sums: Sequence[Decimal | int | None]) -> Decimal | None:
    """The cost of a row from what cost_sums summed: None when no plan in it has one."""
    if len(sums) == 1:
        return None if sums[0] is None else Decimal(sums[0])
    units, millionths = sums
    if units is None or millionths is None:  # NULL together: sums of the same column over the same rows
        return None
    return Decimal(units) + Decimal(millionths).scaleb(-MONEY_SCALE)


Columns = TypeVarTuple("Columns")


def plan_filters(stmt: Select[*Columns], query: CostQuery) -> Select[*Columns]:
    """The filters on a plan's own columns but its organisation's (which each measure takes where its
    index has it)."""
    if query.budget_id is not None:
        stmt = stmt.where(Plan.budget_id == query.budget_id)
    if query.hardware is not None:
        stmt = stmt.where(Plan.hardware_id == id_by_slug(HardwareProfile, query.hardware))
    return stmt


def period_column(
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


def period_bounds(period: str | datetime, granularity: str) -> dict[str, str]:
    """A row's period_start and period_end (ISO dates) from the period a database gave: SQLite's day or month
    prefix, or the Monday it computed, or PostgreSQL's date_trunc."""
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


def group_column(name: str) -> SQLColumnExpression[uuid.UUID | str | None]:
    """The column of a plan that the group `name` (organization, budget, hardware, status, label:<key>) is."""
    if name == "organization":
        return Plan.organization_id
    if name == "budget":
        return Plan.budget_id
    if name == "hardware":
        return Plan.hardware_id
    if name == "status":
        return Plan.status
    return cast(Plan.labels[name.removeprefix("label:")].as_string(), String).label(name)


def group_slugs(
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


def usage_per_plan(
    keys: list[SQLColumnExpression[Any]], query: CostQuery, scope: uuid.UUID | None, dialect: str
) -> Subquery:
    """The days of usage in the query's window summed per plan and `keys` (the plan, its period, its
    currency), in the caller's scope and the query's organisation: what reports of spend join to plans."""
    first_day, end_day = _days(query)
    stmt = (
        select(
            *keys,
            func.sum(UsageDay.accelerator_hours).label("accelerator_hours"),
            *cost_sums(dialect, UsageDay.cost),
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
