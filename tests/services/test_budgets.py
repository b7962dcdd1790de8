"""services/budgets.py: what finance sets on a budget, and what it may not change under commitments."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from sqlalchemy import func, select

from service.data.models import CAP_SLACK, DEFAULT_ALERT_THRESHOLDS, Budget
from service.services import budgets, plans
from service.services.budgets import BudgetFields
from service.services.errors import (
    ConflictError,
    InvalidFieldError,
    NotFoundError,
    PreconditionFailedError,
    PreconditionRequiredError,
)
from tests.services.conftest import PLAN_FLOPS, PLAN_HOURS, QUARTER, START, add_gpu, run, stored


def new(**overrides) -> BudgetFields:
    """A new budget's fields, as BudgetSchema loads a POST: 2 500 000.00 USD of acme's over QUARTER."""
    fields = {
        "organization_slug": "acme",
        "name": "Q4 pretraining",
        "amount": Decimal("2500000.00"),
        "currency": "USD",
        "period_start": QUARTER[0],
        "period_end": QUARTER[1],
        **overrides,
    }
    return BudgetFields(given=frozenset(fields), **fields)


def changes(**fields) -> BudgetFields:
    """A PATCH (or PUT) body's fields: only those given are set."""
    return BudgetFields(given=frozenset(fields), **fields)


def update(session, budget: Budget, fields: BudgetFields, *, replace: bool = False, scope=None) -> Budget:
    """Update `budget` naming the version it was read at, as a client sends its ETag."""
    return budgets.update_budget(
        session, budget.id, fields, scope=scope, if_match=f'"{budget.version}"', replace=replace
    )


def count(session) -> int:
    return session.scalar(select(func.count()).select_from(Budget))


@pytest.fixture
def committed_budget(session, make_budget, make_plan):
    """A budget of 1000.00 with one plan committed to it: 500.00, 3.6e20 FLOPs, 200 accelerator-hours."""
    budget = make_budget(max_flops=1e21, max_accelerator_hours=1000)
    run(plans.commit_plan, session, make_plan(budget_id=budget.id).id, scope=None)
    return stored(session, Budget, budget.id)


# --- Creating -----------------------------------------------------------------------------------------------


def test_a_new_budget_has_nothing_committed_and_everything_remaining(session, acme):
    budget = budgets.create_budget(session, new(labels={"cost_center": "ml-42"}), scope=None)

    held = stored(session, Budget, budget.id)
    assert (held.organization_id, held.name, held.amount, held.currency) == (
        acme.id,
        "Q4 pretraining",
        Decimal("2500000.00"),
        "USD",
    )
    assert (held.committed, held.spent, held.overrun, held.remaining) == (0, 0, 0, Decimal("2500000.00"))
    assert (held.committed_flops, held.committed_accelerator_hours) == (0, 0)
    assert (held.period_start, held.period_end) == QUARTER
    assert (held.labels, held.version) == ({"cost_center": "ml-42"}, 1)


def test_a_budget_alerts_at_80_and_100_percent_unless_it_names_its_thresholds_which_are_kept_in_order(
    session, acme
):
    default = budgets.create_budget(session, new(), scope=None)
    own = budgets.create_budget(session, new(alert_thresholds=[1.0, 0.25, 0.5]), scope=None)

    assert (
        stored(session, Budget, default.id).alert_thresholds == list(DEFAULT_ALERT_THRESHOLDS) == [0.8, 1.0]
    )
    assert stored(session, Budget, own.id).alert_thresholds == [0.25, 0.5, 1.0]


def test_caps_on_flops_and_accelerator_hours_are_optional(session, acme):
    capped = budgets.create_budget(session, new(max_flops=1e24, max_accelerator_hours=5e5), scope=None)
    uncapped = budgets.create_budget(session, new(), scope=None)

    assert (capped.max_flops, capped.max_accelerator_hours) == (1e24, 5e5)
    assert (uncapped.max_flops, uncapped.max_accelerator_hours) == (None, None)


def test_allowed_hardware_is_kept_by_slug_once_each_in_slug_order(session, acme):
    for slug in ("b-gpu", "a-gpu"):
        add_gpu(session, slug)

    budget = budgets.create_budget(
        session, new(allowed_hardware_slugs=["b-gpu", "a-gpu", "b-gpu"]), scope=None
    )

    assert stored(session, Budget, budget.id).allowed_hardware_slugs == ["a-gpu", "b-gpu"]


def test_an_unknown_allowed_hardware_slug_is_refused_at_its_index_and_nothing_is_stored(session, acme):
    add_gpu(session, "a-gpu")

    with pytest.raises(InvalidFieldError, match="No hardware profile 'nope'") as refused:
        budgets.create_budget(session, new(allowed_hardware_slugs=["a-gpu", "nope"]), scope=None)

    assert refused.value.field == ("allowed_hardware", 1)
    session.rollback()
    assert count(session) == 0


