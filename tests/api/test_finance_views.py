"""Every view of a plan's money counts it once, in the months it is planned and spent, and all agree to the
cent (issue 49): a plan committed, started and completed across two months, seen through the budget's
utilisation and forecast, the cost report (JSON, its CSV and the totals CSV), planned against actual and the
FOCUS export, on whichever database the tests run on."""

from __future__ import annotations

import csv
import io
import json
import os
import re
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from planner_client import cli
from tests.api.test_plans import create_plan, make_budget, transition
from tests.api.test_plans import world as world  # noqa: PLC0414 -- the fixture, re-exported
from tests.client.test_command_line_served import served as served  # noqa: PLC0414 -- the fixture
from tests.console.test_pages import signed_in

# lab-gpu (2.50 USD an hour) on one accelerator: 200 accelerator-hours, 500.00 USD, from 20:00 on 28 November
# 2026 into December.
START = datetime(2026, 11, 28, 20, tzinfo=UTC)
DECEMBER = datetime(2026, 12, 1, tzinfo=UTC)
QUARTER = {"from": "2026-10-01T00:00:00Z", "to": "2027-01-01T00:00:00Z"}
# What the run used, by day (accelerator-hours at 2.50): 24 + 24 in November, 24 x 5 in December; 168 in
# all, 420.00, less than planned: the ledger gives 80.00 back when it completes.
DAYS = ["2026-11-29", "2026-11-30", "2026-12-01", "2026-12-02", "2026-12-03", "2026-12-04", "2026-12-05"]


@pytest.fixture
def completed(client, world) -> tuple[dict, dict]:
    budget = make_budget(
        client, amount="1000.00", period_start=QUARTER["from"], period_end="2027-04-01T00:00:00Z"
    )
    plan = create_plan(client, budget_id=budget["id"], accelerators=1, start_at=START.isoformat())
    assert (plan["cost"], plan["accelerator_hours"]) == ("500.00", pytest.approx(200))
    assert transition(client, plan["id"], "commit").status_code == 200
    for index, day in enumerate(DAYS, start=1):
        usage = {
            "reporter": "slurm",
            "period_start": f"{day}T00:00:00Z",
            "period_end": f"{day}T23:59:59Z" if day != "2026-12-05" else "2026-12-05T12:00:00Z",
            "accelerator_hours": 24.0,
            "tokens": 6e10 * index / len(DAYS),
        }
        response = client.post(f"/v1/plans/{plan['id']}/usage", json=usage)
        assert response.status_code == 201, response.get_json()
    assert transition(client, plan["id"], "complete").status_code == 200
    return client.get(f"/v1/budgets/{budget['id']}").get_json(), client.get(
        f"/v1/plans/{plan['id']}"
    ).get_json()


def keep_for_the_validator(client, name: str) -> None:
    """With FOCUS_EXPORT_DIR set (.ci/run sets it), the FOCUS exports of the lifecycle, by day and by month,
    for the FinOps Foundation's validator, which .ci/validate-focus runs on them after the tests."""
    directory = os.environ.get("FOCUS_EXPORT_DIR")
    if not directory:
        return
    Path(directory).mkdir(parents=True, exist_ok=True)
    for granularity in ("day", "month"):
        export = client.get("/v1/reports/focus", query_string={**QUARTER, "granularity": granularity})
        assert export.status_code == 200
        Path(directory, f"focus-1.2-{name}-{granularity}.csv").write_bytes(export.get_data())


def money(value: str | None) -> Decimal:
    return Decimal(value or "0")


def csv_lines(response) -> list[dict[str, str]]:
    assert response.status_code == 200, response.get_data(as_text=True)
    return list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))


