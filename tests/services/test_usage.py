"""services/usage.py: what a run's orchestrator reports, and what each record moves: the plan's actual
figures, its budget's spent and overrun, the daily sums reports read, and the events of the thresholds it
crosses. A wrong record is reversed, never edited."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from sqlalchemy import select

from service.data.models import Budget, Event, HardwarePrice, Plan, UsageDay, UsageRecord, utcnow
from service.services import usage
from service.services.errors import ConflictError, InvalidFieldError, NotFoundError
from service.services.usage import UsageReport
from tests.services.conftest import PLAN_COST, QUARTER, START, run, stored, transition


def hours(start: float, end: float) -> dict:
    """The period from `start` to `end` hours into the run."""
    return {"period_start": START + timedelta(hours=start), "period_end": START + timedelta(hours=end)}


def report(session, plan: Plan, *, scope: uuid.UUID | None = None, **overrides) -> UsageRecord:
    """Report a run's usage, in a transaction of its own: by default its first hour on 10 accelerators, a
    tenth of its 6e10 tokens trained by then, priced at lab-gpu's 2.50 an hour (25.00)."""
    fields = {"reporter": "slurm-a", **hours(0, 1), "accelerator_hours": 10.0, "tokens": 6e9, **overrides}
    return run(usage.report_usage, session, plan.id, UsageReport(**fields), scope=scope)


def reverse(session, plan: Plan, record: UsageRecord, note: str | None = None) -> UsageRecord:
    return run(usage.reverse_usage, session, plan.id, record.id, note=note, scope=None)


def records(session) -> list[UsageRecord]:
    session.expire_all()
    return list(session.scalars(select(UsageRecord).order_by(UsageRecord.created_at)))


def actuals(session, plan: Plan) -> tuple[Decimal, float, float]:
    held = stored(session, Plan, plan.id)
    return held.actual_cost, held.actual_accelerator_hours, held.tokens_trained


def spending(session, budget: Budget) -> tuple[Decimal, Decimal, Decimal, Decimal]:
    held = stored(session, Budget, budget.id)
    return held.committed, held.spent, held.overrun, held.remaining


def days(session) -> list[tuple[str, float, Decimal]]:
    rows = session.execute(
        select(UsageDay.day, UsageDay.accelerator_hours, UsageDay.cost).order_by(UsageDay.day)
    )
    return [(str(day), hours_, cost) for day, hours_, cost in rows]


def crossings(session) -> list[tuple[str, str | None, float | None, str | None]]:
    """The events raised, in order: (type, measure, threshold, amount)."""
    raised = session.scalars(select(Event).order_by(Event.id))
    return [(e.type, e.data.get("measure"), e.data.get("threshold"), e.data.get("amount")) for e in raised]


# --- A record -----------------------------------------------------------------------------------------------


def test_the_first_record_starts_a_committed_plan_and_charges_its_hours_at_the_price(
    session, budget, committed
):
    record = report(session, committed)

    assert (record.kind, record.cost, record.currency, record.cost_source, record.price_per_hour) == (
        "usage",
        Decimal("25.00"),
        "USD",
        "price",
        Decimal("2.50"),
    )
    held = stored(session, Plan, committed.id)
    assert (held.status, held.started_at) == ("running", START)
    assert actuals(session, committed) == (Decimal("25.00"), 10.0, 6e9)
    assert spending(session, budget) == (PLAN_COST, Decimal("25.00"), 0, Decimal("500.00"))
    assert [r.id for r in records(session)] == [record.id]
    assert crossings(session) == [("plan.started", None, None, None)]


def test_later_records_of_a_running_plan_do_not_start_it_again(session, committed):
    report(session, committed, **hours(0, 1))

    report(session, committed, **hours(1, 2), tokens=1.2e10)

    assert stored(session, Plan, committed.id).started_at == START
    assert [kind for kind, *_ in crossings(session)] == ["plan.started"]


def test_a_plans_figures_are_the_sums_of_its_records_and_its_latest_tokens(session, committed):
    for day in (0, 1, 2):
        report(
            session, committed, **hours(24 * day, 24 * day + 2), accelerator_hours=20, tokens=(day + 2) * 1e10
        )

    assert actuals(session, committed) == (Decimal("150.00"), 60.0, 4e10)
    assert sum(cost for _, _, cost in days(session)) == Decimal("150.00")


