"""Sizing a budget in lean rounds gives engine 2.4's answers: the same count, compute, model and run, and
every plan within its limits (docs/decisions/0004-sizing-offers-fast.md). The answers 2.4 gave on the grid
were recorded once (tests/core/data/record_sizing_v2_4.py); a spread sample of it is sized here, which takes
seconds (bench/bench_sizing.py --grid 1 sizes all of it)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from service.core import engine
from service.core.validation import InvalidInput
from tests.core import sizing_grid

RECORDED = json.loads((Path(__file__).parent / "data" / "sizing_v2_4.json").read_text(encoding="utf-8"))
# Every 179th budget of the grid's 1960, from the 6th: each profile and rule, most costs and deadlines, and a
# budget of days only. The record script sizes every budget again (`[path]`) to compare the whole grid.
SAMPLE = list(sizing_grid.cases())[5::179]
REFUSED = [case for case in sizing_grid.cases() if "refused" in RECORDED["cases"][case.key]][:2]


def test_the_answers_were_recorded_by_engine_2_4_on_the_grid_the_tests_size():
    assert RECORDED["engine_version"] == "2.4.0"
    assert set(RECORDED["cases"]) == {case.key for case in sizing_grid.cases()}


@pytest.mark.parametrize("case", SAMPLE, ids=lambda case: case.key)
def test_a_budget_is_sized_to_the_count_compute_model_and_run_engine_2_4_chose_within_its_limits(case):
    recorded = RECORDED["cases"][case.key]

    result = sizing_grid.plan_of(case)

    assert sizing_grid.answer_of(result) == {
        name: value for name, value in recorded.items() if name != "counts"
    }
    assert all(limit.unspent is None or limit.unspent >= 0 for limit in result.limits)
    assert result.estimate.sizing.tried == len(
        [count for count, flops in recorded["counts"] if flops is not None]
    )


@pytest.mark.parametrize("case", REFUSED, ids=lambda case: case.key)
def test_a_budget_engine_2_4_refused_is_refused_on_the_same_field(case):
    with pytest.raises(InvalidInput) as refusal:
        sizing_grid.plan_of(case)

    assert refusal.value.argument == RECORDED["cases"][case.key]["refused"]


def test_a_count_given_is_sized_to_the_compute_engine_2_4_found_on_it():
    case = sizing_grid.Case("h100-sxm", "chinchilla-2022", "3e6", 60)
    for count, flops in RECORDED["cases"][case.key]["counts"][-3:]:
        on = engine.Cluster(hardware=sizing_grid.hardware(case.hardware), accelerators=count)

        result = engine.plan(case.budget(), law=engine.published(case.rule), on=on)

        assert float(f"{result.allocation.flops:.9g}") == flops
        assert result.estimate.cost <= Decimal(case.cost)
