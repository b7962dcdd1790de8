"""Plans: evaluated, stored with what they used, committed against budgets through the ledger.

A plan keeps three documents: its `inputs` (the allocation request as validated), a `snapshot` of what the
evaluation used (the hardware's figures and the price in force, the law's coefficients, the engine version)
and its `result` (the allocation document of POST /v1/allocations). `evaluate(inputs, snapshot)` gives the
result again, whatever has changed in the catalog since. The stored documents use the API's schemas: they
are what the API shows.

Use cases here flush but do not commit: each request is one transaction, which `transactions.run_once`
commits together with the record of its Idempotency-Key (called by service/api/idempotency.py and the
console).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_DOWN, Decimal
from typing import Any

from sqlalchemy import Select, case, exists, literal, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, defer, selectinload

from service import metrics
from service.core import engine
from service.core.laws import FittedRange, ScalingLaw
from service.core.units import CENT
from service.models import (
    CAP_SLACK,
    Budget,
    HardwareProfile,
    LedgerEntry,
    Money,
    Organization,
    Plan,
    PlanStatus,
    budget_hardware,
    id_by_slug,
    utcnow,
)
from service.schemas import AllocationSchema, PlanInputsSchema, PlanRequestSchema, format_money
from service.services import audit, laws, organizations, planning
from service.services.budgets import get_budget
from service.services.errors import ConflictError, InvalidFieldError, NotFoundError
from service.services.pagination import Cursor, Page, paginate

FLOAT_SLACK = 1e-9  # relative: sums of floats committed and released again need not return to exactly 0
LAST_YEAR = 9998  # as for any time the API accepts
_INPUTS = PlanInputsSchema()
_REQUEST = PlanRequestSchema()
_RESULT = AllocationSchema()
INPUT_FIELDS = frozenset(_INPUTS.fields)

# `scope` below: the organisation whose plans the caller may see, or None for all (an admin). Plans of other
# organisations behave as if they did not exist.


# --- Evaluation -------------------------------------------------------------------------------------------


def snapshot(
    hardware: engine.Hardware,
    price_effective_at: datetime | None,
    law: engine.NamedLaw | None,
    serving: tuple[engine.Hardware, datetime | None] | None = None,
) -> dict:
    """What an evaluation depends on besides its inputs, as JSON. `serving`: the inference hardware and
    when its price took effect, when the plan serves on hardware of its own."""
    return {
        "engine_version": engine.ENGINE_VERSION,
        "hardware": _hardware_snapshot(hardware, price_effective_at),
        "inference_hardware": None if serving is None else _hardware_snapshot(*serving),
        "law": None
        if law is None
        else {
            "slug": law.slug,
            "name": law.name,
            "source": law.source,
            "note": law.note,
            **{name: getattr(law.law, name) for name in ("E", "A", "B", "alpha", "beta")},
            "fitted_range": None if law.fitted_range is None else vars(law.fitted_range).copy(),
        },
    }


def _hardware_snapshot(hardware: engine.Hardware, price_effective_at: datetime | None) -> dict:
    return {
        "slug": hardware.slug,
        "name": hardware.name,
        "peak_flops": dict(hardware.peak_flops),
        "memory_bytes": hardware.memory_bytes,
        "memory_bandwidth_bytes_per_second": hardware.memory_bandwidth_bytes_per_second,
        "price_per_hour": _money(hardware.price_per_hour),
        "currency": hardware.currency,
        "price_effective_at": None if price_effective_at is None else price_effective_at.isoformat(),
    }


def _money(amount: Decimal | None) -> str | None:
    return None if amount is None else format_money(amount)


def _hardware_from(snap: Mapping[str, Any], role: str = "hardware") -> engine.Hardware | None:
    """The hardware a snapshot holds for `role` (hardware or inference_hardware). Snapshots of engines
    before 1.3.0 hold no inference hardware and no memory bandwidth: those plans served nothing."""
    hardware = snap.get(role)
    if hardware is None:
        return None
    price = hardware["price_per_hour"]
    return engine.Hardware(
        name=hardware["name"],
        slug=hardware["slug"],
        peak_flops=hardware["peak_flops"],
        memory_bytes=hardware["memory_bytes"],
        price_per_hour=None if price is None else Decimal(price),
        currency=hardware["currency"],
        memory_bandwidth_bytes_per_second=hardware.get("memory_bandwidth_bytes_per_second"),
    )


def _law_from(snap: Mapping[str, Any], samples: tuple[ScalingLaw, ...]) -> engine.NamedLaw | None:
    law = snap["law"]
    if law is None:
        return None
    fitted = law["fitted_range"]
    return engine.NamedLaw(
        ScalingLaw(**{name: law[name] for name in ("E", "A", "B", "alpha", "beta")}),
        slug=law["slug"],
        name=law["name"],
        source=law["source"],
        fitted_range=None if fitted is None else FittedRange(**fitted),
        note=law["note"],
        samples=samples,
    )


def evaluate(
    inputs: Mapping[str, Any], snap: Mapping[str, Any], samples: tuple[ScalingLaw, ...] = ()
) -> dict:
    """The result document of `inputs` (as stored) evaluated against `snap` and the bootstrap fits of its
    law (`samples`, kept with the fitted law the plan points at): pure, and what a plan holds."""
    outcome = planning.allocate_on(
        _INPUTS.load(inputs),
        _hardware_from(snap),
        _law_from(snap, samples),
        _hardware_from(snap, "inference_hardware"),
    )
    return _RESULT.dump(outcome)


# --- Creating ---------------------------------------------------------------------------------------------


def create_plan(
    session: Session, request: Mapping[str, Any], *, scope: uuid.UUID | None, parent: Plan | None = None
) -> Plan:
    """Evaluate a request (validated by PlanRequestSchema) and store it as a draft."""
    organization = organizations.named_in_body(session, request["organization"], scope=scope)
    budget = _budget_for(session, request["budget_id"], organization) if "budget_id" in request else None
    loaded = {name: value for name, value in request.items() if name in INPUT_FIELDS}
    if request.get("budget") == "remaining":
        # Down to the cent: plans cost whole cents (rounded half-up), so a money budget of 0.005 more than a
        # cent could buy a plan the budget cannot hold.
        remaining = budget.remaining.quantize(CENT, ROUND_DOWN)
        if remaining <= 0:
            metrics.BUDGET_CONFLICTS.labels(limit="amount").inc()
            raise ConflictError(f"Budget {budget.id} has nothing remaining.", limit="amount")
        loaded.update(cost=remaining, currency=budget.currency)

    profile, hardware, price_effective_at = _priced_hardware(session, loaded, "hardware")
    fitted = (
        planning.find_fitted_law(session, loaded["law"], scope=organization.id) if "law" in loaded else None
    )
    law = planning.named_law(fitted, loaded["law"]) if "law" in loaded else None
    serving = None
    if loaded.get("inference_hardware") is not None:
        serving = _priced_hardware(session, loaded, "inference_hardware")[1:]
    if budget is not None and "price_per_hour" not in loaded:
        # Before allocating: with "remaining", a mismatch would otherwise surface at `currency`, which the
        # budget, not the caller, supplied.
        _check_currency(hardware.currency, budget)
    outcome = planning.allocate_on(loaded, hardware, law, None if serving is None else serving[0])
    run = outcome.estimate
    if budget is not None:
        _check_chargeable(run, budget)

    now = utcnow()
    start_at = request.get("start_at") or now
    end_at = _end_of_run(start_at, run.runtime.seconds)
    inputs = _INPUTS.dump(loaded)
    plan = Plan(
        organization=organization,
        budget_id=None if budget is None else budget.id,
        hardware=profile,
        law=fitted,
        parent_id=None if parent is None else parent.id,
        name=request.get("name"),
        labels=dict(request.get("labels") or {}),
        status=PlanStatus.DRAFT,
        start_at=start_at,
        end_at=end_at,
        inputs=inputs,
        snapshot=snapshot(hardware, price_effective_at, outcome.law, serving),
        result=_RESULT.dump(outcome),
        method=outcome.method,
        params=outcome.allocation.params,
        tokens=outcome.allocation.tokens,
        flops=outcome.allocation.flops,
        predicted_loss=outcome.allocation.predicted_loss,
        accelerators=run.cluster.accelerators,
        days=run.runtime.days,
        accelerator_hours=run.runtime.accelerator_hours,
        cost=run.cost,
        currency=run.currency,
        created_by=session.info.get("actor", "system"),
        created_at=now,
    )
    session.add(plan)
    try:
        session.flush()
    except IntegrityError:  # its budget or hardware profile was deleted since we read it
        raise ConflictError("The plan's budget or hardware profile was just deleted.") from None
    metrics.count_on_commit(session, metrics.PLANS_CREATED)
    return plan


def _priced_hardware(
    session: Session, request: Mapping[str, Any], field: str
) -> tuple[HardwareProfile | None, engine.Hardware, datetime | None]:
    """The profile the request's `field` names (None for inline hardware), the engine's view of it with the
    price in force now, and when that price took effect."""
    profile = planning.find_hardware_profile(session, request[field], field=field)
    price = profile.current_price if profile is not None else None
    return profile, planning.hardware_of(profile, request[field]), price.effective_at if price else None


def _end_of_run(start_at: datetime, seconds: float) -> datetime:
    try:
        end_at = start_at + timedelta(seconds=seconds)
    except OverflowError:
        end_at = None
    if end_at is None or end_at.year > LAST_YEAR:
        raise InvalidFieldError(
            "#/accelerators",
            f"The run would take {seconds / 86400:.3g} days and end after the year {LAST_YEAR}; "
            "plan it on more accelerators.",
        )
    return end_at


def _budget_for(session: Session, budget_id: uuid.UUID, organization: Organization) -> Budget:
    try:
        return get_budget(session, budget_id, scope=organization.id)
    except NotFoundError:
        raise InvalidFieldError(
            "#/budget_id", f"No budget {budget_id} in organization {organization.slug!r}."
        ) from None


def _check_chargeable(run: engine.Estimate, budget: Budget) -> None:
    """A plan charged to a budget must have a cost in the budget's currency."""
    if run.cost is None:
        raise InvalidFieldError(
            "#/hardware",
            f"{run.cluster.hardware.name} has no price, so the plan has no cost to charge to a budget; "
            "give price_per_hour and currency.",
        )
    _check_currency(run.currency, budget)


