"""`planner --output table|json|csv`: tables for people, the API's JSON and csv for scripts and spreadsheets.
csv is one table: a list's items under the columns its table has (the figures raw, money as the API's exact
strings with their currency, times as the API gives them), one answer's `field,value` rows."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal

import pytest

from planner_client import cli
from tests.client.test_command_line_served import named
from tests.client.test_command_line_served import served as served  # noqa: PLC0414 -- the fixture

PLAN = {
    "organization": "acme",
    "hardware": "h100-sxm",
    "accelerators": 64,
    "start_at": "2027-02-01T00:00:00Z",
}


def printed(capsys, *argv: str) -> str:
    assert cli.main(list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def parsed(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.fixture
def plans(served, capsys) -> list[dict]:
    """Two plans of acme's, as the API answers them (the newest first, as lists are)."""
    made = [
        json.loads(printed(capsys, "--json", "plan", "create", *options, *flags(PLAN)))
        for options in (["--pf-days=100", "--name=small"], ["--pf-days=400", "--name=Larger, with a comma"])
    ]
    return made[::-1]


def flags(fields: dict) -> list[str]:
    return [f"--{name.replace('_', '-')}={value}" for name, value in fields.items()]


@pytest.mark.parametrize(
    "argv",
    [
        ["--output", "json", "plan", "list"],
        ["-o", "json", "plan", "list"],
        ["plan", "list", "--output=json"],
        ["--json", "plan", "list"],  # the alias scripts use
        ["plan", "list", "--json"],
        ["--output=csv", "plan", "list", "-o", "json"],  # after the command's name: for it
    ],
)
def test_output_json_prints_the_apis_answer_wherever_it_is_given(plans, capsys, argv):
    assert json.loads(printed(capsys, *argv)) == json.loads(printed(capsys, "--json", "plan", "list"))
    assert [plan["id"] for plan in json.loads(printed(capsys, *argv))] == [plan["id"] for plan in plans]


def test_planner_output_in_the_environment_is_the_default_and_an_option_wins(plans, capsys, monkeypatch):
    monkeypatch.setenv("PLANNER_OUTPUT", "json")
    assert [plan["id"] for plan in json.loads(printed(capsys, "plan", "list"))] == [p["id"] for p in plans]
    assert printed(capsys, "--output=table", "plan", "list").splitlines()[0].split()[0] == "id"


def test_json_with_another_output_is_a_usage_error(served, capsys):
    assert cli.main(["--json", "--output=csv", "plan", "list"]) == 2
    assert "--json is --output json" in capsys.readouterr().err


def test_a_list_as_csv_has_its_tables_columns_with_raw_figures_that_round_trip(plans, capsys):
    rows = parsed(printed(capsys, "plan", "list", "--output=csv"))

    assert list(rows[0]) == [
        *("id", "name", "status", "organization", "params", "tokens", "days", "cost", "currency"),
        "created_at",
    ]
    assert [row["id"] for row in rows] == [plan["id"] for plan in plans]
    for row, plan in zip(rows, plans, strict=True):
        assert row["name"] == plan["name"]  # a comma in it quoted, as csv does
        assert (float(row["params"]), float(row["tokens"]), float(row["days"])) == (
            plan["params"],
            plan["tokens"],
            plan["days"],
        )
        assert (row["cost"], row["currency"]) == (plan["cost"], plan["currency"])  # exact, no separators
        assert row["created_at"] == plan["created_at"]  # as the API gives it, not as tables show it


def test_one_resource_as_csv_is_the_field_value_rows_of_its_table_with_raw_values(plans, capsys):
    plan = plans[0]

    rows = parsed(printed(capsys, "plan", "show", plan["id"], "--output=csv"))
    table = named(printed(capsys, "plan", "show", plan["id"]))

    values = {row["field"]: row["value"] for row in rows}
    assert list(rows[0]) == ["field", "value"]
    assert {name for name in table if name != "warning"} <= set(values)  # each row of the table
    assert float(values["params"]) == plan["params"]
    assert float(values["accelerator_hours"]) == plan["accelerator_hours"]
    assert (values["cost"], values["currency"]) == (plan["cost"], "USD")
    assert values["start_at"] == plan["start_at"]
    assert [row["value"] for row in rows if row["field"] == "result.warnings"] == [
        warning["code"] for warning in plan["result"]["warnings"]
    ]


