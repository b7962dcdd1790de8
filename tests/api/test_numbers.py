"""Issue 50: no number the API accepts makes a 500 or a NaN. Money and its running sums stay within what
both databases hold (NUMERIC(18, 6) on PostgreSQL, int64 millionths on SQLite), refused with a 422 naming the
field before anything is written; forecasts never raise, and flag shares too small to extrapolate; money
takes ASCII digits only; a failure rate too small to matter is no failure rather than NaN."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import func, select

from service.core.goodput import goodput
from service.data.models import UsageRecord
from tests.api.test_usage import budget as budget  # noqa: PLC0414 -- the fixture, re-exported
from tests.api.test_usage import committed as committed  # noqa: PLC0414 -- the fixture, re-exported
from tests.api.test_usage import report
from tests.api.test_usage import world as world  # noqa: PLC0414 -- the fixture, re-exported
from tests.problems import assert_problem


def pointers(response) -> list[str]:
    return [error["pointer"] for error in assert_problem(response, 422)["errors"]]


def records(session) -> int:
    return session.scalar(select(func.count()).select_from(UsageRecord))


def test_hours_whose_cost_the_databases_cannot_hold_are_a_422_at_accelerator_hours(
    client, session, committed
):
    # 1e12 accelerator-hours (the documented maximum) at 2.50 USD: 2.5e12 USD, past NUMERIC(18, 6).
    response = report(client, committed["id"], accelerator_hours=1e12)
    assert pointers(response) == ["#/accelerator_hours"]
    assert records(session) == 0
    # The plan and its budget still read and report (before, every later report on the budget failed).
    assert client.get(f"/v1/plans/{committed['id']}").status_code == 200


def test_costs_whose_sum_would_pass_what_the_databases_hold_are_a_422_at_cost(client, session, committed):
    first = report(client, committed["id"], cost="999999999999.00")
    assert first.status_code == 201, first.get_json()
    second = report(
        client,
        committed["id"],
        cost="999999999999.00",
        period_start="2026-11-03T00:00:00Z",
        period_end="2026-11-03T01:00:00Z",
    )
    assert pointers(second) == ["#/cost"]
    assert records(session) == 1
    budget = client.get(f"/v1/budgets/{committed['budget_id']}")
    assert budget.status_code == 200
    assert budget.get_json()["spent"] == "999999999999.00"
    forecast = client.get(f"/v1/budgets/{committed['budget_id']}/forecast")
    assert forecast.status_code == 200, forecast.get_json()


@pytest.mark.parametrize("tokens", [1e-300, 5e-324, 1.0])
def test_a_share_too_small_to_extrapolate_forecasts_the_plan_and_says_so(client, committed, tokens):
    response = report(client, committed["id"], tokens=tokens)
    assert response.status_code == 201, response.get_json()
    plan = client.get(f"/v1/plans/{committed['id']}").get_json()
    # 10 accelerator-hours spent of 200 planned: the plan (500.00) is the forecast, not 770 billion.
    assert plan["estimate_at_completion"] == "500.00"
    assert plan["forecast_basis"] == "plan"
    forecast = client.get(f"/v1/budgets/{committed['budget_id']}/forecast")
    assert forecast.status_code == 200, forecast.get_json()
    [running] = forecast.get_json()["running"]
    assert (running["estimate_at_completion"], running["forecast_basis"]) == ("500.00", "plan")
    assert running["expected_end_at"] is None


def test_a_share_worth_extrapolating_forecasts_the_trend(client, committed):
    report(client, committed["id"], tokens=6e9)  # a tenth trained for 25.00
    plan = client.get(f"/v1/plans/{committed['id']}").get_json()
    assert (plan["estimate_at_completion"], plan["forecast_basis"]) == ("250.00", "trend")


# NKo, Arabic-Indic and fullwidth digits: 123 (or 123.45) in scripts Python's \d takes.
@pytest.mark.parametrize(
    "digits", ["\u07c1\u07c2\u07c3", "\u0661\u0662\u0663.\u0664\u0665", "\uff11\uff12\uff13"]
)
def test_money_takes_ascii_digits_only(client, session, committed, digits):
    assert pointers(report(client, committed["id"], cost=digits)) == ["#/cost"]
    assert records(session) == 0


def test_a_failure_rate_too_small_to_matter_is_no_failure_not_nan():
    run = goodput(86_400.0, 1024, 7e9, failures_per_accelerator_hour=5e-324)
    assert math.isfinite(run.wall_clock_seconds)
    assert run.useful_fraction == pytest.approx(1.0)
    assert run.failures_per_hour == 0.0


@pytest.mark.usefixtures("world")
def test_a_subnormal_failure_rate_plans_and_estimates_without_nan(client):
    hardware = {
        "name": "rented",
        "peak_flops": {"bf16": 1e15},
        "memory_bytes": 80e9,
        "price_per_hour": "2.50",
        "currency": "USD",
        "failures_per_accelerator_hour": 5e-324,
    }
    run = {"params": 1e9, "tokens": 6e10, "hardware": hardware, "accelerators": 16}
    plan = client.post("/v1/plans", json={"organization": "acme", "start_at": "2027-01-04T00:00:00Z", **run})
    estimate = client.post("/v1/estimates", json=run)
    for response in (plan, estimate):
        assert response.status_code in (200, 201), response.get_json()
        assert "NaN" not in response.get_data(as_text=True)
    goodput = estimate.get_json()["performance"]["goodput"]
    assert goodput["useful_fraction"] is not None
    assert goodput["failures_per_hour"] == 0.0


def test_the_description_lets_response_totals_pass_twelve_digits(client):
    """A total over many budgets may pass what one amount holds: the described pattern allows 18 digits."""
    spec = client.get("/openapi.json").get_json()["components"]["schemas"]
    assert spec["CostTotals"]["properties"]["actual_cost"]["pattern"] == r"^[0-9]{1,18}(\.[0-9]{1,6})?$"
