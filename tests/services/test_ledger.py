"""services/plans.py, the budget ledger: a commit reserves a plan's cost, FLOPs and accelerator-hours on its
budget by one conditional UPDATE; a cancel gives them back; each movement is a ledger entry; a refusal says
which limit the plan broke."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest

from service.core import engine
from service.data.models import Budget, Plan
from service.infra import actors
from service.services import budgets, plans
from service.services.budgets import BudgetFields
from service.services.errors import ConflictError, InvalidFieldError, NotFoundError
from tests.services.conftest import (
    PLAN_COST,
    PLAN_FLOPS,
    PLAN_HOURS,
    START,
    add_gpu,
    ledger_of,
    stored,
    transition,
)

RENTED = engine.Hardware(
    name="rented",
    peak_flops={"bf16": 1e15},
    memory_bytes=80e9,
    price_per_hour=Decimal("2.50"),
    currency="USD",
)


def commit(session, plan: Plan) -> Plan:
    return transition(session, plan, "commit")


def cancel(session, plan: Plan) -> Plan:
    return transition(session, plan, "cancel")


def committed_figures(budget: Budget) -> tuple[Decimal, float, float]:
    return budget.committed, budget.committed_flops, budget.committed_accelerator_hours


# --- Committing ---------------------------------------------------------------------------------------------


def test_committing_reserves_the_cost_flops_and_hours_on_the_budget(session, make_budget, make_plan):
    budget = make_budget(max_flops=1e21, max_accelerator_hours=1000)
    draft = make_plan(budget_id=budget.id)

    committed = commit(session, draft)

    assert (committed.status, committed.version) == ("committed", 2)
    assert committed.committed_at is not None
    held = stored(session, Budget, budget.id)
    assert committed_figures(held) == (PLAN_COST, PLAN_FLOPS, PLAN_HOURS)
    assert (held.remaining, held.version) == (Decimal("500.00"), 2)
    assert stored(session, Plan, draft.id).status == "committed"


def test_a_commit_writes_a_ledger_entry_of_what_it_reserved_and_who_asked(session, make_budget, make_plan):
    budget = make_budget()
    draft = make_plan(budget_id=budget.id)
    actors.act_as(session, "key-1", "request-1")

    commit(session, draft)

    [entry] = ledger_of(session, budget)
    assert (
        entry.entry,
        entry.plan_id,
        entry.amount,
        entry.currency,
        entry.flops,
        entry.accelerator_hours,
    ) == (
        "commit",
        draft.id,
        PLAN_COST,
        "USD",
        PLAN_FLOPS,
        PLAN_HOURS,
    )
    assert (entry.actor, entry.request_id) == ("key-1", "request-1")


def test_commits_add_up_until_the_rest_of_the_budget_is_too_little(session, make_budget, make_plan):
    budget = make_budget(amount=Decimal("700.00"))
    first, second = make_plan(budget_id=budget.id), make_plan(budget_id=budget.id)
    commit(session, first)

    with pytest.raises(ConflictError) as refused:
        commit(session, second)

    extensions = refused.value.extensions
    assert (extensions["limit"], Decimal(extensions["requested"]), Decimal(extensions["remaining"])) == (
        "amount",
        PLAN_COST,
        Decimal("200.00"),
    )
    assert stored(session, Budget, budget.id).committed == PLAN_COST


@pytest.mark.parametrize(
    ("budget", "plan", "limit"),
    [
        ({"amount": Decimal("499.99")}, {}, "amount"),
        ({"max_flops": 3.5e20}, {}, "max_flops"),
        ({"max_accelerator_hours": 199.5}, {}, "max_accelerator_hours"),
        ({"allowed_hardware": ["other-gpu"]}, {}, "hardware"),
        ({"allowed_hardware": ["lab-gpu"]}, {"hardware": RENTED}, "hardware"),
        ({"period_start": START + timedelta(seconds=1)}, {}, "period"),  # starts before the period
        ({"period_end": START + timedelta(hours=19)}, {}, "period"),  # ends after it
    ],
)
def test_a_commit_that_breaks_a_limit_is_refused_naming_it_and_changes_nothing(
    session, make_budget, make_plan, lab_gpu, budget, plan, limit
):
    hardware = {"other-gpu": add_gpu(session, "other-gpu"), "lab-gpu": lab_gpu}
    limits = {name: value for name, value in budget.items() if name != "allowed_hardware"}
    allowed = [hardware[slug] for slug in budget.get("allowed_hardware", [])]
    limited = make_budget(**limits, allowed_hardware=allowed)
    draft = make_plan(budget_id=limited.id, **plan)

    with pytest.raises(ConflictError) as refused:
        commit(session, draft)

    assert refused.value.extensions["limit"] == limit
    held = stored(session, Plan, draft.id)
    assert (held.status, held.version, held.committed_at) == ("draft", 1, None)
    after = stored(session, Budget, limited.id)
    assert (committed_figures(after), after.version) == ((0, 0, 0), 1)
    assert ledger_of(session, limited) == []


def test_a_plan_without_a_budget_cannot_be_committed(session, make_plan):
    draft = make_plan()

    with pytest.raises(ConflictError) as refused:
        commit(session, draft)

    assert refused.value.extensions == {"limit": "budget"}
    assert stored(session, Plan, draft.id).status == "draft"


def test_a_commit_after_the_budgets_currency_changed_is_refused_at_the_currency(
    session, make_budget, make_plan
):
    budget = make_budget()
    draft = make_plan(budget_id=budget.id)
    in_euros = BudgetFields(given=frozenset({"currency"}), currency="EUR")
    budgets.update_budget(session, budget.id, in_euros, scope=None, if_match='"1"', replace=False)

    with pytest.raises(ConflictError) as refused:
        commit(session, draft)

    assert refused.value.extensions == {"limit": "currency"}
    assert (stored(session, Plan, draft.id).status, ledger_of(session, budget)) == ("draft", [])


def test_a_commit_that_takes_exactly_what_every_limit_leaves_is_admitted(session, make_budget, make_plan):
    # The run ends 20 hours after START, on the period's last instant.
    budget = make_budget(
        amount=PLAN_COST,
        max_flops=PLAN_FLOPS,
        max_accelerator_hours=PLAN_HOURS,
        period_start=START,
        period_end=START + timedelta(hours=20),
    )

    commit(session, make_plan(budget_id=budget.id))

    assert stored(session, Budget, budget.id).remaining == 0


def test_a_budget_restricted_to_some_hardware_admits_plans_on_it(session, make_budget, make_plan, lab_gpu):
    budget = make_budget(allowed_hardware=[lab_gpu])

    assert commit(session, make_plan(budget_id=budget.id)).status == "committed"


def test_a_cap_admits_plans_whose_hours_add_up_to_it_but_for_float_rounding(session, make_budget, make_plan):
    hours = make_plan(tokens=5.9e10).accelerator_hours
    count, total = 0, 0.0
    while total <= count * hours:  # the first count at which adding up overshoots count x hours
        count, total = count + 1, total + hours
    assert count < 50
    budget = make_budget(amount=Decimal(100000), max_accelerator_hours=count * hours)
    for _ in range(count):
        commit(session, make_plan(budget_id=budget.id, tokens=5.9e10))

    with pytest.raises(ConflictError) as refused:
        commit(session, make_plan(budget_id=budget.id, tokens=5.9e10))

    assert refused.value.extensions["limit"] == "max_accelerator_hours"


# --- Cancelling ---------------------------------------------------------------------------------------------


def test_cancelling_a_committed_plan_releases_its_reservation_and_the_ledger_balances(
    session, make_budget, make_plan
):
    budget = make_budget()
    kept, dropped = make_plan(budget_id=budget.id, tokens=3e10), make_plan(budget_id=budget.id)
    for plan in (kept, dropped):
        commit(session, plan)

    cancelled = cancel(session, dropped)

    assert (cancelled.status, cancelled.version) == ("cancelled", 3)
    assert cancelled.cancelled_at is not None
    held = stored(session, Budget, budget.id)
    assert committed_figures(held) == (Decimal("250.00"), PLAN_FLOPS / 2, PLAN_HOURS / 2)
    entries = ledger_of(session, budget)
    assert [(e.entry, e.plan_id, e.amount) for e in entries] == [
        ("commit", kept.id, Decimal("250.00")),
        ("commit", dropped.id, PLAN_COST),
        ("release", dropped.id, -PLAN_COST),
    ]
    assert (entries[-1].flops, entries[-1].accelerator_hours) == (-PLAN_FLOPS, -PLAN_HOURS)
    assert sum(e.amount for e in entries) == held.committed
    assert sum(e.flops for e in entries) == held.committed_flops
    assert sum(e.accelerator_hours for e in entries) == held.committed_accelerator_hours


def test_cancelling_a_draft_writes_no_ledger_entry_and_leaves_its_budget_alone(
    session, make_budget, make_plan
):
    budget = make_budget()
    draft = make_plan(budget_id=budget.id)

    assert cancel(session, draft).status == "cancelled"

    assert ledger_of(session, budget) == []
    assert stored(session, Budget, budget.id).version == 1


def test_a_plan_without_a_budget_can_be_cancelled(session, make_plan):
    assert cancel(session, make_plan()).status == "cancelled"


def test_when_every_plan_is_released_the_committed_flops_and_hours_are_exactly_zero(
    session, make_budget, make_plan
):
    budget = make_budget(amount=Decimal(100000))
    drafts = [make_plan(budget_id=budget.id, tokens=tokens) for tokens in (2e10, 4.0001e10, 6e10)]
    for plan in drafts:
        commit(session, plan)

    for plan in drafts:
        cancel(session, plan)

    assert committed_figures(stored(session, Budget, budget.id)) == (0, 0.0, 0.0)


# --- The ledger ---------------------------------------------------------------------------------------------


def test_the_ledger_lists_a_budgets_entries_newest_first_to_those_who_see_it(
    session, make_budget, make_plan, acme, globex
):
    budget = make_budget()
    plan = make_plan(budget_id=budget.id)
    commit(session, plan)
    cancel(session, plan)

    page = plans.list_ledger(session, budget.id, scope=acme.id, limit=10, after=None)

    assert [(e.entry, e.amount) for e in page.items] == [("release", -PLAN_COST), ("commit", PLAN_COST)]
    with pytest.raises(NotFoundError):
        plans.list_ledger(session, budget.id, scope=globex.id, limit=10, after=None)
    with pytest.raises(NotFoundError):
        plans.list_ledger(session, uuid.uuid4(), scope=None, limit=10, after=None)


# --- What a plan charged to a budget must be ----------------------------------------------------------------


def test_the_remaining_amount_of_a_budget_is_a_plans_money_budget_down_to_the_cent(
    session, make_budget, make_plan
):
    budget = make_budget(amount=Decimal("1000.005"))

    plan = make_plan(budget_id=budget.id, budget=plans.REMAINING, params=None, tokens=None)

    assert (plan.cost, plan.currency) == (Decimal("1000.00"), "USD")
    commit(session, plan)
    assert stored(session, Budget, budget.id).remaining == Decimal("0.005")


def test_a_budget_with_nothing_remaining_is_no_money_budget(session, make_budget, make_plan):
    budget = make_budget(amount=PLAN_COST)
    commit(session, make_plan(budget_id=budget.id))

    with pytest.raises(ConflictError, match="nothing remaining") as refused:
        make_plan(budget_id=budget.id, budget=plans.REMAINING, params=None, tokens=None)

    assert refused.value.extensions == {"limit": "amount"}


def test_a_plan_is_charged_only_to_a_budget_of_its_own_organisation(session, make_budget, make_plan, globex):
    theirs = make_budget(organization=globex)

    with pytest.raises(InvalidFieldError, match="No budget") as refused:
        make_plan(budget_id=theirs.id)

    assert refused.value.field == ("budget_id",)


def test_a_plan_charged_to_a_budget_costs_in_the_budgets_currency(session, make_budget, make_plan):
    in_euros = make_budget(currency="EUR")

    with pytest.raises(InvalidFieldError, match="never mixed") as refused:
        make_plan(budget_id=in_euros.id)

    assert refused.value.field == ("budget_id",)
    accepted = make_plan(budget_id=in_euros.id, price_per_hour=Decimal("2.00"), currency="EUR")
    assert (accepted.cost, accepted.currency) == (Decimal("400.00"), "EUR")


def test_a_plan_on_unpriced_hardware_cannot_be_charged_to_a_budget(session, make_budget, make_plan):
    add_gpu(session, "free-gpu", price=None)
    budget = make_budget()

    with pytest.raises(InvalidFieldError, match="has no price") as refused:
        make_plan(budget_id=budget.id, hardware="free-gpu")

    assert refused.value.field == ("hardware",)
    assert make_plan(hardware="free-gpu").cost is None
