"""A plan's run through the API: started, its usage reported (and reversed), completed or failed; what its
budget then shows and forecasts, and the events its thresholds raise."""

from __future__ import annotations

import uuid
from decimal import ROUND_HALF_UP, Decimal

import pytest
from sqlalchemy import func, select

from service.core import accuracy
from service.core.forecast import FINISHED_STATUSES
from service.data.models import Budget, Event, LedgerEntry, Plan, PlanStatus, UsageDay, UsageRecord
from tests.api.test_plans import create_plan, make_budget, transition
from tests.api.test_plans import world as world  # noqa: PLC0414 -- the fixture, re-exported
from tests.conftest import bearer
from tests.problems import assert_problem

# The plan of test_plans.plan_body: 200 accelerator-hours, 500.00 USD on lab-gpu (2.50 an hour), 6e10 tokens.
PLANNED_COST = Decimal("500.00")


def usage_body(**overrides) -> dict:
    """An hour of 10 accelerators on 2026-11-02, a tenth of the tokens trained (None leaves a field out)."""
    body = {
        "reporter": "slurm-a",
        "period_start": "2026-11-02T00:00:00Z",
        "period_end": "2026-11-02T01:00:00Z",
        "accelerator_hours": 10.0,
        "tokens": 6e9,
        **overrides,
    }
    return {name: value for name, value in body.items() if value is not None}


def report(client, plan_id: str, **overrides):
    return client.post(f"/v1/plans/{plan_id}/usage", json=usage_body(**overrides))


def hours(day: int, start: int, end: int) -> dict:
    return {
        "period_start": f"2026-11-{day:02d}T{start:02d}:00:00Z",
        "period_end": f"2026-11-{day:02d}T{end:02d}:00:00Z",
    }


# The budget's period holds the usage periods of these tests (November 2026, before the plan's start: a
# run that started early, which the plan flags) and the plan's schedule.
BUDGET_PERIOD = {"period_start": "2026-10-01T00:00:00Z", "period_end": "2027-04-01T00:00:00Z"}


@pytest.fixture
def budget(client, world):
    return make_budget(client, **BUDGET_PERIOD)


@pytest.fixture
def committed(client, budget):
    plan = create_plan(client, budget_id=budget["id"])
    assert transition(client, plan["id"], "commit").status_code == 200
    return plan


def budget_row(session, budget_id: str) -> Budget:
    row = session.get_one(Budget, uuid.UUID(budget_id))
    session.refresh(row)
    return row


def test_the_first_usage_record_starts_a_committed_plan_and_charges_the_hours_at_the_price(
    client, session, committed
):
    response = report(client, committed["id"])

    assert response.status_code == 201, response.get_json()
    record = response.get_json()
    assert (record["cost"], record["cost_source"], record["price_per_hour"]) == ("25.00", "price", "2.50")
    assert response.headers["Location"] == f"/v1/plans/{committed['id']}/usage/{record['id']}"
    plan = client.get(f"/v1/plans/{committed['id']}").get_json()
    assert (plan["status"], plan["started_at"]) == ("running", "2026-11-02T00:00:00+00:00")
    assert (plan["actual_cost"], plan["actual_accelerator_hours"], plan["tokens_trained"]) == (
        "25.00",
        10.0,
        6e9,
    )
    # A tenth of the tokens for 25.00: at that pace the run completes at 250.00.
    assert (plan["share_trained"], plan["estimate_at_completion"]) == (0.1, "250.00")
    assert (
        budget_row(session, committed["budget_id"]).spent,
        budget_row(session, committed["budget_id"]).committed,
    ) == (
        Decimal("25.00"),
        PLANNED_COST,
    )


def test_usage_before_the_plans_start_is_taken_and_flagged_on_the_record_and_the_plan(client, committed):
    # The plan starts on 2027-01-04; its run reported November 2026 (within the budget's period).
    record = report(client, committed["id"]).get_json()

    assert record["off_schedule"] is True
    plan = client.get(f"/v1/plans/{committed['id']}").get_json()
    assert (plan["off_schedule_accelerator_hours"], plan["off_schedule_cost"]) == (10.0, "25.00")
    assert [
        item["off_schedule"] for item in client.get(f"/v1/plans/{committed['id']}/usage").get_json()["items"]
    ] == [True]


