"""An orchestrator drives a plan from commit to completion with `planner`, against the service in process;
finance then reads the budget's spend and forecast."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from planner_client import cli
from tests.client.test_command_line_served import named
from tests.client.test_command_line_served import served as served  # noqa: PLC0414 -- the fixture

RUN = ["--organization=acme", "--params=1e9", "--tokens=2e10", "--hardware=h100-sxm", "--accelerators=8"]


def answer(capsys, *argv: str) -> dict:
    assert cli.main(["--json", *argv]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def runs_budget(client) -> dict:
    """A budget of acme's for 2026 and 2027 (made by the admin `client`: planners make none)."""
    body = {"organization": "acme", "name": "runs", "amount": "100000.00", "currency": "USD"}
    body |= {"period_start": "2026-01-01T00:00:00Z", "period_end": "2028-01-01T00:00:00Z"}
    response = client.post("/v1/budgets", json=body)
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def test_a_plan_runs_from_commit_to_completion_through_the_command_line(client, served, capsys):
    budget = runs_budget(client)
    plan = answer(
        capsys, "plan", "create", *RUN, f"--budget-id={budget['id']}", "--start-at=2027-01-04T00:00:00Z"
    )
    answer(capsys, "plan", "commit", plan["id"])
    half = str(plan["accelerator_hours"] / 2)
    report = ["usage", "report", plan["id"], "--reporter=slurm", "--accelerator-hours", half]

    first = answer(
        capsys, *report, "--from=2026-11-01T00:00:00Z", "--to=2026-11-01T06:00:00Z", "--tokens=1e10"
    )
    answer(capsys, *report, "--from=2026-11-01T06:00:00Z", "--to=2026-11-01T12:00:00Z", "--tokens=2e10")
    assert answer(capsys, "plan", "show", plan["id"])["status"] == "running"
    forecast = answer(capsys, "budget", "forecast", budget["id"])
    assert [run["share_trained"] for run in forecast["running"]] == [1.0]
    # The table says the band: every token trained, the estimate at completion is what was spent.
    assert cli.main(["budget", "forecast", budget["id"]]) == 0
    low, high = forecast["intervals"]["estimate_at_completion"]
    band = f"80%: {Decimal(low):,}-{Decimal(high):,} USD"
    assert named(capsys.readouterr().out.split("\n\n")[0])["estimate_at_completion_band"] == band

    assert cli.main(["plan", "complete", plan["id"]]) == 0
    shown = named(capsys.readouterr().out)
    assert shown["status"] == "completed"
    assert shown["actual_cost"] == shown["estimate_at_completion"]
    listed = answer(capsys, "usage", "list", plan["id"])
    assert [record["id"] for record in listed][-1] == first["id"]
    assert answer(capsys, "budget", "show", budget["id"])["spent"] == forecast["spent"]


def test_finance_approves_a_large_commit_through_the_command_line(client, served, capsys, issue_key):
    budget = runs_budget(client)
    finance = ["--api-key", issue_key("finance", "acme")]
    updated = answer(capsys, *finance, "budget", "update", budget["id"], "--approval-above=1.00")
    assert updated["approval_above"] == "1.00"
    plan = answer(
        capsys, "plan", "create", *RUN, f"--budget-id={budget['id']}", "--start-at=2027-01-04T00:00:00Z"
    )

    assert cli.main(["plan", "commit", plan["id"]]) == 0
    asked = named(capsys.readouterr().out)
    assert asked["status"] == "pending_approval"
    assert asked["approval"].endswith("waiting for a finance or admin key")
    assert cli.main(["plan", "approve", plan["id"]]) == cli.EXIT_NOT_ALLOWED  # a planner may not
    assert "may not" in capsys.readouterr().err
    assert [p["id"] for p in answer(capsys, "plan", "list", "--status=pending_approval")] == [plan["id"]]

    assert cli.main([*finance, "plan", "approve", plan["id"], "--note", "Roadmap item 4."]) == 0
    approved = named(capsys.readouterr().out)
    assert approved["status"] == "committed"
    assert approved["approval"].endswith(": Roadmap item 4.")
    assert answer(capsys, "budget", "show", budget["id"])["committed"] == plan["cost"]

    other = answer(
        capsys, "plan", "create", *RUN, f"--budget-id={budget['id']}", "--start-at=2027-01-04T00:00:00Z"
    )
    answer(capsys, "plan", "commit", other["id"])
    assert cli.main([*finance, "plan", "reject", other["id"]]) == 2  # --note is required
    capsys.readouterr()
    rejected = answer(capsys, *finance, "plan", "reject", other["id"], "--note", "One run a quarter.")
    assert (rejected["status"], rejected["approval"]["decision"]) == ("rejected", "rejected")
    assert answer(capsys, "budget", "show", budget["id"])["committed"] == plan["cost"]


def test_finance_and_the_orchestrator_read_the_events_accuracy_and_calibration_of_a_run(
    client, served, capsys
):
    budget = runs_budget(client)
    plan = answer(
        capsys, "plan", "create", *RUN, f"--budget-id={budget['id']}", "--start-at=2027-01-04T00:00:00Z"
    )
    answer(capsys, "plan", "commit", plan["id"])
    steady = plan["result"]["estimate"]["performance"]
    slower = 0.8 * steady["tokens_per_step"] / steady["step_seconds"]
    usage = ["usage", "report", plan["id"], "--reporter=slurm", "--from=2026-11-01T00:00:00Z"]
    answer(
        capsys,
        *usage,
        "--to=2026-11-01T04:00:00Z",
        "--accelerator-hours=32",
        f"--tokens-per-second={slower}",
    )
    answer(capsys, "plan", "fail", plan["id"])

    feed = answer(capsys, "event", "list")
    accuracy = answer(capsys, "report", "accuracy", "--hardware=h100-sxm")
    calibrated = answer(capsys, "calibration", "create", "--organization=acme", "--hardware=h100-sxm")

    assert [event["type"] for event in feed["items"]] == ["plan.started", "plan.failed"]
    assert answer(capsys, "event", "list", f"--cursor={feed['next_cursor']}")["items"] == []
    [row] = accuracy["rows"]
    assert row["runs"] == 1
    # 20% under the plan's steady throughput (its pace between interruptions).
    assert row["mean_error"] == pytest.approx(-0.2, abs=1e-6)
    assert calibrated["matmul_efficiency"] < 0.609  # slower than the published H100 constant predicts
    assert [listed["id"] for listed in answer(capsys, "calibration", "list")] == [calibrated["id"]]