def test_a_record_without_tokens_leaves_the_tokens_trained_as_they_were(session, committed):
    report(session, committed, **hours(0, 1), tokens=6e9)

    report(session, committed, **hours(1, 2), tokens=None)

    assert actuals(session, committed) == (Decimal("50.00"), 20.0, 6e9)


# --- Its cost -----------------------------------------------------------------------------------------------


def test_hours_are_charged_at_the_price_in_force_when_the_period_starts(session, committed, lab_gpu):
    session.add(
        HardwarePrice(
            hardware_id=lab_gpu.id,
            price_per_hour=Decimal("4.00"),
            currency="USD",
            effective_at=START + timedelta(hours=12),
        )
    )
    session.commit()

    before = report(session, committed, **hours(11, 13), accelerator_hours=20)
    after = report(session, committed, **hours(13, 14), accelerator_hours=10)

    assert (before.price_per_hour, before.cost) == (Decimal("2.50"), Decimal("50.00"))
    assert (after.price_per_hour, after.cost) == (Decimal("4.00"), Decimal("40.00"))


def test_a_plans_own_price_charges_its_usage(session, make_plan, budget):
    plan = transition(
        session, make_plan(budget_id=budget.id, price_per_hour=Decimal("2.00"), currency="USD"), "commit"
    )

    record = report(session, plan)

    assert (record.price_per_hour, record.cost) == (Decimal("2.00"), Decimal("20.00"))


def test_a_reported_cost_is_taken_as_given(session, budget, committed):
    record = report(session, committed, cost=Decimal("31.40"), currency="USD")

    assert (record.cost, record.cost_source, record.price_per_hour) == (Decimal("31.40"), "reported", None)
    assert spending(session, budget)[1] == Decimal("31.40")


def test_usage_is_reported_in_the_plans_currency(session, committed):
    with pytest.raises(InvalidFieldError, match="never mixed") as refused:
        report(session, committed, cost=Decimal("12.00"), currency="EUR")

    assert refused.value.field == ("currency",)
    assert records(session) == []
    assert stored(session, Plan, committed.id).status == "committed"


def test_without_a_price_in_the_plans_currency_a_record_must_give_its_cost(session, committed, lab_gpu):
    in_euros = HardwarePrice(
        hardware_id=lab_gpu.id, price_per_hour=Decimal("2.30"), currency="EUR", effective_at=START
    )
    session.add(in_euros)
    session.commit()

    with pytest.raises(InvalidFieldError, match="give cost") as refused:
        report(session, committed)

    assert refused.value.field == ("cost",)
    assert report(session, committed, cost=Decimal("24.00")).cost == Decimal("24.00")


# --- Its period ---------------------------------------------------------------------------------------------


def test_a_period_that_has_not_ended_is_refused_but_for_five_minutes_of_clock_skew(session, committed):
    now = utcnow()

    with pytest.raises(InvalidFieldError, match="has not ended") as refused:
        report(
            session, committed, period_start=now - timedelta(hours=1), period_end=now + timedelta(minutes=6)
        )

    assert refused.value.field == ("period_end",)
    accepted = report(
        session, committed, period_start=now - timedelta(hours=1), period_end=now + timedelta(minutes=4)
    )
    assert [r.id for r in records(session)] == [accepted.id]


def test_a_record_covers_at_most_366_days(session, make_budget, make_plan):
    year = make_budget(period_start=START - timedelta(days=400))  # a period that holds a year before START
    plan = transition(session, make_plan(budget_id=year.id), "commit")

    with pytest.raises(InvalidFieldError, match="at most 366 days") as refused:
        report(session, plan, period_start=START - timedelta(days=366, seconds=1), period_end=START)

    assert refused.value.field == ("period_end",)
    assert report(session, plan, period_start=START - timedelta(days=366), period_end=START).id is not None


ENDS = START + timedelta(days=8)  # a budget period that has ended, around the plan's schedule


@pytest.mark.parametrize(
    ("period", "field"),
    [
        ((QUARTER[0] - timedelta(hours=1), QUARTER[0] + timedelta(hours=1)), "period_start"),
        ((ENDS - timedelta(hours=1), ENDS + timedelta(hours=1)), "period_end"),
    ],
)
def test_usage_outside_its_budgets_period_is_refused_naming_the_end_outside(
    session, make_budget, make_plan, period, field
):
    budget = make_budget(period_end=ENDS)
    plan = transition(session, make_plan(budget_id=budget.id), "commit")

    with pytest.raises(InvalidFieldError, match=r"period of the plan's budget, \[2026-10-01") as refused:
        report(session, plan, period_start=period[0], period_end=period[1])

    assert refused.value.field == (field,)
    assert spending(session, budget)[1] == Decimal(0)  # nothing half-written


