"""Plans: evaluated, stored with what they used, committed against budgets through the ledger.

A plan keeps three documents (service/services/plan_documents.py): its `inputs` (the request it evaluated),
a `snapshot` of what the evaluation used (the hardware's figures and the price in force, the law's
coefficients, the engine version) and its `result` (the allocation document of POST /v1/allocations).
`evaluate(inputs, snapshot)` gives the result again, whatever has changed in the catalog since.

Use cases here flush but do not commit: each request is one transaction, which `transactions.run_once`
commits together with the record of its Idempotency-Key (called by service/api/idempotency.py and the
console).
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Select,
    SQLColumnExpression,
    case,
    exists,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, defer, selectinload
from sqlalchemy.orm.interfaces import LoaderOption

from service.core import accuracy, engine, performance
from service.core.laws import ScalingLaw
from service.core.units import CENT
from service.data.models import (
    CAP_SLACK,
    Budget,
    FittedLaw,
    HardwareProfile,
    LedgerEntry,
    Organization,
    Plan,
    PlanStatus,
    budget_hardware,
    id_by_slug,
    money_literal,
    utcnow,
)
from service.infra import actors, metrics
from service.infra.after_commit import on_commit
from service.services import (
    audit,
    calibrations,
    energy,
    events,
    laws,
    organizations,
    plan_documents,
    planning,
)
from service.services.budgets import get_budget
from service.services.documents import JsonObject, format_money
from service.services.errors import ConflictError, InvalidFieldError, NotFoundError
from service.services.pagination import Cursor, Page, paginate
from service.services.planning import PlanInputs

FLOAT_SLACK = 1e-9  # relative: sums of floats committed and released again need not return to exactly 0
LAST_YEAR = 9998  # as for any time the API accepts
REMAINING = "remaining"  # the budget's remaining amount is the plan's money budget

# `scope` below: the organisation whose plans the caller may see, or None for all (an admin). Plans of other
# organisations behave as if they did not exist.


@dataclass(frozen=True, kw_only=True)
class PlanRequest(PlanInputs):
    """A plan's inputs, and where it belongs (what PlanRequestSchema loads)."""

    organization: str  # slug
    hardware: str | engine.Hardware  # a plan always names its cluster (PlanRequestSchema requires it)
    budget_id: uuid.UUID | None = None  # charged to it when committed
    budget: str | None = None  # REMAINING: the budget's remaining amount is the money budget (cost)
    name: str | None = None
    labels: Mapping[str, str] | None = None
    start_at: datetime | None = None  # None: now

    def inputs(self) -> PlanInputs:
        """What the plan evaluates, and stores as its `inputs`."""
        fields = dataclasses.fields(PlanInputs)
        return PlanInputs(**{field.name: getattr(self, field.name) for field in fields})


# --- Evaluation -------------------------------------------------------------------------------------------


def evaluate(
    inputs: JsonObject, snapshot: JsonObject, samples: tuple[ScalingLaw, ...] = ()
) -> dict[str, Any]:
    """The result document of `inputs` (as stored) evaluated against `snapshot` and the bootstrap fits of
    its law (`samples`, kept with the fitted law the plan points at): pure, and what a plan holds."""
    return plan_documents.result_document(plan_documents.replay(inputs, snapshot, samples), snapshot)


# --- Creating ---------------------------------------------------------------------------------------------