def _check_currency(currency: str | None, budget: Budget) -> None:
    if currency is not None and currency != budget.currency:
        raise InvalidFieldError(
            "#/budget_id",
            f"The plan costs {currency} and the budget is in {budget.currency}; amounts in different "
            "currencies are never mixed (give price_per_hour in the budget's currency).",
        )


def revise_plan(
    session: Session, plan_id: uuid.UUID, changes: Mapping[str, Any], *, scope: uuid.UUID | None
) -> Plan:
    """A new draft from a plan's request with `changes` merged in (RFC 7396: null removes a member).

    The merged request is validated as a whole; the hardware's price and the law are resolved afresh
    (a change of price is a change: `price_per_hour`).
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
        raise InvalidFieldError("#/organization", "A revision belongs to its parent's organization.")
    request = merge_patch(request, changes)
    if changes.get("budget") is not None:
        request.pop("cost", None)  # "remaining" replaces the parent's money budget
    return create_plan(session, _REQUEST.load(request), scope=scope, parent=parent)


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


def _loaded():
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
) -> Page:
    """Newest first, a page at a time (keyset on created_at, id: as cheap deep down as on top)."""
    # Lists show summaries: the documents (several KiB a plan) stay in the database.
    summaries = select(Plan).options(
        *_loaded(), *(defer(document) for document in (Plan.inputs, Plan.snapshot, Plan.result))
    )
    return paginate(session, _filtered(summaries, where, scope), Plan, limit, after)


def _filtered(stmt: Select, where: PlanFilter, scope: uuid.UUID | None) -> Select:
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


def compare_plans(session: Session, ids: list[uuid.UUID], *, scope: uuid.UUID | None) -> dict:
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
    return a == b


def _json(value: Any) -> Any:
    return _money(value) if isinstance(value, Decimal) else value


def _relative(values: list[Any]) -> list[float | None] | None:
    numbers = [v for v in values if isinstance(v, int | float | Decimal) and not isinstance(v, bool)]
    if len(numbers) != len(values) or not values[0]:
        return None
    first = float(values[0])
    return [float(value) / first if math.isfinite(float(value) / first) else None for value in values]


# --- Lifecycle: the budget ledger -------------------------------------------------------------------------


def commit_plan(session: Session, plan_id: uuid.UUID, *, scope: uuid.UUID | None) -> Plan:
    """draft -> committed: reserve the plan's cost (and FLOPs and accelerator-hours) on its budget.

    The check and the reservation are one conditional UPDATE of the budget row, so concurrent commits can
    never together overspend it (on SQLite and PostgreSQL alike); the plan's status moves the same way.
    """
    plan = get_plan(session, plan_id, scope=scope)
    if plan.budget_id is None:
        raise ConflictError(
            "The plan has no budget to commit against; revise it with a budget_id.", limit="budget"
        )
    now = utcnow()
    _move(session, plan, PlanStatus.DRAFT, status=PlanStatus.COMMITTED, committed_at=now)
    # PostgreSQL: lock the budget row before the conditional UPDATE, so that the UPDATE's own snapshot sees
    # the budget's allowed hardware as of any edit it waited for (a re-check after a lock wait would see
    # other tables as they were when the statement began). SQLite serialises writers anyway.
    session.execute(select(Budget.id).where(Budget.id == plan.budget_id).with_for_update())
    cost = literal(plan.cost, Money())
    reserved = session.execute(
        update(Budget)
        .where(Budget.id == plan.budget_id, *_admits(plan, cost))
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
        refusal = _refusal(session, plan)
        metrics.BUDGET_CONFLICTS.labels(limit=refusal.extensions["limit"]).inc()
        raise refusal
    _ledger(session, plan, "commit", 1, now)
    metrics.count_on_commit(session, metrics.PLANS_COMMITTED)
    session.flush()
    session.refresh(plan)
    return plan


def _admits(plan: Plan, cost) -> list:
    """The budget's conditions for this plan, as SQL: evaluated by the UPDATE that reserves it."""
    allowed = select(budget_hardware.c.hardware_id).where(budget_hardware.c.budget_id == Budget.id)
    return [
        Budget.currency == plan.currency,
        Budget.committed + cost <= Budget.amount,
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


def _refusal(session: Session, plan: Plan) -> ConflictError:  # noqa: PLR0911 -- one return per limit
    """Why the budget refused the plan: read back after the conditional UPDATE matched nothing."""
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
    if budget.committed + plan.cost > budget.amount:
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
    return ConflictError("The budget changed while the plan was being committed; retry.", limit="concurrent")


def cancel_plan(session: Session, plan_id: uuid.UUID, *, scope: uuid.UUID | None) -> Plan:
    """draft or committed -> cancelled; a committed plan's reservation goes back to its budget."""
    plan = get_plan(session, plan_id, scope=scope)
    now = utcnow()
    if plan.status == PlanStatus.COMMITTED:
        _move(session, plan, PlanStatus.COMMITTED, status=PlanStatus.CANCELLED, cancelled_at=now)
        cost = literal(plan.cost, Money())
        session.execute(
            update(Budget)
            .where(Budget.id == plan.budget_id)
            .values(
                committed=Budget.committed - cost,
                committed_flops=_less(Budget.committed_flops, plan.flops),
                committed_accelerator_hours=_less(Budget.committed_accelerator_hours, plan.accelerator_hours),
                version=Budget.version + 1,
                updated_at=now,
            )
            .execution_options(synchronize_session=False)
        )
        _ledger(session, plan, "release", -1, now)
    else:
        _move(session, plan, PlanStatus.DRAFT, status=PlanStatus.CANCELLED, cancelled_at=now)
    session.flush()
    session.refresh(plan)
    return plan


def _less(committed, amount: float):
    """committed - amount, as SQL; what is left of rounding when the last plan goes is 0, not -1e-14."""
    return case((committed - amount <= amount * FLOAT_SLACK, 0.0), else_=committed - amount)


def _move(session: Session, plan: Plan, from_status: str, **values: Any) -> None:
    """Change the plan's status if it is still `from_status` (a concurrent transition makes this a 409)."""
    moved = session.execute(
        update(Plan)
        .where(Plan.id == plan.id, Plan.status == from_status)
        .values(version=Plan.version + 1, **values)
        .returning(Plan.id)
        .execution_options(synchronize_session=False)
    ).first()
    if moved is None:
        session.refresh(plan)
        wanted = values["status"]
        raise ConflictError(f"The plan is {plan.status}; it cannot be {wanted}.", plan_status=plan.status)
    audit.record(
        session, "commit" if values["status"] == PlanStatus.COMMITTED else "cancel", plan, sorted(values)
    )


def _ledger(session: Session, plan: Plan, entry: str, sign: int, now: datetime) -> None:
    session.add(
        LedgerEntry(
            budget_id=plan.budget_id,
            plan_id=plan.id,
            entry=entry,
            amount=sign * plan.cost,
            currency=plan.currency,
            flops=sign * plan.flops,
            accelerator_hours=sign * plan.accelerator_hours,
            actor=session.info.get("actor", "system"),
            request_id=session.info.get("request_id"),
            created_at=now,
        )
    )


def list_ledger(
    session: Session, budget_id: uuid.UUID, *, scope: uuid.UUID | None, limit: int, after: Cursor | None
) -> Page:
    get_budget(session, budget_id, scope=scope)  # 404 for a budget the caller may not see
    stmt = select(LedgerEntry).where(LedgerEntry.budget_id == budget_id)
    return paginate(session, stmt, LedgerEntry, limit, after)


def reevaluate(plan: Plan) -> dict:
    """The plan's result computed again from its inputs and snapshot (equal to `plan.result`)."""
    return evaluate(plan.inputs, plan.snapshot, laws.bootstrap_laws(plan.law))