@pytest.mark.parametrize("end", [QUARTER[0], QUARTER[0] - timedelta(seconds=1)])
def test_a_period_must_end_after_it_starts(session, acme, end):
    with pytest.raises(InvalidFieldError, match="after period_start") as refused:
        budgets.create_budget(session, new(period_end=end), scope=None)

    assert refused.value.field == ("period_end",)
    session.rollback()
    assert count(session) == 0


def test_a_budget_belongs_to_an_organisation_the_caller_sees(session, acme, globex):
    with pytest.raises(InvalidFieldError, match="No organization 'acme'") as refused:
        budgets.create_budget(session, new(), scope=globex.id)

    assert refused.value.field == ("organization",)
    with pytest.raises(InvalidFieldError, match="No organization 'initech'"):
        budgets.create_budget(session, new(organization_slug="initech"), scope=None)
    session.rollback()
    assert count(session) == 0


# --- Reading ------------------------------------------------------------------------------------------------


def test_another_organisations_budget_does_not_exist_for_its_caller(session, make_budget, acme, globex):
    budget = make_budget()

    assert budgets.get_budget(session, budget.id, scope=acme.id).id == budget.id
    with pytest.raises(NotFoundError):
        budgets.get_budget(session, budget.id, scope=globex.id)
    with pytest.raises(NotFoundError):
        budgets.get_budget(session, uuid.uuid4(), scope=None)


def test_budgets_are_listed_newest_first_within_the_callers_scope(session, make_budget, acme, globex):
    first, second = make_budget(name="first"), make_budget(name="second")
    theirs = make_budget(organization=globex, name="theirs")

    everyone = budgets.list_budgets(session, scope=None, organization=None, limit=10, after=None)
    own = budgets.list_budgets(session, scope=acme.id, organization=None, limit=10, after=None)
    named = budgets.list_budgets(session, scope=None, organization="globex", limit=10, after=None)

    assert [b.id for b in everyone.items] == [theirs.id, second.id, first.id]
    assert [b.id for b in own.items] == [second.id, first.id]
    assert [b.id for b in named.items] == [theirs.id]


# --- Updating -----------------------------------------------------------------------------------------------


def test_an_update_names_the_version_it_changes(session, make_budget):
    budget = make_budget()

    with pytest.raises(PreconditionRequiredError):
        budgets.update_budget(session, budget.id, changes(name="x"), scope=None, if_match=None, replace=False)
    with pytest.raises(PreconditionFailedError) as stale:
        budgets.update_budget(
            session, budget.id, changes(name="x"), scope=None, if_match='"7"', replace=False
        )

    assert stale.value.extensions == {"current_etag": '"1"'}
    assert stored(session, Budget, budget.id).name == "b"


def test_a_patch_changes_what_it_gives_and_moves_the_version(session, make_budget):
    budget = make_budget(labels={"team": "x"}, max_flops=1e24)

    update(session, budget, changes(name="renamed", amount=Decimal("1500.00")))

    held = stored(session, Budget, budget.id)
    assert (held.name, held.amount, held.labels, held.max_flops, held.version) == (
        "renamed",
        Decimal("1500.00"),
        {"team": "x"},
        1e24,
        2,
    )


def test_a_put_replaces_the_budget_and_clears_what_it_omits(session, make_budget):
    add_gpu(session, "a-gpu")
    budget = make_budget()
    update(
        session,
        budget,
        changes(
            labels={"team": "x"}, max_flops=1e24, allowed_hardware_slugs=["a-gpu"], alert_thresholds=[0.5]
        ),
    )

    update(
        session, stored(session, Budget, budget.id), new(name="new", amount=Decimal("10.00")), replace=True
    )

    held = stored(session, Budget, budget.id)
    assert (held.name, held.amount, held.labels, held.max_flops, held.allowed_hardware_slugs) == (
        "new",
        Decimal("10.00"),
        {},
        None,
        [],
    )
    assert held.alert_thresholds == list(DEFAULT_ALERT_THRESHOLDS)


def test_an_update_that_changes_nothing_keeps_the_version_and_updated_at(session, make_budget):
    budget = make_budget(name="same")
    before = stored(session, Budget, budget.id).updated_at

    update(session, budget, changes(name="same"))

    held = stored(session, Budget, budget.id)
    assert (held.version, held.updated_at) == (1, before)


def test_a_budget_never_moves_to_another_organisation(session, make_budget, globex):
    budget = make_budget()

    with pytest.raises(InvalidFieldError, match="another organization") as refused:
        update(session, budget, changes(organization_slug="globex"))

    assert refused.value.field == ("organization",)
    assert stored(session, Budget, budget.id).organization_id == budget.organization_id