def evaluate_new(
    session: Session,
    request: PlanRequest,
    *,
    scope: uuid.UUID | None,
    parent: Plan | None = None,
) -> Plan:
    """A request evaluated into a draft, not yet stored: reads only, so that every caller (the API, its
    revisions, the console) runs it before its writing transaction (db.reading_session), and then stores
    the draft with `store_new`."""
    organization = organizations.in_body(
        session.scalar(select(Organization).where(Organization.slug == request.organization)),
        request.organization,
        scope=scope,
    )
    budget = _charged_budget(session, request.budget_id, organization)
    inputs = request.inputs()
    if request.budget == REMAINING:
        assert budget is not None, "PlanRequestSchema requires budget_id with budget"
        # The budget's money and what is left of its period: a run that ends after it could not be committed.
        days = _days_left(budget, request.start_at or utcnow(), inputs.days)
        inputs = dataclasses.replace(inputs, cost=_remaining(budget), currency=budget.currency, days=days)

    profile, hardware, price_effective_at = _priced_hardware(session, request.hardware, "hardware")
    energy_setting = planning.energy_setting(profile, inputs, PlanInputs)
    fitted, law = None, None
    if inputs.law is not None:
        fitted = planning.find_fitted_law(session, inputs.law, scope=organization.id)
        law = planning.named_law(fitted, inputs.law)
    serving = None
    if inputs.inference_hardware is not None:
        serving = _priced_hardware(session, inputs.inference_hardware, "inference_hardware")[1:]
    if budget is not None and inputs.price_per_hour is None:
        # Before allocating: with "remaining", a mismatch would otherwise surface at `currency`, which the
        # budget, not the caller, supplied.
        _check_currency(hardware.currency, budget)
    # The organisation's own efficiency for the hardware, when it has calibrated one (calibrations.py).
    own = None if profile is None else calibrations.in_force(session, organization.id, profile.id)
    modelled = hardware if own is None else calibrations.applied(own, hardware)
    outcome = planning.allocate_on(inputs, modelled, law, None if serving is None else serving[0])
    run = outcome.estimate
    assert run is not None, "the engine estimates the run of every plan on hardware"
    if run.run is None:  # paced by the MFU given: the hardware's efficiency played no part
        own, modelled = None, hardware
    if budget is not None:
        _check_chargeable(run, budget)

    snapshot = plan_documents.snapshot_document(
        modelled,
        price_effective_at,
        outcome.law,
        serving,
        own_calibration=None
        if own is None
        else calibrations.snapshot_of(
            own,
            hardware.matmul_efficiency_at(
                inputs.precision or engine.DEFAULT_PRECISION, performance.CALIBRATION
            ),
        ),
        energy_setting=energy_setting,
    )
    outcome = energy.plan_with_energy(outcome, energy_setting)
    return _draft(request, inputs, outcome, snapshot, organization, budget, profile, fitted, parent)


def _draft(  # noqa: PLR0917 -- what a draft is made of, each read or evaluated by evaluate_new
    request: PlanRequest,
    inputs: PlanInputs,
    outcome: engine.Plan,
    snapshot: JsonObject,
    organization: Organization,
    budget: Budget | None,
    profile: HardwareProfile | None,
    fitted: FittedLaw | None,
    parent: Plan | None,
) -> Plan:
    """The draft plan of an evaluated request: its documents, and the figures lists show as columns."""
    run = outcome.estimate
    assert run is not None, "the engine estimates the run of every plan on hardware"
    now = utcnow()
    start_at = request.start_at or now
    cost, quantile = committed_cost(run, budget)
    return Plan(
        id=uuid.uuid4(),
        organization=organization,
        budget_id=None if budget is None else budget.id,
        hardware=profile,
        law=fitted,
        parent_id=None if parent is None else parent.id,
        name=request.name,
        labels=dict(request.labels or {}),
        status=PlanStatus.DRAFT,
        start_at=start_at,
        end_at=_end_of_run(start_at, run.runtime.seconds),
        inputs=plan_documents.inputs_document(inputs),
        snapshot={**snapshot, "commit_quantile": quantile},
        result=plan_documents.result_document(outcome, snapshot),
        method=outcome.method,
        params=outcome.allocation.params,
        tokens=outcome.allocation.tokens,
        flops=outcome.allocation.flops,
        predicted_loss=outcome.allocation.predicted_loss,
        accelerators=run.cluster.accelerators,
        days=run.runtime.days,
        accelerator_hours=run.runtime.accelerator_hours,
        cost=cost,
        currency=run.currency,
        energy_kwh=energy.energy_kwh(run.energy),
        emissions_kg_co2e=energy.emissions_kg_co2e(run.energy),
        created_at=now,
    )


def committed_cost(run: engine.Estimate, budget: Budget | None) -> tuple[Decimal | None, float | None]:
    """What a plan charges: its cost, or the budget's quantile of it (`Budget.commit_quantile`) from the
    estimate's interval, to the cent; and the quantile taken (None: the point value)."""
    quantile = None if budget is None else budget.commit_quantile
    if run.cost is None or quantile is None or run.intervals is None or run.intervals.cost is None:
        return run.cost, None
    low, high = (float(value) for value in run.intervals.cost)
    charged = accuracy.at_quantile(float(run.cost), (low, high), quantile)
    return Decimal(repr(charged)).quantize(CENT, ROUND_HALF_UP), quantile