def test_usage_outside_its_plans_schedule_is_taken_and_flagged(session, committed):
    before = report(
        session, committed, period_start=START - timedelta(hours=2), period_end=START - timedelta(hours=1)
    )
    on = report(session, committed, **hours(0, 1))
    reversal = usage.reverse_usage(session, committed.id, before.id, note=None, scope=None)

    assert (before.off_schedule, on.off_schedule, reversal.off_schedule) == (True, False, True)
    plan = stored(session, Plan, committed.id)
    assert (plan.off_schedule_accelerator_hours, plan.off_schedule_cost) == (0.0, Decimal(0))
    report(session, committed, period_start=START - timedelta(hours=2), period_end=START - timedelta(hours=1))
    plan = stored(session, Plan, committed.id)
    assert (plan.off_schedule_accelerator_hours, plan.off_schedule_cost) == (10.0, Decimal("25.00"))
    assert plan.actual_cost == Decimal("50.00")


def test_a_reporters_periods_may_not_overlap_so_a_retry_is_refused_not_counted_twice(
    session, budget, committed
):
    first = report(session, committed, **hours(0, 1))

    with pytest.raises(ConflictError) as refused:
        report(session, committed, **hours(0.5, 2))

    assert refused.value.extensions == {"field": "period_start", "usage_id": str(first.id)}
    assert spending(session, budget)[1] == Decimal("25.00")


def test_periods_that_touch_do_not_overlap_and_other_reporters_report_their_own(session, committed):
    report(session, committed, **hours(0, 1))

    report(session, committed, **hours(1, 2), tokens=1.2e10)
    report(session, committed, **hours(0, 1), reporter="slurm-b", tokens=None)

    assert [(r.reporter, r.period_start) for r in records(session)] == [
        ("slurm-a", START),
        ("slurm-a", START + timedelta(hours=1)),
        ("slurm-b", START),
    ]


# --- Its tokens ---------------------------------------------------------------------------------------------


def test_tokens_trained_so_far_never_go_down_from_an_earlier_period(session, committed):
    report(session, committed, **hours(0, 1), tokens=6e9)

    with pytest.raises(InvalidFieldError, match="earlier period") as refused:
        report(session, committed, **hours(1, 2), tokens=5e9)

    assert refused.value.field == ("tokens",)
    assert actuals(session, committed)[2] == 6e9


def test_a_late_record_may_not_claim_more_tokens_than_a_later_period(session, committed):
    report(session, committed, **hours(2, 3), tokens=1.8e10)

    with pytest.raises(InvalidFieldError, match="later period") as refused:
        report(session, committed, **hours(0, 1), tokens=2e10)

    assert refused.value.field == ("tokens",)


def test_a_late_record_between_two_periods_leaves_the_tokens_trained_at_the_latest(session, committed):
    report(session, committed, **hours(0, 1), tokens=6e9)
    report(session, committed, **hours(2, 3), tokens=1.8e10)

    report(session, committed, **hours(1, 2), tokens=1.2e10)

    assert actuals(session, committed) == (Decimal("75.00"), 30.0, 1.8e10)


# --- Its budget and its days --------------------------------------------------------------------------------


def test_a_run_beyond_its_plan_is_an_overrun_that_no_new_plan_may_reserve(
    session, budget, committed, make_plan
):
    report(session, committed, accelerator_hours=280, tokens=6e10)  # 700.00 of a 500.00 plan

    assert spending(session, budget) == (PLAN_COST, Decimal("700.00"), Decimal("200.00"), Decimal("300.00"))
    # 400.00 would have fitted the 500.00 left by the reservation alone.
    with pytest.raises(ConflictError) as refused:
        transition(session, make_plan(budget_id=budget.id, tokens=4.8e10), "commit")
    assert refused.value.extensions["limit"] == "amount"


def test_finishing_a_run_over_its_plan_gives_nothing_back_and_keeps_the_overrun(session, budget, committed):
    report(session, committed, accelerator_hours=280, tokens=6e10)

    transition(session, committed, "fail")

    assert spending(session, budget) == (PLAN_COST, Decimal("700.00"), Decimal("200.00"), Decimal("300.00"))