def test_a_completed_plan_counts_once_in_every_view_in_the_months_it_is_planned_and_spent(
    client, completed, request
):
    budget, plan = completed
    planned, spent = Decimal("500.00"), Decimal("420.00")
    assert (plan["status"], money(plan["cost"]), money(plan["actual_cost"])) == ("completed", planned, spent)
    # The ledger keeps what the run spent of its reservation.
    assert (money(budget["committed"]), money(budget["spent"]), money(budget["overrun"])) == (spent, spent, 0)

    # The share of the plan's schedule in November: the rest is in December.
    start, end = datetime.fromisoformat(plan["start_at"]), datetime.fromisoformat(plan["end_at"])
    november = Decimal((DECEMBER - start) / (end - start))

    def split(amount: Decimal) -> dict[str, Decimal]:
        """How the amount falls in each month, to the cent (the pieces add up to it)."""
        first = (amount * november).quantize(Decimal("0.01"))
        return {"2026-11": first, "2026-12": amount - first}

    # Utilisation: what the ledger holds, spread over the schedule, month by month; it adds up to committed.
    months = client.get(f"/v1/budgets/{budget['id']}/utilization").get_json()["months"]
    by_month = {month["month"]: money(month["committed"]) for month in months}
    assert sum(by_month.values()) == spent
    for month, amount in split(spent).items():
        assert abs(by_month[month] - amount) <= Decimal("0.01")

    # The cost report (planned), its JSON, its CSV rows and its totals CSV: the plan's cost, spread.
    query = {**QUARTER, "granularity": "month", "group_by": "budget"}
    report = client.get("/v1/reports/costs", query_string=query).get_json()
    planned_months = {row["period_start"]: money(row["cost"]) for row in report["rows"]}
    assert set(planned_months) == {"2026-11-01", "2026-12-01"}
    assert sum(planned_months.values()) == planned
    for month, amount in split(planned).items():
        assert abs(planned_months[f"{month}-01"] - amount) <= Decimal("0.01")
    assert [(total["plans"], money(total["cost"])) for total in report["totals"]] == [(1, planned)]
    rows = csv_lines(client.get("/v1/reports/costs", query_string={**query, "format": "csv"}))
    assert sum(money(line["planned_cost"]) for line in rows) == planned
    assert {line["period_start"] for line in rows} == {
        "2026-10-01",
        "2026-11-01",
        "2026-12-01",
    }  # every month
    totals = csv_lines(
        client.get("/v1/reports/costs", query_string={**query, "format": "csv", "part": "totals"})
    )
    assert [(line["planned_plans"], money(line["planned_cost"])) for line in totals] == [("1", planned)]

    # Planned against actual: the same planned months; the spend on the days it was used.
    both = client.get("/v1/reports/costs", query_string={**query, "measure": "both"}).get_json()
    assert {row["period_start"]: money(row["planned_cost"]) for row in both["rows"]} == {
        "2026-10-01": Decimal(0),
        **planned_months,
    }
    actual_months = {row["period_start"]: money(row["actual_cost"]) for row in both["rows"]}
    assert actual_months == {
        "2026-10-01": 0,
        "2026-11-01": Decimal("120.00"),
        "2026-12-01": Decimal("300.00"),
    }
    [total] = both["totals"]
    assert (money(total["planned_cost"]), money(total["actual_cost"])) == (planned, spent)
    assert (total["planned_plans"], total["actual_plans"]) == (1, 1)
    assert money(total["variance_cost"]) == spent - planned  # under plan: negative
    both_rows = csv_lines(
        client.get("/v1/reports/costs", query_string={**query, "measure": "both", "format": "csv"})
    )
    assert sum(money(line["actual_cost"]) for line in both_rows) == spent

    # FOCUS: the same spend, charge by charge.
    focus = csv_lines(client.get("/v1/reports/focus", query_string={**QUARTER, "granularity": "month"}))
    assert sum(money(line["BilledCost"]) for line in focus) == spent
    assert {line["ChargePeriodStart"][:7]: money(line["BilledCost"]) for line in focus} == {
        "2026-11": Decimal("120.00"),
        "2026-12": Decimal("300.00"),
    }
    keep_for_the_validator(client, request.node.callspec.id)

    # The forecast of a budget whose only plan has finished: what it spent.
    forecast = client.get(f"/v1/budgets/{budget['id']}/forecast").get_json()
    assert money(forecast["estimate_at_completion"]) == money(forecast["spent"]) == spent
    assert money(forecast["intervals"]["estimate_at_completion_p50"]) == spent