def test_moving_one_end_of_the_period_past_the_other_is_refused_at_period_end_and_changes_nothing(
    session, make_budget
):
    add_gpu(session, "a-gpu")
    budget = make_budget()

    with pytest.raises(InvalidFieldError) as refused:
        update(
            session,
            budget,
            changes(period_start=QUARTER[1] + timedelta(days=1), allowed_hardware_slugs=["a-gpu"]),
        )

    assert refused.value.field == ("period_end",)
    session.rollback()
    held = stored(session, Budget, budget.id)
    assert (held.period_start, held.allowed_hardware_slugs, held.version) == (QUARTER[0], [], 1)


def test_the_amount_may_drop_to_what_is_committed_but_not_below(session, committed_budget):
    with pytest.raises(ConflictError, match="500") as refused:
        update(session, committed_budget, changes(amount=Decimal("499.99")))

    assert refused.value.extensions == {"committed": str(committed_budget.committed)}
    session.rollback()
    lowered = update(session, stored(session, Budget, committed_budget.id), changes(amount=Decimal("500.00")))
    assert (lowered.remaining, lowered.utilization) == (0, 1.0)


def test_the_currency_is_fixed_once_anything_is_committed(session, make_budget, committed_budget):
    empty = make_budget()

    with pytest.raises(ConflictError, match="currency cannot change"):
        update(session, committed_budget, changes(currency="EUR"))

    session.rollback()
    assert update(session, empty, changes(currency="EUR")).currency == "EUR"
    assert stored(session, Budget, committed_budget.id).currency == "USD"


@pytest.mark.parametrize(
    ("cap", "committed"), [("max_flops", PLAN_FLOPS), ("max_accelerator_hours", PLAN_HOURS)]
)
def test_a_cap_may_drop_to_what_is_committed_within_rounding_but_not_below(
    session, committed_budget, cap, committed
):
    with pytest.raises(ConflictError) as refused:
        update(session, committed_budget, changes(**{cap: committed * 0.999}))

    assert refused.value.extensions == {"limit": cap}
    session.rollback()
    lowered = update(
        session, stored(session, Budget, committed_budget.id), changes(**{cap: committed / CAP_SLACK})
    )
    assert getattr(lowered, cap) == committed / CAP_SLACK


@pytest.mark.parametrize(
    "shrunk",
    [
        {"period_start": START + timedelta(hours=1)},  # after the committed run starts
        {"period_end": START + timedelta(hours=19)},  # before it ends
    ],
)
def test_the_period_may_not_shrink_past_a_committed_plans_run(session, committed_budget, shrunk):
    with pytest.raises(ConflictError, match="1 committed plan") as refused:
        update(session, committed_budget, changes(**shrunk))

    assert refused.value.extensions == {"limit": "period"}
    held = stored(session, Budget, committed_budget.id)
    assert (held.period_start, held.period_end) == QUARTER


def test_the_period_may_shrink_to_the_committed_plans_run(session, committed_budget):
    # The committed plan runs for 20 hours from START.
    around = changes(period_start=START, period_end=START + timedelta(hours=20))

    update(session, committed_budget, around)

    held = stored(session, Budget, committed_budget.id)
    assert (held.period_start, held.period_end) == (START, START + timedelta(hours=20))


def test_the_period_of_a_budget_with_nothing_committed_moves_freely(session, make_budget, make_plan):
    budget = make_budget()
    make_plan(budget_id=budget.id)  # a draft: nothing committed

    moved = update(
        session, budget, changes(period_start=QUARTER[1], period_end=QUARTER[1] + timedelta(days=90))
    )

    assert stored(session, Budget, moved.id).period_start == QUARTER[1]


# --- Deleting -----------------------------------------------------------------------------------------------


def test_an_empty_budget_is_deleted(session, make_budget):
    budget = make_budget()

    budgets.delete_budget(session, budget.id, scope=None, if_match='"1"')

    assert count(session) == 0


def test_a_budget_with_commitments_is_not_deleted(session, committed_budget):
    with pytest.raises(ConflictError, match="committed to plans"):
        budgets.delete_budget(
            session, committed_budget.id, scope=None, if_match=f'"{committed_budget.version}"'
        )

    assert count(session) == 1


def test_a_budget_that_plans_were_charged_to_is_kept_with_their_history(session, make_budget, make_plan):
    budget = make_budget()
    draft = make_plan(budget_id=budget.id)
    run(plans.cancel_plan, session, draft.id, scope=None)

    with pytest.raises(ConflictError, match="kept with their history") as refused:
        budgets.delete_budget(session, budget.id, scope=None, if_match='"1"')

    assert refused.value.extensions == {"plans": 1}
    assert count(session) == 1