def test_finishing_a_run_under_its_plan_settles_what_it_did_not_spend(session, budget, committed):
    report(session, committed, accelerator_hours=120, tokens=6e10)  # 300.00 of 500.00

    transition(session, committed, "complete")

    assert spending(session, budget) == (Decimal("300.00"), Decimal("300.00"), 0, Decimal("700.00"))
    held = stored(session, Budget, budget.id)
    assert (held.committed_accelerator_hours, held.committed_flops) == (120.0, 3.6e20)


def test_a_record_spanning_midnight_counts_in_each_utc_day_in_proportion(session, committed):
    report(session, committed, **hours(18, 30), accelerator_hours=120, tokens=None)

    assert days(session) == [
        ("2026-11-02", 60.0, Decimal("150.00")),
        ("2026-11-03", 60.0, Decimal("150.00")),
    ]


def test_the_last_day_of_a_record_takes_the_rounding_of_its_cost(session, committed):
    report(session, committed, **hours(0, 72), accelerator_hours=3, cost=Decimal("10.00"), tokens=None)

    assert [cost for _, _, cost in days(session)] == [
        Decimal("3.333333"),
        Decimal("3.333333"),
        Decimal("3.333334"),
    ]


# --- Reversals ----------------------------------------------------------------------------------------------


def test_a_reversal_takes_a_record_back_everywhere_it_counted(session, budget, committed):
    report(session, committed, **hours(0, 1), tokens=6e9)
    wrong = report(session, committed, **hours(1, 2), accelerator_hours=100, tokens=1.2e10)

    reversal = reverse(session, committed, wrong, note="typo")

    assert (reversal.kind, reversal.reverses_id, reversal.note) == ("reversal", wrong.id, "typo")
    assert (reversal.cost, reversal.accelerator_hours, reversal.cost_source) == (
        Decimal("-250.00"),
        -100.0,
        "reversal",
    )
    assert actuals(session, committed) == (Decimal("25.00"), 10.0, 6e9)
    assert spending(session, budget)[1] == Decimal("25.00")
    assert days(session) == [("2026-11-02", 10.0, Decimal("25.00"))]


def test_a_reversed_period_may_be_reported_again(session, committed):
    wrong = report(session, committed, accelerator_hours=100)
    reverse(session, committed, wrong)

    right = report(session, committed, accelerator_hours=10)

    assert [r.kind for r in records(session)] == ["usage", "reversal", "usage"]
    assert actuals(session, committed)[0] == right.cost == Decimal("25.00")


def test_reversing_a_record_of_an_overrun_takes_the_overrun_back(session, budget, committed):
    wrong = report(session, committed, accelerator_hours=280, tokens=6e10)

    reverse(session, committed, wrong)

    assert spending(session, budget) == (PLAN_COST, 0, 0, Decimal("500.00"))


def test_a_record_is_reversed_once_and_a_reversal_never(session, committed):
    wrong = report(session, committed)
    reversal = reverse(session, committed, wrong)

    with pytest.raises(ConflictError, match="already reversed") as twice:
        reverse(session, committed, wrong)
    with pytest.raises(ConflictError, match="cannot be reversed") as of_a_reversal:
        reverse(session, committed, reversal)

    assert twice.value.extensions == {"usage_id": str(wrong.id)}
    assert of_a_reversal.value.extensions == {"usage_id": str(reversal.id)}
    assert len(records(session)) == 2


def test_only_a_record_of_the_plan_itself_is_reversed(session, make_plan, budget, committed):
    other = transition(session, make_plan(budget_id=budget.id, tokens=3e10), "commit")
    theirs = report(session, other)

    with pytest.raises(NotFoundError):
        reverse(session, committed, theirs)
    with pytest.raises(NotFoundError):
        run(usage.reverse_usage, session, committed.id, uuid.uuid4(), note=None, scope=None)


# --- Who reports, and when ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "status"),
    [([], "draft"), (["cancel"], "cancelled"), (["commit", "start", "complete"], "completed")],
)
def test_usage_is_reported_only_for_a_committed_or_running_plan(session, make_plan, budget, steps, status):
    plan = make_plan(budget_id=budget.id)
    for step in steps:
        transition(session, plan, step)

    with pytest.raises(ConflictError) as refused:
        report(session, plan)

    assert refused.value.extensions == {"plan_status": status}
    assert records(session) == []


def test_another_organisations_plan_takes_no_usage(session, committed, globex):
    with pytest.raises(NotFoundError):
        report(session, committed, scope=globex.id)

    assert records(session) == []


# --- Thresholds ---------------------------------------------------------------------------------------------