def _remaining(budget: Budget) -> Decimal:
    """What remains of a budget, as a plan's money budget: down to the cent, since plans cost whole cents
    (rounded half-up) and a money budget of 0.005 more than a cent could buy a plan the budget cannot hold."""
    remaining = budget.remaining.quantize(CENT, ROUND_DOWN)
    if remaining <= 0:
        metrics.BUDGET_CONFLICTS.labels(limit="amount").inc()
        raise ConflictError(f"Budget {budget.id} has nothing remaining.", limit="amount")
    return remaining


def store_new(session: Session, plan: Plan) -> Plan:
    """Store a draft `evaluate_new` made (in this session or another): its row, and its audit entry (the
    flush's, services/audit.py)."""
    plan.created_by = actors.actor(session)
    session.add(plan)
    try:
        session.flush()
    except IntegrityError:  # its organisation, budget or hardware profile was deleted since it was read
        raise ConflictError("The plan's budget or hardware profile was just deleted.") from None
    on_commit(session, metrics.PLANS_CREATED.inc)
    return plan


def _priced_hardware(
    session: Session, reference: str | engine.Hardware, field: str
) -> tuple[HardwareProfile | None, engine.Hardware, datetime | None]:
    """The profile `reference` (the request's `field`) names (None for inline hardware), the engine's view of
    it with the price in force now, and when that price took effect."""
    profile = planning.find_hardware_profile(session, reference, field=field)
    price = profile.current_price if profile is not None else None
    return profile, planning.hardware_of(profile, reference), price.effective_at if price else None


def _days_left(budget: Budget, start_at: datetime, days: float | None) -> float:
    """The days from the plan's start to the end of its budget's period (or `days`, if fewer)."""
    left = (budget.period_end - start_at).total_seconds() / 86_400
    if left <= 0:
        raise ConflictError(
            f"The budget's period ends at {budget.period_end.isoformat()}, before the plan would start: "
            "nothing of it remains to spend.",
            field="start_at",
            limit="period",
        )
    return left if days is None else min(days, left)


def _end_of_run(start_at: datetime, seconds: float) -> datetime:
    try:
        end_at = start_at + timedelta(seconds=seconds)
    except OverflowError:
        end_at = None
    if end_at is None or end_at.year > LAST_YEAR:
        raise InvalidFieldError(
            "accelerators",
            f"The run would take {seconds / 86400:.3g} days and end after the year {LAST_YEAR}; "
            "plan it on more accelerators.",
        )
    return end_at


def _charged_budget(
    session: Session, budget_id: uuid.UUID | None, organization: Organization
) -> Budget | None:
    """The budget a new plan is charged to, if it names one: the organisation's, or a 422 at budget_id."""
    if budget_id is None:
        return None
    budget = session.scalars(
        select(Budget)
        .where(Budget.id == budget_id, Budget.organization_id == organization.id)
        .execution_options(populate_existing=True)  # what remains now, not when the session first read it
    ).first()
    if budget is None:
        raise InvalidFieldError("budget_id", f"No budget {budget_id} in organization {organization.slug!r}.")
    return budget


def _check_chargeable(run: engine.Estimate, budget: Budget) -> None:
    """A plan charged to a budget must have a cost in the budget's currency."""
    if run.cost is None:
        raise InvalidFieldError(
            "hardware",
            f"{run.cluster.hardware.name} has no price, so the plan has no cost to charge to a budget; "
            "give price_per_hour and currency.",
        )
    _check_currency(run.currency, budget)


def _check_currency(currency: str | None, budget: Budget) -> None:
    if currency is not None and currency != budget.currency:
        raise InvalidFieldError(
            "budget_id",
            f"The plan costs {currency} and the budget is in {budget.currency}; amounts in different "
            "currencies are never mixed (give price_per_hour in the budget's currency).",
        )


