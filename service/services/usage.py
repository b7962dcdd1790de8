"""A plan's run: started, its usage reported by its orchestrator, completed or failed.

Usage records are append-only. Each moves, in its own transaction, the plan's actual figures, its budget's
`spent` (and `overrun`, the spend beyond what the plan reserved), the daily sums reports read
(`usage_days`), and raises an event when a spend or its forecast crosses one of the budget's thresholds.
A wrong record is reversed by a record of the opposite sign, never edited.

The plan's row is locked first (SQLite serialises writers anyway), so records of one plan apply one after
the other and its figures are read and written under that lock; the budget, shared by many plans, only
ever moves by relative UPDATEs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from sqlalchemy import ColumnElement, and_, exists, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, defer
from sqlalchemy.orm.attributes import set_committed_value

from service.core import accuracy
from service.core.forecast import Progress, expected_end
from service.core.units import CENT, MAX_MONEY
from service.data.models import (
    CHARGED_STATUSES,
    DEFAULT_ALERT_THRESHOLDS,
    MONEY_SCALE,
    REPORTING_STATUSES,
    Budget,
    Event,
    HardwarePrice,
    Plan,
    PlanStatus,
    UsageDay,
    UsageRecord,
    money_literal,
    standing_usage,
    utcnow,
)
from service.infra import actors
from service.services import audit, events
from service.services.documents import JsonObject, format_money, format_optional_money
from service.services.errors import ConflictError, InvalidFieldError, NotFoundError
from service.services.pagination import DEFAULT_LIMIT, Cursor, Page, paginate
from service.services.plans import get_plan, give_back

CLOCK_SKEW = timedelta(minutes=5)  # a reporter's clock may run this far ahead of ours
MAX_PERIOD = timedelta(days=366)
MONEY_QUANTUM = Decimal(1).scaleb(-MONEY_SCALE)
MOST_MONEY = MAX_MONEY - MONEY_QUANTUM  # the largest amount the databases hold
# Forecasts raise events only at thresholds a run is not expected to reach anyway (a forecast of 80% of the
# plan is the plan going well), and only when over them: before any progress a run's forecast is its plan,
# which is no news.
FORECAST_THRESHOLD = 1.0


@dataclass(frozen=True, kw_only=True)
class UsageReport:
    """What a run used in [period_start, period_end), as its orchestrator reports it."""

    reporter: str
    period_start: datetime
    period_end: datetime
    accelerator_hours: float
    tokens: float | None = None  # trained by period_end, in all
    tokens_per_second: float | None = None  # measured over the period
    cost: Decimal | None = None  # None: the hours at the price in force
    currency: str | None = None  # the plan's when given
    note: str | None = None


# --- Reporting --------------------------------------------------------------------------------------------


def report_usage(
    session: Session, plan_id: uuid.UUID, report: UsageReport, *, scope: uuid.UUID | None
) -> UsageRecord:
    """Append a usage record to a committed or running plan (a committed plan starts with it)."""
    plan = _locked(session, plan_id, scope)
    _check_reporting(plan)
    _check_period(report)
    _check_budget_period(session, plan, report)
    if report.currency is not None and report.currency != plan.currency:
        raise InvalidFieldError(
            "currency",
            f"The plan is charged in {plan.currency}; usage is reported in the plan's currency (amounts in "
            "different currencies are never mixed).",
        )
    _check_no_overlap(session, plan, report)
    latest = _check_tokens(session, plan, report)
    cost, price = _cost(session, plan, report)
    cost_source = "price" if report.cost is None else "reported"
    _check_within_money(plan, cost, _money_field(cost_source))

    starts = plan.status == PlanStatus.COMMITTED
    if starts:
        _start(session, plan, report.period_start)
    record = UsageRecord(
        plan_id=plan.id,
        organization_id=plan.organization_id,
        kind="usage",
        reporter=report.reporter,
        period_start=report.period_start,
        period_end=report.period_end,
        accelerator_hours=report.accelerator_hours,
        tokens=report.tokens,
        tokens_per_second=report.tokens_per_second,
        cost=cost,
        currency=plan.currency,
        cost_source=cost_source,
        price_per_hour=price,
        off_schedule=report.period_start < plan.start_at or report.period_end > plan.end_at,
        note=report.note,
        actor=actors.actor(session),
        request_id=actors.request_id(session),
        created_at=utcnow(),
    )
    session.add(record)
    session.flush()
    tokens_trained = report.tokens if latest and report.tokens is not None else plan.tokens_trained
    _apply(session, plan, record, tokens_trained, starts=starts)
    return record


def reverse_usage(
    session: Session, plan_id: uuid.UUID, usage_id: uuid.UUID, *, note: str | None, scope: uuid.UUID | None
) -> UsageRecord:
    """Take a record back with one of the opposite sign; its period may then be reported again."""
    plan = _locked(session, plan_id, scope)
    _check_reporting(plan)
    wrong = session.scalars(
        select(UsageRecord).where(UsageRecord.id == usage_id, UsageRecord.plan_id == plan.id)
    ).first()
    if wrong is None:
        raise NotFoundError(f"No usage record {usage_id} of plan {plan.id}.")
    if wrong.kind != "usage":
        raise ConflictError("A reversal cannot be reversed; report the usage again.", usage_id=str(usage_id))
    if session.scalar(select(exists().where(UsageRecord.reverses_id == wrong.id))):
        raise ConflictError(f"Usage record {wrong.id} is already reversed.", usage_id=str(usage_id))
    reversal = UsageRecord(
        plan_id=plan.id,
        organization_id=plan.organization_id,
        kind="reversal",
        reverses_id=wrong.id,
        reporter=wrong.reporter,
        period_start=wrong.period_start,
        period_end=wrong.period_end,
        accelerator_hours=-wrong.accelerator_hours,
        cost=-wrong.cost,
        currency=wrong.currency,
        cost_source="reversal",
        off_schedule=wrong.off_schedule,
        note=note,
        actor=actors.actor(session),
        request_id=actors.request_id(session),
        created_at=utcnow(),
    )
    session.add(reversal)
    session.flush()
    _apply(session, plan, reversal, _tokens_trained(session, plan.id))
    return reversal


def _locked(session: Session, plan_id: uuid.UUID, scope: uuid.UUID | None) -> Plan:
    """The plan, its row locked until the transaction ends; 404 for a plan the caller may not see."""
    stmt = (
        select(Plan)
        .where(Plan.id == plan_id)
        .options(defer(Plan.result))
        .with_for_update(of=Plan)
        .execution_options(populate_existing=True)
    )
    if scope is not None:
        stmt = stmt.where(Plan.organization_id == scope)
    plan = session.scalars(stmt).first()
    if plan is None:
        raise NotFoundError(f"No plan {plan_id}.")
    return plan


def _check_reporting(plan: Plan) -> None:
    if plan.status not in REPORTING_STATUSES:
        raise ConflictError(
            f"The plan is {plan.status}; usage is reported for committed or running plans.",
            plan_status=plan.status,
        )


def _check_period(report: UsageReport) -> None:
    if report.period_end > utcnow() + CLOCK_SKEW:
        raise InvalidFieldError("period_end", "Usage cannot be reported for a period that has not ended.")
    if report.period_end - report.period_start > MAX_PERIOD:
        raise InvalidFieldError(
            "period_end", "A usage record covers at most 366 days; report longer runs in parts."
        )


def _check_budget_period(session: Session, plan: Plan, report: UsageReport) -> None:
    """Spend is charged to the plan's budget: a period outside the budget's is refused, naming the end that
    lies outside (a run that starts late or runs over its plan's own schedule is taken, and flagged)."""
    if plan.budget_id is None:
        return
    budget = session.get_one(Budget, plan.budget_id)
    window = f"[{budget.period_start.isoformat()}, {budget.period_end.isoformat()})"
    if report.period_start < budget.period_start:
        raise InvalidFieldError(
            "period_start",
            f"The period starts before the period of the plan's budget, {window}: spend outside it "
            "cannot be charged to it.",
        )
    if report.period_end > budget.period_end:
        raise InvalidFieldError(
            "period_end",
            f"The period ends after the period of the plan's budget, {window}: spend outside it cannot "
            "be charged to it.",
        )


def _check_no_overlap(session: Session, plan: Plan, report: UsageReport) -> None:
    """A reporter's periods never overlap: a retry without an Idempotency-Key is refused, never counted
    twice."""
    overlapping = session.scalars(
        select(UsageRecord.id)
        .where(
            _live_usage(plan.id),
            UsageRecord.reporter == report.reporter,
            UsageRecord.period_start < report.period_end,
            UsageRecord.period_end > report.period_start,
        )
        .limit(1)
    ).first()
    if overlapping is not None:
        raise ConflictError(
            f"Reporter {report.reporter!r} already reported usage overlapping this period (record "
            f"{overlapping}); reverse that record to correct it.",
            field="period_start",
            usage_id=str(overlapping),
        )


def _check_tokens(session: Session, plan: Plan, report: UsageReport) -> bool:
    """Tokens so far never go down from one period to the next. True when no record with tokens follows
    this one: its tokens are then the plan's tokens trained."""
    if report.tokens is None:
        return False
    live = _live_usage(plan.id)
    before = session.scalar(
        select(UsageRecord.tokens)
        .where(live, UsageRecord.tokens.is_not(None), UsageRecord.period_end <= report.period_start)
        .order_by(UsageRecord.period_end.desc())
        .limit(1)
    )
    after = session.scalar(
        select(UsageRecord.tokens)
        .where(live, UsageRecord.tokens.is_not(None), UsageRecord.period_start >= report.period_end)
        .order_by(UsageRecord.period_start)
        .limit(1)
    )
    if before is not None and report.tokens < before:
        raise InvalidFieldError(
            "tokens", f"Tokens trained so far: {before:.6g} were reported for an earlier period; not fewer."
        )
    if after is not None and report.tokens > after:
        raise InvalidFieldError(
            "tokens", f"Tokens trained so far: {after:.6g} were reported for a later period; not more."
        )
    return after is None


def _live_usage(plan_id: uuid.UUID) -> ColumnElement[bool]:
    """Usage records of the plan that stand: not reversals, not reversed."""
    return and_(UsageRecord.plan_id == plan_id, standing_usage())


def _cost(session: Session, plan: Plan, report: UsageReport) -> tuple[Decimal, Decimal | None]:
    """The record's cost, and the price per hour it was charged at when the reporter gave no cost."""
    if report.cost is not None:
        return report.cost, None
    price = _price_in_force(session, plan, report.period_start)
    if price is None:
        raise InvalidFieldError(
            "cost", "The plan's hardware has no price in the plan's currency for this period; give cost."
        )
    cost = (Decimal(repr(report.accelerator_hours)) * price).quantize(MONEY_QUANTUM, ROUND_HALF_UP)
    return cost, price


def _money_field(cost_source: str) -> str:
    """The field a record's cost comes from: the hours when charged at the price, else `cost`."""
    return "accelerator_hours" if cost_source == "price" else "cost"


def _check_within_money(plan: Plan, cost: Decimal, field: str) -> None:
    """A 422 at `field` for a record whose cost, or the plan's spend with it, would reach MAX_MONEY: more
    than the databases hold (NUMERIC(18, 6)). The budget's spend is held to it as the record is charged
    (_charge_budget)."""
    if cost >= MAX_MONEY or plan.actual_cost + cost >= MAX_MONEY:
        raise InvalidFieldError(
            field,
            f"The period's cost, {cost:f} {plan.currency}, would bring the plan's spend to "
            f"{plan.actual_cost + cost:f}: amounts reach at most {MOST_MONEY:f}.",
        )


def _price_in_force(session: Session, plan: Plan, moment: datetime) -> Decimal | None:
    """The plan's own price (given with its request), else its hardware's price in force at `moment`, else
    (inline hardware, or a period before the profile had a price) the price the plan was made with."""
    given = plan.inputs.get("price_per_hour")
    if given is not None:
        return Decimal(given)
    if plan.hardware_id is not None:
        # As HardwareProfile.price_at chooses, in one query rather than the profile's whole price history.
        in_force = session.execute(
            select(HardwarePrice.price_per_hour, HardwarePrice.currency)
            .where(HardwarePrice.hardware_id == plan.hardware_id, HardwarePrice.effective_at <= moment)
            .order_by(HardwarePrice.effective_at.desc(), HardwarePrice.id.desc())
            .limit(1)
        ).first()
        if in_force is not None:
            return in_force.price_per_hour if in_force.currency == plan.currency else None
    planned = plan.snapshot["hardware"]
    if planned.get("price_per_hour") is None or planned.get("currency") != plan.currency:
        return None
    return Decimal(planned["price_per_hour"])


# --- Applying a record ------------------------------------------------------------------------------------


def _apply(
    session: Session, plan: Plan, record: UsageRecord, tokens_trained: float, *, starts: bool = False
) -> None:
    """Move the plan's, the budget's and the day's figures by the record, then raise its events: that the
    run started (`starts`), and the thresholds it crossed. Events come last: their counter row's lock, held
    to the commit, is taken after the budget's, in every transaction, so that two never wait on each other."""
    spent_before = plan.actual_cost
    off_schedule = {}
    if record.off_schedule:
        off_schedule = {
            "off_schedule_cost": plan.off_schedule_cost + record.cost,
            "off_schedule_accelerator_hours": max(
                plan.off_schedule_accelerator_hours + record.accelerator_hours, 0.0
            ),
        }
    _update(
        session,
        plan,
        actual_cost=spent_before + record.cost,
        actual_accelerator_hours=max(plan.actual_accelerator_hours + record.accelerator_hours, 0.0),
        tokens_trained=tokens_trained,
        **off_schedule,
    )
    reserved = plan.cost or Decimal(0)
    overrun = max(plan.actual_cost - reserved, Decimal(0)) - max(spent_before - reserved, Decimal(0))
    budget = _charge_budget(session, plan, record.cost, overrun, _money_field(record.cost_source))
    _add_to_days(session, record)
    if starts:
        _announce_start(session, plan)
    _raise_thresholds(session, plan, spent_before, budget)


def _update(session: Session, plan: Plan, **values: Any) -> None:
    """Set the locked plan's columns by a Core UPDATE (the audit log records usage records and transitions,
    not every figure they move) and on the loaded plan alike."""
    session.execute(
        update(Plan)
        .where(Plan.id == plan.id)
        .values(version=Plan.version + 1, **values)
        .execution_options(synchronize_session=False)
    )
    for name, value in values.items():
        set_committed_value(plan, name, value)
    set_committed_value(plan, "version", plan.version + 1)


def _tokens_trained(session: Session, plan_id: uuid.UUID) -> float:
    latest = session.scalar(
        select(UsageRecord.tokens)
        .where(_live_usage(plan_id), UsageRecord.tokens.is_not(None))
        .order_by(UsageRecord.period_end.desc())
        .limit(1)
    )
    return latest or 0.0


@dataclass(frozen=True)
class _Charged:
    """A budget as a record's cost left it: what its thresholds are checked against."""

    id: uuid.UUID
    organization_id: uuid.UUID
    amount: Decimal
    currency: str
    alert_thresholds: list[float]
    spent_before: Decimal
    spent: Decimal


def _charge_budget(
    session: Session, plan: Plan, cost: Decimal, overrun: Decimal, field: str
) -> _Charged | None:
    """Add the record's cost to the budget's spend (None for a plan without a budget); a 422 at `field`
    when the budget's spend would reach MAX_MONEY (the UPDATE's own condition: concurrent records alike)."""
    if plan.budget_id is None:
        return None
    after = session.execute(
        update(Budget)
        .where(Budget.id == plan.budget_id, Budget.spent + money_literal(cost) < MAX_MONEY)
        .values(
            spent=Budget.spent + money_literal(cost),
            overrun=Budget.overrun + money_literal(overrun),
            version=Budget.version + 1,
            updated_at=utcnow(),
        )
        .returning(
            Budget.organization_id, Budget.amount, Budget.currency, Budget.alert_thresholds, Budget.spent
        )
        .execution_options(synchronize_session=False)
    ).first()
    if after is None:
        raise InvalidFieldError(
            field,
            f"The period's cost, {cost:f} {plan.currency}, would bring its budget's spend past "
            f"{MOST_MONEY:f}, the most an amount reaches.",
        )
    return _Charged(plan.budget_id, *after[:4], spent_before=after.spent - cost, spent=after.spent)


def days_of(start: datetime, end: datetime) -> Iterator[tuple[date, float]]:
    """The UTC days [start, end) touches, each with the share of the period in it."""
    total = (end - start).total_seconds()
    day = start.date()
    while True:
        day_start = datetime.combine(day, time(), start.tzinfo)
        day_end = day_start + timedelta(days=1)
        share = (min(end, day_end) - max(start, day_start)).total_seconds() / total
        if share > 0:
            yield day, share
        if day_end >= end:
            return
        day = day_end.date()


def day_pieces(
    start: datetime, end: datetime, hours: float, cost: Decimal
) -> list[tuple[date, float, Decimal]]:
    """A record's hours and cost by the UTC days of its period, in proportion to time: each day's hours and
    cost to the millionth, the last day taking the cost's rounding (so the pieces add up to it)."""
    days = list(days_of(start, end))
    pieces, allotted = [], Decimal(0)
    for index, (day, share) in enumerate(days):
        if index == len(days) - 1:
            piece = cost - allotted
        else:
            piece = (cost * Decimal(repr(share))).quantize(MONEY_QUANTUM, ROUND_HALF_UP)
            allotted += piece
        pieces.append((day, hours * share, piece))
    return pieces


def _add_to_days(session: Session, record: UsageRecord) -> None:
    """Add the record to its plan's days (day_pieces), and to their off-schedule figures if it is off it."""
    off = 1 if record.off_schedule else 0
    rows = [
        {
            "plan_id": record.plan_id,
            "day": day,
            "organization_id": record.organization_id,
            "accelerator_hours": hours,
            "cost": cost,
            "currency": record.currency,
            "off_schedule_accelerator_hours": hours * off,
            "off_schedule_cost": cost * off,
        }
        for day, hours, cost in day_pieces(
            record.period_start, record.period_end, record.accelerator_hours, record.cost
        )
    ]
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(UsageDay).values(rows)
    stmt = stmt.on_conflict_do_update(
        index_elements=[UsageDay.plan_id, UsageDay.day],
        set_={
            "accelerator_hours": UsageDay.accelerator_hours + stmt.excluded.accelerator_hours,
            "cost": UsageDay.cost + stmt.excluded.cost,
            "off_schedule_accelerator_hours": UsageDay.off_schedule_accelerator_hours
            + stmt.excluded.off_schedule_accelerator_hours,
            "off_schedule_cost": UsageDay.off_schedule_cost + stmt.excluded.off_schedule_cost,
        },
    )
    session.execute(stmt)


# --- Thresholds -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Crossing:
    """A threshold a spend or a forecast reached: `measure` is actual or forecast for a plan, spent or
    forecast for a budget."""

    subject: str  # plan or budget
    subject_id: uuid.UUID
    measure: str
    threshold: float
    amount: Decimal

    @property
    def key(self) -> str:
        return _crossing_key(self.subject, self.subject_id, self.measure, self.threshold)


def _crossing_key(subject: str, subject_id: uuid.UUID, measure: str, threshold: float) -> str:
    """What makes a crossing's event raised once: the same threshold crossed again raises nothing."""
    return f"{subject}:{subject_id}:{measure}:{threshold}"


def _raise_thresholds(session: Session, plan: Plan, spent_before: Decimal, budget: _Charged | None) -> None:
    """Raise an event for each threshold the record took the plan's or its budget's spend (or forecast)
    across: the crossings are worked out here, and those raised before found in one query."""
    thresholds = DEFAULT_ALERT_THRESHOLDS if budget is None else budget.alert_thresholds
    crossings = _plan_crossings(plan, spent_before, thresholds)
    forecast_keys: dict[str, float] = {}  # the budget's forecast thresholds, by their events' keys
    if budget is not None:
        crossings += _budget_spent_crossings(budget)
        for threshold in thresholds:
            if threshold >= FORECAST_THRESHOLD:
                forecast_keys[_crossing_key("budget", budget.id, "forecast", threshold)] = threshold
    candidates = [crossing.key for crossing in crossings] + list(forecast_keys)
    raised = set(session.scalars(select(Event.key).where(Event.key.in_(candidates)))) if candidates else set()
    pending = [threshold for key, threshold in forecast_keys.items() if key not in raised]
    if budget is not None and pending:
        # The budget's forecast sums every plan of it: only worth it while a threshold is still to cross.
        forecast = _budget_estimate_at_completion(session, budget.id)
        crossings += [
            _Crossing("budget", budget.id, "forecast", threshold, forecast)
            for threshold in pending
            if forecast > budget.amount * Decimal(repr(threshold))
        ]
    for crossing in crossings:
        if crossing.key not in raised:
            _publish(session, crossing, plan, budget)


def _plan_crossings(plan: Plan, spent_before: Decimal, thresholds: Sequence[float]) -> list[_Crossing]:
    if not plan.cost:
        return []
    forecast = plan.progress.estimate_at_completion
    crossings = []
    for threshold in thresholds:
        line = plan.cost * Decimal(repr(threshold))
        if spent_before < line <= plan.actual_cost:
            crossings.append(_Crossing("plan", plan.id, "actual", threshold, plan.actual_cost))
        if threshold >= FORECAST_THRESHOLD and forecast > line:
            crossings.append(_Crossing("plan", plan.id, "forecast", threshold, forecast))
    return crossings


def _budget_spent_crossings(budget: _Charged) -> list[_Crossing]:
    return [
        _Crossing("budget", budget.id, "spent", threshold, budget.spent)
        for threshold in budget.alert_thresholds
        if budget.spent_before < budget.amount * Decimal(repr(threshold)) <= budget.spent
    ]


def _publish(session: Session, crossing: _Crossing, plan: Plan, budget: _Charged | None) -> None:
    data: dict[str, Any] = {
        "measure": crossing.measure,
        "threshold": crossing.threshold,
        "amount": format_money(crossing.amount),
    }
    if crossing.subject == "plan":
        organization_id = plan.organization_id
        budget_id = None if plan.budget_id is None else str(plan.budget_id)
        data |= {
            "planned_cost": format_optional_money(plan.cost),
            "currency": plan.currency,
            "budget_id": budget_id,
        }
    else:
        assert budget is not None, "a budget's crossing has its budget"
        organization_id = budget.organization_id
        data |= {"budget_amount": format_money(budget.amount), "currency": budget.currency}
    events.publish(
        session,
        organization_id=organization_id,
        type=f"{crossing.subject}.threshold_crossed",
        subject_type=crossing.subject,
        subject_id=crossing.subject_id,
        key=crossing.key,
        data=data,
    )


# --- Forecasts --------------------------------------------------------------------------------------------


Band = tuple[Decimal, Decimal]


@dataclass(frozen=True)
class PlanForecast:
    plan: Plan
    progress: Progress
    expected_end_at: datetime | None
    band: Band  # where its estimate at completion falls, at accuracy.CONFIDENCE

    @property
    def intervals(self) -> dict[str, Any]:
        return {
            "confidence": accuracy.CONFIDENCE,
            "estimate_at_completion": list(self.band),
            **quantiles(self.progress.estimate_at_completion, self.band),
        }


def quantiles(point: Decimal, band: Band) -> dict[str, Decimal]:
    """The P50 and P90 of an estimate whose CONFIDENCE band is `band` (its upper end: the band is 80%, two
    sided), read off the log-normal the band was built from (accuracy.at_quantile)."""
    low, high = band
    if low == high or low <= 0 or point <= 0:  # finished, or nothing to spread: the estimate itself
        median = min(max(point, low), high)
    else:
        median = Decimal(repr(accuracy.at_quantile(float(point), (float(low), float(high)), 0.5)))
        median = median.quantize(CENT, ROUND_HALF_UP)
    return {"estimate_at_completion_p50": median, "estimate_at_completion_p90": high}


@dataclass(frozen=True)
class BudgetForecast:
    budget: Budget
    as_of: datetime
    estimate_at_completion: Decimal  # every charged plan's: spent if finished, forecast if running
    running: list[PlanForecast]
    band: Band  # the plans' bands added: their errors are the model's, and move together
    median: Decimal  # the plans' P50s added (moving together, their quantiles add)
    next_cursor: str | None = None  # of the running plans, a page at a time

    @property
    def variance_at_completion(self) -> Decimal:
        return self.estimate_at_completion - self.budget.amount

    @property
    def intervals(self) -> dict[str, Any]:
        low, high = self.band
        amount = self.budget.amount
        return {
            "confidence": accuracy.CONFIDENCE,
            "estimate_at_completion": [low, high],
            "variance_at_completion": [low - amount, high - amount],
            "estimate_at_completion_p50": self.median,
            "estimate_at_completion_p90": high,
        }


_PROGRESS_COLUMNS = (Plan.status, Plan.cost, Plan.actual_cost, Plan.tokens, Plan.tokens_trained)


def _charged_progress(session: Session, budget_id: uuid.UUID) -> list[tuple[uuid.UUID, Progress]]:
    """Every plan charged to the budget, by id, with its progress: the columns it needs, not the plans."""
    rows = session.execute(
        select(Plan.id, *_PROGRESS_COLUMNS).where(
            Plan.budget_id == budget_id, Plan.status.in_(CHARGED_STATUSES)
        )
    )
    return [
        (plan_id, Progress.of(status, cost, actual_cost, tokens, trained))
        for plan_id, status, cost, actual_cost, tokens, trained in rows
    ]


def _budget_estimate_at_completion(session: Session, budget_id: uuid.UUID) -> Decimal:
    """Every charged plan's estimate at completion, summed (for the write path's forecast thresholds)."""
    charged = _charged_progress(session, budget_id)
    return sum((progress.estimate_at_completion for _, progress in charged), Decimal(0))


def _completion(session: Session, budget_id: uuid.UUID) -> tuple[Decimal, Band, Decimal]:
    """Every charged plan's estimate at completion, its band and its P50, summed: the stored result (for the
    cost interval) read only of plans not finished."""
    charged = _charged_progress(session, budget_id)
    unfinished = [plan_id for plan_id, progress in charged if not progress.finished]
    stored: dict[uuid.UUID, JsonObject] = {}
    if unfinished:
        stored = dict(session.execute(select(Plan.id, Plan.result).where(Plan.id.in_(unfinished))).all())
    total, low, high, median = Decimal(0), Decimal(0), Decimal(0), Decimal(0)
    for plan_id, progress in charged:
        band = progress.completion_interval(*cost_interval(stored.get(plan_id)))
        total += progress.estimate_at_completion
        low, high = low + band[0], high + band[1]
        median += quantiles(progress.estimate_at_completion, band)["estimate_at_completion_p50"]
    return total, (low, high), median


def cost_interval(result: JsonObject | None) -> tuple[Decimal | None, Band | None]:
    """A plan's point cost and its cost interval, from its stored result; None where it has none (a plan at
    a given MFU, hardware without a price)."""
    estimate = (result or {}).get("estimate") or {}
    bounds = (estimate.get("intervals") or {}).get("cost")
    if estimate.get("cost") is None or not bounds:
        return None, None
    return Decimal(estimate["cost"]), (Decimal(bounds[0]), Decimal(bounds[1]))


def budget_forecast(
    session: Session, budget: Budget, *, limit: int = DEFAULT_LIMIT, after: Cursor | None = None
) -> BudgetForecast:
    """Where the budget is heading: the sum over every plan charged to it (the plan for those not started,
    the spend for those finished, the forecast for those running), and a page of its running plans, newest
    started first, each with its estimate at completion from its progress."""
    stmt = (
        select(Plan)
        .where(Plan.budget_id == budget.id, Plan.status == PlanStatus.RUNNING)
        .options(*(defer(document) for document in (Plan.inputs, Plan.snapshot)))
    )
    page = paginate(session, stmt, Plan, limit, after, time="started_at")
    running = page.items
    reported_until = dict(
        session.execute(
            select(UsageRecord.plan_id, func.max(UsageRecord.period_end))
            .where(UsageRecord.plan_id.in_([plan.id for plan in running]), UsageRecord.kind == "usage")
            .group_by(UsageRecord.plan_id)
        ).all()
    )
    forecasts = []
    for plan in running:
        plan_progress = plan.progress
        until = reported_until.get(plan.id)
        end = (
            None
            if until is None or plan.started_at is None
            else expected_end(plan.started_at, until, plan_progress.share_trained)
        )
        band = plan_progress.completion_interval(*cost_interval(plan.result))
        forecasts.append(PlanForecast(plan, plan_progress, end, band))
    total, band, median = _completion(session, budget.id)
    return BudgetForecast(budget, utcnow(), total, forecasts, band, median, page.next_cursor)


# --- Lifecycle --------------------------------------------------------------------------------------------


def start_plan(session: Session, plan_id: uuid.UUID, *, at: datetime | None, scope: uuid.UUID | None) -> Plan:
    """committed -> running: its run began (at `at`, now by default)."""
    plan = _locked(session, plan_id, scope)
    if plan.status != PlanStatus.COMMITTED:
        raise ConflictError(
            f"The plan is {plan.status}; only a committed plan starts.", plan_status=plan.status
        )
    _start(session, plan, at or utcnow())
    _announce_start(session, plan)
    session.flush()
    return plan


def _start(session: Session, plan: Plan, at: datetime) -> None:
    _update(session, plan, status=PlanStatus.RUNNING, started_at=at)
    audit.record(session, "start", plan, ["started_at", "status"])


def _announce_start(session: Session, plan: Plan) -> None:
    assert plan.started_at is not None, "a started plan"
    events.publish(
        session,
        organization_id=plan.organization_id,
        type="plan.started",
        subject_type="plan",
        subject_id=plan.id,
        key=f"plan:{plan.id}:started",
        data={
            "started_at": plan.started_at.isoformat(),
            "budget_id": None if plan.budget_id is None else str(plan.budget_id),
        },
    )


def finish_plan(session: Session, plan_id: uuid.UUID, outcome: str, *, scope: uuid.UUID | None) -> Plan:
    """running -> completed or failed: what its reservation did not spend goes back to its budget."""
    assert outcome in (PlanStatus.COMPLETED, PlanStatus.FAILED), outcome
    plan = _locked(session, plan_id, scope)
    if plan.status != PlanStatus.RUNNING:
        raise ConflictError(
            f"The plan is {plan.status}; only a running plan can be {outcome} "
            "(a committed plan that never ran is cancelled).",
            plan_status=plan.status,
        )
    now = utcnow()
    _update(session, plan, status=outcome, finished_at=now)
    action = "complete" if outcome == PlanStatus.COMPLETED else "fail"
    audit.record(session, action, plan, ["finished_at", "status"])
    _settle(session, plan, now)
    session.flush()
    final = plan.progress
    events.publish(
        session,
        organization_id=plan.organization_id,
        type=f"plan.{outcome}",
        subject_type="plan",
        subject_id=plan.id,
        key=f"plan:{plan.id}:{outcome}",
        data={
            "planned_cost": format_optional_money(plan.cost),
            "actual_cost": format_money(plan.actual_cost),
            "variance": None if plan.cost is None else format_money(plan.actual_cost - plan.cost),
            "currency": plan.currency,
            "tokens_planned": plan.tokens,
            "tokens_trained": plan.tokens_trained,
            "share_trained": final.share_trained,
            "accelerator_hours_planned": plan.accelerator_hours,
            "accelerator_hours_used": plan.actual_accelerator_hours,
        },
    )
    return plan


def _settle(session: Session, plan: Plan, now: datetime) -> None:
    """Give back the part of the plan's reservation its run did not spend (the spend beyond it is already in
    the budget's overrun)."""
    if plan.budget_id is None or plan.cost is None:
        return
    money = max(plan.cost - plan.actual_cost, Decimal(0))
    hours = max(plan.accelerator_hours - plan.actual_accelerator_hours, 0.0)
    flops = plan.flops * (1.0 - plan.progress.share_trained)
    if money or hours or flops:
        give_back(session, plan, "settle", money, flops, hours, now)


# --- Reading ----------------------------------------------------------------------------------------------


def list_usage(
    session: Session, plan_id: uuid.UUID, *, scope: uuid.UUID | None, limit: int, after: Cursor | None
) -> Page[UsageRecord]:
    get_plan(session, plan_id, scope=scope)
    return paginate(
        session, select(UsageRecord).where(UsageRecord.plan_id == plan_id), UsageRecord, limit, after
    )


def get_usage(
    session: Session, plan_id: uuid.UUID, usage_id: uuid.UUID, *, scope: uuid.UUID | None
) -> UsageRecord:
    get_plan(session, plan_id, scope=scope)
    record = session.scalars(
        select(UsageRecord).where(UsageRecord.id == usage_id, UsageRecord.plan_id == plan_id)
    ).first()
    if record is None:
        raise NotFoundError(f"No usage record {usage_id} of plan {plan_id}.")
    return record
