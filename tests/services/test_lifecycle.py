"""A plan's life (services/plans.py, services/usage.py): draft -> committed -> running -> completed or
failed, or cancelled before it runs; each transition from any other status is a conflict that names the
plan's status."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from sqlalchemy import select

from service.data.models import AuditEntry, Budget, Event, Plan, utcnow
from service.infra import actors
from service.services import usage
from service.services.errors import ConflictError, InvalidFieldError, NotFoundError
from tests.services.conftest import (
    PLAN_COST,
    PLAN_FLOPS,
    PLAN_HOURS,
    START,
    ledger_of,
    run,
    stored,
    transition,
)


def audited(session, plan: Plan) -> list[str]:
    entries = select(AuditEntry.action).where(AuditEntry.object_id == str(plan.id))
    return list(session.scalars(entries.order_by(AuditEntry.created_at)))


def events_of(session, plan: Plan) -> list[Event]:
    return list(session.scalars(select(Event).where(Event.subject_id == str(plan.id)).order_by(Event.id)))


# --- A draft ------------------------------------------------------------------------------------------------


def test_a_new_plan_is_stored_as_a_draft_with_its_figures_and_nothing_done_yet(session, make_plan, acme):
    actors.act_as(session, "key-1")

    draft = make_plan(name="1B on 60B", labels={"team": "alpha"})

    held = stored(session, Plan, draft.id)
    assert (held.organization_id, held.status, held.version, held.method) == (acme.id, "draft", 1, "fixed")
    assert (held.name, held.labels, held.budget_id, held.created_by) == (
        "1B on 60B",
        {"team": "alpha"},
        None,
        "key-1",
    )
    assert (held.params, held.tokens, held.flops, held.accelerators) == (1e9, 6e10, PLAN_FLOPS, 10)
    assert (held.accelerator_hours, held.cost, held.currency) == (PLAN_HOURS, PLAN_COST, "USD")
    assert (held.start_at, held.end_at) == (START, START + timedelta(hours=20))
    assert (held.committed_at, held.cancelled_at, held.started_at, held.finished_at) == (None,) * 4
    assert (held.actual_cost, held.actual_accelerator_hours, held.tokens_trained) == (0, 0, 0)
    assert audited(session, draft) == ["plan.create"]


def test_a_plan_starts_now_unless_told_otherwise(session, make_plan):
    before = utcnow()

    draft = make_plan(start_at=None)

    assert before <= stored(session, Plan, draft.id).start_at <= utcnow()


def test_a_run_that_would_end_after_the_year_9998_is_refused_at_its_accelerators(session, make_plan):
    with pytest.raises(InvalidFieldError, match="after the year 9998") as refused:
        make_plan(tokens=1e17, accelerators=1)

    assert refused.value.field == ("accelerators",)
    assert session.scalars(select(Plan)).all() == []


def test_a_plan_belongs_to_an_organisation_the_caller_sees(session, make_plan, globex):
    with pytest.raises(InvalidFieldError, match="No organization 'acme'") as refused:
        make_plan(scope=globex.id)

    assert refused.value.field == ("organization",)


@pytest.mark.parametrize("action", ["commit", "cancel", "start", "complete", "fail"])
def test_another_organisations_plan_does_not_exist_for_its_transitions(session, committed, globex, action):
    with pytest.raises(NotFoundError):
        transition(session, committed, action, scope=globex.id)

    assert stored(session, Plan, committed.id).status == "committed"


# --- A run --------------------------------------------------------------------------------------------------


def test_a_committed_plan_starts_when_told_and_announces_it(session, committed):
    started_at = START + timedelta(minutes=5)

    running = run(usage.start_plan, session, committed.id, at=started_at, scope=None)

    held = stored(session, Plan, committed.id)
    assert (running.status, held.status, held.started_at, held.version) == (
        "running",
        "running",
        started_at,
        3,
    )
    [event] = events_of(session, committed)
    assert (event.type, event.key, event.organization_id) == (
        "plan.started",
        f"plan:{committed.id}:started",
        committed.organization_id,
    )
    assert event.data == {"started_at": started_at.isoformat(), "budget_id": str(committed.budget_id)}
    assert audited(session, committed) == ["plan.create", "plan.commit", "plan.start"]


def test_a_plan_started_without_a_time_started_now(session, committed):
    before = utcnow()

    transition(session, committed, "start")

    assert before <= stored(session, Plan, committed.id).started_at <= utcnow()


def test_completing_a_run_that_used_nothing_gives_its_whole_reservation_back(session, budget, committed):
    transition(session, committed, "start")

    completed = transition(session, committed, "complete")

    assert completed.status == "completed"
    assert completed.finished_at is not None
    held = stored(session, Budget, budget.id)
    assert (held.committed, held.committed_flops, held.committed_accelerator_hours) == (0, 0.0, 0.0)
    assert [(e.entry, e.amount, e.flops, e.accelerator_hours) for e in ledger_of(session, budget)] == [
        ("commit", PLAN_COST, PLAN_FLOPS, PLAN_HOURS),
        ("settle", -PLAN_COST, -PLAN_FLOPS, -PLAN_HOURS),
    ]


@pytest.mark.parametrize(("action", "outcome"), [("complete", "completed"), ("fail", "failed")])
def test_the_end_of_a_run_is_announced_with_its_plan_against_its_actuals(session, committed, action, outcome):
    transition(session, committed, "start")

    transition(session, committed, action)

    assert stored(session, Plan, committed.id).status == outcome
    [_, ended] = events_of(session, committed)
    assert (ended.type, ended.key) == (f"plan.{outcome}", f"plan:{committed.id}:{outcome}")
    assert ended.data == {
        "planned_cost": "500.00",
        "actual_cost": "0.00",
        "variance": "-500.00",
        "currency": "USD",
        "tokens_planned": 6e10,
        "tokens_trained": 0.0,
        "share_trained": 0.0,
        "accelerator_hours_planned": PLAN_HOURS,
        "accelerator_hours_used": 0.0,
    }
    assert audited(session, committed)[-1] == f"plan.{action}"


# --- Transitions that are not allowed -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "refused", "status"),
    [
        (["commit"], "commit", "committed"),
        (["cancel"], "cancel", "cancelled"),
        (["cancel"], "commit", "cancelled"),
        (["commit", "cancel"], "cancel", "cancelled"),
        (["commit", "cancel"], "commit", "cancelled"),
        (["cancel"], "start", "cancelled"),
        ([], "start", "draft"),
        ([], "complete", "draft"),
        (["commit"], "complete", "committed"),
        (["commit"], "fail", "committed"),
        (["commit", "start"], "start", "running"),
        (["commit", "start"], "commit", "running"),
        (["commit", "start"], "cancel", "running"),
        (["commit", "start", "complete"], "fail", "completed"),
        (["commit", "start", "complete"], "cancel", "completed"),
        (["commit", "start", "fail"], "complete", "failed"),
        (["commit", "start", "fail"], "start", "failed"),
    ],
)
def test_a_transition_from_the_wrong_status_is_a_conflict_naming_the_status_and_moves_nothing(
    session, make_plan, budget, steps, refused, status
):
    plan = make_plan(budget_id=budget.id)
    for step in steps:
        transition(session, plan, step)
    before = stored(session, Plan, plan.id).version, len(ledger_of(session, budget))

    with pytest.raises(ConflictError) as conflict:
        transition(session, plan, refused)

    assert conflict.value.extensions == {"plan_status": status}
    held = stored(session, Plan, plan.id)
    assert (held.status, held.version, len(ledger_of(session, budget))) == (status, *before)


def test_an_unknown_plan_does_not_exist(session, acme):
    with pytest.raises(NotFoundError):
        run(usage.start_plan, session, uuid.uuid4(), at=None, scope=None)


def test_a_completed_plan_keeps_what_it_spent_committed(session, budget, committed):
    record = usage.UsageReport(
        reporter="slurm-a",
        period_start=START,
        period_end=START + timedelta(hours=1),
        accelerator_hours=10.0,
        tokens=6e10,
    )
    run(usage.report_usage, session, committed.id, record, scope=None)

    transition(session, committed, "complete")

    held = stored(session, Budget, budget.id)
    assert (held.committed, held.spent, held.remaining) == (
        Decimal("25.00"),
        Decimal("25.00"),
        Decimal("975.00"),
    )