def evaluate_revision(
    session: Session,
    plan_id: uuid.UUID,
    changes: JsonObject,
    *,
    validate: Callable[[dict[str, Any]], PlanRequest],
    scope: uuid.UUID | None,
) -> Plan:
    """A new draft from a plan's request with `changes` merged in, evaluated as `evaluate_new` evaluates
    (reads only; `store_new` stores it).

    `changes` is a JSON merge patch (RFC 7396: null removes a member) of the parent's request as a document;
    `validate` turns the merged document into a request (PlanRequestSchema's load), which is validated as a
    whole. The hardware's price and the law are resolved afresh (a change of price is a change:
    `price_per_hour`).
    """
    parent = get_plan(session, plan_id, scope=scope)
    request = {
        **parent.inputs,
        "organization": parent.organization_slug,
        "start_at": parent.start_at.isoformat(),
        **({"budget_id": str(parent.budget_id)} if parent.budget_id else {}),
        **({"name": parent.name} if parent.name else {}),
        **({"labels": parent.labels} if parent.labels else {}),
    }
    if changes.get("organization", parent.organization_slug) != parent.organization_slug:
        raise InvalidFieldError("organization", "A revision belongs to its parent's organization.")
    request = merge_patch(request, changes)
    if changes.get("budget") is not None:
        request.pop("cost", None)  # "remaining" replaces the parent's money budget
    return evaluate_new(session, validate(request), scope=scope, parent=parent)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON merge patch: objects merge member by member, null removes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return patch
    merged = dict(target) if isinstance(target, Mapping) else {}
    for name, value in patch.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = merge_patch(merged.get(name), value)
    return merged


# --- Reading ----------------------------------------------------------------------------------------------


def _loaded() -> tuple[LoaderOption, ...]:
    return (selectinload(Plan.organization), selectinload(Plan.hardware))


def get_plan(session: Session, plan_id: uuid.UUID, *, scope: uuid.UUID | None) -> Plan:
    stmt = select(Plan).where(Plan.id == plan_id).options(*_loaded())
    if scope is not None:
        stmt = stmt.where(Plan.organization_id == scope)
    plan = session.scalars(stmt).first()
    if plan is None:
        raise NotFoundError(f"No plan {plan_id}.")
    return plan


@dataclass(frozen=True)
class PlanFilter:
    organization: str | None = None
    budget_id: uuid.UUID | None = None
    hardware: str | None = None
    status: str | None = None
    label: tuple[str, str] | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None


def list_plans(
    session: Session, where: PlanFilter, *, scope: uuid.UUID | None, limit: int, after: Cursor | None
) -> Page[Plan]:
    """Newest first, a page at a time (keyset on created_at, id: as cheap deep down as on top), without their
    documents, which lists do not show."""
    stmt = select(Plan).options(*_loaded(), defer(Plan.inputs), defer(Plan.snapshot), defer(Plan.result))
    return paginate(session, _filtered(stmt, where, scope), Plan, limit, after)


def _filtered(stmt: Select[Plan], where: PlanFilter, scope: uuid.UUID | None) -> Select[Plan]:
    # `organization_id = (SELECT id ...)` seeks the (organization_id, created_at, id) index, where
    # `IN (SELECT ...)` made the databases walk every organisation's plans.
    if scope is not None:
        stmt = stmt.where(Plan.organization_id == scope)
    if where.organization is not None:
        stmt = stmt.where(Plan.organization_id == id_by_slug(Organization, where.organization))
    if where.budget_id is not None:
        stmt = stmt.where(Plan.budget_id == where.budget_id)
    if where.hardware is not None:
        stmt = stmt.where(Plan.hardware_id == id_by_slug(HardwareProfile, where.hardware))
    if where.status is not None:
        stmt = stmt.where(Plan.status == where.status)
    if where.label is not None:
        key, value = where.label
        stmt = stmt.where(Plan.labels[key].as_string() == value)
    if where.created_from is not None:
        stmt = stmt.where(Plan.created_at >= where.created_from)
    if where.created_to is not None:
        stmt = stmt.where(Plan.created_at < where.created_to)
    return stmt


_COMPARED = ("params", "tokens", "flops", "predicted_loss", "days", "accelerator_hours", "cost")


