"""Use cases for budgets: money an organisation may commit to plans in a period."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload
from sqlalchemy.orm.interfaces import LoaderOption

from service.data.models import (
    CAP_SLACK,
    DEFAULT_ALERT_THRESHOLDS,
    Budget,
    HardwareProfile,
    Organization,
    Plan,
    PlanStatus,
    utcnow,
)
from service.services import organizations
from service.services.changes import Changes
from service.services.errors import ConflictError, InvalidFieldError, NotFoundError
from service.services.pagination import Cursor, Page, paginate
from service.services.preconditions import require_version
from service.services.transactions import commit_or


@dataclass(frozen=True, kw_only=True)
class BudgetFields(Changes):
    """A budget's fields as a request sets them (what BudgetSchema loads)."""

    organization_slug: str | None = None
    name: str | None = None
    amount: Decimal | None = None
    currency: str | None = None
    period_start: datetime | None = None
    period_end: datetime | None = None
    max_flops: float | None = None
    max_accelerator_hours: float | None = None
    allowed_hardware_slugs: list[str] | None = None  # empty: any hardware
    alert_thresholds: list[float] | None = None
    labels: Mapping[str, str] | None = None
    commit_quantile: float | None = None
    approval_above: Decimal | None = None


_PLAIN_FIELDS = (
    "name",
    "amount",
    "currency",
    "period_start",
    "period_end",
    "max_flops",
    "max_accelerator_hours",
    "commit_quantile",
    "approval_above",
)


def _loaded() -> tuple[LoaderOption, ...]:
    return (selectinload(Budget.organization), selectinload(Budget.allowed_hardware))


# `scope` below: the organisation whose budgets the caller may see, or None for all. Budgets of other
# organisations behave as if they did not exist.


def list_budgets(
    session: Session, *, scope: uuid.UUID | None, organization: str | None, limit: int, after: Cursor | None
) -> Page[Budget]:
    stmt = select(Budget).options(*_loaded())
    if scope is not None:
        stmt = stmt.where(Budget.organization_id == scope)
    if organization is not None:
        stmt = stmt.join(Budget.organization).where(Organization.slug == organization)
    return paginate(session, stmt, Budget, limit, after)


def get_budget(session: Session, budget_id: uuid.UUID, *, scope: uuid.UUID | None) -> Budget:
    stmt = select(Budget).where(Budget.id == budget_id).options(*_loaded())
    if scope is not None:
        stmt = stmt.where(Budget.organization_id == scope)
    budget = session.scalars(stmt).first()
    if budget is None:
        raise NotFoundError(f"No budget {budget_id}.")
    return budget


def create_budget(session: Session, fields: BudgetFields, *, scope: uuid.UUID | None) -> Budget:
    assert fields.organization_slug is not None, "a new budget's organization is required (BudgetSchema)"
    organization = organizations.named_in_body(session, fields.organization_slug, scope=scope)
    now = utcnow()
    budget = Budget(organization=organization, committed=Decimal(0), created_at=now, updated_at=now)
    _apply(session, budget, fields, replace=True)
    session.add(budget)
    _commit(session)
    return budget


def update_budget(
    session: Session,
    budget_id: uuid.UUID,
    fields: BudgetFields,
    *,
    scope: uuid.UUID | None,
    if_match: str | None,
    replace: bool,
) -> Budget:
    """PATCH (`replace=False`) or PUT (`replace=True`). The organisation never changes; the amount never
    drops below what is committed, and the currency is fixed once anything is."""
    budget = get_budget(session, budget_id, scope=scope)
    require_version(if_match, budget.version)
    if fields.given_or("organization_slug", budget.organization_slug) != budget.organization_slug:
        raise InvalidFieldError("organization", "A budget cannot move to another organization.")
    if budget.committed and fields.given_or("currency", budget.currency) != budget.currency:
        raise ConflictError(f"{budget.committed} {budget.currency} is committed; the currency cannot change.")
    if fields.amount is not None and fields.amount < budget.committed:
        raise ConflictError(
            f"The amount cannot drop below the {budget.committed} {budget.currency} already committed.",
            committed=str(budget.committed),
        )
    for cap, committed in (
        ("max_flops", budget.committed_flops),
        ("max_accelerator_hours", budget.committed_accelerator_hours),
    ):
        if getattr(fields, cap) is not None and getattr(fields, cap) * CAP_SLACK < committed:
            raise ConflictError(f"{cap} cannot drop below the {committed:.6g} already committed.", limit=cap)
    _check_period_holds_commitments(session, budget, fields)
    _apply(session, budget, fields, replace=replace)
    if session.is_modified(budget):  # an update that changes nothing keeps the version (and the ETag)
        budget.updated_at = utcnow()
    _commit(session)
    return budget