def test_usage_outside_the_budgets_period_is_a_422_naming_the_field_and_stores_nothing(
    client, session, committed
):
    response = report(
        client, committed["id"], period_start="2026-09-30T23:00:00Z", period_end="2026-10-01T01:00:00Z"
    )

    problem = assert_problem(response, 422)
    assert [error["pointer"] for error in problem["errors"]] == ["#/period_start"]
    assert "2026-10-01T00:00:00+00:00, 2027-04-01T00:00:00+00:00" in problem["errors"][0]["detail"]
    assert session.scalar(select(func.count()).select_from(UsageRecord)) == 0
    assert budget_row(session, committed["budget_id"]).spent == Decimal(0)


def test_a_reported_cost_is_taken_as_given(client, committed):
    record = report(client, committed["id"], cost="31.40", currency="USD").get_json()

    assert (record["cost"], record["cost_source"], record["price_per_hour"]) == ("31.40", "reported", None)


def test_a_record_spanning_midnight_counts_in_each_day_in_proportion(client, session, committed):
    body = {
        "period_start": "2026-11-02T18:00:00Z",
        "period_end": "2026-11-03T06:00:00Z",
        "accelerator_hours": 120,
    }
    assert report(client, committed["id"], **body).status_code == 201

    days = session.execute(
        select(UsageDay.day, UsageDay.accelerator_hours, UsageDay.cost).order_by(UsageDay.day)
    ).all()
    assert [(str(day), hours, cost) for day, hours, cost in days] == [
        ("2026-11-02", 60.0, Decimal("150.00")),
        ("2026-11-03", 60.0, Decimal("150.00")),
    ]


def test_a_reporters_periods_may_not_overlap_so_a_retry_without_a_key_is_refused(client, session, committed):
    assert report(client, committed["id"]).status_code == 201

    again = report(
        client, committed["id"], period_start="2026-11-02T00:30:00Z", period_end="2026-11-02T02:00:00Z"
    )

    assert_problem(again, 409)
    assert again.get_json()["field"] == "period_start"
    assert session.scalar(select(func.count()).select_from(UsageRecord)) == 1
    # Another reporter of the same run is another stream of records.
    assert report(client, committed["id"], reporter="slurm-b").status_code == 201


def test_a_retry_with_the_idempotency_key_gets_the_first_record_and_counts_once(client, session, committed):
    first = client.post(
        f"/v1/plans/{committed['id']}/usage", json=usage_body(), headers={"Idempotency-Key": "u-1"}
    )
    retry = client.post(
        f"/v1/plans/{committed['id']}/usage", json=usage_body(), headers={"Idempotency-Key": "u-1"}
    )

    assert (first.status_code, retry.status_code) == (201, 201)
    assert retry.get_json() == first.get_json()
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert budget_row(session, committed["budget_id"]).spent == Decimal("25.00")


@pytest.mark.parametrize(
    ("overrides", "pointer"),
    [
        ({"accelerator_hours": -1}, "#/accelerator_hours"),
        ({"accelerator_hours": "NaN"}, "#/accelerator_hours"),
        ({"tokens": -5}, "#/tokens"),
        ({"tokens_per_second": 0}, "#/tokens_per_second"),
        ({"cost": "-1.00"}, "#/cost"),
        ({"cost": "12.00", "currency": "EUR"}, "#/currency"),
        ({"period_end": "2026-11-01T00:00:00Z"}, "#/period_end"),
        ({"period_start": "2099-01-01T00:00:00Z", "period_end": "2099-01-01T01:00:00Z"}, "#/period_end"),
        ({"reporter": ""}, "#/reporter"),
        ({"surprise": 1}, "#/surprise"),
    ],
)
def test_bad_usage_is_a_422_naming_the_field_and_stores_nothing(
    client, session, committed, overrides, pointer
):
    response = report(client, committed["id"], **overrides)

    assert_problem(response, 422)
    assert pointer in [error["pointer"] for error in response.get_json()["errors"]]
    assert session.scalar(select(func.count()).select_from(UsageRecord)) == 0
    assert client.get(f"/v1/plans/{committed['id']}").get_json()["status"] == "committed"


