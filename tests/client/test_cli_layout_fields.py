"""`planner` sends no field the API marks deprecated: the layout options of allocate and plan (--zero-stage,
--tensor-parallel, --recomputation, --sequence-parallel and the rest) go in the request's `layout`, where
the API takes them now, never as the top-level fields it keeps for old callers."""

from __future__ import annotations

import json

import pytest

from planner_client import cli
from tests.client.test_command_line_served import served as served  # noqa: PLC0414 -- the fixture

PLAN = ["plan", "create", "--organization=acme", "--pf-days=100", "--hardware=h100-sxm", "--accelerators=64"]
DEPRECATED = {"zero_stage", "tensor_parallel", "recomputation", "sequence_parallel"}


def answer(capsys, *argv: str) -> dict:
    assert cli.main(["--json", *argv]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def warnings_of(plan: dict) -> set[str]:
    return {warning["code"] for warning in plan["result"]["warnings"]}


def test_a_plan_made_with_zero_stage_2_carries_no_deprecated_field_warning(served, capsys):
    plan = answer(capsys, *PLAN, "--zero-stage=2", "--tensor-parallel=2", "--no-sequence-parallel")

    assert "deprecated_field" not in warnings_of(plan)
    assert plan["inputs"]["layout"] == {"zero_stage": 2, "tensor_parallel": 2, "sequence_parallel": False}
    assert not DEPRECATED & set(plan["inputs"])
    assert plan["result"]["estimate"]["performance"]["layout"]["zero_stage"] == 2  # and the model used it


def test_an_allocation_takes_the_layout_options_in_its_layout(served, capsys):
    allocation = ["allocate", "--pf-days=600", "--hardware=h100-sxm", "--accelerators=256"]

    answered = answer(capsys, *allocation, "--zero-stage=3", "--pipeline-parallel=2")

    assert "deprecated_field" not in {warning["code"] for warning in answered["warnings"]}
    layout = answered["estimate"]["performance"]["layout"]
    assert (layout["zero_stage"], layout["pipeline_parallel"]) == (3, 2)


def test_a_revision_changes_and_removes_layout_fields_inside_the_layout(served, capsys):
    plan = answer(capsys, *PLAN, "--zero-stage=2", "--tensor-parallel=2")

    revised = answer(capsys, "plan", "revise", plan["id"], "--unset=layout.zero_stage", "--tensor-parallel=4")

    assert revised["inputs"]["layout"] == {"tensor_parallel": 4}
    assert "deprecated_field" not in warnings_of(revised)


@pytest.mark.parametrize(
    ("unset", "options", "sent"),
    [
        (["law"], [], {"law": None}),
        (
            ["layout.zero_stage"],
            ["--tensor-parallel=4"],
            {"layout": {"zero_stage": None, "tensor_parallel": 4}},
        ),
        (
            ["layout.zero_stage", "layout.micro_batch"],
            [],
            {"layout": {"zero_stage": None, "micro_batch": None}},
        ),
    ],
)
def test_unset_sends_the_merge_patch_that_removes_a_field_or_one_of_an_objects(
    monkeypatch, unset, options, sent
):
    changes: dict = {}
    monkeypatch.setattr(
        cli.PlannerClient,
        "revise_plan",
        lambda _client, _id, given, **_: changes.update(given) or {"id": _id},
    )
    plan_id = "5e1f15fd-c368-49d6-9e28-70ff84047589"

    assert (
        cli.main(["plan", "revise", plan_id, *(f"--unset={name}" for name in unset), *options, "--json"]) == 0
    )

    assert changes == sent