def test_the_console_and_the_command_line_show_the_same_money(
    app, client, completed, issue_key, capsys, served
):
    """The console's budget page (its burn chart's data) and cost report, and `planner`'s utilisation and
    cost report, give the figures the API gives, to the cent."""
    budget, _ = completed
    api_months = client.get(f"/v1/budgets/{budget['id']}/utilization").get_json()["months"]
    finance = issue_key("finance", "acme")

    console = signed_in(app, finance)
    page = console.get(f"/budgets/{budget['id']}").get_data(as_text=True)
    data = page[page.index("Committed by month") : page.index("</table>", page.index("Committed by month"))]
    shown = re.findall(
        r"<tr><td>(\d{4}-\d\d)</td><td class=\"num\">\d+</td><td class=\"num\">([^<]+)</td>", data
    )
    assert shown == [(month["month"], month["committed"]) for month in api_months]
    query = {**QUARTER, "granularity": "month", "group_by": "budget"}
    report = console.get("/reports/costs", query_string=query).get_data(as_text=True)
    totals = report[report.index("<h2>Totals</h2>") : report.index("</ul>", report.index("<h2>Totals</h2>"))]
    # Its default: planned against actual, variance positive over plan.
    assert "<strong>500.00 USD</strong> planned, <strong>420.00 USD</strong> spent (-80.00 USD" in totals

    assert cli.main(["--api-key", finance, "--json", "budget", "utilization", budget["id"]]) == 0
    assert json.loads(capsys.readouterr().out)["months"] == api_months
    argv = ["--api-key", finance, "report", "costs", "--from", QUARTER["from"], "--to", QUARTER["to"]]
    assert cli.main([*argv, "--granularity=month", "--group-by=budget", "--format=csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert sum(money(row["planned_cost"]) for row in rows) == Decimal("500.00")


def test_spend_off_the_plans_schedule_is_flagged_in_the_plan_and_every_report(client, world):
    budget = make_budget(client, period_start=QUARTER["from"], period_end="2027-04-01T00:00:00Z")
    plan = create_plan(client, budget_id=budget["id"], accelerators=1, start_at=START.isoformat())
    assert transition(client, plan["id"], "commit").status_code == 200
    # Twelve hours the day before the plan's start (a run that began early), then a day on schedule.
    for start, end in (
        ("2026-11-27T00:00:00Z", "2026-11-27T12:00:00Z"),
        ("2026-11-29T00:00:00Z", "2026-11-30T00:00:00Z"),
    ):
        usage = {
            "reporter": "slurm",
            "period_start": start,
            "period_end": end,
            "accelerator_hours": 12.0 if start < "2026-11-28" else 24.0,
        }
        response = client.post(f"/v1/plans/{plan['id']}/usage", json=usage)
        assert response.status_code == 201, response.get_json()
    early = Decimal("30.00")  # 12 accelerator-hours at 2.50

    shown = client.get(f"/v1/plans/{plan['id']}").get_json()
    assert (money(shown["off_schedule_cost"]), shown["off_schedule_accelerator_hours"]) == (early, 12.0)
    query = {**QUARTER, "granularity": "month", "measure": "both"}
    report = client.get("/v1/reports/costs", query_string=query).get_json()
    november = next(row for row in report["rows"] if row["period_start"] == "2026-11-01")
    assert (money(november["actual_cost"]), money(november["off_schedule_cost"])) == (Decimal("90.00"), early)
    assert november["off_schedule_accelerator_hours"] == 12.0
    assert money(report["totals"][0]["off_schedule_cost"]) == early
    rows = csv_lines(client.get("/v1/reports/costs", query_string={**query, "format": "csv"}))
    assert sum(money(line["off_schedule_cost"]) for line in rows) == early
    focus = csv_lines(client.get("/v1/reports/focus", query_string=QUARTER))
    assert {line["ChargePeriodStart"][:10]: money(line["x_OffScheduleCost"]) for line in focus} == {
        "2026-11-27": early,
        "2026-11-29": Decimal(0),
    }