def test_crossing_a_threshold_of_the_plan_raises_one_event_per_threshold(session, committed):
    report(session, committed, **hours(0, 1), accelerator_hours=170, tokens=3e10)  # 425.00, 85% of the plan

    report(session, committed, **hours(1, 2), accelerator_hours=10, tokens=3.1e10)  # 450.00

    # The spend crossed 80% of the plan once; the forecast (425.00 for half the tokens: 850.00) crossed 100%.
    # The budget's 1000.00 is crossed by neither the spend nor the budget's forecast.
    assert crossings(session) == [
        ("plan.started", None, None, None),
        ("plan.threshold_crossed", "actual", 0.8, "425.00"),
        ("plan.threshold_crossed", "forecast", 1.0, "850.00"),
    ]


def test_a_budgets_forecast_over_its_amount_raises_an_event(session, budget, committed):
    report(session, committed, accelerator_hours=40, tokens=3e9)  # 100.00 for 5% of the tokens: 2000.00

    assert crossings(session) == [
        ("plan.started", None, None, None),
        ("plan.threshold_crossed", "forecast", 1.0, "2000.00"),
        ("budget.threshold_crossed", "forecast", 1.0, "2000.00"),
    ]
    budget_event = session.scalars(select(Event).where(Event.subject_type == "budget")).one()
    assert (budget_event.subject_id, budget_event.data["budget_amount"]) == (str(budget.id), "1000.00")


def test_a_budgets_thresholds_are_its_own_and_its_plans(session, make_budget, make_plan):
    budget = make_budget(alert_thresholds=[0.25, 0.5])
    plan = transition(session, make_plan(budget_id=budget.id), "commit")

    report(session, plan, accelerator_hours=120, tokens=6e10)  # 300.00: 30% of the budget, 60% of the plan

    assert crossings(session) == [
        ("plan.started", None, None, None),
        ("plan.threshold_crossed", "actual", 0.25, "300.00"),
        ("plan.threshold_crossed", "actual", 0.5, "300.00"),
        ("budget.threshold_crossed", "spent", 0.25, "300.00"),
    ]


def test_a_spend_that_reaches_a_threshold_exactly_crosses_it(session, make_budget, make_plan):
    budget = make_budget(alert_thresholds=[0.25])
    plan = transition(session, make_plan(budget_id=budget.id), "commit")

    report(session, plan, accelerator_hours=100, tokens=6e10)  # 250.00: 25% of the budget, 50% of the plan

    assert crossings(session)[-1] == ("budget.threshold_crossed", "spent", 0.25, "250.00")


def test_a_threshold_crossed_again_after_a_reversal_raises_nothing_more(session, make_budget, make_plan):
    budget = make_budget(alert_thresholds=[0.25])
    plan = transition(session, make_plan(budget_id=budget.id), "commit")
    wrong = report(session, plan, **hours(0, 1), accelerator_hours=120, tokens=6e10)
    reverse(session, plan, wrong)

    report(session, plan, **hours(0, 1), accelerator_hours=120, tokens=6e10)

    assert crossings(session) == [
        ("plan.started", None, None, None),
        ("plan.threshold_crossed", "actual", 0.25, "300.00"),
        ("budget.threshold_crossed", "spent", 0.25, "300.00"),
    ]


def test_a_run_raises_no_forecast_event_before_it_reports_progress(session, committed):
    report(session, committed, accelerator_hours=10, tokens=None)  # no tokens: the forecast is the plan

    assert crossings(session) == [("plan.started", None, None, None)]


# --- Forecasts ----------------------------------------------------------------------------------------------


def test_a_budgets_forecast_is_each_running_plans_estimate_at_completion_and_the_others_plans(
    session, budget, committed, make_plan
):
    report(session, committed, accelerator_hours=40, tokens=1.2e10)  # 100.00 for a fifth: heads to 500.00
    transition(session, make_plan(budget_id=budget.id, tokens=2.4e10), "commit")  # 200.00, not started

    forecast = usage.budget_forecast(session, stored(session, Budget, budget.id))

    assert (forecast.estimate_at_completion, forecast.variance_at_completion) == (
        Decimal("700.00"),
        Decimal("-300.00"),
    )
    [running] = forecast.running
    assert (running.plan.id, running.progress.share_trained, running.progress.estimate_at_completion) == (
        committed.id,
        0.2,
        Decimal("500.00"),
    )
    # A fifth of the tokens in the first hour: the run ends 5 hours after it started.
    assert running.expected_end_at == START + timedelta(hours=5)
