"""The world of the use-case tests: a session in, domain objects out, no HTTP.

A test builds the least of it it needs: the organisation `acme`, the priced accelerator `lab-gpu`, budgets
(`make_budget`, or `budget`: one of 1000.00 USD) and plans (`make_plan`, the one way these tests make a
plan; `committed`: one committed to `budget`). A plan names its model, its accelerators and its MFU, so the
engine searches no layout and prices it in milliseconds.

The use cases of plans.py and usage.py flush but do not commit: their caller's transaction does
(transactions.run_once, for a request). `run` plays that caller.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypeVar

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.data.models import Budget, HardwarePrice, HardwareProfile, LedgerEntry, Organization, Plan
from service.services import plans, usage
from service.services.plans import PlanRequest
from tests import builders

Outcome = TypeVar("Outcome")

# Runs start on 2 November 2026 and budgets cover its quarter: in the past, so that usage may be reported for
# any hour of a run.
START = datetime(2026, 11, 2, tzinfo=UTC)
QUARTER = (datetime(2026, 10, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))
PRICED_SINCE = datetime(2026, 1, 1, tzinfo=UTC)  # lab-gpu's price, 2.50 USD an accelerator-hour

# The plan make_plan makes: 6 x 1e9 x 6e10 = 3.6e20 FLOPs at half of 10 x 1e15 FLOP/s take 72 000 s, that is
# 20 hours, 200 accelerator-hours, 500.00 USD on lab-gpu. Its cost and hours scale with `tokens`.
PLAN_FLOPS = 3.6e20
PLAN_HOURS = 200.0
PLAN_COST = Decimal("500.00")


def run(use_case: Callable[..., Outcome], session: Session, *args: Any, **kwargs: Any) -> Outcome:
    """`use_case(session, *args, **kwargs)` in a transaction of its own, as a request runs it: committed
    when it returns, rolled back whole when it raises (transactions.run_once without an Idempotency-Key)."""
    try:
        outcome = use_case(session, *args, **kwargs)
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return outcome


# A plan's transitions, by the name of the API's action (POST /v1/plans/{id}/<action>).
_TRANSITIONS: dict[str, Callable[..., Plan]] = {
    "commit": plans.commit_plan,
    "cancel": plans.cancel_plan,
    "start": lambda session, plan_id, scope: usage.start_plan(session, plan_id, at=None, scope=scope),
    "complete": lambda session, plan_id, scope: usage.finish_plan(session, plan_id, "completed", scope=scope),
    "fail": lambda session, plan_id, scope: usage.finish_plan(session, plan_id, "failed", scope=scope),
}


def transition(session: Session, plan: Plan, action: str, *, scope: uuid.UUID | None = None) -> Plan:
    """`plan` committed, cancelled, started, completed or failed (`action`), in a transaction of its own."""
    return run(_TRANSITIONS[action], session, plan.id, scope=scope)


def stored(session: Session, model: type[Any], id_: object) -> Any:
    """The row as the database now holds it (nothing the session kept in memory)."""
    session.expire_all()
    return session.get_one(model, id_)


def ledger_of(session: Session, budget: Budget) -> list[LedgerEntry]:
    session.expire_all()
    stmt = select(LedgerEntry).where(LedgerEntry.budget_id == budget.id)
    return list(session.scalars(stmt.order_by(LedgerEntry.created_at, LedgerEntry.amount.desc())))


def add_organization(session: Session, slug: str) -> Organization:
    organization = Organization(slug=slug, name=slug.title())
    session.add(organization)
    session.commit()
    return organization


@pytest.fixture
def acme(session) -> Organization:
    return add_organization(session, "acme")


@pytest.fixture
def globex(session) -> Organization:
    return add_organization(session, "globex")


def add_gpu(
    session: Session, slug: str, price: str | None = "2.50", currency: str = "USD"
) -> HardwareProfile:
    """A custom profile of 1e15 bf16 FLOP/s, priced (per accelerator-hour) since PRICED_SINCE unless
    `price` is None."""
    profile = builders.hardware_profile(slug=slug, name=slug, peak_flops_bf16=1e15)
    if price is not None:
        profile.prices.append(
            HardwarePrice(price_per_hour=Decimal(price), currency=currency, effective_at=PRICED_SINCE)
        )
    session.add(profile)
    session.commit()
    return profile


@pytest.fixture
def lab_gpu(session) -> HardwareProfile:
    return add_gpu(session, "lab-gpu")


@pytest.fixture
def make_budget(session, acme) -> Callable[..., Budget]:
    """make_budget(**overrides): a budget of acme's, 1000.00 USD over QUARTER, stored as it is (not through
    the use case: tests of budgets.py call it themselves)."""

    def make(organization: Organization = acme, **overrides: Any) -> Budget:
        fields = {"amount": Decimal("1000.00"), "period_start": QUARTER[0], "period_end": QUARTER[1]}
        budget = builders.budget(organization.id, **{**fields, **overrides})
        session.add(budget)
        session.commit()
        return budget

    return make


@pytest.fixture
def make_plan(session, acme, lab_gpu) -> Callable[..., Plan]:
    """make_plan(**overrides): a draft of acme's, evaluated (plans.evaluate_new) then stored (store_new) in a
    transaction of its own, as every caller makes plans (see PLAN_COST); `scope` is the caller's, None by
    default (an admin). Every test here makes its plans so."""

    def make(*, scope: uuid.UUID | None = None, **overrides: Any) -> Plan:
        request = {
            "organization": "acme",
            "hardware": "lab-gpu",
            "params": 1e9,
            "tokens": 6e10,
            "accelerators": 10,
            "mfu": 0.5,
            "start_at": START,
            **overrides,
        }
        draft = plans.evaluate_new(session, PlanRequest(**request), scope=scope)
        return run(plans.store_new, session, draft)

    return make


@pytest.fixture
def budget(make_budget) -> Budget:
    return make_budget()


@pytest.fixture
def committed(session, make_plan, budget) -> Plan:
    """500.00 of the budget's 1000.00 reserved for 200 accelerator-hours and 6e10 tokens."""
    return transition(session, make_plan(budget_id=budget.id), "commit")
