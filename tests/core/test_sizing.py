"""Sizing a budget: the answers this engine recorded on the grid (tests/core/data/record_sizing.py), every
plan within its limits, the counts a dense model's sizing plans around where its money and days bind
together, and a search for the utilisation that converges (docs/decisions/0004-sizing-offers-fast.md). A
spread sample of the grid is sized here, which takes seconds (bench/bench_sizing.py --grid 1 sizes all of
it)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from service.core import engine, wall_clock
from service.core.engine import sizing
from service.core.validation import InvalidInput
from tests.core import sizing_grid

RECORDED = json.loads((Path(__file__).parent / "data" / "sizing.json").read_text(encoding="utf-8"))
# Every 179th budget of the grid's 1960, from the 6th: each profile and rule, most costs and deadlines, and a
# budget of days only. The record script sizes every budget again to compare the whole grid.
SAMPLE = list(sizing_grid.cases())[5::179]
REFUSED = [case for case in sizing_grid.cases() if "refused" in RECORDED["cases"][case.key]][:2]
README_CASE = sizing_grid.Case("h100-sxm", "chinchilla-2022", "5e6", 60)


def test_the_answers_were_recorded_by_this_engine_on_the_grid_the_tests_size():
    assert RECORDED["engine_version"] == engine.ENGINE_VERSION
    assert set(RECORDED["cases"]) == {case.key for case in sizing_grid.cases()}


@pytest.mark.parametrize("case", SAMPLE, ids=lambda case: case.key)
def test_a_budget_is_sized_to_the_recorded_count_compute_model_and_run_within_its_limits(case):
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
def test_a_budget_the_engine_refused_is_refused_on_the_same_field(case):
    with pytest.raises(InvalidInput) as refusal:
        sizing_grid.plan_of(case)

    assert refusal.value.argument == RECORDED["cases"][case.key]["refused"]


def _dense_cases() -> list[sizing_grid.Case]:
    return [
        case
        for case in sizing_grid.cases()
        if case.rule != "krajewski-2024-g8" and "refused" not in RECORDED["cases"][case.key]
    ]


def test_a_dense_models_sizing_plans_a_few_counts_around_where_money_and_days_bind_together():
    # 2.4 planned every doubling from 1 to 32 768 and the counts around the best: 15.7 a budget.
    recorded = [RECORDED["cases"][case.key]["counts"] for case in _dense_cases()]
    planned = [sum(flops is not None for _, flops in counts) for counts in recorded]
    assert sum(planned) / len(planned) < 6
    counts = wall_clock.candidate_counts(8, wall_clock.DEFAULT_MAX_ACCELERATORS)
    anchor = counts[sizing._anchor(counts, README_CASE.budget(), Decimal("3.90"))]
    # $5M at $3.90 an hour is 1.28M GPU-hours: 60 days of 890 GPUs.
    assert anchor == 912


@pytest.mark.parametrize("case", _dense_cases()[3::97], ids=lambda case: case.key)
def test_the_count_chosen_for_a_dense_model_buys_at_least_its_neighbours_compute_within_reach(
    case, monkeypatch
):
    answers = {}
    answer = sizing._Sizer.answer

    def recording(sizer, on, *start):
        answers[on.accelerators] = None  # refused, unless it answers
        answers[on.accelerators] = answer(sizer, on, *start)
        return answers[on.accelerators]

    monkeypatch.setattr(sizing._Sizer, "answer", recording)
    result = sizing_grid.plan_of(case)
    counts = wall_clock.candidate_counts(
        sizing_grid.hardware(case.hardware).accelerators_per_node, wall_clock.DEFAULT_MAX_ACCELERATORS
    )
    chosen = counts.index(result.estimate.accelerators)

    # The climb ends with the best inside the counts it planned: each neighbour was planned and, unless
    # refused, buys no more than 0.1% more (the tie band) within the days, or else a year.
    for neighbour in [counts[i] for i in (chosen - 1, chosen + 1) if 0 <= i < len(counts)]:
        planned = answers[neighbour]
        if planned is not None and wall_clock.within_reach(planned.seconds, case.days):
            assert planned.flops <= result.allocation.flops * (1 + 1e-3)
    assert len(answers) >= 3


def test_the_search_for_the_utilisation_converges_instead_of_alternating(monkeypatch):
    # The README's budget on 544 H100s: 2.4 alternated between two rates four times before its bracket
    # closed, 14 rounds; the fixed point r = a takes 5.
    rounds = []
    tried = sizing._Sizer._tried

    def counting(sizer, on, rate):
        rounds.append(rate)
        return tried(sizer, on, rate)

    monkeypatch.setattr(sizing._Sizer, "_tried", counting)
    on = engine.Cluster(hardware=sizing_grid.hardware("h100-sxm"), accelerators=544)

    result = engine.plan(README_CASE.budget(), law=engine.published("chinchilla-2022"), on=on)

    assert len(rounds) <= 6
    assert result.estimate.cost <= Decimal("5000000")
    spent = max(float(result.estimate.cost) / 5e6, result.estimate.runtime.days / 60)
    assert 0.995 <= spent <= 1


def test_a_count_given_is_sized_to_within_1_percent_of_the_compute_the_sizing_found_there():
    # The counts of a sizing start their search at the anchor's utilisation, a count given at DEFAULT_MFU:
    # both end within 0.5% of the tightest limit, on shapes that may differ by a layer.
    case = sizing_grid.Case("h100-sxm", "chinchilla-2022", "3e6", 60)
    for count, flops in RECORDED["cases"][case.key]["counts"][-3:]:
        on = engine.Cluster(hardware=sizing_grid.hardware(case.hardware), accelerators=count)

        result = engine.plan(case.budget(), law=engine.published(case.rule), on=on)

        assert result.allocation.flops == pytest.approx(flops, rel=0.01)
        assert result.estimate.cost <= Decimal(case.cost)