def compare_plans(session: Session, ids: list[uuid.UUID], *, scope: uuid.UUID | None) -> dict[str, Any]:
    """Plans side by side, in the order asked, with every input or output that differs between them."""
    plans = [get_plan(session, plan_id, scope=scope) for plan_id in ids]
    rows: list[tuple[str, list[Any]]] = []
    inputs = sorted(set().union(*(plan.inputs for plan in plans)))
    rows += [(f"inputs.{name}", [plan.inputs.get(name) for plan in plans]) for name in inputs]
    rows += [
        ("hardware", [plan.hardware_slug for plan in plans]),
        ("currency", [plan.currency for plan in plans]),
    ]
    rows += [(name, [getattr(plan, name) for plan in plans]) for name in _COMPARED]
    differences = [
        {"field": name, "values": [_json(value) for value in values], "relative": _relative(values)}
        for name, values in rows
        if any(not _same(value, values[0]) for value in values)
    ]
    return {"plans": plans, "differences": differences}


def _same(a: Any, b: Any) -> bool:
    """Equal, or floats equal but for rounding (hours from a law's N and D differ in the last digits)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9)
    return bool(a == b)


def _json(value: Any) -> Any:
    return format_money(value) if isinstance(value, Decimal) else value


def _relative(values: list[Any]) -> list[float | None] | None:
    numbers = [v for v in values if isinstance(v, int | float | Decimal) and not isinstance(v, bool)]
    if len(numbers) != len(values) or not values[0]:
        return None
    first = float(values[0])
    return [float(value) / first if math.isfinite(float(value) / first) else None for value in values]


# --- Lifecycle: the budget ledger -------------------------------------------------------------------------


def commit_plan(session: Session, plan_id: uuid.UUID, *, scope: uuid.UUID | None) -> Plan:
    """draft -> committed: reserve the plan's cost (and FLOPs and accelerator-hours) on its budget; or
    draft -> pending_approval, reserving nothing, when the budget asks for approval of plans that cost more
    than its `approval_above` (approve_plan then reserves it).

    The check and the reservation are one conditional UPDATE of the budget row, so concurrent commits can
    never together overspend it (on SQLite and PostgreSQL alike); the plan's status moves the same way.
    """
    plan = get_plan(session, plan_id, scope=scope)
    if plan.budget_id is None:
        raise ConflictError(
            "The plan has no budget to commit against; revise it with a budget_id.", limit="budget"
        )
    threshold = _approval_threshold(session, plan)
    if _needs_approval(plan, threshold):
        return _request_approval(session, plan, threshold)
    now = utcnow()
    _move(session, plan, PlanStatus.DRAFT, "commit", status=PlanStatus.COMMITTED, committed_at=now)
    _reserve(session, plan, now, unless_approval=True)
    return plan


def _approval_threshold(session: Session, plan: Plan) -> Decimal | None:
    """Its budget's approval_above, as read before the commit (_reserve checks it again as it reserves)."""
    return session.scalar(select(Budget.approval_above).where(Budget.id == plan.budget_id))


def _needs_approval(plan: Plan, threshold: Decimal | None) -> bool:
    return threshold is not None and plan.cost is not None and plan.cost > threshold


def _request_approval(session: Session, plan: Plan, threshold: Decimal | None) -> Plan:
    """draft -> pending_approval, if its budget could hold it now (else the 409 a commit gives): nothing is
    reserved, and the organisation hears of it (plan.approval_requested)."""
    assert threshold is not None, "a plan needs approval only under a threshold"
    if _refused_now(session, plan):
        raise _refused(session, plan)
    now = utcnow()
    _move(
        session,
        plan,
        PlanStatus.DRAFT,
        "request_approval",
        status=PlanStatus.PENDING_APPROVAL,
        approval_requested_at=now,
        approval_requested_by=actors.actor(session),
    )
    session.flush()
    session.refresh(plan)
    _publish(session, plan, "plan.approval_requested", approval_above=format_money(threshold))
    return plan


def approve_plan(session: Session, plan_id: uuid.UUID, *, note: str | None, scope: uuid.UUID | None) -> Plan:
    """pending_approval -> committed: reserve the plan on its budget as a commit does, against the budget as
    it is now; a 409 (the plan still pending) when the budget can no longer hold it."""
    plan = get_plan(session, plan_id, scope=scope)
    now = utcnow()
    _move(
        session,
        plan,
        PlanStatus.PENDING_APPROVAL,
        "approve",
        status=PlanStatus.COMMITTED,
        committed_at=now,
        **_decision(session, now, note),
    )
    _reserve(session, plan, now, unless_approval=False)
    _publish(session, plan, "plan.approved", note=note)
    return plan