def test_tokens_trained_so_far_never_go_down(client, committed):
    assert report(client, committed["id"], **hours(2, 0, 1), tokens=6e9).status_code == 201

    fewer = report(client, committed["id"], **hours(2, 1, 2), tokens=5e9)

    assert_problem(fewer, 422)
    assert fewer.get_json()["errors"][0]["pointer"] == "#/tokens"


@pytest.mark.parametrize("status", ["draft", "cancelled"])
def test_usage_for_a_plan_that_is_not_committed_or_running_is_a_409(client, session, budget, status):
    plan = create_plan(client, budget_id=budget["id"])
    if status == "cancelled":
        transition(client, plan["id"], "cancel")

    response = report(client, plan["id"])

    assert_problem(response, 409)
    assert response.get_json()["plan_status"] == status
    assert session.scalar(select(func.count()).select_from(UsageRecord)) == 0


def test_a_reversal_takes_a_record_back_and_the_period_may_be_reported_again(client, session, committed):
    wrong = report(client, committed["id"], accelerator_hours=100, tokens=6e9).get_json()

    reversed_ = client.post(f"/v1/plans/{committed['id']}/usage/{wrong['id']}/reverse", json={"note": "typo"})

    assert reversed_.status_code == 201, reversed_.get_json()
    assert (reversed_.get_json()["kind"], reversed_.get_json()["cost"], reversed_.get_json()["reverses"]) == (
        "reversal",
        "-250.00",
        wrong["id"],
    )
    assert budget_row(session, committed["budget_id"]).spent == 0
    assert session.scalar(select(UsageDay.cost)) == 0
    assert report(client, committed["id"]).status_code == 201
    again = client.post(f"/v1/plans/{committed['id']}/usage/{wrong['id']}/reverse", json={})
    assert_problem(again, 409)
    listed = client.get(f"/v1/plans/{committed['id']}/usage").get_json()["items"]
    assert [item["kind"] for item in listed] == ["usage", "reversal", "usage"]


def test_completing_gives_back_what_the_run_did_not_spend_through_a_settle_entry(client, session, committed):
    report(client, committed["id"], accelerator_hours=120, tokens=6e10)  # 300.00 of 500.00

    response = transition(client, committed["id"], "complete")

    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert (body["status"], body["actual_cost"], body["estimate_at_completion"]) == (
        "completed",
        "300.00",
        "300.00",
    )
    budget = budget_row(session, committed["budget_id"])
    assert (budget.committed, budget.spent, budget.overrun, budget.remaining) == (
        Decimal("300.00"),
        Decimal("300.00"),
        Decimal(0),
        Decimal("700.00"),
    )
    settle = session.scalars(select(LedgerEntry).where(LedgerEntry.entry == "settle")).one()
    assert (settle.amount, settle.accelerator_hours) == (Decimal("-200.00"), -80.0)
    assert session.scalar(select(func.sum(LedgerEntry.amount))) == budget.committed
    assert_problem(report(client, committed["id"], **hours(3, 0, 1)), 409)


def test_a_run_over_its_plan_is_an_overrun_that_no_new_plan_may_reserve(client, session, budget, committed):
    report(client, committed["id"], accelerator_hours=280, tokens=6e10)  # 700.00 of a 500.00 plan

    transition(client, committed["id"], "fail")

    row = budget_row(session, budget["id"])
    assert (row.committed, row.spent, row.overrun, row.remaining) == (
        PLANNED_COST,
        Decimal("700.00"),
        Decimal("200.00"),
        Decimal("300.00"),
    )
    # 400.00 would have fitted the 500.00 left by the reservation alone.
    too_much = create_plan(client, budget_id=budget["id"], tokens=4.8e10)
    refused = transition(client, too_much["id"], "commit")
    assert_problem(refused, 409)
    assert refused.get_json()["limit"] == "amount"


