"""The cost report, and the pieces every report of money is built from.

The cost report (`cost_report`: GET /v1/reports/costs with measure=planned, the default) is what plans are
estimated to cost: the plans whose money is committed (committed, running, completed and failed, or the
statuses the query names) by period and by organisation, budget, hardware, status or label, with totals per
currency. A budget's utilisation (budget_utilization.py) is its committed money month by month.

The other reports are built from the pieces here: planned against actual (spend.py, measures actual and both)
and the FOCUS export of what runs spent (focus.py). What they share keeps their money right:

* One meaning of committed money: the statuses a query counts are CHARGED_STATUSES unless it names others,
  in every report, the console and the CLI.
* A plan's planned figures are spread over its schedule [start_at, end_at), pro rata to time (its planned
  pace is steady), so a three-month run plans a third of its cost in each month; money is split in cents
  (in millionths where an amount has them) by the largest remainder, so a plan's pieces add up to its cost
  exactly and no view can lose or gain a cent. A run's spend counts in the period of each UTC day it was
  used (models.UsageDay, the daily sums of its usage records).
* The window [from, to) and the day, week (ISO, from Monday) or month buckets are in UTC; a plan counts in a
  window with the part of its schedule inside it.
* Amounts are exact (NUMERIC on PostgreSQL, integer millionths on SQLite: see models.Money); the currency is
  always part of a row's group, so amounts in different currencies are never added together.
* A report as JSON has at most MAX_ROWS rows: a larger one is refused rather than cut short (its message
  points to CSV). CSV files (the cost report's and the FOCUS export) have no bound: they stream their rows a
  period at a time as they are read from the database (planned_periods, spend.spend_stream, focus.focus_rows).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
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
    case,
    cast,
    func,
    select,
)
from sqlalchemy.orm import Session

from service.core.forecast import FINISHED_STATUSES
from service.core.units import minor_unit
from service.data.models import (
    CHARGED_STATUSES,
    MONEY_SCALE,
    HardwareProfile,
    Organization,
    Plan,
    UsageDay,
    id_by_slug,
)
from service.services.errors import InvalidParameterError

MAX_ROWS = 100_000
MILLION = 10**MONEY_SCALE
# The one default of every view of money (reports, utilisation, forecasts, the console, the CLI): plans whose
# cost is reserved on their budget or spent there.
COMMITTED_MONEY: tuple[str, ...] = tuple(str(status) for status in CHARGED_STATUSES)
MILLIONTH = Decimal(1).scaleb(-MONEY_SCALE)


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
    # The plans counted: by default those whose money is committed (reserved or spent), in every report.
    statuses: tuple[str, ...] = COMMITTED_MONEY
    measure: str = "planned"


@dataclass
class Totals:
    currency: str | None
    plans: int = 0
    accelerator_hours: float = 0.0
    flops: float = 0.0
    cost: Decimal | None = None
    energy_kwh: float | None = None
    emissions_kg_co2e: float | None = None
    plans_without_energy: int = 0
    plans_without_emissions: int = 0


# A plan's energy and emissions (services/energy.py) are summed like its hours; plans without them (hardware
# without a TDP; for emissions, no site) add nothing and are counted, so that a sum says what it leaves out.
ENERGY_METRICS = ("energy_kwh", "emissions_kg_co2e", "plans_without_energy", "plans_without_emissions")
METRICS = ("currency", "plans", "accelerator_hours", "flops", "cost", "estimated", *ENERGY_METRICS)
# The figures planned_periods sums per key, in order.
PLANNED_FIGURES = ("plans", "accelerator_hours", "flops", "cost", *ENERGY_METRICS)


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
    """The plans of the query's statuses whose schedule overlaps [start, end), spread over its periods and
    grouped by `group_by`, with their sums per currency."""
    planned = planned_sums(session, query, scope)
    names = group_slugs(session, query.group_by, planned.rows, offset=0 if query.granularity == "none" else 1)
    rows = []
    for record in planned.rows:
        values = list(record)
        row: dict[str, Any] = {}
        if query.granularity != "none":
            row.update(period_bounds(values.pop(0), query.granularity))
        for name in query.group_by:
            raw = values.pop(0)
            row[name] = names.get((name, raw), raw)
        row["currency"] = values.pop(0)
        row.update(zip(PLANNED_FIGURES, values, strict=True))
        rows.append(row)
    return CostReport(query, rows, _totals(rows, planned.plans, plans_without_energy(session, query, scope)))


def _totals(
    rows: list[dict[str, Any]], plans: dict[str | None, int], without: dict[str | None, tuple[int, int]]
) -> list[Totals]:
    """Per currency; a plan spread over several periods counts once."""
    by_currency: dict[str | None, Totals] = {}
    for row in rows:
        currency = row["currency"]
        totals = by_currency.get(currency)
        if totals is None:
            no_energy, no_emissions = without.get(currency, (0, 0))
            totals = by_currency[currency] = Totals(
                currency,
                plans[currency],
                plans_without_energy=no_energy,
                plans_without_emissions=no_emissions,
            )
        totals.accelerator_hours += row["accelerator_hours"]
        totals.flops += row["flops"]
        if row["cost"] is not None:
            totals.cost = (totals.cost or Decimal(0)) + row["cost"]
        totals.energy_kwh = _plus(totals.energy_kwh, row["energy_kwh"])
        totals.emissions_kg_co2e = _plus(totals.emissions_kg_co2e, row["emissions_kg_co2e"])
    return sorted(by_currency.values(), key=lambda totals: totals.currency or "")


def _plus(total: float | None, value: float | None) -> float | None:
    """A sum of figures some plans lack: None until one has it."""
    return total if value is None else (total or 0.0) + value


def plans_without_energy(
    session: Session, query: CostQuery, scope: uuid.UUID | None
) -> dict[str | None, tuple[int, int]]:
    """Per currency, the plans a planned report counts that have no energy, and no emissions: each once."""
    stmt = planned_scope(
        select(
            Plan.currency,
            func.count() - func.count(Plan.energy_kwh),
            func.count() - func.count(Plan.emissions_kg_co2e),
        ),
        query,
        scope,
    ).group_by(Plan.currency)
    return {
        currency: (no_energy, no_emissions) for currency, no_energy, no_emissions in session.execute(stmt)
    }


Columns = TypeVarTuple("Columns")


@dataclass(frozen=True)
class Planned:
    """Per (period, groups, currency), in key order: PLANNED_FIGURES (cost None for plans without a price,
    energy and emissions None where no plan has them); and per currency the plans counted, each once however
    many periods it spans."""

    rows: list[tuple[Any, ...]]
    plans: dict[str | None, int]


def planned_sums(
    session: Session, query: CostQuery, scope: uuid.UUID | None, *, charged: bool = False
) -> Planned:
    """The plans of the query's statuses whose schedule overlaps the window, each spread over the periods of
    its schedule pro rata to time (`spread`), summed per period, group and currency: every period's of
    planned_periods, at most MAX_ROWS rows (a larger report is refused).

    `charged`: the money each plan holds on its budget's ledger instead of its planned cost: the cost while
    it is committed or running, and once it has finished what it spent of it (the ledger settles the rest
    back; spend beyond it is the budget's overrun).
    """
    counted: dict[str | None, int] = {}
    rows: list[tuple[Any, ...]] = []
    for _, sums in planned_periods(session, query, scope, charged=charged, counted=counted):
        if len(rows) + len(sums) > MAX_ROWS:
            raise too_many_rows()
        rows += [(*key, *values) for key, values in sorted(sums.items(), key=lambda item: key_order(item[0]))]
    return Planned(rows, counted)


# Rows fetched from the database at a time when a report streams (a server-side cursor on PostgreSQL).
STREAM_BATCH = 2_000
PeriodSums = dict[tuple[Any, ...], list[Any]]


def streamed(stmt: Select[*Columns], stream: bool) -> Select[*Columns]:
    """`stmt` read a batch at a time as it is iterated (a server-side cursor on PostgreSQL, which needs a
    transaction: see infra.db.export_session) rather than whole when it is executed."""
    return stmt.execution_options(yield_per=STREAM_BATCH) if stream else stmt


def planned_periods(
    session: Session,
    query: CostQuery,
    scope: uuid.UUID | None,
    *,
    charged: bool = False,
    counted: dict[str | None, int] | None = None,
    stream: bool = False,
) -> Iterator[tuple[datetime | None, PeriodSums]]:
    """planned_sums a period at a time, in order, the periods with something planned only: (its start, or
    None for granularity none; its sums per (period, groups, currency) key: plans, accelerator_hours, flops
    and cost (None for plans without a price)). `counted` receives per currency the plans counted, each once
    however many periods it spans, as they are read.

    A plan whose schedule lies inside one period of the window is that period's whole: the database sums
    those (most plans, at a month's or the window's granularity) as it sums any column, in period order; the
    others, which cross a period's or the window's edge, are read in order of their start and spread here.
    What is held at a time is one period's sums and the pieces, in later periods, of the plans that crossed
    into them, never the whole report: with `stream`, rows are read from the database as they are needed.
    """
    dialect = session.get_bind().dialect.name
    groups = [group_column(name) for name in query.group_by]
    money: SQLColumnExpression[Any] = Plan.cost
    if charged:
        spent_less = Plan.status.in_(FINISHED_STATUSES) & (Plan.actual_cost < Plan.cost)
        money = case((spent_less, Plan.actual_cost), else_=Plan.cost)
    within = _within_one_period(query, dialect)
    counted = {} if counted is None else counted
    period = period_column(query.granularity, dialect, Plan.start_at)
    keys: list[SQLColumnExpression[Any]] = [*([period] if period is not None else []), *groups, Plan.currency]
    whole = planned_scope(
        select(
            *keys,
            func.count().label("plans"),
            func.sum(Plan.accelerator_hours),
            func.sum(Plan.flops),
            func.sum(Plan.energy_kwh),
            func.sum(Plan.emissions_kg_co2e),
            func.count() - func.count(Plan.energy_kwh),
            func.count() - func.count(Plan.emissions_kg_co2e),
            *cost_sums(dialect, money),
        ).where(within),
        query,
        scope,
    ).group_by(*keys)
    if period is not None:
        whole = whole.order_by(period)
    crossing = (
        planned_scope(
            select(
                Plan.start_at,
                Plan.end_at,
                *groups,
                Plan.currency,
                Plan.accelerator_hours,
                Plan.flops,
                Plan.energy_kwh,
                Plan.emissions_kg_co2e,
                money,
            ),
            query,
            scope,
        )
        .where(~within)
        .order_by(Plan.start_at)
    )
    results = [session.execute(streamed(statement, stream)) for statement in (whole, crossing)]
    try:  # closed however the stream ends: a server-side cursor is not left to the garbage collector
        yield from _merged_periods(
            query,
            periodic=period is not None,
            group_count=len(groups),
            counted=counted,
            wholes_result=results[0],
            crossings_result=results[1],
        )
    finally:
        for result in results:
            result.close()


def _merged_periods(
    query: CostQuery,
    *,
    periodic: bool,
    group_count: int,
    counted: dict[str | None, int],
    wholes_result: Iterable[Any],
    crossings_result: Iterable[Any],
) -> Iterator[tuple[datetime | None, PeriodSums]]:
    """planned_periods' merge of the sums of plans inside one period (in period order) and the pieces of
    those crossing a period's edge (in order of their start)."""
    wholes, crossings = iter(wholes_result), iter(crossings_result)
    next_whole, next_crossing = next(wholes, None), next(crossings, None)
    pending: dict[datetime | None, PeriodSums] = {}

    def first_of(record: Any) -> datetime | None:
        return None if not periodic else _period_start(record[0], query.granularity)

    def crossing_first(record: Any) -> datetime | None:
        moment = max(record[0], query.start) if record[1] > record[0] else record[0]
        return None if not periodic else period_floor(moment, query.granularity)

    while True:
        starts = [*pending]
        if next_whole is not None:
            starts.append(first_of(next_whole))
        if next_crossing is not None:
            starts.append(crossing_first(next_crossing))
        if not starts:
            return
        first = None if not periodic else min(start for start in starts if start is not None)
        after = None if first is None else next_period(first, query.granularity)
        sums = pending.setdefault(first, {})
        while next_whole is not None and (after is None or first_of(next_whole) == first):
            values = list(next_whole)
            head = [first] if periodic else []
            values = values[1:] if periodic else values
            key = (*head, *values[:group_count], values[group_count])
            plans, hours, flops, kwh, emitted, no_energy, no_emissions, *cost = values[group_count + 1 :]
            counted[key[-1]] = counted.get(key[-1], 0) + plans
            _add(
                sums,
                key,
                plans,
                hours or 0.0,
                flops or 0.0,
                summed_cost(cost),
                kwh,
                emitted,
                no_energy,
                no_emissions,
            )
            next_whole = next(wholes, None)
        while next_crossing is not None and (after is None or next_crossing[0] < after):
            start, end, *rest = next_crossing
            *group_values, currency, hours, flops, kwh, emitted, cost = rest
            counted[currency] = counted.get(currency, 0) + 1
            for moment, share, piece in spread(start, end, query, cost, currency):
                key = (*([moment] if periodic else []), *group_values, currency)
                _add(
                    pending.setdefault(moment, {}),
                    key,
                    1,
                    hours * share,
                    flops * share,
                    piece,
                    None if kwh is None else kwh * share,
                    None if emitted is None else emitted * share,
                    int(kwh is None),
                    int(emitted is None),
                )
            next_crossing = next(crossings, None)
        yield first, pending.pop(first)


def _add(sums: PeriodSums, key: tuple[Any, ...], *figures: Any) -> None:
    """Adds PLANNED_FIGURES to the sums of `key` (a cost, energy or emissions of None adds nothing)."""
    plans, hours, flops, cost, kwh, emitted, no_energy, no_emissions = figures
    found = sums.get(key)
    if found is None:
        found = sums[key] = [0, 0.0, 0.0, None, None, None, 0, 0]
    found[0] += plans
    found[1] += hours
    found[2] += flops
    if cost is not None:
        found[3] = cost if found[3] is None else found[3] + cost
    found[4] = _plus(found[4], kwh)
    found[5] = _plus(found[5], emitted)
    found[6] += no_energy
    found[7] += no_emissions


def planned_scope(stmt: Select[*Columns], query: CostQuery, scope: uuid.UUID | None) -> Select[*Columns]:
    """The plans a planned report counts: of its statuses, in its scope and filters, their schedule
    overlapping the window (a schedule of no length: its start inside it)."""
    stmt = stmt.where(
        Plan.status.in_(query.statuses),
        Plan.start_at < query.end,
        (Plan.end_at > query.start) | ((Plan.end_at <= Plan.start_at) & (Plan.start_at >= query.start)),
    )
    if scope is not None:
        stmt = stmt.where(Plan.organization_id == scope)
    if query.organization is not None:
        stmt = stmt.where(Plan.organization_id == id_by_slug(Organization, query.organization))
    return plan_filters(stmt, query)


def _within_one_period(query: CostQuery, dialect: str) -> ColumnElement[bool]:
    """SQL for a schedule of some length inside the window and inside one of its periods (its start's and
    its end's periods the same: a run ending at midnight on the 1st counts as crossing, and is spread)."""
    inside = (Plan.start_at >= query.start) & (Plan.end_at <= query.end) & (Plan.end_at > Plan.start_at)
    if query.granularity == "none":
        return inside
    start, end = (
        period_column(query.granularity, dialect, moment) for moment in (Plan.start_at, Plan.end_at)
    )
    assert start is not None, "a granularity has periods"
    assert end is not None, "a granularity has periods"
    return inside & (_unlabelled(start) == _unlabelled(end))


def _unlabelled(column: ColumnElement[Any]) -> ColumnElement[Any]:
    return column.element if isinstance(column, Label) else column


def _period_start(period: str | datetime, granularity: str) -> datetime:
    """A database's period (SQLite's prefix or Monday, PostgreSQL's date_trunc) as the instant it starts."""
    first = date.fromisoformat(period_bounds(period, granularity)["period_start"])
    return datetime(first.year, first.month, first.day, tzinfo=UTC)


def key_order(key: tuple[Any, ...]) -> tuple[tuple[bool, str], ...]:
    """Rows in key order, nulls first (on both databases, as SQLite orders them)."""
    return tuple((value is not None, str(value)) for value in key)


def spread(
    start: datetime, end: datetime, query: CostQuery, cost: Decimal | None, currency: str | None
) -> list[tuple[datetime | None, float, Decimal | None]]:
    """The periods of the window a schedule [start, end) falls in (None: the whole window, granularity none),
    each with its share of the schedule's time and of `cost`.

    The cost is split in the currency's minor unit (cents; millionths where the cost has them) by the
    largest remainder over the periods inside the window and the parts before and after it, so that a
    plan's pieces in every window add up to its cost to the last cent. A schedule of no length counts whole
    at its start.
    """
    if end <= start:
        pieces: list[tuple[datetime | None, int]] = [
            (None if query.granularity == "none" else period_floor(start, query.granularity), 1)
        ]
        outside = [0, 0]
    else:
        pieces = []
        inside_start, inside_end = max(start, query.start), min(end, query.end)
        moment = inside_start
        while moment < inside_end:
            if query.granularity == "none":
                period, after = None, inside_end
            else:
                period = period_floor(moment, query.granularity)
                after = min(next_period(period, query.granularity), inside_end)
            pieces.append((period, _seconds(after - moment)))
            moment = after
        outside = [_seconds(inside_start - start), _seconds(end - inside_end)]
    weights = [weight for _, weight in pieces] + outside
    total = sum(weights)
    money = [None] * len(pieces) if cost is None else split_money(cost, weights, currency)[: len(pieces)]
    return [(period, weight / total, piece) for (period, weight), piece in zip(pieces, money, strict=True)]


def _seconds(span: timedelta) -> int:
    return span.days * 86_400_000_000 + span.seconds * 1_000_000 + span.microseconds  # microseconds


def split_money(amount: Decimal, weights: Sequence[int], currency: str | None) -> list[Decimal]:
    """`amount` in parts proportional to `weights` (integers, not all 0), in the currency's minor unit unless
    the amount has finer digits (then millionths), the remainder going to the largest fractional parts (the
    first of a tie): the parts add up to the amount exactly."""
    unit = minor_unit(currency)
    quantum = unit if amount == amount.quantize(unit) else MILLIONTH
    units = int(amount / quantum)
    total = sum(weights)
    exact = [units * weight for weight in weights]
    parts = [value // total for value in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: -(exact[i] % total))
    for i in by_remainder[: units - sum(parts)]:
        parts[i] += 1
    return [quantum * part for part in parts]


def period_floor(moment: datetime, granularity: str) -> datetime:
    """The UTC start of the day, ISO week (Monday) or month `moment` is in."""
    day = moment.astimezone(UTC).date()
    if granularity == "week":
        day -= timedelta(days=day.weekday())
    elif granularity == "month":
        day = day.replace(day=1)
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def next_period(first: datetime, granularity: str) -> datetime:
    """The start of the period after the one starting at `first`."""
    if granularity == "day":
        return first + timedelta(days=1)
    if granularity == "week":
        return first + timedelta(days=7)
    return datetime(first.year + first.month // 12, first.month % 12 + 1, 1, tzinfo=UTC)


# --- What the reports share ---------------------------------------------------------------------------------


def too_many_rows() -> InvalidParameterError:
    return InvalidParameterError(
        "granularity",
        f"The report would have more than {MAX_ROWS} rows, more than a JSON answer holds: ask for CSV "
        "(format=csv, or the FOCUS export), which streams every row, or narrow the window, coarsen the "
        "granularity or group by less.",
    )


def cost_sums(
    dialect: str, amount: SQLColumnExpression[Decimal | None], name: str = "cost"
) -> list[Label[Decimal | None]] | list[Label[int]]:
    """Exact sums of amounts, labelled `name` (SQLite: `name`_units and `name`_millionths). SQLite holds
    amounts as integer millionths, whose 64-bit sum overflows past 9.2e12: there, whole units and millionths
    are summed apart (each far from overflowing)."""
    if dialect != "sqlite":
        return [func.sum(amount).label(name)]
    stored = cast(amount, Integer)
    return [
        func.sum(stored // MILLION).label(f"{name}_units"),
        func.sum(stored % MILLION).label(f"{name}_millionths"),
    ]


def summed_columns(table: Subquery, dialect: str, name: str = "cost") -> list[ColumnElement[Any]]:
    """The columns of `table` that cost_sums labelled `name`."""
    if dialect != "sqlite":
        return [table.c[name]]
    return [table.c[f"{name}_units"], table.c[f"{name}_millionths"]]


def summed_cost(sums: Sequence[Decimal | int | None]) -> Decimal | None:
    """The cost of a row from what cost_sums summed: None when no plan in it has one."""
    if len(sums) == 1:
        return None if sums[0] is None else Decimal(sums[0])
    units, millionths = sums
    if units is None or millionths is None:  # NULL together: sums of the same column over the same rows
        return None
    return Decimal(units) + Decimal(millionths).scaleb(-MONEY_SCALE)


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
    # A plan without the label and one whose value is empty are one group (null): a CSV could not tell them
    # apart, and neither says anything more.
    value = cast(Plan.labels[name.removeprefix("label:")].as_string(), String)
    return func.nullif(value, "").label(name)


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
    currency), in the caller's scope and the query's organisation: what reports of spend join to plans.
    With the part of the hours and cost that records off their plan's schedule used and spent."""
    first_day, end_day = _days(query)
    stmt = (
        select(
            *keys,
            func.sum(UsageDay.accelerator_hours).label("accelerator_hours"),
            *cost_sums(dialect, UsageDay.cost),
            func.sum(UsageDay.off_schedule_accelerator_hours).label("off_schedule_accelerator_hours"),
            *cost_sums(dialect, UsageDay.off_schedule_cost, "off_schedule_cost"),
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