def reject_plan(session: Session, plan_id: uuid.UUID, *, note: str | None, scope: uuid.UUID | None) -> Plan:
    """pending_approval -> rejected: nothing was reserved, and nothing is."""
    plan = get_plan(session, plan_id, scope=scope)
    _move(
        session,
        plan,
        PlanStatus.PENDING_APPROVAL,
        "reject",
        status=PlanStatus.REJECTED,
        **_decision(session, utcnow(), note),
    )
    session.flush()
    session.refresh(plan)
    _publish(session, plan, "plan.rejected", note=note)
    return plan


def _decision(session: Session, now: datetime, note: str | None) -> dict[str, Any]:
    """The columns an approval or a rejection sets: when, by whom, why."""
    return {"approval_decided_at": now, "approval_decided_by": actors.actor(session), "approval_note": note}


def _publish(session: Session, plan: Plan, type: str, **data: Any) -> None:
    """An approval event of the plan (last in the transaction, as events.publish asks)."""
    assert plan.cost is not None, "a plan charged to a budget has a cost"
    events.publish(
        session,
        organization_id=plan.organization_id,
        type=type,
        subject_type="plan",
        subject_id=plan.id,
        data={
            "plan_id": str(plan.id),
            "name": plan.name,
            "budget_id": str(plan.budget_id),
            "cost": format_money(plan.cost),
            "currency": plan.currency,
            "requested_by": plan.approval_requested_by,
            **({"decided_by": plan.approval_decided_by} if plan.approval_decided_by else {}),
            **data,
        },
    )


def _reserve(session: Session, plan: Plan, now: datetime, *, unless_approval: bool) -> None:
    """Reserve the plan's cost, FLOPs and accelerator-hours on its budget, with the ledger's commit entry;
    a 409 naming the limit when the budget cannot hold it (or, `unless_approval`, when it asks for approval
    of the plan: a budget changed since the commit read it)."""
    # PostgreSQL: lock the budget row before the conditional UPDATE, so that the UPDATE's own snapshot sees
    # the budget's allowed hardware as of any edit it waited for (a re-check after a lock wait would see
    # other tables as they were when the statement began). SQLite serialises writers anyway.
    session.execute(select(Budget.id).where(Budget.id == plan.budget_id).with_for_update())
    cost = money_literal(plan.cost)
    conditions = _admits(plan, cost)
    if unless_approval:
        conditions.append(or_(Budget.approval_above.is_(None), Budget.approval_above >= cost))
    reserved = session.execute(
        update(Budget)
        .where(Budget.id == plan.budget_id, *conditions)
        .values(
            committed=Budget.committed + cost,
            committed_flops=Budget.committed_flops + plan.flops,
            committed_accelerator_hours=Budget.committed_accelerator_hours + plan.accelerator_hours,
            version=Budget.version + 1,
            updated_at=now,
        )
        .returning(Budget.id)
        .execution_options(synchronize_session=False)
    ).first()
    if reserved is None:
        raise _refused(session, plan, approval_asked=unless_approval)
    # The budget's UPDATE admits no plan without a cost (_admits).
    assert plan.cost is not None, "a plan charged to a budget has a cost"
    _ledger_entry(session, plan, "commit", plan.cost, plan.flops, plan.accelerator_hours, now)
    on_commit(session, metrics.PLANS_COMMITTED.inc)
    session.flush()
    session.refresh(plan)


def _refused_now(session: Session, plan: Plan) -> bool:
    """Whether the budget could not hold the plan now (read only: what _reserve's UPDATE would find)."""
    admitted = select(Budget.id).where(Budget.id == plan.budget_id, *_admits(plan, money_literal(plan.cost)))
    return session.scalar(admitted) is None


def _refused(session: Session, plan: Plan, *, approval_asked: bool = False) -> ConflictError:
    refusal = _refusal(session, plan, approval_asked=approval_asked)
    metrics.BUDGET_CONFLICTS.labels(limit=refusal.extensions["limit"]).inc()
    return refusal