def test_only_a_running_plan_completes_or_fails(client, committed):
    response = transition(client, committed["id"], "complete")

    assert_problem(response, 409)
    assert response.get_json()["plan_status"] == "committed"


def test_a_running_plan_cannot_be_cancelled(client, committed):
    assert transition(client, committed["id"], "start").status_code == 200

    assert_problem(transition(client, committed["id"], "cancel"), 409)


def test_the_budget_forecast_shows_each_running_plans_estimate_at_completion(client, budget, committed):
    report(
        client, committed["id"], accelerator_hours=40, tokens=1.2e10
    )  # 100.00 for a fifth: heads to 500.00
    other = create_plan(client, budget_id=budget["id"], tokens=2.4e10)  # 200.00, committed, not started
    transition(client, other["id"], "commit")

    forecast = client.get(f"/v1/budgets/{budget['id']}/forecast").get_json()

    assert (forecast["committed"], forecast["spent"], forecast["remaining"]) == ("700.00", "100.00", "300.00")
    assert (forecast["estimate_at_completion"], forecast["variance_at_completion"]) == ("700.00", "-300.00")
    [running] = forecast["running"]
    assert (running["plan_id"], running["share_trained"], running["estimate_at_completion"]) == (
        committed["id"],
        0.2,
        "500.00",
    )


def test_crossing_a_threshold_raises_one_event_per_threshold(client, session, budget, committed):
    report(
        client, committed["id"], **hours(2, 0, 1), accelerator_hours=170, tokens=3e10
    )  # 425.00: 85% of plan
    report(client, committed["id"], **hours(2, 1, 2), accelerator_hours=10, tokens=3.1e10)  # 450.00

    raised = session.execute(select(Event.type, Event.data).order_by(Event.id)).all()

    crossed = [(kind, data.get("measure"), data.get("threshold")) for kind, data in raised]
    # The plan started; its spend crossed 80% of its cost once; its forecast (425/0.5 = 850.00) crossed 100%
    # of its cost and of the budget's 1000.00? No: 850.00 of 1000.00 stays under.
    assert crossed == [
        ("plan.started", None, None),
        ("plan.threshold_crossed", "actual", 0.8),
        ("plan.threshold_crossed", "forecast", 1.0),
    ]


def test_a_budgets_thresholds_are_its_own(client, session, world):
    budget = make_budget(client, alert_thresholds=[0.25, 0.5], **BUDGET_PERIOD)
    plan = create_plan(client, budget_id=budget["id"])
    transition(client, plan["id"], "commit")

    report(client, plan["id"], accelerator_hours=120, tokens=6e10)  # 300.00 of 1000.00

    raised = session.execute(
        select(Event.type, Event.data).where(Event.type == "budget.threshold_crossed")
    ).all()
    assert [data["threshold"] for _, data in raised] == [0.25]
    assert client.get(f"/v1/budgets/{budget['id']}").get_json()["alert_thresholds"] == [0.25, 0.5]


def test_another_organisations_plan_takes_no_usage(client, committed, issue_key):
    key = issue_key("planner", "globex")

    response = client.post(f"/v1/plans/{committed['id']}/usage", json=usage_body(), headers=bearer(key))

    assert_problem(response, 404)


def test_plan_rows_keep_the_sum_of_their_records(client, session, committed):
    for day in (2, 3, 4):
        report(client, committed["id"], **hours(day, 0, 2), accelerator_hours=20, tokens=day * 1e10)

    plan = session.get_one(Plan, uuid.UUID(committed["id"]))
    session.refresh(plan)
    assert (plan.actual_cost, plan.actual_accelerator_hours, plan.tokens_trained) == (
        Decimal("150.00"),
        60.0,
        4e10,
    )
    assert session.scalar(select(func.sum(UsageDay.cost))) == Decimal("150.00")