def test_an_estimate_as_csv_has_its_steps_breakdown_in_seconds(served, capsys):
    run = ["estimate", "--params=7e9", "--tokens=2e12", "--hardware=h100-sxm", "--accelerators=256"]
    answer = json.loads(printed(capsys, *run, "--json"))

    values = {row["field"]: row["value"] for row in parsed(printed(capsys, *run, "-o", "csv"))}

    performance = answer["performance"]
    assert float(values["days"]) == answer["days"]
    assert int(values["accelerators"]) == 256
    assert float(values["performance.mfu"]) == performance["mfu"]
    assert json.loads(values["performance.layout"]) == performance["layout"]  # an object as its JSON
    assert {
        name.removeprefix("performance.breakdown."): float(value)
        for name, value in values.items()
        if name.startswith("performance.breakdown.")
    } == performance["breakdown"]
    assert float(values["performance.step_seconds"]) == performance["step_seconds"]


def test_layout_as_csv_is_the_ranked_layouts(served, capsys):
    run = ["layout", "--params=7e9", "--tokens=2e12", "--hardware=h100-sxm", "--accelerators=256"]
    performance = json.loads(printed(capsys, *run, "--json"))["performance"]

    rows = parsed(printed(capsys, *run, "--output=csv"))

    assert [int(row["rank"]) for row in rows] == list(range(1, len(performance["alternatives"]) + 2))
    assert int(rows[0]["tensor_parallel"]) == performance["layout"]["tensor_parallel"]
    assert float(rows[1]["step_seconds"]) == performance["alternatives"][0]["step_seconds"]
    assert float(rows[0]["memory_bytes"]) == performance["memory_bytes"]


def test_plans_compared_as_csv_are_a_row_per_field_a_column_per_plan(plans, capsys):
    ids = [plan["id"] for plan in plans]

    rows = parsed(printed(capsys, "plan", "compare", *ids, "--output=csv"))

    assert list(rows[0]) == ["field", *ids]
    cost = next(row for row in rows if row["field"] == "cost")
    assert [cost[plan_id] for plan_id in ids] == [plan["cost"] for plan in plans]


def test_get_prints_one_field_whatever_the_output(plans, capsys):
    assert printed(capsys, "--output=csv", "plan", "list", "--get=id").split() == [p["id"] for p in plans]


def test_get_spells_a_value_as_json_does_for_a_script(plans, capsys):
    plan = plans[0]["id"]
    assert printed(capsys, "plan", "show", plan, "--get=budget_id").strip() == ""  # null
    assert printed(capsys, "plan", "show", plan, "--get=labels").strip() == json.dumps(plans[0]["labels"])
    fits = printed(capsys, "plan", "show", plan, "--get=result.estimate.memory.fits").strip()
    assert fits in {"true", "false"}


def test_the_cost_report_as_csv_is_the_servers_finance_csv(plans, capsys):
    window = ["--from=2027-01-01T00:00:00Z", "--to=2028-01-01T00:00:00Z", "--status=draft"]

    shown = printed(capsys, "report", "costs", *window, "--group-by=organization", "-o", "csv")

    [row] = parsed(shown)
    assert (row["organization"], row["currency"]) == ("acme", "USD")
    assert Decimal(row["planned_cost"]) == sum(Decimal(plan["cost"]) for plan in plans)
    # --format, its option before --output, still works for the scripts that give it.
    assert printed(capsys, "report", "costs", *window, "--group-by=organization", "--format=csv") == shown