def _admits(plan: Plan, cost: BindParameter[Decimal]) -> list[ColumnElement[bool]]:
    """The budget's conditions for this plan, as SQL: evaluated by the UPDATE that reserves it."""
    allowed = select(budget_hardware.c.hardware_id).where(budget_hardware.c.budget_id == Budget.id)
    return [
        Budget.currency == plan.currency,
        Budget.committed + Budget.overrun + cost <= Budget.amount,
        or_(Budget.max_flops.is_(None), Budget.committed_flops + plan.flops <= Budget.max_flops * CAP_SLACK),
        or_(
            Budget.max_accelerator_hours.is_(None),
            Budget.committed_accelerator_hours + plan.accelerator_hours
            <= Budget.max_accelerator_hours * CAP_SLACK,
        ),
        Budget.period_start <= plan.start_at,
        Budget.period_end >= plan.end_at,
        or_(~exists(allowed), exists(allowed.where(budget_hardware.c.hardware_id == plan.hardware_id))),
    ]


def _refusal(  # noqa: PLR0911 -- one return per limit
    session: Session, plan: Plan, *, approval_asked: bool
) -> ConflictError:
    """Why the budget refused the plan: read back after the conditional UPDATE matched nothing (which, with
    `approval_asked`, also refused a plan the budget asks approval for)."""
    budget = session.scalars(
        select(Budget).where(Budget.id == plan.budget_id).options(selectinload(Budget.allowed_hardware))
    ).one()
    session.refresh(budget)
    money = f"{{}} {budget.currency}"
    if plan.currency != budget.currency:
        return ConflictError(
            f"The plan costs {plan.currency}; the budget is in {budget.currency}.", limit="currency"
        )
    if not (budget.period_start <= plan.start_at and plan.end_at <= budget.period_end):
        return ConflictError(
            f"The run ({plan.start_at.isoformat()} to {plan.end_at.isoformat()}) does not lie within the "
            f"budget's period ({budget.period_start.isoformat()} to {budget.period_end.isoformat()}).",
            limit="period",
        )
    if budget.allowed_hardware and plan.hardware_id not in {p.id for p in budget.allowed_hardware}:
        return ConflictError(
            f"The budget allows only {', '.join(budget.allowed_hardware_slugs)}; the plan uses "
            f"{plan.hardware_slug or 'inline hardware'}.",
            limit="hardware",
        )
    if plan.cost is not None and plan.cost > budget.remaining:
        return ConflictError(
            f"The plan costs {money.format(plan.cost)} and the budget has {money.format(budget.remaining)} "
            "remaining.",
            limit="amount",
            requested=str(plan.cost),
            remaining=str(budget.remaining),
        )
    if budget.max_flops is not None and budget.committed_flops + plan.flops > budget.max_flops * CAP_SLACK:
        return ConflictError(
            f"The plan needs {plan.flops:.4g} FLOPs and the budget's cap leaves "
            f"{budget.max_flops - budget.committed_flops:.4g}.",
            limit="max_flops",
        )
    if (
        budget.max_accelerator_hours is not None
        and budget.committed_accelerator_hours + plan.accelerator_hours
        > budget.max_accelerator_hours * CAP_SLACK
    ):
        return ConflictError(
            f"The plan needs {plan.accelerator_hours:.6g} accelerator-hours and the budget's cap leaves "
            f"{budget.max_accelerator_hours - budget.committed_accelerator_hours:.6g}.",
            limit="max_accelerator_hours",
        )
    if approval_asked and _needs_approval(plan, budget.approval_above):
        return ConflictError(
            f"The budget now asks for approval of plans above {money.format(budget.approval_above)}; "
            "commit the plan again to request it.",
            limit="approval",
        )
    return ConflictError("The budget changed while the plan was being committed; retry.", limit="concurrent")