def test_the_forecast_knows_the_finished_statuses_by_the_names_plans_have():
    assert set(FINISHED_STATUSES) == {PlanStatus.COMPLETED, PlanStatus.FAILED}


def test_usage_and_the_runs_transitions_are_in_the_audit_log(client, committed):
    record = report(client, committed["id"]).get_json()
    transition(client, committed["id"], "complete")

    entries = client.get("/v1/audit?limit=10").get_json()["items"]

    actions = [(entry["action"], entry["object_id"]) for entry in entries]
    assert ("usage.create", record["id"]) in actions
    assert ("plan.start", committed["id"]) in actions
    assert ("plan.complete", committed["id"]) in actions


def test_a_run_on_plan_raises_no_forecast_event_before_it_reports_progress(client, session, committed):
    report(client, committed["id"], tokens=None, accelerator_hours=10)  # 25.00, no tokens: forecast = plan

    raised = session.scalars(select(Event.type)).all()

    assert raised == ["plan.started"]


def test_the_forecast_gives_the_band_its_plans_intervals_put_around_it(client, budget, committed):
    report(client, committed["id"], accelerator_hours=40, tokens=1.2e10)  # 100.00 spent, a fifth trained
    waiting = create_plan(client, budget_id=budget["id"], tokens=2.4e10)  # 200.00, not started
    transition(client, waiting["id"], "commit")

    forecast = client.get(f"/v1/budgets/{budget['id']}/forecast").get_json()

    def bounds(plan: dict) -> list[Decimal]:
        return [Decimal(value) for value in plan["result"]["estimate"]["intervals"]["cost"]]

    low, high = bounds(committed)
    assert low < Decimal("500.00") < high
    # The running plan: 100.00 spent and 400.00 to go, stretched as its plan's interval stretches 500.00.
    running_band = [(Decimal(100) + 400 * bound / 500).quantize(Decimal("0.01")) for bound in (low, high)]
    [running] = forecast["running"]
    p50, p90 = (
        Decimal(running["intervals"].pop(name))
        for name in ("estimate_at_completion_p50", "estimate_at_completion_p90")
    )
    assert running["intervals"] == {
        "confidence": 0.8,
        "estimate_at_completion": [f"{bound:.2f}" for bound in running_band],
    }
    # P90 is the 80% band's upper end; P50 lies inside it, where the band's log-normal puts its median.
    median = accuracy.at_quantile(
        float(running["estimate_at_completion"]), tuple(map(float, running_band)), 0.5
    )
    assert (p50, p90) == (Decimal(repr(median)).quantize(Decimal("0.01"), ROUND_HALF_UP), running_band[1])
    assert running_band[0] < p50 < p90
    # The waiting plan: its own interval. The budget: both added, and the variance the other way round.
    expected = [running_band[0] + bounds(waiting)[0], running_band[1] + bounds(waiting)[1]]
    intervals = forecast["intervals"]
    assert intervals["confidence"] == 0.8
    assert intervals["estimate_at_completion"] == [f"{bound:.2f}" for bound in expected]
    assert intervals["variance_at_completion"] == [f"{bound - 1000:.2f}" for bound in expected]
    low_total, high_total = (Decimal(bound) for bound in intervals["estimate_at_completion"])
    assert low_total < Decimal(forecast["estimate_at_completion"]) < high_total
    # The budget's P50 and P90: its plans', added (their errors move together).
    assert low_total < Decimal(intervals["estimate_at_completion_p50"]) < high_total
    assert intervals["estimate_at_completion_p90"] == f"{high_total:.2f}"

    # Finished, a plan's band is its spend.
    transition(client, committed["id"], "complete")
    done = client.get(f"/v1/budgets/{budget['id']}/forecast").get_json()["intervals"]
    assert done["estimate_at_completion"] == [f"{Decimal('100.00') + bound:.2f}" for bound in bounds(waiting)]