def _check_period_holds_commitments(session: Session, budget: Budget, fields: BudgetFields) -> None:
    """A period may change only around what is committed: every committed or running plan's run stays
    within it (as its commit required), so reports by month add up to the budget's `committed`."""
    start = fields.given_or("period_start", budget.period_start)
    end = fields.given_or("period_end", budget.period_end)
    if not budget.committed or (start, end) == (budget.period_start, budget.period_end):
        return
    outside = session.scalar(
        select(func.count())
        .select_from(Plan)
        .where(
            Plan.budget_id == budget.id,
            Plan.status.in_((PlanStatus.COMMITTED, PlanStatus.RUNNING)),
            or_(Plan.start_at < start, Plan.end_at > end),
        )
    )
    if outside:
        raise ConflictError(
            f"{outside} committed plan(s) would run outside the new period; cancel them first.",
            limit="period",
        )


# What a concurrent request made impossible, by a word of the constraint that refused the commit.
_CONFLICTS = {
    # A plan was committed between our check and our write; the CHECK constraint kept the books.
    "committed_within_amount": "The amount cannot drop below what is committed (it changed meanwhile).",
    "within_cap": "A cap cannot drop below what is committed (it changed meanwhile).",
    "hardware": "A hardware profile named in allowed_hardware was just deleted.",
}


def _commit(session: Session) -> None:
    """Commit, turning what a concurrent request made impossible into a 409 that says what."""
    commit_or(session, _conflict)


def _conflict(violation: IntegrityError) -> ConflictError | None:
    refused_by = str(violation.orig)
    return next((ConflictError(detail) for word, detail in _CONFLICTS.items() if word in refused_by), None)


def delete_budget(
    session: Session, budget_id: uuid.UUID, *, scope: uuid.UUID | None, if_match: str | None
) -> None:
    budget = get_budget(session, budget_id, scope=scope)
    require_version(if_match, budget.version)
    if budget.committed:
        raise ConflictError(
            f"{budget.committed} {budget.currency} is committed to plans; cancel them before deleting it."
        )
    plans = session.scalar(select(func.count()).select_from(Plan).where(Plan.budget_id == budget.id))
    if plans:
        raise ConflictError(
            f"{plans} plan(s) are charged to this budget; it is kept with their history.", plans=plans
        )
    session.delete(budget)
    # Refused when a plan was charged to it since we counted.
    commit_or(session, ConflictError("A plan was just charged to this budget; it is kept with its history."))


def _apply(session: Session, budget: Budget, fields: BudgetFields, *, replace: bool) -> None:
    start = fields.period_start if fields.sets("period_start") or replace else budget.period_start
    end = fields.period_end if fields.sets("period_end") or replace else budget.period_end
    # BudgetSchema requires both on POST and PUT, and never lets a PATCH clear either.
    assert start is not None, "a budget's period has a start"
    assert end is not None, "a budget's period has an end"
    if end <= start:  # checked before any change, so that no half-changed row is ever flushed
        raise InvalidFieldError("period_end", "Must be after period_start.")
    for name in _PLAIN_FIELDS:
        if fields.sets(name) or replace:
            setattr(budget, name, getattr(fields, name))
    if fields.sets("labels") or replace:
        budget.labels = dict(fields.labels or {})
    if fields.sets("alert_thresholds") or replace:
        given = fields.alert_thresholds
        budget.alert_thresholds = list(DEFAULT_ALERT_THRESHOLDS) if given is None else sorted(given)
    if fields.sets("allowed_hardware_slugs") or replace:
        with session.no_autoflush:
            budget.allowed_hardware = _hardware(session, fields.allowed_hardware_slugs or [])


def _hardware(session: Session, slugs: list[str]) -> list[HardwareProfile]:
    found = {
        p.slug: p for p in session.scalars(select(HardwareProfile).where(HardwareProfile.slug.in_(slugs)))
    }
    for index, slug in enumerate(slugs):
        if slug not in found:
            raise InvalidFieldError(("allowed_hardware", index), f"No hardware profile {slug!r}.")
    return sorted(found.values(), key=lambda profile: profile.slug)  # as the relationship loads them
