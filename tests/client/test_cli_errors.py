"""When the API refuses, `planner` says so in one line that names what was refused (the resource by its id,
else the command), the problem and each field the problem names, and its status; it exits by the class."""

from __future__ import annotations

import json
import uuid

import pytest

from planner_client import cli
from planner_client.client import ProblemError
from tests.client.test_command_line_served import served as served  # noqa: PLC0414 -- the fixture

PLAN = ["--organization=acme", "--pf-days=100", "--hardware=h100-sxm", "--accelerators=64"]
BUDGET = ["--organization=acme", "--name=FY27", "--currency=USD"]
BUDGET += ["--period-start=2026-10-01T00:00:00Z", "--period-end=2027-10-01T00:00:00Z"]


def refused(capsys, *argv: str) -> tuple[int, str]:
    """The exit status and the one line of stderr a refused command prints (nothing on stdout)."""
    code = cli.main(list(argv))
    output = capsys.readouterr()
    assert output.out == ""
    [line] = output.err.splitlines()
    return code, line


def made(capsys, *argv: str) -> dict:
    assert cli.main(["--json", *argv]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_a_resource_that_is_not_there_is_named_with_not_found(served, capsys):
    missing = str(uuid.uuid4())
    assert refused(capsys, "plan", "show", missing) == (
        cli.EXIT_NOT_FOUND,
        f"planner: plan {missing}: not found (404)",
    )
    assert refused(capsys, "hardware", "show", "nope-9000") == (
        cli.EXIT_NOT_FOUND,
        "planner: hardware nope-9000: not found (404)",
    )
    slug = "a hardware profile's slug is 2-63 lowercase letters, digits or inner hyphens"
    assert refused(capsys, "hardware", "show", "NOPE") == (
        cli.EXIT_NOT_FOUND,
        f"planner: hardware NOPE: not found: {slug} (404)",
    )


def test_an_id_that_is_not_one_is_the_command_lines_error_before_anything_is_sent(served, capsys):
    code = cli.main(["plan", "show", "3f2"])
    error = capsys.readouterr().err
    assert code == 2
    assert "'3f2' is not a plan id: ids are UUIDs" in error
    assert "If you entered the URL manually" not in error


def test_a_conflict_says_which_plan_and_why(served, capsys):
    plan = made(capsys, "plan", "create", *PLAN)

    code, line = refused(capsys, "plan", "commit", plan["id"])

    assert code == cli.EXIT_CONFLICT
    said = "The plan has no budget to commit against; revise it with a budget_id."
    assert line == f"planner: plan {plan['id']}: {said} (409)"


def test_an_invalid_request_names_the_command_and_each_field_in_one_line(served, capsys, issue_key):
    admin = ["--api-key", issue_key("admin")]

    code, line = refused(capsys, *admin, "budget", "create", *BUDGET, "--amount=-5")

    assert code == cli.EXIT_INVALID
    assert line.startswith("planner: budget create: #/amount: Must be ")
    assert line.endswith(" (422)")
    code, line = refused(capsys, "plan", "create", "--organization=acme", "--pf-days=-5")
    assert code == cli.EXIT_INVALID
    assert line.startswith("planner: plan create: #/")
    assert {"#/hardware:", "#/accelerators:", "#/pf_days:"} <= set(line.split())


def test_a_key_that_is_refused_says_where_it_came_from(served, capsys, monkeypatch):
    code, line = refused(capsys, "--api-key", "cpk_0f18e4d3ec84_wrong", "organization", "list")
    assert code == cli.EXIT_NOT_ALLOWED
    assert line.startswith("planner: organization list: The API key is not valid")
    assert line.endswith("(401; key from --api-key)")

    monkeypatch.setenv("PLANNER_API_KEY", "cpk_0f18e4d3ec84_wrong")
    assert refused(capsys, "organization", "list")[1].endswith("(401; key from PLANNER_API_KEY)")


def test_a_role_that_may_not_is_told_so(served, capsys):
    code, line = refused(capsys, "organization", "create", "globex", "--name=Globex")
    assert code == cli.EXIT_NOT_ALLOWED
    assert line.startswith("planner: organization globex: ")
    assert line.endswith(" (403)")


def failing(status: int, **problem):
    def refuse(*_, **__):
        raise ProblemError(status, {"status": status, "title": "Refused", **problem})

    return refuse


def test_a_resource_changed_meanwhile_is_a_conflict_naming_it(monkeypatch, capsys):
    detail = "The resource has changed since its ETag was read: read it again."
    monkeypatch.setattr(cli.PlannerClient, "update_budget", failing(412, detail=detail))
    budget = str(uuid.uuid4())

    assert refused(capsys, "budget", "update", budget, "--name=FY28") == (
        cli.EXIT_CONFLICT,
        f"planner: budget {budget}: {detail} (412)",
    )


def test_a_server_error_gives_the_request_id_to_look_for_in_its_log(monkeypatch, capsys):
    monkeypatch.setattr(
        cli.PlannerClient, "allocate", failing(500, detail="Internal error.", request_id="req-4f1c2")
    )

    assert refused(capsys, "allocate", "--pf-days=6000") == (
        cli.EXIT_SERVER,
        "planner: allocate: Internal error. (500; request req-4f1c2)",
    )


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        (
            {"pointer": "#/layout/zero_stage", "detail": "Must be 0 to 3."},
            "#/layout/zero_stage: Must be 0 to 3.",
        ),
        ({"parameter": "limit", "detail": "Must be at most 100."}, "parameter limit: Must be at most 100."),
        ({"header": "If-Match", "detail": "Required."}, "header If-Match: Required."),
    ],
)
def test_each_field_a_problem_names_is_said_as_it_names_it(monkeypatch, capsys, entry, named):
    monkeypatch.setattr(
        cli.PlannerClient, "allocate", failing(422, detail="Not valid; see errors.", errors=[entry])
    )

    assert refused(capsys, "allocate", "--pf-days=6000") == (
        cli.EXIT_INVALID,
        f"planner: allocate: {named} (422)",
    )