def cancel_plan(session: Session, plan_id: uuid.UUID, *, scope: uuid.UUID | None) -> Plan:
    """draft, pending approval or committed -> cancelled; a committed plan's reservation goes back to its
    budget."""
    plan = get_plan(session, plan_id, scope=scope)
    now = utcnow()
    if plan.status == PlanStatus.COMMITTED:
        _move(session, plan, PlanStatus.COMMITTED, "cancel", status=PlanStatus.CANCELLED, cancelled_at=now)
        assert plan.cost is not None, "a committed plan has a cost"
        give_back(session, plan, "release", plan.cost, plan.flops, plan.accelerator_hours, now)
    else:
        unreserved = (
            PlanStatus.PENDING_APPROVAL if plan.status == PlanStatus.PENDING_APPROVAL else PlanStatus.DRAFT
        )
        _move(session, plan, unreserved, "cancel", status=PlanStatus.CANCELLED, cancelled_at=now)
    session.flush()
    session.refresh(plan)
    return plan


def less(committed: SQLColumnExpression[float], amount: float) -> ColumnElement[float]:
    """committed - amount, as SQL; what is left of rounding when the last plan goes is 0, not -1e-14."""
    return case((committed - amount <= amount * FLOAT_SLACK, 0.0), else_=committed - amount)


# What each transition is called, in the audit log and in a refusal ("it cannot be approved").
_DONE = {
    "commit": "committed",
    "request_approval": "committed",
    "approve": "approved",
    "reject": "rejected",
    "cancel": "cancelled",
}


def _move(session: Session, plan: Plan, from_status: str, action: str, **values: Any) -> None:
    """Change the plan's status if it is still `from_status` (a concurrent transition makes this a 409), and
    log it as `action` (commit, request_approval, approve, reject, cancel)."""
    moved = session.execute(
        update(Plan)
        .where(Plan.id == plan.id, Plan.status == from_status)
        .values(version=Plan.version + 1, **values)
        .returning(Plan.id)
        .execution_options(synchronize_session=False)
    ).first()
    if moved is None:
        session.refresh(plan)
        status = str(plan.status).replace("_", " ")
        raise ConflictError(f"The plan is {status}; it cannot be {_DONE[action]}.", plan_status=plan.status)
    audit.record(session, action, plan, sorted(values))


def give_back(  # noqa: PLR0917 -- the three figures a budget reserves, and the entry that says why
    session: Session, plan: Plan, entry: str, money: Decimal, flops: float, hours: float, now: datetime
) -> None:
    """Return part (or all) of the plan's reservation to its budget, with the ledger entry that says so:
    `release` when a committed plan is cancelled, `settle` for what a finished run did not spend."""
    session.execute(
        update(Budget)
        .where(Budget.id == plan.budget_id)
        .values(
            committed=Budget.committed - money_literal(money),
            committed_flops=less(Budget.committed_flops, flops),
            committed_accelerator_hours=less(Budget.committed_accelerator_hours, hours),
            version=Budget.version + 1,
            updated_at=now,
        )
        .execution_options(synchronize_session=False)
    )
    _ledger_entry(session, plan, entry, -money, -flops, -hours, now)


def _ledger_entry(  # noqa: PLR0917 -- a ledger row's figures
    session: Session, plan: Plan, entry: str, money: Decimal, flops: float, hours: float, now: datetime
) -> None:
    session.add(
        LedgerEntry(
            budget_id=plan.budget_id,
            plan_id=plan.id,
            entry=entry,
            amount=money,
            currency=plan.currency,
            flops=flops,
            accelerator_hours=hours,
            actor=actors.actor(session),
            request_id=actors.request_id(session),
            created_at=now,
        )
    )


def names_of(session: Session, plan_ids: set[uuid.UUID]) -> dict[uuid.UUID, str | None]:
    """The names of plans by their ids (a page's worth: the console names them rather than show UUIDs)."""
    if not plan_ids:
        return {}
    return dict(session.execute(select(Plan.id, Plan.name).where(Plan.id.in_(plan_ids))).all())


def list_ledger(
    session: Session, budget_id: uuid.UUID, *, scope: uuid.UUID | None, limit: int, after: Cursor | None
) -> Page[LedgerEntry]:
    get_budget(session, budget_id, scope=scope)  # 404 for a budget the caller may not see
    stmt = select(LedgerEntry).where(LedgerEntry.budget_id == budget_id)
    return paginate(session, stmt, LedgerEntry, limit, after)


def reevaluate(plan: Plan) -> dict[str, Any]:
    """The plan's result computed again from its inputs and snapshot (equal to `plan.result`)."""
    return evaluate(plan.inputs, plan.snapshot, laws.bootstrap_laws(plan.law))
